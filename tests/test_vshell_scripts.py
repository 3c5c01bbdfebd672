"""The virtual shell runs the bash agents write: each script runs on a small fixed file tree and
must print what real bash printed for it.

The expected outputs were recorded once, by running the same scripts with GNU bash 5.2.15, GNU
coreutils, mawk 1.3.4 and GNU sed 4.9 in a temporary directory holding the same files (stdout and
exit status); the tests never call the host shell.
"""

from __future__ import annotations

import time

import pytest

from openmanus_lite.envs.vshell import MAX_STEPS, RUN_DEADLINE_S, VFS, Shell

FILES = {
    'data/access.log': '192.168.1.10 - - [10/Oct/2023:13:55:36] "GET /index.html HTTP/1.1" 200 2326\n10.0.0.5 - - [10/Oct/2023:13:56:01] "POST /login HTTP/1.1" 302 512\n192.168.1.10 - - [10/Oct/2023:13:57:12] "GET /about.html HTTP/1.1" 200 1024\n172.16.0.3 - - [10/Oct/2023:13:58:45] "GET /missing HTTP/1.1" 404 128\n10.0.0.5 - - [10/Oct/2023:13:59:59] "GET /index.html HTTP/1.1" 200 2326\n192.168.1.10 - - [10/Oct/2023:14:00:03] "GET /api/data HTTP/1.1" 500 64\n',
    'data/app.log': '2023-10-10 13:55:36 INFO server started on port 8080\n2023-10-10 13:56:01 WARN disk usage at 85%\n2023-10-10 13:57:12 ERROR failed to connect to db\n2023-10-10 13:58:45 INFO request handled in 35ms\n2023-10-10 13:59:59 ERROR timeout after 30s\n2023-10-10 14:00:03 WARNWARN repeated warning\n',
    'data/users.csv': 'name,dept,salary,age\nalice,eng,120000,34\nbob,ops,85000,45\ncarol,eng,135000,29\ndave,sales,70000,38\neve,ops,90000,41\n',
    'data/passwd': 'root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\nalice:x:1000:1000:Alice:/home/alice:/bin/bash\nbob:x:1001:1001:Bob:/home/bob:/bin/zsh\n',
    'notes/todo.txt': 'buy milk\nfix   the bug\n\nCall Mom\nbuy bread\n',
    'notes/readme.md': '# Title\nSome text here.\nMore Text.\n',
    'notes/empty.txt': '',
    'src/main.py': "import os\nimport sys\n\ndef main():\n    print('hi')\n",
    'src/util.py': 'def add(a, b):\n    return a + b\n',
    'src/lib/helper.py': '# helper\nVALUE = 42\n',
    'scripts/run.sh': '#!/bin/bash\necho running\n',
    'words.txt': 'apple banana apple\ncherry banana apple\ndate\n',
}


def make_shell() -> Shell:
    return Shell(VFS.from_spec({"/work/" + k: v for k, v in FILES.items()}, dirs=["/tmp"]), cwd="/work")


