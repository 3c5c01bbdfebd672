"""Tables and plots of a merged dataset: what is in it, how long it is, what trains, what was rejected.

Figures are built without pyplot, so they work in scripts, tests and notebooks alike.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from openmanus_lite.data.checks import token_counter
from openmanus_lite.schema import Trajectory

COLUMNS = ["id", "source", "domain", "turns", "assistant_turns", "train_turns", "tokens", "train_tokens", "chars",
           "negative"]


def trajectory_stats(trajs: Iterable[Trajectory], tokenizer: Any = None):
    """A pandas DataFrame, one row per trajectory, with `COLUMNS` (negative: the negative-sample kind or '')."""
    import pandas as pd

    count = token_counter(tokenizer)
    rows = []
    for t in trajs:
        tokens = [count(m.content) for m in t.messages]
        train = [n for m, n in zip(t.messages, tokens) if m.role == "assistant" and m.train]
        neg = t.meta.get("negative")
        rows.append([t.id, t.source, t.domain, len(t.messages), sum(m.role == "assistant" for m in t.messages),
                     len(train), sum(tokens), sum(train), sum(len(m.content) for m in t.messages),
                     neg.get("kind", "") if isinstance(neg, dict) else ""])
    return pd.DataFrame(rows, columns=COLUMNS)


def summary_tables(df) -> dict[str, Any]:
    """counts (source x domain, with totals), turns and tokens per domain, train_share per source and domain."""
    import pandas as pd

    counts = pd.crosstab(df["source"], df["domain"], margins=True, margins_name="total")
    turns = df.groupby("domain")["turns"].describe()[["count", "mean", "50%", "max"]]
    tokens = df.groupby("domain")["tokens"].describe()[["mean", "50%", "max"]]
    grouped = df.groupby(["source", "domain"])[["tokens", "train_tokens"]].sum()
    grouped["train_share"] = (grouped["train_tokens"] / grouped["tokens"].where(grouped["tokens"] > 0)).round(3)
    return {"counts": counts, "turns": turns, "tokens": tokens, "train_share": grouped.reset_index()}


def rejection_table(report):
    """Rejections of a MergeReport as a reason x source table (counts), most frequent first."""
    import pandas as pd

    frame = report.to_frame()
    frame = frame[frame["reason"] != "kept"]
    if frame.empty:
        return pd.DataFrame(columns=["reason"]).set_index("reason")
    table = frame.pivot_table(index="reason", columns="source", values="count", aggfunc="sum", fill_value=0)
    return table.loc[table.sum(axis=1).sort_values(ascending=False).index]


# --------------------------------------------------------------------------- plots


def _figure(ncols: int = 1, nrows: int = 1, size: tuple[float, float] = (6, 4)):
    from matplotlib.figure import Figure

    fig = Figure(figsize=size)  # no layout engine: it dominated the drawing time
    axes = fig.subplots(nrows, ncols, squeeze=False)
    fig.subplots_adjust(left=0.09 if ncols == 1 else 0.05, right=0.97, bottom=0.2 if nrows == 1 else 0.1,
                        top=0.9 if nrows == 1 else 0.94, hspace=0.45, wspace=0.4)
    return fig, axes


def _titles(ax, title: str, ylabel: str = "") -> None:
    ax.set(title=title, ylabel=ylabel)
    ax.tick_params(axis="x", labelrotation=30)


def plot_counts(df, ax=None):
    """Stacked bars: trajectories per source, split by domain. Draws into `ax`, else a figure of its own."""
    import pandas as pd

    ax = _figure()[1][0][0] if ax is None else ax
    table = pd.crosstab(df["source"], df["domain"])
    bottom = 0
    for domain in table.columns:
        ax.bar(table.index, table[domain], bottom=bottom, label=domain)
        bottom = bottom + table[domain]
    _titles(ax, "trajectories per source and domain", "trajectories")
    if len(table.columns):
        ax.legend(fontsize="small", ncols=2, loc="upper right")
    return ax.figure


def plot_lengths(df, column: str = "turns", ax=None):
    """Histogram of `column` (turns, tokens) per trajectory, by domain."""
    ax = _figure()[1][0][0] if ax is None else ax
    for domain, group in df.groupby("domain"):
        ax.hist(group[column], bins=20, histtype="step", linewidth=1.5, label=domain)
    ax.set(title=f"{column} per trajectory", xlabel=column, ylabel="trajectories")
    if df["domain"].nunique():
        ax.legend(fontsize="small", loc="upper right")
    return ax.figure


def plot_train_share(df, ax=None):
    """Share of tokens that receive loss, per domain."""
    ax = _figure()[1][0][0] if ax is None else ax
    sums = df.groupby("domain")[["tokens", "train_tokens"]].sum()
    share = sums["train_tokens"] / sums["tokens"].where(sums["tokens"] > 0)
    ax.bar(share.index, share.fillna(0).values)
    _titles(ax, "train-token share", "tokens with loss / all tokens")
    ax.set_ylim(0, 1)
    return ax.figure


def plot_rejections(report, ax=None):
    """Horizontal bars: rejected rows per reason."""
    ax = _figure()[1][0][0] if ax is None else ax
    items = sorted(((r, n) for r, n in report.by_reason().items() if r != "kept"), key=lambda x: x[1])
    ax.barh([r for r, _ in items], [n for _, n in items], color="tab:red")
    ax.set(title=f"rejections ({report.rejected} of {sum(report.input_rows.values())} rows)", xlabel="rows")
    if not items:
        ax.text(0.5, 0.5, "no rejections", ha="center", va="center", transform=ax.transAxes)
    return ax.figure


def plot_overview(df, report=None):
    """Counts, turns, tokens, train share, (with a report) rejections and negative samples in one figure."""
    fig, axes = _figure(3, 2, size=(16, 8))
    plot_counts(df, axes[0][0])
    plot_lengths(df, "turns", axes[0][1])
    plot_lengths(df, "tokens", axes[0][2])
    plot_train_share(df, axes[1][0])
    if report is not None:
        plot_rejections(report, axes[1][1])
    else:
        axes[1][1].axis("off")
    kinds = df[df["negative"] != ""]["negative"].value_counts()
    axes[1][2].bar(kinds.index, kinds.values, color="tab:purple")
    _titles(axes[1][2], "negative samples")
    if kinds.empty:
        axes[1][2].text(0.5, 0.5, "none", ha="center", va="center", transform=axes[1][2].transAxes)
    return fig


def save_plots(df, out_dir, report=None) -> list:
    """Write the overview figure (and the rejections, with a report) as PNG files; returns their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    figures = {"overview": plot_overview(df, report)}
    if report is not None:
        figures["rejections"] = plot_rejections(report)
    for name, fig in figures.items():
        fig.savefig(out / f"{name}.png", dpi=72)
    return [out / f"{name}.png" for name in figures]
