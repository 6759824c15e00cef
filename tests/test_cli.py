"""The `splice` release commands on a real release: release, releases, show, budget, refit, sample, export.
Every command succeeds on a real release and fails with one line (non-zero exit, no traceback) on bad input."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from helpers import PROGRESS_LINE, fails_cleanly, ok, without_progress

from splice_assets.datasets import DEMO_DATASET, demo_data_path

FAST = ["--k", "8", "--L", "128", "--K", "3", "--steps", "60", "--rows", "2000"]
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
COMMANDS = ["release", "releases", "show", "budget", "refit", "sample", "query", "export", "plan"]


def environment(tmp: Path) -> dict[str, str]:
    return {
        "DAGSTER_HOME": str(tmp / "home"),
        "SPLICE_LEDGER_URL": f"sqlite:///{tmp / 'ledger.sqlite'}",
        "MLFLOW_TRACKING_URI": f"sqlite:///{tmp / 'mlflow.db'}",
        "SPLICE_ARTIFACT_DIR": str(tmp / "releases"),
    }


def run_process(*args: str) -> subprocess.CompletedProcess:
    """`splice ...` in a fresh process (the in-process Dagster run binds log handlers to the real streams)."""
    return subprocess.run([sys.executable, "-m", "splice_assets.cli", *map(str, args)], env=dict(os.environ),
                          capture_output=True, text=True, timeout=600)


def process_fails_cleanly(*args: str) -> str:
    proc = run_process(*args)
    assert proc.returncode != 0, (args, proc.stdout)
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = without_progress(proc.stderr)  # a release shows its stages first, the FAILED one last
    assert len(lines) == 1 and lines[0].startswith("Error: "), (args, proc.stderr[-3000:])
    return lines[0]


@pytest.fixture(scope="module")
def cli_env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cli")
    with pytest.MonkeyPatch.context() as mp:
        for key, value in environment(tmp).items():
            mp.setenv(key, value)
        refused = run_process("release", "--dataset", DEMO_DATASET, "--input", demo_data_path(), "--epsilon", "1",
                              "--delta", "1e-9", *FAST)
        assert refused.returncode != 0 and "splice budget set" in refused.stderr  # no budget: nothing released
        assert not Path(tmp / "releases").exists()
        ok("budget", "set", DEMO_DATASET, "--epsilon", "10", "--delta", "1e-6")
        proc = run_process("release", "--dataset", DEMO_DATASET, "--input", demo_data_path(), "--epsilon", "1",
                           "--delta", "1e-9", *FAST, "--json")
        assert proc.returncode == 0, proc.stderr[-3000:]
        record = json.loads(proc.stdout)
        yield {"tmp": tmp, "record": record, "release_id": record["release_id"], "stderr": proc.stderr}


def test_release_shows_its_stages_and_no_debug_log(cli_env):
    """At default verbosity: one progress line per stage (the fit's inner ones indented), Dagster at INFO (no
    DEBUG line, no step-event chatter), and stdout only the JSON record."""
    stderr = cli_env["stderr"]
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert not [line for line in lines if "DEBUG" in line or "STEP_START" in line], stderr[-3000:]
    assert "INFO mlflow" not in stderr, stderr[-3000:]  # its store creation on a new tracking URI included
    stages = [line.split()[1:3] for line in lines if PROGRESS_LINE.match(line)]
    for stage in (["load", "Dagster"], ["validate", "and"], ["measure", "the"], ["fit", "the"],
                  ["mixture:", "gradient"], ["sample", "2,000"], ["report:", "metrics"], ["write", "the"]):
        assert stage in stages, (stage, stderr[-3000:])
    assert "\n  done mixture: gradient steps" in stderr  # nested under the fit
    assert len(lines) < 30, stderr[-3000:]


def test_help_everywhere():
    assert ok("--help").output
    for command in COMMANDS:
        assert "Usage:" in ok(command, "--help").output


def test_release_prints_id_and_folders(cli_env):
    record = cli_env["record"]
    assert Path(record["public_dir"], "release.json").is_file()
    assert Path(record["internal_dir"], "audit.json").is_file()
    assert Path(record["public_dir"]).parent.name == record["release_id"]
    assert record["epsilon_cost"] == 1.0 and record["registered_model_name"] == f"splice-{DEMO_DATASET}"


def test_releases_lists_the_release(cli_env):
    rid = cli_env["release_id"]
    assert rid in ok("releases").output
    rows = json.loads(ok("releases", "--dataset", DEMO_DATASET, "--json").stdout)
    row = next(r for r in rows if r["release_id"] == rid)
    assert (row["epsilon"], row["delta"], row["status"], row["kind"]) == (1.0, 1e-9, "released", "release")
    assert row["created_at"]


def test_show_prints_manifest_and_ledger_entry(cli_env):
    rid = cli_env["release_id"]
    text = ok("show", rid).output
    assert rid in text and "committed" in text
    assert "relation replace-one" in text and "sigma/Delta" in text and "(noisy)" not in text
    shown = json.loads(ok("show", rid[:10], "--json").stdout)  # a unique prefix works too
    assert shown["manifest"]["release_id"] == rid
    assert [e["status"] for e in shown["ledger_entries"]] == ["committed"]
    assert shown["ledger_entries"][0]["ledger_entry_id"] == shown["manifest"]["privacy"]["ledger_entry_id"]


def test_budget_refit_is_free_and_linked(cli_env):
    rid = cli_env["release_id"]
    before = json.loads(ok("budget", DEMO_DATASET, "--json").stdout)
    assert before["epsilon_spent"] > 0 and [h["release_id"] for h in before["history"]] == [rid]
    assert "remaining" in ok("budget", DEMO_DATASET).output
    child = json.loads(ok("refit", rid, "--K", "2", "--steps", "30", "--rows", "300", "--json").stdout)
    assert child["parent_release_id"] == rid and child["epsilon_cost"] == 0.0
    after = json.loads(ok("budget", DEMO_DATASET, "--json").stdout)
    assert after["epsilon_spent"] == before["epsilon_spent"]
    assert after["epsilon_remaining"] == before["epsilon_remaining"]
    history = {h["release_id"]: h for h in after["history"]}
    assert history[child["release_id"]]["epsilon"] == 0.0
    assert history[child["release_id"]]["parent_release_id"] == rid
    rows = {r["release_id"]: r for r in json.loads(ok("releases", "--json").stdout)}
    assert rows[child["release_id"]]["kind"] == "refit" and rows[child["release_id"]]["parent_release_id"] == rid
    # One release-id format: the dashed UUID of a Dagster run, for a refit too; `releases` prints ids in full.
    assert all(UUID.fullmatch(r) for r in rows), list(rows)
    listing = ok("releases").output
    assert f"{child['release_id']}  " in listing and f"(refit of {rid})" in listing


def test_sample_writes_csv_parquet_and_prints(cli_env, tmp_path):
    rid = cli_env["release_id"]
    columns = pd.read_parquet(Path(cli_env["record"]["public_dir"]) / "synthetic.parquet").columns.tolist()
    ok("sample", rid, "-n", "40", "--seed", "3", "--out", tmp_path / "s.csv")
    ok("sample", rid, "-n", "40", "--seed", "3", "--out", tmp_path / "s.parquet")
    from_csv = pd.read_csv(tmp_path / "s.csv")
    from_parquet = pd.read_parquet(tmp_path / "s.parquet")
    assert from_csv.shape == from_parquet.shape == (40, len(columns)) and list(from_parquet.columns) == columns
    printed = ok("sample", rid, "-n", "5").output
    assert all(c in printed for c in columns)
    # An existing --out file is kept unless --force.
    before = (tmp_path / "s.csv").read_bytes()
    assert "--force" in fails_cleanly("sample", rid, "-n", "7", "--out", tmp_path / "s.csv")
    assert (tmp_path / "s.csv").read_bytes() == before
    ok("sample", rid, "-n", "7", "--out", tmp_path / "s.csv", "--force")
    assert len(pd.read_csv(tmp_path / "s.csv")) == 7


def test_query_answers_with_an_interval_and_refuses_a_bad_query(cli_env):
    rid = cli_env["release_id"]
    assert "cannot read 'median(age)'" in fails_cleanly("query", rid, "median(age)")
    exact = json.loads(ok("query", rid, "share where rate_marriage == 5", "--json").output)
    assert exact["interval"] == "exact" and exact["lower"] < exact["estimate"] < exact["upper"]
    assert not (Path(cli_env["record"]["public_dir"]).parent / "query-basis").exists()  # a measured answer: no refits
    printed = ok("query", rid, "mean(affairs) where educ == 16", "--replicates", "2").output
    assert "mean(affairs) where educ == 16: " in printed and "parametric bootstrap" in printed
    assert (Path(cli_env["record"]["public_dir"]).parent / "query-basis" / "basis.json").is_file()
    # The basis is built once per release and read back by the next query.
    again = ok("query", rid, "mean(affairs) where educ == 16", "--replicates", "2").output
    assert again == printed.splitlines()[-1] + "\n"


def test_export_copies_only_the_public_bundle(cli_env, tmp_path):
    rid = cli_env["release_id"]
    public = Path(cli_env["record"]["public_dir"])
    ok("export", rid, tmp_path / "out")
    exported = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert exported == sorted(p.name for p in public.iterdir())
    internal = {p.name for p in Path(cli_env["record"]["internal_dir"]).iterdir()}
    assert not internal & set(exported)
    assert "not empty" in fails_cleanly("export", rid, tmp_path / "out")


def test_bad_release_ids_fail_cleanly(cli_env, tmp_path):
    for args in (("show", "nope-0000"), ("refit", "nope-0000"), ("sample", "nope-0000", "-n", "3"),
                 ("export", "nope-0000", tmp_path / "x"), ("show", "../etc")):
        assert "release" in fails_cleanly(*args)
    rid = cli_env["release_id"]
    assert "csv" in fails_cleanly("sample", rid, "-n", "3", "--out", tmp_path / "s.xlsx")
    short = fails_cleanly("show", rid[:4])  # a real release's id, too short a prefix
    assert "prefix needs at least 6 characters" in short and "splice releases" in short
    assert "prefix needs" not in fails_cleanly("show", "nope-0000")


def test_bad_dataset_fails_cleanly(cli_env):
    assert "no_such_dataset" in fails_cleanly("budget", "no_such_dataset")
    assert "no_such_dataset" in fails_cleanly("releases", "--dataset", "no_such_dataset")
    assert "no_such_dataset" in fails_cleanly("release", "--dataset", "no_such_dataset", "--input", demo_data_path(),
                                              "--epsilon", "1", "--delta", "1e-9")


def test_bad_input_fails_cleanly(cli_env, tmp_path):
    base = ["--dataset", DEMO_DATASET, "--epsilon", "1", "--delta", "1e-9", *FAST]
    assert "does not exist" in fails_cleanly("release", "--input", tmp_path / "missing.csv", *base)
    assert "epsilon" in fails_cleanly("release", "--input", demo_data_path(), *base[:2], "--epsilon", "-1",
                                      "--delta", "1e-9")
    broken = tmp_path / "broken.csv"
    pd.read_csv(demo_data_path()).drop(columns=["affairs"]).to_csv(broken, index=False)
    spent = json.loads(ok("budget", DEMO_DATASET, "--json").stdout)["epsilon_spent"]
    message = process_fails_cleanly("release", "--input", broken, *base)  # fails inside the Dagster job
    assert "affairs" in message and "missing" in message and "StructuralError" not in message  # no class path
    assert json.loads(ok("budget", DEMO_DATASET, "--json").stdout)["epsilon_spent"] == spent


def test_real_process_error_is_one_line_without_traceback(cli_env):
    assert "does-not-exist" in process_fails_cleanly("show", "does-not-exist")


def test_release_says_what_its_delta_costs_in_sigma(cli_env):
    """The release's text output names delta's cost in sigma (delta = 1e-9 at the demo's n is far below 1/n)."""
    from splice_assets.cli import _delta_cost_line
    from splice_assets.private.gaussian_dp import delta_cost

    record = cli_env["record"]
    n = json.loads(Path(record["public_dir"], "release.json").read_text())["privacy"]["n"]
    line = _delta_cost_line(record, 1000)
    assert line is not None and line.startswith("delta = 1e-09 costs sigma x")
    assert f"x{delta_cost(record['epsilon_measurement'], 1e-9, n):.1f}" in line and f"n = {n:,}" in line