FEATURES = [
    ('awk', "awk '{print $1}' data/users.csv | head -3",
     'name,dept,salary,age\nalice,eng,120000,34\nbob,ops,85000,45\n', 0),
    ('awk', "awk -F, 'NR>1 {sum += $3} END {print sum}' data/users.csv",
     '500000\n', 0),
    ('awk', 'awk -F, \'NR>1 && $2 == "eng" {print $1, $3}\' data/users.csv',
     'alice 120000\ncarol 135000\n', 0),
    ('awk', "awk -F: '$3 >= 1000 {print $1}' data/passwd",
     'alice\nbob\n', 0),
    ('awk', "awk '/ERROR/ {n++} END {print n+0}' data/app.log",
     '2\n', 0),
    ('awk', "awk '$9 ~ /^5/ {print $1, $9}' data/access.log",
     '10.0.0.5 512\n', 0),
    ('awk', 'awk \'{print NR ": " NF}\' notes/todo.txt',
     '1: 2\n2: 3\n3: 0\n4: 2\n5: 2\n', 0),
    ('awk', "awk -F, 'NR>1 {c[$2]++} END {for (d in c) print d, c[d]}' data/users.csv | sort",
     'eng 2\nops 2\nsales 1\n', 0),
    ('awk', 'awk -F, \'NR>1 {s[$2]+=$3} END {for (d in s) printf "%s %.1f\\n", d, s[d]/1000}\' data/users.csv | sort',
     'eng 255.0\nops 175.0\nsales 70.0\n', 0),
    ('awk', "awk -v min=40 -F, 'NR>1 && $4+0 > min {print toupper($1)}' data/users.csv",
     'BOB\nEVE\n', 0),
    ('awk', 'awk \'BEGIN {x = 3; y = 4; print x * y, x "" y, length("hello"), substr("abcdef", 2, 3), index("abc", "c")}\'',
     '12 34 5 bcd 3\n', 0),
    ('awk', 'awk \'{ if ($NF > 1000) print $7; else print "small" }\' data/access.log',
     'HTTP/1.1"\nsmall\nHTTP/1.1"\nsmall\nHTTP/1.1"\nsmall\n', 0),
    ('awk', 'awk \'{gsub(/a/, "A"); print}\' words.txt',
     'Apple bAnAnA Apple\ncherry bAnAnA Apple\ndAte\n', 0),
    ('awk', 'awk \'{n = split($0, w, " "); print n, w[1]}\' words.txt',
     '3 apple\n3 cherry\n1 date\n', 0),
    ('awk', "awk 'BEGIN {for (i = 1; i <= 5; i++) s = s i; print s}'",
     '12345\n', 0),
    ('awk', "awk -F, 'NR==1 {next} {print $1}' data/users.csv | tr '\\n' ' '",
     'alice bob carol dave eve ', 0),
    ('awk', "awk 'length($0) > 10' notes/todo.txt",
     'fix   the bug\n', 0),
    ('awk', 'awk \'{print $1}\' data/access.log | sort | uniq -c | sort -rn | awk \'{print $2"="$1}\'',
     '192.168.1.10=3\n10.0.0.5=2\n172.16.0.3=1\n', 0),
    ('awk', 'awk \'BEGIN {printf "%5s|%-5s|%03d|%x\\n", "ab", "cd", 7, 255}\'',
     '   ab|cd   |007|ff\n', 0),
    ('awk', 'awk -F, \'{$2 = "X"; print}\' OFS=\';\' data/users.csv | head -2',
     'name;X;salary;age\nalice;X;120000;34\n', 0),
    ('awk', 'awk \'{sub(/buy/, "sell")} 1\' notes/todo.txt',
     'sell milk\nfix   the bug\n\nCall Mom\nsell bread\n', 0),
    ('awk', 'awk \'NR==2, NR==4 {print NR": "$0}\' notes/todo.txt',
     '2: fix   the bug\n3: \n4: Call Mom\n', 0),
    ('awk', 'awk \'BEGIN {a["x"]=1; if ("x" in a) print "yes"; delete a["x"]; print length(a)}\'',
     'yes\n0\n', 0),
    ('awk', "awk '{ m = ($2 > m ? $2 : m) } END { print m }' FS=, data/users.csv",
     'sales\n', 0),
    ('awk', "awk 'BEGIN { print 10 / 4, 2 ^ 10, 7 % 3, -5 % 3, int(-3.7) }'",
     '2.5 1024 1 -2 -3\n', 0),
    ('awk', 'echo \'a b c\' | awk \'{ $2 = ""; print; print NF }\'',
     'a  c\n3\n', 0),
    ('awk', "awk 'END { print NR }' data/app.log data/users.csv",
     '12\n', 0),
    ('awk', 'awk \'{ print FILENAME ":" FNR }\' data/passwd notes/readme.md | tail -2',
     'notes/readme.md:2\nnotes/readme.md:3\n', 0),
    ('awk', "awk 'function sq(x) { return x * x } BEGIN { print sq(7) }'",
     '49\n', 0),
    ('awk', "awk -F'\\t' '{print $2}' <<< $'a\\tb\\tc'",
     'b\n', 0),
    ('awk', "awk 'match($0, /[0-9]+ms/) { print substr($0, RSTART, RLENGTH) }' data/app.log",
     '35ms\n', 0),
    ('awk', "awk 'BEGIN { while (i < 3) { i++; if (i == 2) continue; print i } }'",
     '1\n3\n', 0),
    ('awk', 'awk \'$3 == "ERROR" || $3 == "WARN" { print $4 }\' data/app.log',
     'disk\nfailed\ntimeout\n', 0),
    ('awk', "awk '!seen[$1]++ { print $1 }' data/access.log",
     '192.168.1.10\n10.0.0.5\n172.16.0.3\n', 0),
    ('sed', "sed 's/apple/APPLE/' words.txt",
     'APPLE banana apple\ncherry banana APPLE\ndate\n', 0),
    ('sed', "sed 's/apple/APPLE/g' words.txt",
     'APPLE banana APPLE\ncherry banana APPLE\ndate\n', 0),
    ('sed', "sed -n '2,3p' notes/todo.txt",
     'fix   the bug\n\n', 0),
    ('sed', "sed '1d' data/users.csv | head -2",
     'alice,eng,120000,34\nbob,ops,85000,45\n', 0),
    ('sed', "sed '$d' notes/readme.md",
     '# Title\nSome text here.\n', 0),
    ('sed', "sed -n '/ERROR/p' data/app.log",
     '2023-10-10 13:57:12 ERROR failed to connect to db\n2023-10-10 13:59:59 ERROR timeout after 30s\n', 0),
    ('sed', "sed -E 's/([0-9]+)-([0-9]+)-([0-9]+)/\\3.\\2.\\1/' data/app.log | head -2",
     '10.10.2023 13:55:36 INFO server started on port 8080\n10.10.2023 13:56:01 WARN disk usage at 85%\n', 0),
    ('sed', "sed 's/\\(^[a-z]*\\),.*/\\1/' data/users.csv",
     'name\nalice\nbob\ncarol\ndave\neve\n', 0),
    ('sed', "sed -e 's/a/A/' -e 's/e/E/g' words.txt",
     'ApplE banana applE\nchErry bAnana applE\ndAtE\n', 0),
    ('sed', "sed 's/[[:space:]]\\+/ /g' notes/todo.txt",
     'buy milk\nfix the bug\n\nCall Mom\nbuy bread\n', 0),
    ('sed', "sed -n '/^alice/,/^carol/p' data/users.csv",
     'alice,eng,120000,34\nbob,ops,85000,45\ncarol,eng,135000,29\n', 0),
    ('sed', "sed '3q' data/passwd",
     'root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\nalice:x:1000:1000:Alice:/home/alice:/bin/bash\n', 0),
    ('sed', "sed 's/text/TEXT/I' notes/readme.md",
     '# Title\nSome TEXT here.\nMore TEXT.\n', 0),
    ('sed', "sed -i 's/buy/get/g' notes/todo.txt && cat notes/todo.txt",
     'get milk\nfix   the bug\n\nCall Mom\nget bread\n', 0),
    ('sed', "sed '/^$/d' notes/todo.txt | wc -l",
     '4\n', 0),
    ('sed', "sed 's/.*/[&]/' notes/readme.md",
     '[# Title]\n[Some text here.]\n[More Text.]\n', 0),
    ('sed', "sed -n '$p' data/passwd",
     'bob:x:1001:1001:Bob:/home/bob:/bin/zsh\n', 0),
    ('sed', "sed '2!d' data/passwd",
     'daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n', 0),
    ('sed', "sed 's|/bin/bash|/bin/sh|' data/passwd | cut -d: -f7",
     '/bin/sh\n/usr/sbin/nologin\n/bin/sh\n/bin/zsh\n', 0),
    ('sed', "echo hello world | sed 's/o/0/2'",
     'hello w0rld\n', 0),
    ('tr', "echo 'Hello World' | tr 'a-z' 'A-Z'",
     'HELLO WORLD\n', 0),
    ('tr', "echo 'Hello World' | tr '[:upper:]' '[:lower:]'",
     'hello world\n', 0),
    ('tr', "echo 'a1b2c3' | tr -d '0-9'",
     'abc\n', 0),
    ('tr', "cat notes/todo.txt | tr -s ' '",
     'buy milk\nfix the bug\n\nCall Mom\nbuy bread\n', 0),
    ('tr', "echo 'a,b,,c' | tr ',' '\\n'",
     'a\nb\n\nc\n', 0),
    ('tr', "echo 'abc-123_x' | tr -cd '[:alnum:]'",
     'abc123x', 0),
    ('tr', "tr -c '[:alpha:]\\n' '_' < notes/readme.md",
     '__Title\nSome_text_here_\nMore_Text_\n', 0),
    ('tr', "echo 'aaabbbccc' | tr -s 'ab'",
     'abccc\n', 0),
    ('xargs', "find src -name '*.py' | sort | xargs wc -l",
     '  2 src/lib/helper.py\n  5 src/main.py\n  2 src/util.py\n  9 total\n', 0),
    ('xargs', 'echo a b c d e | xargs -n 2',
     'a b\nc d\ne\n', 0),
    ('xargs', 'ls notes | xargs -I{} echo file: {}',
     'file: empty.txt\nfile: readme.md\nfile: todo.txt\n', 0),
    ('xargs', "printf 'notes/todo.txt\\0notes/readme.md\\0' | xargs -0 cat | wc -l",
     '8\n', 0),
    ('xargs', "find notes -name '*.md' | xargs grep -c Text",
     '1\n', 0),
    ('xargs', 'echo | xargs -r echo nothing; echo status $?',
     'status 0\n', 0),
    ('chmod', 'chmod +x scripts/run.sh && [ -x scripts/run.sh ] && echo exec',
     'exec\n', 0),
    ('chmod', 'chmod 750 scripts/run.sh; ls -l scripts/run.sh | cut -c1-10',
     '-rwxr-x---\n', 0),
    ('chmod', 'chmod u=rw,go=r notes/todo.txt; ls -l notes/todo.txt | cut -c1-10; [ -x notes/todo.txt ] || echo noexec',
     '-rw-r--r--\nnoexec\n', 0),
    ('chmod', 'chmod -R go-rx src; ls -ld src | cut -c1-10; ls -l src/main.py | cut -c1-10',
     'drwx------\n-rw-------\n', 0),
    ('chmod', 'chmod 644 nosuchfile; echo $?',
     '1\n', 0),
    ('du', 'du -s src | cut -f2',
     'src\n', 0),
    ('du', 'du -a notes | sort -k2 | cut -f2',
     'notes\nnotes/empty.txt\nnotes/readme.md\nnotes/todo.txt\n', 0),
    ('flow', 'for f in notes/*.txt; do echo "$f: $(wc -l < $f)"; done',
     'notes/empty.txt: 0\nnotes/todo.txt: 5\n', 0),
    ('flow', 'for i in 1 2 3; do echo $((i * i)); done',
     '1\n4\n9\n', 0),
    ('flow', 'for i in $(seq 1 5); do if [ $i -eq 3 ]; then continue; fi; echo $i; done',
     '1\n2\n4\n5\n', 0),
    ('flow', 'i=0; while [ $i -lt 3 ]; do echo n$i; i=$((i+1)); done',
     'n0\nn1\nn2\n', 0),
    ('flow', 'n=5; until [ $n -le 2 ]; do n=$((n-1)); done; echo $n',
     '2\n', 0),
    ('flow', 'for x in a b c; do [ $x = b ] && break; echo $x; done',
     'a\n', 0),
    ('flow', 'if grep -q ERROR data/app.log; then echo found; else echo none; fi',
     'found\n', 0),
    ('flow', 'x=7; if [ $x -lt 5 ]; then echo low; elif [ $x -lt 10 ]; then echo mid; else echo high; fi',
     'mid\n', 0),
    ('flow', 'for f in src/*.py notes/readme.md; do case $f in *.py) echo py $f;; *.md) echo md $f;; *) echo other;; esac; done',
     'py src/main.py\npy src/util.py\nmd notes/readme.md\n', 0),
    ('flow', 'case hello in h*o) echo match;; esac',
     'match\n', 0),
    ('flow', 'for ((i=0; i<3; i++)); do echo $i; done',
     '0\n1\n2\n', 0),
    ('flow', "count=0\nfor f in $(find src -name '*.py'); do\n  count=$((count + 1))\ndone\necho $count",
     '3\n', 0),
    ('flow', 'f() { echo "arg $1 of $#"; }; f x y',
     'arg x of 2\n', 0),
    ('flow', '{ echo one; echo two; } | wc -l',
     '2\n', 0),
    ('flow', '(cd notes && ls | wc -l); ls | wc -l',
     '3\n5\n', 0),
    ('flow', 'for i in 1 2; do for j in a b; do echo $i$j; done; done',
     '1a\n1b\n2a\n2b\n', 0),
    ('flow', 'true && echo t || echo f; false && echo t || echo f',
     't\nf\n', 0),
    ('flow', '! grep -q nope words.txt && echo absent',
     'absent\n', 0),
    ('subst', 'echo "lines: $(cat words.txt | wc -l)"',
     'lines: 3\n', 0),
    ('subst', 'echo `echo nested`',
     'nested\n', 0),
    ('subst', 'a=3; b=4; echo $((a * b + 2)) $(( (a + b) % 4 )) $((a ** 2)) $((10 / 3))',
     '14 3 9 3\n', 0),
    ('subst', 'x=5; ((x++)); ((x += 10)); echo $x; (( x > 10 )) && echo big',
     '16\nbig\n', 0),
    ('subst', 'name=report.txt; echo ${name%.txt} ${name#*.} ${#name} ${name/report/summary} ${name^^}',
     'report txt 10 summary.txt REPORT.TXT\n', 0),
    ('subst', 'unset v; echo ${v:-default}; v=set; echo ${v:+alt}',
     'default\nalt\n', 0),
    ('subst', 'export GREETING=hi; echo $GREETING',
     'hi\n', 0),
    ('subst', 'total=0; for n in $(cut -d, -f3 data/users.csv | tail -n +2); do total=$((total + n)); done; echo $total',
     '500000\n', 0),
    ('subst', 'dir=$(dirname src/lib/helper.py); base=$(basename src/lib/helper.py .py); echo $dir $base',
     'src/lib helper\n', 0),
    ('subst', 's=\'a  b\'; echo $s; echo "$s"',
     'a b\na  b\n', 0),
    ('subst', 'echo $((2**62)) $((-7 / 2)) $((-7 % 2)) $((1 << 4)) $((5 > 3 ? 1 : 0))',
     '4611686018427387904 -3 -1 16 1\n', 0),
    ('read', 'while IFS= read -r line; do echo "[$line]"; done < notes/todo.txt',
     '[buy milk]\n[fix   the bug]\n[]\n[Call Mom]\n[buy bread]\n', 0),
    ('read', "IFS=: read a b c <<< 'x:y:z:w'; echo $a $c",
     'x z:w\n', 0),
    ('read', 'while IFS=, read -r name dept salary age; do echo "$name is in $dept"; done < data/users.csv | tail -2',
     'dave is in sales\neve is in ops\n', 0),
    ('read', 'cat data/passwd | while IFS=: read user _ uid rest; do [ $uid -ge 1000 ] && echo $user; done',
     'alice\nbob\n', 0),
    ('read', 'read x y <<< \'  lead  and   trail  \'; echo "<$x><$y>"',
     '<lead><and   trail>\n', 0),
    ('read', 'n=0; while read -r l; do n=$((n+1)); done < words.txt; echo $n',
     '3\n', 0),
    ('test', '[ -d src ] && echo dir; [ -f src ] || echo notfile; [ -e nope ] || echo missing',
     'dir\nnotfile\nmissing\n', 0),
    ('test', '[ -s notes/empty.txt ] || echo empty; [ -s notes/todo.txt ] && echo nonempty',
     'empty\nnonempty\n', 0),
    ('test', '[ -z "" ] && echo z; [ -n x ] && echo n; [ abc = abc ] && echo eq; [ a != b ] && echo ne',
     'z\nn\neq\nne\n', 0),
    ('test', 'test 3 -gt 2 && echo gt; test 2 -ge 3 || echo lt; [ 10 -le 10 ] && echo le',
     'gt\nlt\nle\n', 0),
    ('test', '[[ words.txt == *.txt ]] && echo glob; [[ abc =~ ^a.c$ ]] && echo re; [[ -f words.txt && ! -d words.txt ]] && echo file',
     'glob\nre\nfile\n', 0),
    ('test', '[ 1 -eq 1 -a 2 -eq 3 ] || echo and; [ ! -f nope ] && echo not',
     'and\nnot\n', 0),
    ('test', '[ abc ]; echo $?; [ ]; echo $?; [ x -eq 1 ]; echo $?',
     '0\n1\n2\n', 0),
    ('here', "wc -w <<< 'one two three'",
     '3\n', 0),
    ('here', 'cat <<EOF\nhello $USER\nsum $((1+2))\nEOF',
     'hello root\nsum 3\n', 0),
    ('here', "cat <<'EOF'\nliteral $HOME\nEOF",
     'literal $HOME\n', 0),
    ('here', 'grep -c a <<< "$(cat words.txt)"',
     '3\n', 0),
    ('status', 'grep -q zzz words.txt; echo $?; ls nope 2>/dev/null; echo $?; true; echo $?',
     '1\n2\n0\n', 0),
    ('grep', "grep -oE '([0-9]+\\.){3}[0-9]+' data/access.log | sort -u",
     '10.0.0.5\n172.16.0.3\n192.168.1.10\n', 0),
    ('grep', "grep -E '(ERROR|WARN)+' data/app.log | wc -l",
     '4\n', 0),
    ('grep', "grep -cE '(WARN)+ ' data/app.log",
     '2\n', 0),
    ('grep', "grep -E '^([a-z]+),(eng|ops),' data/users.csv | cut -d, -f1",
     'alice\nbob\ncarol\neve\n', 0),
]


