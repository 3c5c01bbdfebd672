#!/usr/bin/env bash
# The kit's GPU path in one offline run (issue #42), sized for under 8 minutes on an H200 including the install.
# Parts, each under its own time limit; a part that fails or runs out of time is reported and the next one runs:
#   env         nvidia-smi, python, torch and its CUDA build
#   install     the wheelhouse (.whl/ from ../shared/gpu/wheelhouse.sh) into $SITE, which goes on PYTHONPATH
#   smoke_bf16  benchmarks/gpu_smoke.py --device cuda: native precision (bf16 on Ampere and newer)
#   smoke_t4    the same with the process reporting compute capability 7.5: a T4's decisions (fp16, grad scaler)
#   probe       benchmarks/gpu_probe.py: the t4 preset on a model of Qwen2.5-1.5B's shapes (random weights)
# Figures go to $OUT (or runs/gpu_check): <part>.log, <part>.json (the part's RESULT line) and summary.txt (each
# part's status, exit code, seconds, and the tail of the log of every part that did not pass).
#
#   bash benchmarks/gpu_check.sh                                  # on the GPU machine, in the checkout
#   GPU_CHECK_DEVICE=cpu bash benchmarks/gpu_check.sh             # the plumbing on a CPU: tiny models, no install
#
# Settings (environment): WHEELHOUSE (default .whl when it holds wheels; on CPU only when given), SITE
# (/tmp/site), WORK (/tmp/gpu_check_work: model folders, never under $OUT), PYTHON (python3), GPU_CHECK_PARTS
# (which parts, in order), T_<PART> (seconds per part), GPU_CHECK_LIB=1 (define the functions only: tests).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${PYTHON:-python3}
DEVICE=${GPU_CHECK_DEVICE:-cuda}
OUT=${OUT:-runs/gpu_check}
WORK=${WORK:-/tmp/gpu_check_work}
SITE=${SITE:-/tmp/site}
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false PYTHONHASHSEED=0
mkdir -p "$OUT" "$WORK"
SUMMARY="$OUT/summary.txt"
FAILED=0

# run_part NAME SECONDS COMMAND...: runs COMMAND (a program, or a function of this script) under `timeout`,
# its output in $OUT/NAME.log, its RESULT line in $OUT/NAME.json, and one line in the summary (plus the log's
# tail when it did not pass).
run_part() {
  local name=$1 limit=$2 start rc status
  shift 2
  echo "== $name (limit ${limit}s): $*"
  start=$(date +%s)
  if declare -F "$1" >/dev/null; then set -- bash -c "$(declare -f "$1"); $*"; fi  # `timeout` runs programs only
  timeout --kill-after=10 "$limit" "$@" >"$OUT/$name.log" 2>&1
  rc=$?
  case $rc in
    0) status=ok ;;
    124|137) status="TIMED_OUT(${limit}s)" ;;
    *) status=FAILED ;;
  esac
  grep '^RESULT ' "$OUT/$name.log" | tail -1 | sed 's/^RESULT //' >"$OUT/$name.json"
  [ -s "$OUT/$name.json" ] || rm -f "$OUT/$name.json"
  printf '%-12s %-16s rc=%-4s %5ss  %s\n' "$name" "$status" "$rc" "$(( $(date +%s) - start ))" "$name.log" \
    | tee -a "$SUMMARY"
  if [ $rc -ne 0 ]; then
    FAILED=$((FAILED + 1))
    { echo "--- $name: last 40 lines of $name.log"; tail -n 40 "$OUT/$name.log"; echo "---"; } >>"$OUT/tails.txt"
  fi
  return 0
}

part_env() {
  command -v nvidia-smi >/dev/null && nvidia-smi
  "$PY" -c 'import sys, torch; print(sys.version); print("torch", torch.__version__, "cuda", torch.version.cuda,
"available", torch.cuda.is_available(), torch.cuda.get_device_name() if torch.cuda.is_available() else "")'
}

part_install() {
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
    "$WHEELHOUSE"/*.whl && "$PY" -m pip list --path "$SITE" --format freeze
}

if [ "$DEVICE" = cpu ]; then
  WHEELHOUSE=${WHEELHOUSE:-}
  SMOKE=(--device cpu --new-tokens 8)
  PROBE=(--device cpu --shape tiny)
else
  WHEELHOUSE=${WHEELHOUSE:-.whl}
  SMOKE=(--device cuda)
  PROBE=(--device cuda)
fi
# 15 + 45 + 90 + 90 + 240 = 480 s if every part ran out of time (the install takes ~15 s, the environment ~5)
T_ENV=${T_ENV:-15}; T_INSTALL=${T_INSTALL:-45}; T_SMOKE_BF16=${T_SMOKE_BF16:-90}; T_SMOKE_T4=${T_SMOKE_T4:-90}
T_PROBE=${T_PROBE:-240}
export PY SITE WHEELHOUSE
[ "${GPU_CHECK_LIB:-0}" = 1 ] && return 0 2>/dev/null

if [ -n "$WHEELHOUSE" ] && compgen -G "$WHEELHOUSE/*.whl" >/dev/null; then
  export PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}"
  DEFAULT_PARTS="env install smoke_bf16 smoke_t4 probe"
else
  DEFAULT_PARTS="env smoke_bf16 smoke_t4 probe"
fi
: >"$SUMMARY"; : >"$OUT/tails.txt"
echo "gpu_check on $DEVICE, $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD 2>/dev/null)" | tee -a "$SUMMARY"
for part in ${GPU_CHECK_PARTS:-$DEFAULT_PARTS}; do
  case $part in
    env) run_part env "$T_ENV" part_env ;;
    install) run_part install "$T_INSTALL" part_install ;;
    # each part's own --time-limit ends it (with its RESULT line) before `timeout` would kill it
    smoke_bf16) run_part smoke_bf16 "$T_SMOKE_BF16" "$PY" benchmarks/gpu_smoke.py "${SMOKE[@]}" \
                  --out "$WORK/smoke_bf16" --time-limit $((T_SMOKE_BF16 - 25)) ;;
    smoke_t4) run_part smoke_t4 "$T_SMOKE_T4" "$PY" benchmarks/gpu_smoke.py "${SMOKE[@]}" --capability 7.5 \
                --out "$WORK/smoke_t4" --time-limit $((T_SMOKE_T4 - 25)) ;;
    probe) run_part probe "$T_PROBE" "$PY" benchmarks/gpu_probe.py "${PROBE[@]}" --out "$WORK/probe" \
             --time-limit $((T_PROBE - 40)) --figures "$OUT/probe_stages.json" ;;
    *) echo "unknown part $part" | tee -a "$SUMMARY"; FAILED=$((FAILED + 1)) ;;
  esac
done
cat "$OUT/tails.txt" >>"$SUMMARY"
echo "$FAILED part(s) did not pass" | tee -a "$SUMMARY"
exit $(( FAILED > 0 ))
