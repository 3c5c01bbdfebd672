"""Several policies or checkpoints side by side, and which tasks flipped between two runs. A few points between two
checkpoints on 60 tasks is often noise: tables show Wilson intervals, `flipped_tasks` the tasks that changed outcome,
`sign_tests` the paired exact sign test on those changes."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Iterable, Mapping

from openmanus_lite.eval.benchmark import BenchmarkResult
from openmanus_lite.eval.metrics import ALL


def _as_list(results: Iterable[BenchmarkResult] | Mapping[str, BenchmarkResult]) -> list[BenchmarkResult]:
    if isinstance(results, Mapping):  # relabelled copies: the caller's results stay as they were
        return [replace(r, label=label) for label, r in results.items()]
    out = list(results)
    labels = [r.label for r in out]
    if len(set(labels)) != len(labels):
        raise ValueError(f"results share labels {labels}: pass a dict {{label: result}} or set result.label")
    return out


def comparison_frame(results, level: str = "domain"):
    """Long-form numbers: one row per (policy, domain, difficulty) at the chosen level."""
    import pandas as pd

    frames = [res.table(level) for res in _as_list(results)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def comparison_table(results, level: str = "domain", digits: int = 1):
    """Rows = domain (x difficulty), columns = policies, cells = `rate_cell`'s 'successes/n: rate% [low, high]'."""
    df = comparison_frame(results, level)
    if df.empty:
        return df
    df = df.assign(cell=[rate_cell(r, digits) for r in df.itertuples()])
    index = ["domain"] if level == "domain" else ["domain", "difficulty"]
    wide = df.pivot_table(index=index, columns="policy", values="cell", aggfunc="first", sort=False)
    return wide[list(dict.fromkeys(df["policy"]))]


def flipped_tasks(a: BenchmarkResult, b: BenchmarkResult):
    """Tasks both runs attempted whose success differs: `gained` (b solves, a did not) or `lost`; a task in only one
    run has change `only_in_<label>`, so nothing is dropped silently when the runs used different subsets."""
    import pandas as pd

    ra, rb = a.by_task(), b.by_task()
    la, lb = a.label, b.label
    if la == lb:
        la, lb = f"{la} (a)", f"{lb} (b)"

    def row(x, y, change):
        first = x or y
        return {"task_id": first.task_id, "domain": first.domain, "difficulty": first.difficulty,
                la: x and x.success, lb: y and y.success, "change": change}

    rows = []
    for tid, x in ra.items():
        y = rb.get(tid)
        if y is None:
            rows.append(row(x, None, f"only_in_{la}"))
        elif x.success != y.success:
            rows.append(row(x, y, "gained" if y.success else "lost"))
    rows += [row(None, y, f"only_in_{lb}") for tid, y in rb.items() if tid not in ra]
    return pd.DataFrame(rows, columns=["task_id", "domain", "difficulty", la, lb, "change"])


def flip_counts(a: BenchmarkResult, b: BenchmarkResult) -> dict[str, int]:
    """How many common tasks b gained and lost relative to a, and how many both solve / fail."""
    ra, rb = a.by_task(), b.by_task()
    common = [t for t in ra if t in rb]
    out = {"common": len(common), "gained": 0, "lost": 0, "both_solved": 0, "both_failed": 0}
    for x, y in ((ra[t].success, rb[t].success) for t in common):
        out["gained" if (y and not x) else "lost" if (x and not y) else "both_solved" if x else "both_failed"] += 1
    return out


def sign_test(gained: int, lost: int) -> float:
    """Two-sided exact sign test on the discordant pairs (1.0 when there are none)."""
    if gained < 0 or lost < 0:
        raise ValueError(f"gained and lost must be counts >= 0, got {gained}, {lost}")
    n = gained + lost
    if n == 0:
        return 1.0
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(min(gained, lost) + 1)) / 2 ** n)


def sign_tests(a: BenchmarkResult, b: BenchmarkResult):
    """The paired sign test of b against a on their common tasks, one row per domain and one for `ALL`."""
    import pandas as pd

    ra, rb = a.by_task(), b.by_task()
    common = [t for t in ra if t in rb]
    rows = []
    for domain in [*dict.fromkeys(ra[t].domain for t in common), ALL]:
        mine = [t for t in common if domain == ALL or ra[t].domain == domain]
        gained = sum(1 for t in mine if rb[t].success and not ra[t].success)
        lost = sum(1 for t in mine if ra[t].success and not rb[t].success)
        rows.append({"domain": domain, "common": len(mine), "gained": gained, "lost": lost,
                     "p_value": sign_test(gained, lost)})
    return pd.DataFrame(rows, columns=["domain", "common", "gained", "lost", "p_value"])


def markdown_table(headers: list[str], rows: Iterable[Iterable]) -> str:
    """A GitHub-flavoured Markdown pipe table (a `|` inside a cell is escaped)."""
    def esc(x) -> str:
        return str(x).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(esc(h) for h in headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(esc(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def rate_cell(row, digits: int = 1) -> str:
    """'successes/n: rate% [low, high]' of a summary row (the 95% Wilson interval, in percent)."""
    f = lambda x: f"{100 * x:.{digits}f}"  # noqa: E731
    return f"{row.successes}/{row.n}: {f(row.success_rate)}% [{f(row.ci_low)}, {f(row.ci_high)}]"


def comparison_markdown(results, domains: Iterable[str] | None = None, *, pooled_label: str = "all domains",
                        invalid_actions: bool = True, digits: int = 1) -> str:
    """A Markdown table of `rate_cell`s: a row per domain, the pooled row (`pooled_label`), then invalid actions
    per action taken; one column per result (`results`: a list or {label: result})."""
    results = _as_list(results)
    domains = list(dict.fromkeys(r.domain for res in results for r in res.records) if domains is None else domains)

    def cell(res: BenchmarkResult, domain: str) -> str:
        try:
            return rate_cell(res.row(domain), digits)
        except KeyError:
            return "-"

    rows = [[d, *[cell(res, d) for res in results]] for d in domains]
    if len(domains) > 1:
        rows.append([f"**{pooled_label}**", *[f"**{cell(res, ALL)}**" for res in results]])
    if invalid_actions:
        rows.append(["invalid actions", *[f"{100 * res.row().invalid_action_rate:.0f}%" for res in results]])
    return markdown_table(["domain", *[res.label for res in results]], rows)