@pytest.mark.parametrize("feature, script, stdout, status", FEATURES,
                         ids=[f"{f}-{k}" for k, (f, *_rest) in enumerate(FEATURES)])
def test_feature_prints_what_bash_prints(feature: str, script: str, stdout: str, status: int) -> None:
    out, err, code = make_shell().run_streams(script)
    assert (out, code) == (stdout, status), err


REALISTIC = [
    ('find . -type f | wc -l',
     '12\n', 0),
    ("find . -name '*.py' | wc -l",
     '3\n', 0),
    ("find . -type f -name '*.txt' | sort | xargs wc -l | tail -1",
     ' 8 total\n', 0),
    ('grep -c ERROR data/app.log',
     '2\n', 0),
    ("awk '{sum += $NF} END {print sum}' data/access.log",
     '6380\n', 0),
    ("cut -d' ' -f1 data/access.log | sort | uniq -c | sort -nr | head -1",
     '      3 192.168.1.10\n', 0),
    ("awk '{print $1}' data/access.log | sort | uniq -c | sort -rn | head -n 1 | awk '{print $2}'",
     '192.168.1.10\n', 0),
    ("grep -oE '([0-9]{1,3}\\.){3}[0-9]{1,3}' data/access.log | sort -u | wc -l",
     '3\n', 0),
    ('cat data/users.csv | tail -n +2 | cut -d, -f2 | sort | uniq -c | sort -nr',
     '      2 ops\n      2 eng\n      1 sales\n', 0),
    ("awk -F, 'NR>1 {print $3, $1}' data/users.csv | sort -nr | head -1 | cut -d' ' -f2",
     'carol\n', 0),
    ('for f in $(find src -name \'*.py\'); do echo "$f $(wc -l < $f)"; done | sort -k2 -n | tail -1',
     'src/main.py 5\n', 0),
    ('count=0; for f in notes/*; do if [ -s "$f" ]; then count=$((count+1)); fi; done; echo $count',
     '2\n', 0),
    ('ls -1 src | wc -l',
     '3\n', 0),
    ("cat words.txt | tr ' ' '\\n' | sort | uniq -c | sort -rn | head -3",
     '      3 apple\n      2 banana\n      1 date\n', 0),
    ("tr -s ' ' '\\n' < words.txt | grep -c apple",
     '3\n', 0),
    ("grep -rl 'import' src | sort",
     'src/main.py\n', 0),
    ("grep -r --include='*.py' -n 'def ' src | wc -l",
     '2\n', 0),
    ('awk -F: \'$7 == "/bin/bash" {print $1}\' data/passwd',
     'root\nalice\n', 0),
    ("cut -d: -f1,3 data/passwd | awk -F: '$2 >= 1000' | wc -l",
     '2\n', 0),
    ('find . -type f -empty | wc -l',
     '1\n', 0),
    ("find src -type f -name '*.py' | xargs cat | wc -l",
     '9\n', 0),
    ('total=0\nwhile read -r line; do\n  n=$(echo "$line" | wc -w)\n  total=$((total + n))\ndone < notes/todo.txt\necho $total',
     '9\n', 0),
    ("grep -E 'ERROR|WARN' data/app.log | awk '{print $3}' | sort | uniq -c",
     '      2 ERROR\n      1 WARN\n      1 WARNWARN\n', 0),
    ("sed -n '2p' data/users.csv | cut -d, -f1",
     'alice\n', 0),
    ('awk -F, \'NR > 1 { total += $3; n++ } END { printf "%.2f\\n", total / n }\' data/users.csv',
     '100000.00\n', 0),
    ('for dir in src notes data; do echo "$dir $(find $dir -type f | wc -l)"; done',
     'src 3\nnotes 3\ndata 4\n', 0),
    ('ls data | while read f; do echo "$f: $(wc -l < data/$f)"; done',
     'access.log: 6\napp.log: 6\npasswd: 4\nusers.csv: 6\n', 0),
    ("grep -v '^$' notes/todo.txt | wc -l",
     '4\n', 0),
    ("head -n 3 data/app.log | tail -n 1 | awk '{print $4}'",
     'failed\n', 0),
    ("find . -name '*.sh' | xargs chmod +x; [ -x scripts/run.sh ] && echo ok",
     'ok\n', 0),
    ("awk '{ print length($0) }' notes/readme.md | sort -n | tail -1",
     '15\n', 0),
    ('echo $(( $(wc -l < data/app.log) - $(grep -c INFO data/app.log) ))',
     '4\n', 0),
    ('if [ $(grep -c ERROR data/app.log) -gt 1 ]; then echo many; else echo few; fi',
     'many\n', 0),
    ('mkdir -p backup && cp notes/*.txt backup/ && ls backup | wc -l',
     '2\n', 0),
    ('find . -type f -name \'*.log\' | sort | while read f; do echo "$(basename $f) $(grep -c ERROR $f)"; done',
     'access.log 0\napp.log 2\n', 0),
    ("cat data/access.log | awk '$9 == 200' | wc -l",
     '0\n', 0),
    ("sed 's/,/ /g' data/users.csv | awk 'NR>1 && $4 < 40 {print $1}'",
     'alice\ncarol\ndave\n', 0),
    ("grep -o '[0-9]\\+ms' data/app.log | tr -d 'ms'",
     '35\n', 0),
    # written without trying them on the virtual shell first (33 of these 35 ran right at once)
    ('find . -type f -size +0 | wc -l',
     '11\n', 0),
    ('find . -maxdepth 1 -type d | wc -l',
     '5\n', 0),
    ("ls -la data | grep -c '^-'",
     '4\n', 0),
    ('wc -l data/*.log | sort -n | head -1',
     '  6 data/access.log\n', 0),
    ('du -a . | sort -k2 | head -3 | cut -f2',
     '.\n./data\n./data/access.log\n', 0),
    ('grep -h -o \'"[A-Z]* \' data/access.log | sort | uniq -c',
     '      6 " \n      5 "GET \n      1 "POST \n', 0),
    ("awk '{print $7}' data/access.log | sort | uniq | wc -l",
     '1\n', 0),
    ('awk -F\'"\' \'{print $2}\' data/access.log | awk \'{print $2}\' | sort -u',
     '/about.html\n/api/data\n/index.html\n/login\n/missing\n', 0),
    ("cat data/app.log | cut -d' ' -f3 | sort | uniq -c | sort -k1,1nr -k2 | head -2",
     '      2 ERROR\n      2 INFO\n', 0),
    ('for f in $(ls src/*.py); do n=$(grep -c \'def\' $f); echo "$(basename $f) $n"; done',
     'main.py 1\nutil.py 1\n', 0),
    ("awk -F, 'NR>1 {if ($3 > max) {max = $3; who = $1}} END {print who}' data/users.csv",
     'carol\n', 0),
    ("grep -n 'TODO\\|bug' notes/todo.txt",
     '2:fix   the bug\n', 0),
    ("find . -name '*.md' -o -name '*.txt' | wc -l",
     '4\n', 0),
    ('cat words.txt | xargs -n1 | sort -u | wc -l',
     '4\n', 0),
    ('echo "scale=2; 10/3" | bc 2>/dev/null || awk \'BEGIN {printf "%.2f\\n", 10/3}\'',
     '3.33\n', 0),
    ('stat -c %s data/users.csv',
     '115\n', 0),
    ("head -1 data/users.csv | tr ',' '\\n' | wc -l",
     '4\n', 0),
    ("find . -type f -name '*.py' -exec grep -l 'import' {} \\; | sort",
     './src/main.py\n', 0),
    ('sort -t, -k3 -nr data/users.csv | head -2 | cut -d, -f1',
     'carol\nalice\n', 0),
    ("ls src | grep -v lib | sed 's/\\.py$//'",
     'main\nutil\n', 0),
    ("awk 'NF' notes/todo.txt | wc -l",
     '4\n', 0),
    ("grep -c '' notes/todo.txt",
     '5\n', 0),
    ('cat -n notes/readme.md | tail -1',
     '     3\tMore Text.\n', 0),
    ("find . -type f | sed 's|.*\\.||' | sort | uniq -c | sort -rn | head -3",
     '      3 txt\n      3 py\n      2 log\n', 0),
    ('files=$(find data -type f | wc -l); dirs=$(find data -type d | wc -l); echo "$files files in $dirs dirs"',
     '4 files in 1 dirs\n', 0),
    ('test -f data/users.csv && echo exists || echo missing',
     'exists\n', 0),
    ('echo $(($(cut -d, -f4 data/users.csv | tail -n +2 | paste -sd+)))',
     '187\n', 0),
    ("while read -r ip _; do echo $ip; done < data/access.log | sort | uniq -c | sort -rn | head -1 | awk '{print $1}'",
     '3\n', 0),
    ("awk '/WARN/ && !/WARNWARN/' data/app.log | wc -l",
     '1\n', 0),
    ("grep -rn 'VALUE' . | cut -d: -f1",
     './src/lib/helper.py\n', 0),
    ('tail -n +2 data/users.csv | sort -t, -k4 -n | head -1 | cut -d, -f1',
     'carol\n', 0),
    ("find src -type f | xargs -I{} sh -c 'echo {} $(wc -l < {})' | sort -k2 -n | tail -1",
     'src/main.py 5\n', 0),
    ('cut -c1-10 data/app.log | sort -u',
     '2023-10-10\n', 0),
    ('echo \'hello world\' | awk \'{ for (i = NF; i > 0; i--) printf "%s%s", $i, (i > 1 ? OFS : ORS) }\'',
     'world hello\n', 0),
    ("printf '%s\\n' $(cat words.txt) | sort | uniq -d",
     'apple\nbanana\n', 0),
]
"""Solutions in the style of AgentBench OS-interaction and InterCode-bash: counting, summing, ranking."""

