"""A release stopped by Ctrl-C or a failure, through `splice release` (in a process of its own,
tests/interrupted_release.py): one line on screen (the spend and the resume command once charged), no private step
files left, and `splice release --resume` finishing a charged release from its stored measurement with no new
charge and no new noise. `splice ledger stale` lists and removes what killed runs left."""

from __future__ import annotations

import json
import re
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import fails_cleanly, ok, without_progress

from splice_assets.datasets import DEMO_DATASET
from splice_assets.private.ledger import BudgetLedger

FAST = ["--k", "8", "--L", "128", "--K", "3", "--steps", "60", "--rows", "2000"]
RELEASE = ["release", "--dataset", DEMO_DATASET, "--epsilon", "1", "--delta", "1e-9", *FAST]
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SPLICE_LEDGER_URL", f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("SPLICE_ARTIFACT_DIR", str(tmp_path / "releases"))
    ok("budget", "set", DEMO_DATASET, "--epsilon", "10", "--delta", "1e-6")
    return tmp_path


def ledger_state(tmp: Path) -> tuple[list[tuple[str, str]], float]:
    with BudgetLedger(f"sqlite:///{tmp / 'ledger.sqlite'}") as book:
        return [(e.id, e.status) for e in book.entries(DEMO_DATASET)], book.spent(DEMO_DATASET)[0]


