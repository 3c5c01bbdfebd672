"""Stats tables and plots of a merged dataset."""

from __future__ import annotations

from openmanus_lite.data import MergeConfig, SourceSpec, merge
from openmanus_lite.data.stats import (
    plot_overview,
    rejection_table,
    save_plots,
    summary_tables,
    trajectory_stats,
)
from openmanus_lite.paths import SAMPLES_DIR
from openmanus_lite.schema import Trajectory, Turn


def test_stats_columns_and_counts():
    t = Trajectory("a", "s", "db", [Turn("user", "12345678"), Turn("assistant", "Think: \nAct: answer(1)", True),
                                    Turn("user", "abcd"), Turn("assistant", "1234", False)])
    df = trajectory_stats([t])
    row = df.iloc[0]
    assert (row.turns, row.assistant_turns, row.train_turns) == (4, 2, 1)
    assert row.tokens == 2 + 6 + 1 + 1 and row.train_tokens == 6 and row.chars == 8 + 22 + 4 + 4

    class WordTokenizer:
        def __call__(self, text, add_special_tokens=False):
            return {"input_ids": text.split()}

    assert trajectory_stats([t], WordTokenizer()).iloc[0].tokens == 1 + 3 + 1 + 1


def test_tables_and_plots_of_the_samples(tmp_path):
    specs = [SourceSpec(n, str(SAMPLES_DIR / n)) for n in ("agentinstruct", "agent_flan", "taskcraft")]
    res = merge(specs, MergeConfig(negatives=0.5))
    df = trajectory_stats(res.trajectories)
    tables = summary_tables(df)
    assert tables["counts"].loc["total", "total"] == len(res.trajectories)
    share = tables["train_share"]
    assert ((share.train_share > 0) & (share.train_share <= 1)).all()
    rej = rejection_table(res.report)
    assert list(rej.index) == ["grammar.free_text"] and rej.loc["grammar.free_text", "agent_flan"] == 1
    fig = plot_overview(df, res.report)
    assert len(fig.axes) == 6
    paths = save_plots(df, tmp_path, res.report)
    assert {p.name for p in paths} >= {"overview.png", "rejections.png"} and all(p.stat().st_size > 1000 for p in paths)