_BROKEN = ("command not found", "not supported", "syntax error", "not available", "invalid option")


@pytest.mark.parametrize("script, stdout, status", REALISTIC, ids=[f"real-{k}" for k in range(len(REALISTIC))])
def test_realistic_agent_script_runs_clean(script: str, stdout: str, status: int) -> None:
    out, err, code = make_shell().run_streams(script)
    assert not any(b in err for b in _BROKEN), err
    assert (out, code) == (stdout, status), err


# ---------------------------------------------------------------- limits and messages


@pytest.mark.parametrize("script", [
    "while true; do :; done",
    "f() { f; }; f",
    "x=a; while true; do x=$x$x; done",
    "for i in $(seq 1 100000); do echo $i; done",
    "echo {1..100000}",
    "awk 'BEGIN { while (1) x++ }'",
    "awk 'BEGIN { s = \"ab\"; while (1) s = s s }'",
    "awk 'function f(n) { return f(n + 1) } BEGIN { f(1) }'",
    "yes=$(printf 'a%.0s' {1..5000}); echo \"${yes}b\" | grep -E '(a|aa)+$'",
    "sed 's/a*/&&/g' <<< aaaa; while :; do sed -n p data/app.log > /dev/null; done",
])
def test_every_action_stops_within_its_budget(script: str) -> None:
    sh = make_shell()
    cpu = time.process_time()
    out, status = sh.run(script)
    assert time.process_time() - cpu < 2 * RUN_DEADLINE_S + 0.5, script
    assert status != 0 and len(out) <= 400_000
    assert sh.run("echo still alive") == ("still alive\n", 0)


