"""The bench's markdown: the off-grid targets table and the copy into docs/benchmarks.md."""

from __future__ import annotations

import pandas as pd

from bench.report import README_END, README_START, sync_readme, targets_table


def _summary(**ours: float) -> pd.DataFrame:
    base = {"qtvd1": 0.01, "missing_values": 0.0, "qtvd2": 0.05, "range_mae": 0.004, "tstr": 0.9}
    rows = [
        {"dataset": "toy", "method": "splice_add_remove", "epsilon": 1.0, **base, **ours},
        {"dataset": "toy", "method": "splice_add_remove", "epsilon": 3.0, **base, "qtvd1": 0.5},
        {"dataset": "toy", "method": "aim", "epsilon": 1.0, **base, "tstr": 0.85},
        {"dataset": "toy", "method": "ref_independent", "epsilon": float("nan"), **base, "qtvd2": 0.08,
         "range_mae": 0.01},
        {"dataset": "toy", "method": "ref_dp_marginals", "epsilon": float("nan"), **base, "qtvd1": 0.03},
        {"dataset": "toy", "method": "ref_bootstrap", "epsilon": float("nan"), **base, "qtvd1": 0.006},
    ]
    return pd.DataFrame(rows)


def test_the_targets_table_names_each_missed_target_at_epsilon_one():
    assert targets_table(_summary())[-2].endswith("| none |")  # the ε = 3 row's q 1-way of .5 is not read
    row = targets_table(_summary(qtvd1=0.03, missing_values=2.0, qtvd2=0.09, range_mae=0.02, tstr=0.8))[-2]
    assert row.startswith("| toy | 0.0300 (0.0300 / 0.0060) | 2 | 0.0900 (0.0800) | 0.0200 (0.0100) | 0.800 (0.850) |")
    assert row.endswith("| q 1-way, missing, q 2-way, range MAE, TSTR |")


def test_little_dependence_means_within_a_hundredth_of_independent_marginals():
    weak = _summary(qtvd2=0.035)
    weak.loc[weak.method == "ref_independent", "qtvd2"] = 0.028
    assert targets_table(weak)[-2].endswith("| none |")
    weak.loc[weak.method == "splice_add_remove", "qtvd2"] = 0.039
    assert targets_table(weak)[-2].endswith("| q 2-way |")


def test_the_results_go_between_the_markers_on_their_own_lines_not_into_prose_that_quotes_them(tmp_path):
    doc = tmp_path / "benchmarks.md"
    prose = f"The bench copies them here (between `{README_START}` and `{README_END}`) after every run."
    doc.write_text(f"# Bench\n\n{prose}\n\n## Latest\n\n{README_START}\nold table\n{README_END}\n\n## After\n")
    results = tmp_path / "results.md"
    results.write_text("# Benchmark\n\nnew table\n")
    assert sync_readme(results, doc)
    text = doc.read_text()
    assert prose in text and "old table" not in text and text.endswith("## After\n")
    assert f"{README_START}\n#### Benchmark\n\nnew table\n{README_END}" in text
    doc.write_text(prose)
    assert not sync_readme(results, doc)


def test_the_report_command_regenerates_the_tables_and_their_copy_from_the_csv(tmp_path):
    from bench.report import main

    rows = _summary().assign(seed=0, status="ok", tstr_metric="roc_auc", wall_s=1.0, code_version="abc1234")
    rows.to_csv(tmp_path / "results.csv", index=False)
    doc = tmp_path / "benchmarks.md"
    doc.write_text(f"# Bench\n\n{README_START}\nold\n{README_END}\n")
    main(["--csv", str(tmp_path / "results.csv"), "--md", str(tmp_path / "results.md"), "--doc", str(doc)])
    generated = (tmp_path / "results.md").read_text()
    assert "## Off-grid targets" in generated and "| toy | 0.0100 (0.0300 / 0.0060) |" in generated
    assert " cores (" not in generated  # regenerated elsewhere: no claim about the machine that measured
    assert "#### Off-grid targets" in doc.read_text() and "old" not in doc.read_text()
    # the page gets the summary (ε = 1, one table per relation); results.md keeps every table
    summary = doc.read_text()
    assert "## toy" in generated and "## toy" not in summary and "| splice_add_remove | 3 |" in generated
    assert "##### Add-remove (n private)" in summary and "| toy | splice_add_remove | 1 |" in summary
    assert "| aim | 1 |" in summary and summary.count("| toy | splice_add_remove |") == 1  # ε = 1 only
    assert "[bench/results/results.md](../bench/results/results.md)" in summary
