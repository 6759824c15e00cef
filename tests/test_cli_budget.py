"""`splice budget set` / `splice budget DATASET` (recorded budget changes) and `splice ledger stale|resolve`
(stale reservations of dead runs: committed if their measurement is stored, else expired and still counted; abort
only with --confirm-no-noise-drawn and never when the measurement is stored). No release is run: the ledger and
the release folders are set up directly in temporary directories."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from helpers import fails_cleanly, ok

from splice_assets.datasets import DEMO_DATASET, schema_path
from splice_assets.measurement import RELATION_REPLACE_ONE
from splice_assets.private.ledger import (
    BudgetLedger,
    default_actor,
    entries_table,
    params_hash,
)
from splice_assets.private.mechanism import calibrate, compose_epsilon
from splice_assets.schema import load_schema

CAL = calibrate(1.0, 1e-6, n=1000, n_directions=64, k=8)


@pytest.fixture
def env(tmp_path, monkeypatch) -> dict[str, Path | str]:
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    # A copy of the demo schema, so the n_min the CLI reads is under the test's control.
    shutil.copy(schema_path(DEMO_DATASET), schemas / f"{DEMO_DATASET}.yaml")
    values = {
        "DAGSTER_HOME": str(tmp_path / "home"),
        "SPLICE_LEDGER_URL": f"sqlite:///{tmp_path / 'ledger.sqlite'}",
        "SPLICE_ARTIFACT_DIR": str(tmp_path / "releases"),
        "SPLICE_SCHEMA_DIR": str(schemas),
    }
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    return {**values, "tmp": tmp_path}








def open_ledger(env) -> BudgetLedger:
    return BudgetLedger(env["SPLICE_LEDGER_URL"])


def reserve(ledger: BudgetLedger, dataset: str, release_id: str, age: timedelta = timedelta(hours=2)) -> str:
    """A reservation made ``age`` ago by a run that then died (never committed, never aborted)."""
    entry_id = ledger.reserve(
        dataset, release_id, "gaussian-sliced-moments", CAL.noise_multiplier, CAL.sigma, CAL.sensitivity,
        CAL.epsilon, CAL.delta, RELATION_REPLACE_ONE, params_hash({"release": release_id}),
    )
    with ledger.engine.begin() as conn:
        conn.execute(entries_table.update().where(entries_table.c.id == entry_id)
                     .values(created_at=datetime.now(UTC) - age))
    return entry_id


def store_measurement(env, dataset: str, release_id: str) -> Path:
    path = Path(env["SPLICE_ARTIFACT_DIR"]) / dataset / release_id / "public" / "measurement.json"
    path.parent.mkdir(parents=True)
    path.write_text("{}")
    return path


# -- budget set / show ---------------------------------------------------------------------------------------


def test_budget_set_then_show_lists_the_change_history(env):
    first = ok("budget", "set", DEMO_DATASET, "--epsilon", "10", "--delta", "1e-6", "--reason", "initial grant")
    assert first.stdout.strip() == (
        f"lifetime budget of {DEMO_DATASET!r}: epsilon 10 at delta 1e-06 (replace-one), was: none")
    second = ok("budget", "set", DEMO_DATASET, "--epsilon", "4", "--delta", "1e-7")
    assert second.stdout.strip().endswith("epsilon 4 at delta 1e-07 (replace-one), "
                                          "was: epsilon 10 at delta 1e-06 (replace-one)")
    shown = json.loads(ok("budget", DEMO_DATASET, "--json").stdout)
    assert (shown["epsilon_total"], shown["delta_total"], shown["relation"]) == (4.0, 1e-7, RELATION_REPLACE_ONE)
    assert shown["history"] == [] and shown["epsilon_spent"] == 0.0
    created, lowered = shown["budget_changes"]
    assert (created["actor"], created["old_epsilon_total"], created["epsilon_total"], created["reason"]) == (
        default_actor(), None, 10.0, "initial grant")
    assert (lowered["old_epsilon_total"], lowered["old_delta_total"], lowered["epsilon_total"],
            lowered["delta_total"]) == (10.0, 1e-6, 4.0, 1e-7)
    assert created["created_at"] and lowered["created_at"] >= created["created_at"]
    assert json.loads(ok("budget", "--json", DEMO_DATASET).stdout) == shown  # option first works too
    assert json.loads(ok("budget", "show", DEMO_DATASET, "--json").stdout) == shown
    text = ok("budget", DEMO_DATASET).stdout
    assert "none -> epsilon 10 at delta 1e-06 (replace-one)" in text and "initial grant" in text
    assert "epsilon 10 at delta 1e-06 (replace-one) -> epsilon 4 at delta 1e-07 (replace-one)" in text
    assert default_actor() in text and "(4.000000 remaining)" in text


def test_budget_set_keeps_the_relation_and_warns_when_lowered_below_the_spend(env):
    ok("budget", "set", "toy", "--epsilon", "5", "--delta", "1e-6", "--relation", "add-remove")
    ok("budget", "set", "toy", "--epsilon", "6", "--delta", "1e-6")  # no --relation: stays add-remove
    with open_ledger(env) as ledger:
        assert ledger.budget("toy").relation == "add-remove"
    ok("budget", "set", "small", "--epsilon", "2", "--delta", "1e-6")
    with open_ledger(env) as ledger:
        ledger.commit(reserve(ledger, "small", "r1"))
    result = ok("budget", "set", "small", "--epsilon", "0.5", "--delta", "1e-6")
    assert "was: epsilon 2" in result.stdout and "further releases are refused" in result.stderr
    assert json.loads(ok("budget", "small", "--json").stdout)["epsilon_remaining"] == 0.0


def test_budget_set_validates_delta_against_the_schema_n_min(env):
    n_min = load_schema(schema_path(DEMO_DATASET)).n_min
    too_big = 1.0 / n_min
    assert "0.5" in fails_cleanly("budget", "set", DEMO_DATASET, "--epsilon", "1", "--delta", "0.5")
    message = fails_cleanly("budget", "set", DEMO_DATASET, "--epsilon", "1", "--delta", repr(too_big))
    assert f"n_min={n_min}" in message and repr(too_big) in message
    assert "no budget" in fails_cleanly("budget", DEMO_DATASET)  # nothing was set
    ok("budget", "set", "no_schema", "--epsilon", "1", "--delta", repr(too_big))  # no schema: only (0, 0.01)
    assert "no_such_dataset" in fails_cleanly("budget", "no_such_dataset")


# -- ledger stale / resolve ----------------------------------------------------------------------------------


def test_ledger_stale_lists_old_reservations_and_their_measurements(env):
    ok("budget", "set", "toy", "--epsilon", "10", "--delta", "1e-6")
    with open_ledger(env) as ledger:
        stored = reserve(ledger, "toy", "stored")
        lost = reserve(ledger, "toy", "lost")
        recent = reserve(ledger, "toy", "recent", age=timedelta(minutes=20))
    path = store_measurement(env, "toy", "stored")
    rows = json.loads(ok("ledger", "stale", "--json").stdout)
    assert [(r["ledger_entry_id"], r["release_id"], r["measurement_stored"]) for r in rows] == [
        (stored, "stored", True), (lost, "lost", False)]
    assert rows[0]["measurement_path"] == str(path) and rows[0]["dataset"] == "toy"
    assert (rows[0]["epsilon"], rows[0]["delta"]) == (1.0, 1e-6) and rows[0]["created_at"]
    recent_rows = json.loads(ok("ledger", "stale", "--older-than", "10", "--json").stdout)
    assert {r["ledger_entry_id"] for r in recent_rows} == {stored, lost, recent}
    assert json.loads(ok("ledger", "stale", "--dataset", "other", "--json").stdout) == []
    text = ok("ledger", "stale").stdout
    assert stored in text and lost in text and recent not in text and "stored" in text
    assert "no reservations older than 600 minutes" in ok("ledger", "stale", "--older-than", "600").stdout


def test_ledger_resolve_commits_or_expires_and_expired_still_counts(env):
    ok("budget", "set", "toy", "--epsilon", "10", "--delta", "1e-6")
    with open_ledger(env) as ledger:
        stored = reserve(ledger, "toy", "stored")
        lost = reserve(ledger, "toy", "lost")
    store_measurement(env, "toy", "stored")
    two = compose_epsilon([CAL.noise_multiplier] * 2, 1e-6)
    result = ok("ledger", "resolve", stored)
    assert "reserved -> committed" in result.stdout and f"epsilon = {two:.6f} spent of 10" in result.stdout
    resolved = json.loads(ok("ledger", "resolve", lost, "--json").stdout)
    assert (resolved["status"], resolved["measurement_stored"], resolved["epsilon_spent"]) == ("expired", False, two)
    with open_ledger(env) as ledger:
        assert [ledger.entry(e).status for e in (stored, lost)] == ["committed", "expired"]
        assert ledger.spent("toy") == (two, 1e-6)  # expired still counts
        assert ledger.projected("toy", [CAL.noise_multiplier]) == compose_epsilon([CAL.noise_multiplier] * 3, 1e-6)
        assert [(r.entry_id, r.new_status, r.actor) for r in ledger.resolutions("toy")] == [
            (stored, "committed", default_actor()), (lost, "expired", default_actor())]
    for entry in (stored, lost):
        assert "only a 'reserved' entry" in fails_cleanly("ledger", "resolve", entry)
    assert "0000" in fails_cleanly("ledger", "resolve", "0" * 32)
    statuses = {r["release_id"]: r["status"] for r in json.loads(ok("releases", "--json").stdout)}
    assert statuses["lost"] == "expired (counted, no release)"


def test_ledger_resolve_abort_is_refused_when_the_measurement_exists(env):
    ok("budget", "set", "toy", "--epsilon", "10", "--delta", "1e-6")
    with open_ledger(env) as ledger:
        stored = reserve(ledger, "toy", "stored")
        never = reserve(ledger, "toy", "never")
    path = store_measurement(env, "toy", "stored")
    message = fails_cleanly("ledger", "resolve", stored, "--abort", "--confirm-no-noise-drawn")
    assert "refusing to abort" in message and str(path) in message
    assert "--confirm-no-noise-drawn" in fails_cleanly("ledger", "resolve", never, "--abort")
    assert "--abort" in fails_cleanly("ledger", "resolve", never, "--confirm-no-noise-drawn")
    with open_ledger(env) as ledger:
        assert [ledger.entry(e).status for e in (stored, never)] == ["reserved", "reserved"]
    one = compose_epsilon([CAL.noise_multiplier], 1e-6)
    result = ok("ledger", "resolve", never, "--abort", "--confirm-no-noise-drawn")
    assert "reserved -> aborted" in result.stdout and f"epsilon = {one:.6f} spent of 10" in result.stdout
    with open_ledger(env) as ledger:
        assert ledger.entry(never).status == "aborted" and ledger.spent("toy")[0] == one
        assert [(r.entry_id, r.new_status) for r in ledger.resolutions("toy")] == [(never, "aborted")]


def test_help_for_the_new_commands():
    for command in (["budget"], ["budget", "set"], ["budget", "show"], ["ledger"], ["ledger", "stale"],
                    ["ledger", "resolve"]):
        assert "Usage:" in ok(*command, "--help").output