def test_missing_tools_are_not_available_not_syntax_errors() -> None:
    sh = make_shell()
    assert sh.run("ps aux") == ("bash: ps: not available in this sandbox (no processes)\n", 127)
    assert sh.run("useradd bob")[0] == "bash: useradd: not available in this sandbox (no other users or groups)\n"
    assert sh.run("apt-get install jq")[0].startswith("bash: apt-get: not available in this sandbox")
    assert sh.run("frobnicate")[0] == "bash: frobnicate: command not found\n"
    assert sh.run("for x in; do")[0].startswith("bash: syntax error")
    assert sh.run("if true; then echo")[0] == "bash: syntax error: unexpected end of file\n"


def test_limits_are_reported() -> None:
    sh = make_shell()
    out, status = sh.run("while true; do :; done")
    assert status == 124 and (f"more than {MAX_STEPS}" in out or "longer than" in out)
    out, _ = sh.run("x=a; while true; do x=$x$x; done")
    assert "a variable may hold at most" in out


def test_state_persists_between_actions_but_not_out_of_subshells() -> None:
    sh = make_shell()
    sh.run("count=3; cd notes; f() { echo called $1; }")
    assert sh.run("echo $count; pwd; f x") == ("3\n/work/notes\ncalled x\n", 0)
    assert sh.run("(count=9; cd /); echo $count $PWD") == ("3 /work/notes\n", 0)
    assert sh.run("echo 1 | read count; echo $count") == ("3\n", 0)  # a pipeline runs in subshells, as in bash


