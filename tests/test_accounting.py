"""Honest accounting of a release with a DP estimate (issue 65, items 4 and 5), through the real paths.

- One headline epsilon per release everywhere (`splice release`, `releases`, `show`, `budget`, release.json, MLflow,
  Dagster): the whole release's, what it charged, with its parts (estimate, measurement) beside it by name.
- One reservation per release for everything it spends, made before any of its noise is drawn; each draw claims its
  part first. A release refused for budget spends nothing; racing releases never spend an estimate for a release
  that cannot measure. Estimate entries resolve by the same rules as measurements.
- Under add-remove no refusal depends on the private n; under replace-one the measured part's n_min check comes
  before any charge. `internal/audit.json` holds the measured count.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import numpy as np
import pandas as pd
import pytest
import yaml
from helpers import FAST, fails_cleanly, ok, release_resources
from helpers import set_budget as admin_sets_budget

from splice_assets import MeasurementSettings, ModelSettings, PostProcessingSettings, Synthesizer, parse_schema
from splice_assets.dagster_layer.assets import op_name
from splice_assets.dagster_layer.automation import run_config_for
from splice_assets.dagster_layer.config import ReleaseConfig
from splice_assets.dagster_layer.definitions import build_definitions
from splice_assets.datasets import DEMO_DATASET, demo_data_path, schema_path
from splice_assets.defaults import ESTIMATE_FILE, ESTIMATE_MECHANISM
from splice_assets.private import mechanism, preflight
from splice_assets.private.ledger import BudgetExceeded, BudgetLedger, entries_table
from splice_assets.private.mechanism import compose_epsilon
from splice_assets.private.validation import StructuralError, read_table
from splice_assets.release.budget_text import release_text
from splice_assets.schema import load_schema

PG_URL = os.environ.get("SPLICE_TEST_POSTGRES_URL")
BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=[
        pytest.mark.postgres, pytest.mark.skipif(not PG_URL, reason="SPLICE_TEST_POSTGRES_URL is not set")]),
]

AUTO_SPEC = {
    "name": "toy_accounting", "version": 1, "n_min": 200,
    "columns": [{"name": "x", "kind": "continuous", "bounds": "auto"},
                {"name": "c", "kind": "categorical", "categories": ["a", "b", "c"]}],
}
AUTO = parse_schema(AUTO_SPEC)
SETTINGS = dict(measurement=MeasurementSettings(n_directions=32, k=6), model=ModelSettings(components=3, max_steps=40),
                postprocessing=PostProcessingSettings(field_iterations=0))


def table(n: int = 600) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    c = rng.choice(["a", "b", "c"], n, p=[0.6, 0.3, 0.1])
    return pd.DataFrame({"x": np.where(c == "a", rng.normal(2, 0.5, n), rng.normal(7, 1, n)).clip(0, 10), "c": c})


def synthesizer(relation: str = "replace-one") -> Synthesizer:
    return Synthesizer(AUTO, epsilon=1.0, delta=1e-6, relation=relation, **SETTINGS)


def parts(entries) -> dict[str, list]:
    """The ledger entries by part: the estimate's mechanism is the estimate, any other the measurement."""
    named = {"estimate": [], "measurement": []}
    for e in entries:
        named["estimate" if e.mechanism == ESTIMATE_MECHANISM else "measurement"].append(e)
    return named


@pytest.fixture
def url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'ledger.sqlite'}"


# -- one reservation, before any noise -------------------------------------------------------------------------