@dataclass(frozen=True)
class Stopped:
    exit_code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def stopped_release(target: str, behaviour: str, *args: object, modes: Path | None = None) -> Stopped:
    """``splice ARGS`` in a process of its own with ``target`` (``module:attribute``) replaced by a Ctrl-C
    (``interrupt``) or a failure (``fail``); the environment is the test's (monkeypatched stores)."""
    driver = Path(__file__).with_name("interrupted_release.py")
    command = [sys.executable, str(driver), target, behaviour, *([str(modes)] if modes else []), "--",
               *(str(a) for a in args)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    return Stopped(done.returncode, done.stdout, done.stderr)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def one_line(result) -> str:
    """The one line a stopped release prints besides its progress lines; no traceback."""
    assert "Traceback" not in result.output
    lines = without_progress(result.stderr)
    assert len(lines) == 1, result.stderr
    return lines[0]


def files_under(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()] if folder.exists() else []


def test_ctrl_c_after_the_charge_then_resume_at_no_further_cost(env, monkeypatch):
    from splice_assets import api
    from splice_assets.private import mechanism

    result = stopped_release("splice_assets.postprocess.chain:fit", "interrupt", *RELEASE,
                             modes=env / "modes.json")
    modes = json.loads((env / "modes.json").read_text())
    assert result.exit_code == 130
    line = one_line(result)
    rid = UUID.search(line).group(0)
    assert line.startswith("interrupted: ") and "epsilon = 1 (delta = 1e-09)" in line
    assert f"splice release --resume {rid}" in line
    # While it ran, its private step files were 0600 in 0700 folders; now they are gone.
    assert modes["internal"] == modes["steps"] == 0o700
    assert {name: m for name, m in modes.items() if name.endswith(".pkl")} == {
        "validated_table.pkl": 0o600, "unit_ball_encoding.pkl": 0o600, "private_moments.pkl": 0o600}
    release_dir = env / "releases" / DEMO_DATASET / rid
    assert not list(release_dir.rglob("*.pkl")) and not (release_dir / "internal" / "steps").exists()
    # What the resume needs was stored at the charge: the schema it was measured under (public), the run's record.
    assert {p.name for p in (release_dir / "public").iterdir()} == {"measurement.json", "measurement.npz",
                                                                    "schema.yaml"}
    assert mode(release_dir / "internal") == 0o700 and mode(release_dir / "internal" / "charge.json") == 0o600
    entries, spent = ledger_state(env)
    assert [status for _, status in entries] == ["committed"] and spent > 0
    # Refit and sample point to the resume; `ledger stale` lists the release with its command.
    assert f"splice release --resume {rid}" in fails_cleanly("sample", rid, "-n", "5")
    assert f"splice release --resume {rid}" in fails_cleanly("refit", rid)
    stale = [r for r in json.loads(ok("ledger", "stale", "--older-than", "0", "--json").stdout)
             if r["kind"] == "release"]
    assert [(r["release_id"], r["resume"], r["epsilon"]) for r in stale] == [
        (rid, f"splice release --resume {rid}", 1.0)]
    # As a killed run would leave them: removing them keeps what the resume needs.
    (release_dir / "internal" / "steps").mkdir()
    (release_dir / "internal" / "steps" / "validated_table.pkl").write_bytes(b"private rows")
    ok("ledger", "stale", "--older-than", "0", "--remove")
    assert [p.name for p in (release_dir / "internal").iterdir()] == ["charge.json"]

    measurement = {name: (release_dir / "public" / name).read_bytes()
                   for name in ("measurement.json", "measurement.npz")}

    def no_noise(*args, **kwargs):
        raise AssertionError("a resume drew noise")

    with monkeypatch.context() as patch:
        for module, name in ((mechanism, "gaussian_noise"), (mechanism, "add_noise_joint"), (api, "measure_exact")):
            patch.setattr(module, name, no_noise)
        resumed = ok("release", "--resume", rid, "--json")
    record = json.loads(resumed.stdout)
    assert record["release_id"] == rid and record["fidelity_report"] is None and record["mlflow_run_id"]
    assert ledger_state(env) == (entries, spent)  # no new entry, nothing more spent
    for name, content in measurement.items():
        assert (release_dir / "public" / name).read_bytes() == content  # the stored noise, reused as it was
    manifest = json.loads((release_dir / "public" / "release.json").read_text())
    assert manifest["privacy"]["epsilon"] == 1.0 and manifest["privacy"]["ledger_entry_id"] == entries[0][0]
    assert manifest["synthetic_rows"] == 2000
    audit = json.loads((release_dir / "internal" / "audit.json").read_text())
    assert audit["fidelity_headline"] and "finished from its stored measurement" in audit["note"]
    assert (release_dir / "internal" / "fidelity_report.html").is_file()
    assert len(ok("sample", rid, "-n", "5").stdout.splitlines()) == 6
    assert "already written" in fails_cleanly("release", "--resume", rid)
    assert "drop epsilon" in fails_cleanly("release", "--resume", rid, "--epsilon", "1")


def test_a_failure_after_the_charge_says_what_was_spent_and_resumes_without_the_input(env):
    from splice_assets.datasets import demo_data_path

    source = env / "input.csv"
    source.write_bytes(demo_data_path().read_bytes())
    result = stopped_release("splice_assets.postprocess.chain:fit", "fail", *RELEASE, "--input", source)
    line = one_line(result)
    rid = UUID.search(line).group(0)
    assert result.exit_code == 1 and line.startswith("Error: release failed")
    assert "injected fitting failure" in line and "epsilon = 1 (delta = 1e-09)" in line
    assert f"splice release --resume {rid}" in line
    assert not list((env / "releases").rglob("*.pkl"))
    source.unlink()  # the input is gone: the release goes out without its internal report
    record = json.loads(ok("release", "--resume", rid, "--json").stdout)
    assert "no internal fidelity report" in record["fidelity_report"]
    release_dir = env / "releases" / DEMO_DATASET / rid
    manifest = json.loads((release_dir / "public" / "release.json").read_text())
    assert manifest["fidelity_report"].startswith("none:") and str(source) not in json.dumps(manifest)
    assert not (release_dir / "internal" / "fidelity_report.html").exists()
    assert [status for _, status in ledger_state(env)[0]] == ["committed"]


def test_ctrl_c_before_the_charge_leaves_no_spend_and_no_files(env):
    # While Dagster loads, then after validation, before the measurement.
    result = stopped_release("splice_assets.dagster_layer.definitions:build_definitions", "interrupt", *RELEASE)
    assert result.exit_code == 130
    assert one_line(result) == "interrupted before the release started: nothing was charged"
    result = stopped_release("splice_assets.api:Synthesizer.encode", "interrupt", *RELEASE)
    assert result.exit_code == 130 and one_line(result) == "interrupted: nothing was charged"
    entries, spent = ledger_state(env)
    assert spent == 0.0 and all(status == "aborted" for _, status in entries)
    assert files_under(env / "releases") == []


def test_ledger_stale_lists_and_removes_what_killed_runs_left(env):
    releases = env / "releases" / DEMO_DATASET
    uncharged = releases / "11111111-0000-0000-0000-000000000000"
    (uncharged / "internal" / "steps").mkdir(parents=True)
    (uncharged / "internal" / "steps" / "validated_table.pkl").write_bytes(b"private rows")
    written = releases / "22222222-0000-0000-0000-000000000000"
    (written / "public").mkdir(parents=True)
    (written / "public" / "release.json").write_text("{}")
    (written / "internal" / "steps").mkdir(parents=True)
    (written / "internal" / "steps" / "private_moments.pkl").write_bytes(b"exact sums")
    (written / "internal" / "audit.json").write_text("{}")
    clean = releases / "33333333-0000-0000-0000-000000000000"
    (clean / "public").mkdir(parents=True)
    (clean / "public" / "release.json").write_text("{}")

    assert json.loads(ok("ledger", "stale", "--json").stdout) == []  # younger than an hour: may still run
    rows = json.loads(ok("ledger", "stale", "--older-than", "0", "--json").stdout)
    assert [(r["release_id"][:8], r["private_files"], r["resume"], r["removed"]) for r in rows] == [
        ("11111111", ["the whole release folder"], None, False),
        ("22222222", ["internal/steps"], None, False),
    ]
    text = ok("ledger", "stale", "--older-than", "0").stdout
    assert "not charged" in text and "splice ledger stale --remove" in text
    removed = json.loads(ok("ledger", "stale", "--older-than", "0", "--remove", "--json").stdout)
    assert all(r["removed"] for r in removed)
    assert not uncharged.exists() and not (written / "internal" / "steps").exists()
    assert (written / "internal" / "audit.json").is_file() and (clean / "public" / "release.json").is_file()
    assert json.loads(ok("ledger", "stale", "--older-than", "0", "--json").stdout) == []
