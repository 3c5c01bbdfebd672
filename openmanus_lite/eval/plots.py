"""Plots of benchmark results and reward distributions (matplotlib imported lazily: importing eval stays cheap)."""

from __future__ import annotations

from pathlib import Path

from openmanus_lite.eval.compare import comparison_frame
from openmanus_lite.rewards import describe_rewards


def file_pyplot():
    """pyplot on matplotlib's file-only backend (Agg): the commands and the demo save figures, and may run where
    there is no display."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_comparison(results, level: str = "domain", ax=None, title: str | None = None, path: str | Path | None = None):
    """Grouped bar chart: success rate per domain (or cell), one bar per policy, 95% CI bars."""
    import matplotlib.pyplot as plt

    df = comparison_frame(results, level)
    if df.empty:
        raise ValueError("nothing to plot: the results have no records")
    df = df.assign(group=df["domain"] if level != "cell" else df["domain"] + "/" + df["difficulty"])
    groups = list(dict.fromkeys(df["group"]))
    policies = list(dict.fromkeys(df["policy"]))
    if ax is None:
        _, ax = plt.subplots(figsize=(max(5, 1.1 * len(groups) * max(1, len(policies)) ** 0.5 + 2), 3.6))
    width = 0.8 / len(policies)
    for j, pol in enumerate(policies):
        sub = df[df["policy"] == pol].set_index("group")
        at = [i for i, g in enumerate(groups) if g in sub.index]  # the groups this policy has a row for
        rows = [sub.loc[groups[i]] for i in at]
        err = [[max(0.0, r["success_rate"] - r["ci_low"]) for r in rows],
               [max(0.0, r["ci_high"] - r["success_rate"]) for r in rows]]
        ax.bar([i - 0.4 + width * (j + 0.5) for i in at], [r["success_rate"] for r in rows], width, yerr=err,
               capsize=3, label=pol)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups, rotation=30 if level == "cell" else 0, ha="right" if level == "cell" else "center")
    return _finish(ax, title or "benchmark success by " + ("domain" if level != "cell" else "domain/difficulty"), path)


def _finish(ax, title: str, path: str | Path | None):
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("success rate (95% CI)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.figure.tight_layout()
    if path:
        ax.figure.savefig(path, dpi=120)
    return ax.figure


def plot_scaling(frame, ax=None, title: str | None = None, path: str | Path | None = None,
                 baseline: float | None = None):
    """Success rate vs compute budget, one line per strategy with a 95% CI band (`frame`: columns strategy, budget,
    success_rate, ci_low, ci_high); `baseline` draws the greedy success rate dashed."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(5.5, 3.8))
    for strat in dict.fromkeys(frame["strategy"]):
        sub = frame[frame["strategy"] == strat].sort_values("budget")
        oracle = str(strat).endswith("-oracle")  # an upper bound, not a strategy: drawn dotted, no band
        line = ax.plot(sub["budget"], sub["success_rate"], marker="o", label=strat, linestyle=":" if oracle else "-")[0]
        if not oracle:
            ax.fill_between(sub["budget"], sub["ci_low"], sub["ci_high"], color=line.get_color(), alpha=0.08)
    if baseline is not None:
        ax.axhline(baseline, color="gray", linestyle="--", label="single episode")
    ax.set_xscale("log", base=2)
    budgets = sorted(set(frame["budget"]))
    ax.set_xticks(budgets)
    ax.set_xticklabels([f"{b:g}x" for b in budgets])
    ax.set_xlabel("compute budget (x tokens of one greedy episode)")
    return _finish(ax, title or "test-time scaling", path)


def plot_reward_distributions(data, by: str = "source", bins: int = 10, cols: int = 3):
    """One histogram per reward column of `data` (rewards.reward_table's, with a `by` column naming each row's source)
    over the reward's registered range, one colour per source."""
    import matplotlib.pyplot as plt
    import numpy as np

    names = [c for c in data.columns if c != by]
    registered = {row["name"]: row["range"] for row in describe_rewards()}
    sources = list(dict.fromkeys(data[by])) if by in data.columns else [None]
    colours = {s: f"C{i}" for i, s in enumerate(sources)}
    rows = max(1, -(-len(names) // cols))
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 2.8 * rows), squeeze=False)
    for ax, name in zip(axes.flat, names):
        lo, hi = registered.get(name) or (data[name].min(), data[name].max())
        edges = np.linspace(lo, hi if hi > lo else lo + 1.0, bins + 1)
        for source in sources:
            values = (data[name] if source is None else data.loc[data[by] == source, name]).dropna()
            if len(values):
                ax.hist(values.clip(edges[0], edges[-1]), bins=edges, alpha=0.55, color=colours[source],
                        label=f"{source} (n={len(values)})")
        ax.set_title(name)
        ax.set_xlabel("reward")
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    handles = [plt.Rectangle((0, 0), 1, 1, color=colours[s], alpha=0.55) for s in sources]
    if by in data.columns:
        fig.legend(handles, [str(s) for s in sources], loc="upper center", ncol=len(sources), frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    return fig