def test_no_noise_is_drawn_before_its_reservation_is_recorded(url, monkeypatch):
    """Synthesizer.fit on an `auto` schema: every noise draw finds, in the ledger as another connection reads it,
    the whole release reserved and the part it draws for claimed; the estimate draws before the measurement."""
    with BudgetLedger(url) as book:
        book.set_budget(AUTO.name, 5.0, 1e-6)
    events: list[tuple[str, object]] = []
    for name in ("reserve_release", "claim", "reserve"):
        original = getattr(BudgetLedger, name)

        def recorded(self, *args, _original=original, _name=name, **kwargs):
            result = _original(self, *args, **kwargs)
            events.append((_name, kwargs.get("mechanism") or (args[2] if _name == "reserve" else None)))
            return result

        monkeypatch.setattr(BudgetLedger, name, recorded)
    draw = mechanism.gaussian_noise

    def noise(values, sigma):
        with BudgetLedger(url) as reader:  # what is committed, as a fresh process would see it
            entries = reader.entries(AUTO.name)
        state = {part: [(e.status, e.claimed) for e in named] for part, named in parts(entries).items()}
        events.append(("noise", state))
        return draw(values, sigma)

    monkeypatch.setattr(mechanism, "gaussian_noise", noise)
    with BudgetLedger(url) as book:
        synthesizer().fit(table(), ledger=book, release_id="r1")
    kinds = [kind for kind, _ in events]
    assert kinds[0] == "reserve_release" and "reserve" not in kinds  # one reservation, nothing reserved afresh
    first_noise = kinds.index("noise")
    assert kinds[1:first_noise] == ["claim"] and events[1][1] == ESTIMATE_MECHANISM
    measurement_claim = kinds.index("claim", first_noise)
    assert events[measurement_claim][1].startswith("gaussian/sliced-chebyshev")
    for index, (kind, state) in enumerate(events):
        if kind != "noise":
            continue
        # The whole release is reserved before any of its noise, and the part being drawn is claimed first.
        assert len(state["estimate"]) == 1 and len(state["measurement"]) == 1, state
        drawing = "estimate" if index < measurement_claim else "measurement"
        assert state[drawing] == [("reserved", True)], (drawing, state)
        if drawing == "estimate":
            assert state["measurement"] == [("reserved", False)]  # reserved, not yet claimed
        else:
            assert state["estimate"] == [("committed", True)]
    assert kinds.count("noise") >= 2 and kinds[-1] != "claim"
    with BudgetLedger(url) as book:
        final = book.entries(AUTO.name)
    assert [e.status for e in final] == ["committed", "committed"]
    assert compose_epsilon([e.noise_multiplier for e in final], 1e-6) == pytest.approx(1.0, abs=2e-6)


def test_a_release_refused_for_budget_spends_nothing(url, monkeypatch):
    """The budget admits the estimate alone but not the release: the one reservation refuses it whole (pre-flight
    bypassed, as when another release spent the budget since), before any noise, with no entry left."""
    estimate_alone = synthesizer().release_parts(600)[0]
    assert estimate_alone.name == "estimate"
    with BudgetLedger(url) as book:
        book.set_budget(AUTO.name, estimate_alone.epsilon * 1.5, 1e-6)
    monkeypatch.setattr(Synthesizer, "_preflight", lambda *args, **kwargs: None)
    drawn = []
    monkeypatch.setattr(mechanism, "gaussian_noise", lambda values, sigma: drawn.append(sigma))
    with BudgetLedger(url) as book, pytest.raises(BudgetExceeded, match="estimate \\+ measurement"):
        synthesizer().fit(table(), ledger=book, release_id="r1")
    assert drawn == []
    with BudgetLedger(url) as book:
        assert book.entries(AUTO.name) == [] and book.spent(AUTO.name)[0] == 0.0


def _racing_release(url: str, barrier, results) -> None:
    try:
        with BudgetLedger(url) as book:
            barrier.wait(timeout=60)
            try:
                synthesizer().prepare(table(), book, release_id=f"pid-{os.getpid()}")  # reserves, then the estimate
                results.put("released")
            except (BudgetExceeded, preflight.PreflightError):
                results.put("refused")
    except Exception as exc:  # noqa: BLE001 - report to the parent
        results.put(repr(exc))