def test_a_multi_line_bash_block_runs_as_one_script() -> None:
    from openmanus_lite.envs import generate_tasks, make_env
    from openmanus_lite.envs.os_shell import INTRO
    from openmanus_lite.react import bash, format_turn

    env = make_env("os")
    env.reset(generate_tasks("os", 1, seed=0)[0])
    script = "n=0\nfor d in / /root; do\n  n=$((n + 1))\ndone\nif [ $n -eq 2 ]; then echo \"two dirs\"; fi"
    step = env.step(format_turn("Count in a loop.", bash(script)))
    assert step.observation == "The output of the OS:\n\ntwo dirs"
    assert "sandboxed bash" in INTRO and "Linux (bash)" not in INTRO


@pytest.mark.parametrize("script, message", [
    ("let words.txt", "bash: words.txt: syntax error"),
    ("echo $((1 / 0)); echo next", "division by 0"),
    ("echo ${x?is required}", "bash: x: is required"),
    ("cat <<EOF\n$(echo\nEOF", "unexpected EOF"),
    ("echo x | xargs -n nope", "xargs: invalid number of arguments"),
    ("awk 'BEGIN { next }'", "awk: line 1: `next' used outside"),
    ("awk 'BEGIN { print index(\"abc\") }'", "function index called with 1 arguments"),
    ("awk 'BEGIN { print 0 ^ -1, log(-1) }'", "inf -nan"),  # what mawk prints
    ("awk '{ print $(-1) }' words.txt", "out of range field -1"),
    ("sed 's/a/b' words.txt", "unterminated `s' command"),
    ("sed -n '/x/{p}' words.txt", "not supported in this shell"),
    ("tr -q a b", "tr: invalid option -- 'q'"),
    ("grep -E '(' words.txt", "grep: invalid regular expression"),
    ("arr=(a b)", "arrays are not supported"),
])
def test_errors_are_messages_never_exceptions(script: str, message: str) -> None:
    out, _ = make_shell().run(script)
    assert message in out