@pytest.mark.parametrize("backend", BACKENDS)
def test_racing_releases_never_spend_an_estimate_for_a_release_that_cannot_measure(backend, url):
    """8 releases race for a budget of exactly 2: 2 reserve estimate and measurement together and draw their
    estimate; the 6 others reserve and spend nothing (before: 8 estimates were spent for 2 releases)."""
    url = PG_URL if backend == "postgres" else url
    dataset_parts = synthesizer().release_parts(600)
    per_release = [p.noise_multiplier for p in dataset_parts]
    budget = compose_epsilon(per_release * 2, 1e-6)
    with BudgetLedger(url) as book:
        if backend == "postgres":  # a shared database: start from a clean dataset
            with book.engine.begin() as conn:
                conn.execute(entries_table.delete().where(entries_table.c.dataset == AUTO.name))
        book.set_budget(AUTO.name, budget, 1e-6)
    workers = 8
    ctx = mp.get_context("fork")
    barrier, results = ctx.Barrier(workers), ctx.Queue()
    procs = [ctx.Process(target=_racing_release, args=(url, barrier, results)) for _ in range(workers)]
    for p in procs:
        p.start()
    outcomes = sorted(results.get(timeout=300) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    assert outcomes == ["refused"] * 6 + ["released"] * 2, outcomes
    with BudgetLedger(url) as book:
        entries = [e for e in book.entries(AUTO.name) if e.counted]
        assert book.spent(AUTO.name)[0] <= budget + 1e-9
    named = parts(entries)
    assert len(named["estimate"]) == 2 and all(e.status == "committed" for e in named["estimate"])
    # The measurement of each is reserved and waits for its draw: every estimate spent has a release to measure.
    assert {e.release_id for e in named["estimate"]} == {e.release_id for e in named["measurement"]}
    assert all(e.status == "reserved" and not e.claimed for e in named["measurement"])


def test_a_budget_of_exactly_one_release_admits_it_through_the_job(tmp_path):
    """The job's budget gate before the measurement counts the measurement once: it is already reserved."""
    config = ReleaseConfig(**FAST)
    synth = config.settings().synthesizer(load_schema(schema_path(DEMO_DATASET)))
    n = len(read_table(demo_data_path()))
    multipliers = [p.noise_multiplier for p in synth.release_parts(n - round(0.2 * n))]
    admin_sets_budget(tmp_path, DEMO_DATASET, compose_epsilon(multipliers, 1e-6))
    with dg.DagsterInstance.ephemeral() as instance:
        result = build_definitions(release_resources(tmp_path)).resolve_job_def("release").execute_in_process(
            run_config=run_config_for(config), instance=instance, raise_on_error=False)
    assert result.success
    with BudgetLedger(f"sqlite:///{tmp_path / 'ledger.sqlite'}") as book:
        assert [e.status for e in book.entries(DEMO_DATASET)] == ["committed"]


# -- resolving a dead run's estimate ----------------------------------------------------------------------------


@pytest.fixture
def cli_ledger(tmp_path, monkeypatch) -> dict[str, Path | str]:
    values = {"DAGSTER_HOME": str(tmp_path / "home"), "SPLICE_LEDGER_URL": f"sqlite:///{tmp_path / 'ledger.sqlite'}",
              "SPLICE_ARTIFACT_DIR": str(tmp_path / "releases")}
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    with BudgetLedger(values["SPLICE_LEDGER_URL"]) as book:
        book.set_budget(AUTO.name, 10.0, 1e-6)
    return {**values, "tmp": tmp_path}


def dead_release(env, release_id: str, claim_estimate: bool = True) -> dict[str, str]:
    """A release that reserved both parts, maybe claimed its estimate, and died two hours ago."""
    with BudgetLedger(env["SPLICE_LEDGER_URL"]) as book:
        ids = book.reserve_release(AUTO.name, release_id, "replace-one", synthesizer().release_parts(600))
        if claim_estimate:
            estimate = book.entry(ids["estimate"])
            assert book.claim(ids["estimate"], dataset=AUTO.name, release_id=release_id, mechanism=ESTIMATE_MECHANISM,
                              noise_multiplier=estimate.noise_multiplier, sigma=2 * estimate.noise_multiplier,
                              sensitivity=2.0, relation="replace-one", params_hash="h")
        with book.engine.begin() as conn:
            conn.execute(entries_table.update().where(entries_table.c.release_id == release_id)
                         .values(created_at=datetime.now(UTC) - timedelta(hours=2)))
    return ids


def public(env, release_id: str) -> Path:
    folder = Path(env["SPLICE_ARTIFACT_DIR"]) / AUTO.name / release_id / "public"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_estimate_entries_resolve_by_the_measurement_rules(cli_ledger):
    stored = dead_release(cli_ledger, "stored")
    (public(cli_ledger, "stored") / ESTIMATE_FILE).write_text("{}")  # the estimate's noisy output was kept
    listed = {r["ledger_entry_id"]: r for r in json.loads(ok("ledger", "stale", "--json").stdout)
              if r.get("kind") == "reservation"}
    assert listed[stored["estimate"]]["measurement_stored"] is True
    assert listed[stored["estimate"]]["measurement_path"].endswith(ESTIMATE_FILE)
    assert listed[stored["measurement"]]["measurement_stored"] is False
    message = fails_cleanly("ledger", "resolve", stored["estimate"], "--abort", "--confirm-no-noise-drawn")
    assert "noise was drawn" in message and ESTIMATE_FILE in message
    resolved = json.loads(ok("ledger", "resolve", stored["estimate"], "--json").stdout)
    assert (resolved["status"], resolved["measurement_stored"]) == ("committed", True)
    # The measurement part was never claimed: no noise can have been drawn for it, and the ledger knows it.
    unclaimed = json.loads(ok("ledger", "resolve", stored["measurement"], "--json").stdout)
    assert unclaimed["status"] == "aborted"
    assert "no draw claimed" in ok("ledger", "resolve", dead_release(cli_ledger, "other")["measurement"]).stdout

    after_measurement = dead_release(cli_ledger, "measured")
    (public(cli_ledger, "measured") / "measurement.json").write_text("{}")  # drawn after the estimate
    assert "noise was drawn" in fails_cleanly("ledger", "resolve", after_measurement["estimate"], "--abort",
                                              "--confirm-no-noise-drawn")

    lost = dead_release(cli_ledger, "lost")  # claimed, nothing stored: as a measurement, it expires and counts
    assert json.loads(ok("ledger", "resolve", lost["estimate"], "--json").stdout)["status"] == "expired"
    never = dead_release(cli_ledger, "never")
    assert "--confirm-no-noise-drawn" in fails_cleanly("ledger", "resolve", never["estimate"], "--abort")
    ok("ledger", "resolve", never["estimate"], "--abort", "--confirm-no-noise-drawn")
    with BudgetLedger(cli_ledger["SPLICE_LEDGER_URL"]) as book:
        assert book.entry(lost["estimate"]).counted and not book.entry(never["estimate"]).counted
        assert [r.new_status for r in book.resolutions(AUTO.name)][:2] == ["committed", "aborted"]


# -- refusals that depend on the private n ----------------------------------------------------------------------


def test_the_measured_part_is_checked_against_n_min_before_any_charge_under_replace_one_only(url):
    """220 rows, 20% held out: 176 measured, below n_min = 200. Replace-one refuses before the reservation (the
    estimate was charged first before); add-remove refuses on nothing that depends on the private n."""
    with BudgetLedger(url) as book:
        book.set_budget(AUTO.name, 5.0, 1e-6)
        with pytest.raises(StructuralError, match="measured part has fewer rows than the schema's public minimum"):
            synthesizer().prepare(table(220), book, "r1", n_measured=176)
        assert book.entries(AUTO.name) == []
    other = parse_schema({**AUTO_SPEC, "name": "toy_accounting_ar"})
    with BudgetLedger(url) as book:
        book.set_budget(other.name, 5.0, 1e-6, "add-remove")
        synth = Synthesizer(other, epsilon=1.0, delta=1e-6, relation="add-remove", **SETTINGS)
        synth.fit(table(20), ledger=book, release_id="r2")  # 20 rows, n_min 200: released, nothing refused
        assert [e.status for e in book.entries(other.name)] == ["committed", "committed"]


def test_the_memory_check_does_not_depend_on_the_private_n_under_add_remove(tmp_path):
    schema = load_schema(schema_path(DEMO_DATASET))
    with BudgetLedger(f"sqlite:///{tmp_path / 'l.sqlite'}") as book:
        book.set_budget(schema.name, 10.0, 1e-10, "add-remove")
        outcomes = set()
        for n in (10, 10**9):
            try:
                preflight.check_release(schema, "add-remove", 1e-10, n, 30, 256, 16, 20, 5000, book,
                                        preflight.ReleaseCost((5.0,)), memory_bytes=2**31)
                outcomes.add("passed")
            except preflight.PreflightError as exc:
                outcomes.add(str(exc))
        assert outcomes == {"passed"}


def test_an_add_remove_release_below_n_min_says_nothing_of_it_in_dagster(tmp_path):
    """5 rows against the demo schema's n_min of 5,000: the run succeeds, and no event mentions n_min."""
    read_table(demo_data_path()).head(5).to_csv(tmp_path / "small.csv", index=False)
    admin_sets_budget(tmp_path, DEMO_DATASET, relation="add-remove")
    config = ReleaseConfig(**{**FAST, "relation": "add-remove", "n_synthetic": 0,
                              "input_path": str(tmp_path / "small.csv")})
    with dg.DagsterInstance.ephemeral() as instance:
        result = build_definitions(release_resources(tmp_path)).resolve_job_def("release").execute_in_process(
            run_config=run_config_for(config), instance=instance, raise_on_error=False)
    assert result.success
    assert not [e.message for e in result.all_events if e.message and "n_min" in e.message]
    record = result.output_for_node(op_name("release"))
    audit = json.loads((Path(record["internal_dir"]) / "audit.json").read_text())
    assert audit["measured_rows"] == len(result.output_for_node(op_name("validated_table")).train)


# -- one headline everywhere -----------------------------------------------------------------------------------


def test_one_headline_epsilon_everywhere(tmp_path, monkeypatch):
    """A real `splice release` of the demo table with one `bounds: auto` column at epsilon = 1: the CLI, release.json,
    MLflow, Dagster, `releases`, `show` and `budget` all give the whole release's epsilon, its parts beside it."""
    env = {"DAGSTER_HOME": str(tmp_path / "home"), "SPLICE_LEDGER_URL": f"sqlite:///{tmp_path / 'ledger.sqlite'}",
           "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}", "SPLICE_ARTIFACT_DIR": str(tmp_path / "rel")}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    raw = yaml.safe_load(schema_path(DEMO_DATASET).read_text())
    for column in raw["columns"]:
        if column["name"] == "affairs":
            column["bounds"] = "auto"
    (tmp_path / "schemas").mkdir()
    schema_file = tmp_path / "schemas" / f"{DEMO_DATASET}.yaml"
    schema_file.write_text(yaml.safe_dump(raw))
    ok("budget", "set", DEMO_DATASET, "--epsilon", "10", "--delta", "1e-6")
    proc = subprocess.run(
        [sys.executable, "-m", "splice_assets.cli", "release", "--schema", str(schema_file), "--input",
         str(demo_data_path()), "--epsilon", "1", "--delta", "1e-9", "--k", "8", "--L", "128", "--K", "3", "--steps",
         "60", "--rows", "2000"], env=dict(os.environ), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    release_id = proc.stdout.split()[1]
    manifest = json.loads(next((tmp_path / "rel").rglob("release.json")).read_text())
    privacy = manifest["privacy"]
    epsilon = privacy["epsilon"]
    with BudgetLedger(env["SPLICE_LEDGER_URL"]) as book:
        entries = book.entries(DEMO_DATASET)
    assert epsilon == privacy["epsilon_cost"] == compose_epsilon([e.noise_multiplier for e in entries], 1e-9)
    assert epsilon == pytest.approx(1.0, abs=2e-6)
    named = parts(entries)
    assert privacy["epsilon_estimate"] == pytest.approx(named["estimate"][0].epsilon)
    assert privacy["epsilon_measurement"] == pytest.approx(named["measurement"][0].epsilon)
    assert privacy["epsilon_estimate"] < privacy["epsilon_measurement"] < epsilon
    # `splice release`: one headline, the parts beside it.
    lines = proc.stdout.splitlines()
    headline = next(i for i, line in enumerate(lines) if line.startswith("this release"))
    assert release_text(epsilon, 1e-9) in lines[headline]
    assert "its parts alone: estimate epsilon" in lines[headline + 1]
    # internal/audit.json: the rows measured, not the input's.
    n = len(read_table(demo_data_path()))
    audit = json.loads(next((tmp_path / "rel").rglob("audit.json")).read_text())
    assert audit["measured_rows"] == n - round(0.2 * n)
    # MLflow: the headline tag, the parts under their own names.
    import mlflow

    run = mlflow.MlflowClient(env["MLFLOW_TRACKING_URI"]).get_run(manifest["mlflow"]["run_id"])
    tags = run.data.tags
    assert float(tags["privacy.epsilon"]) == epsilon and float(tags["privacy.epsilon_cost"]) == epsilon
    assert float(tags["privacy.parts.epsilon_estimate"]) == pytest.approx(privacy["epsilon_estimate"])
    assert float(tags["privacy.parts.epsilon_measurement"]) == pytest.approx(privacy["epsilon_measurement"])
    # Dagster: the measurement's asset carries the headline, its parts beside it.
    with dg.DagsterInstance.get() as instance:
        event = instance.get_latest_materialization_event(dg.AssetKey(["splice", "private_moments"]))
    metadata = event.asset_materialization.metadata
    assert metadata["epsilon"].value == epsilon
    assert metadata["epsilon_estimate"].value == pytest.approx(privacy["epsilon_estimate"])
    assert metadata["epsilon_measurement"].value == pytest.approx(privacy["epsilon_measurement"])
    # `splice releases`, `show`, `budget`: one row / line per release, the headline, then its parts.
    row = next(r for r in json.loads(ok("releases", "--json").stdout) if r["release_id"] == release_id)
    assert row["epsilon"] == epsilon and row["status"] == "released"
    assert (row["epsilon_estimate"], row["epsilon_measurement"]) == pytest.approx(
        (privacy["epsilon_estimate"], privacy["epsilon_measurement"]))
    assert "its parts alone" in ok("releases").output
    shown = ok("show", release_id).output
    assert f"guarantee   ({epsilon}, 1e-09)-DP" in shown and f"this release {release_text(epsilon, 1e-9)}" in shown
    assert "estimate part" in shown and "measurement part" in shown
    budget = ok("budget", DEMO_DATASET).output
    per_release = [line for line in budget.splitlines() if "this release" in line]
    assert len(per_release) == 1 and release_text(epsilon, 1e-9) in per_release[0]
    assert "its parts alone: estimate epsilon" in per_release[0]
    history = json.loads(ok("budget", DEMO_DATASET, "--json").stdout)["history"]
    assert [(h["release_id"], h["epsilon"], len(h["entries"])) for h in history] == [(release_id, epsilon, 2)]
    assert uuid.UUID(release_id)
