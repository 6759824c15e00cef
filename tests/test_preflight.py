"""The pre-flight catalogue: every setting or input that would fail a release is refused before any reservation,
and the refused run leaves nothing behind (no ledger entry, no release folder, no step output)."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import numpy as np
import pandas as pd
import pytest
import yaml
from helpers import ledger_url, release_resources
from pydantic import ValidationError

from splice_assets.dagster_layer.automation import run_config_for
from splice_assets.dagster_layer.config import ReleaseConfig
from splice_assets.dagster_layer.definitions import build_definitions
from splice_assets.private import preflight
from splice_assets.private.ledger import BudgetLedger, budgets_table
from splice_assets.private.mechanism import PrivacyParameterError, compose_epsilon, epsilon_of
from splice_assets.schema import load_schema

SCHEMA = {
    "name": "toy_preflight", "version": 1, "n_min": 100,
    "columns": [
        {"name": "amount", "kind": "continuous", "bounds": [0, 1000]},
        {"name": "colour", "kind": "categorical", "categories": ["red", "green", "blue"]},
    ],
}
AUTO_SCHEMA = {**SCHEMA, "name": "toy_preflight_auto",
               "columns": [{"name": "amount", "kind": "continuous", "bounds": "auto"}, SCHEMA["columns"][1]]}
FAST = dict(k=8, n_directions=64, components=3, max_steps=30, n_synthetic=200)


@pytest.fixture
def world(tmp_path, monkeypatch):
    folder = tmp_path / "schemas"
    folder.mkdir()
    for schema in (SCHEMA, AUTO_SCHEMA):
        (folder / f"{schema['name']}.yaml").write_text(yaml.safe_dump(schema))
    monkeypatch.setenv("SPLICE_SCHEMA_DIR", str(folder))
    rng = np.random.default_rng(0)
    table = pd.DataFrame({"amount": rng.gamma(2, 50, 400).round(2), "colour": rng.choice(["red", "green"], 400)})
    table.to_csv(tmp_path / "input.csv", index=False)
    return tmp_path


def run(tmp: Path, **settings):
    resources = release_resources(tmp)
    config = ReleaseConfig(**{"dataset": SCHEMA["name"], "input_path": str(tmp / "input.csv"), **FAST, **settings})
    with dg.DagsterInstance.ephemeral() as instance:
        return build_definitions(resources).resolve_job_def("release").execute_in_process(
            run_config=run_config_for(config), instance=instance, raise_on_error=False
        )


def failure_message(result) -> str:
    event = next(e for e in result.all_events if e.is_step_failure)
    error = event.event_specific_data.error
    while error.cause is not None:
        error = error.cause
    return error.message


def assert_nothing_charged_or_written(tmp: Path, dataset: str = SCHEMA["name"]) -> None:
    with BudgetLedger(ledger_url(tmp)) as book:
        assert book.entries(dataset) == []
    assert not (tmp / "releases").exists()
    assert not (tmp / "mlflow.db").exists()


def set_budget(tmp: Path, epsilon: float = 10.0, delta: float = 1e-6, relation: str = "replace-one",
               dataset: str = SCHEMA["name"]) -> None:
    with BudgetLedger(ledger_url(tmp)) as book:
        book.set_budget(dataset, epsilon, delta, relation)


# -- refused at launch (the run config), before a run exists -------------------------------------------------------


@pytest.mark.parametrize("setting, value, words", [
    ("k", 20_000, "k must be an integer in [1, 64], got 20000"),
    ("n_directions", 200_000_000, "n_directions (L) must be an integer in [1, 8192], got 200000000"),
    ("epsilon", 1e6, "epsilon must be a number in (0, 20], got 1000000.0"),
    ("epsilon", -1.0, "got -1.0"),
    ("components", 10_000, "components (K) must be an integer in [1, 500], got 10000"),
    ("n_synthetic", 10**9, "n_synthetic must be an integer in [0, 10000000], got 1000000000"),
    ("delta", 0.5 + 0.5, "delta"),
    ("max_unparseable_share", 1.5, "max_unparseable_share must be a number in [0, 1], got 1.5"),
])
def test_settings_that_cannot_succeed_are_refused_at_launch(setting, value, words):
    with pytest.raises(ValidationError) as caught:
        ReleaseConfig(**{setting: value})
    assert words in str(caught.value)


# -- refused by the first step, before any reservation ---------------------------------------------------------------


def test_delta_must_be_below_one_over_the_public_n(world):
    set_budget(world, delta=1e-6)
    result = run(world, delta=0.005)  # < 1/n_min = 0.01, but n = 400 - 80 measured rows: 1/320
    assert not result.success and "delta must be < 1/320" in failure_message(result)
    assert_nothing_charged_or_written(world)


def test_delta_must_not_exceed_the_lifetime_delta(world):
    set_budget(world, delta=1e-8)
    result = run(world, delta=1e-6)
    assert not result.success and "exceeds the dataset's lifetime delta" in failure_message(result)
    assert_nothing_charged_or_written(world)


def test_a_lifetime_delta_of_one_half_is_refused(world):
    with BudgetLedger(ledger_url(world)) as book, pytest.raises(PrivacyParameterError, match="0.5"):
        book.set_budget(SCHEMA["name"], 10.0, 0.5)
    # A ledger written before that rule may still hold one: the release refuses it.
    with BudgetLedger(ledger_url(world)) as book:
        book.set_budget(SCHEMA["name"], 10.0, 1e-6)
        with book.engine.begin() as conn:
            conn.execute(budgets_table.update().values(delta_total=0.5))
    result = run(world)
    assert not result.success and "must be < 1/n_min" in failure_message(result)
    assert_nothing_charged_or_written(world)


def test_no_budget_and_a_relation_mismatch_are_refused(world):
    result = run(world)
    assert not result.success and "splice budget set toy_preflight" in failure_message(result)
    set_budget(world, relation="add-remove")
    result = run(world)
    assert not result.success and "accounted under relation 'add-remove'" in failure_message(result)
    assert_nothing_charged_or_written(world)


def test_the_whole_release_with_its_bounds_estimate_must_fit_the_budget(world):
    # With 0.1 of the privacy on DP bounds the measurement is (0.946, 1e-9); at the lifetime delta 1e-6 it alone
    # composes to 0.712, with the bounds' Gaussian to 0.754: a budget of 0.73 admits the one and not the other.
    set_budget(world, epsilon=0.73, dataset=AUTO_SCHEMA["name"])
    result = run(world, dataset=AUTO_SCHEMA["name"], epsilon=1.0, bounds_share=0.1)
    assert not result.success and "lifetime epsilon of 0.75" in failure_message(result)
    assert_nothing_charged_or_written(world, AUTO_SCHEMA["name"])


def test_a_streamed_input_plans_memory_for_one_batch_not_for_n(world, monkeypatch):
    set_budget(world)
    cost = preflight.ReleaseCost((1.0,))
    schema = load_schema(world / "schemas" / f"{SCHEMA['name']}.yaml")
    args = (schema, "replace-one", 1e-12, 10**9, 30, 256, 16, 20, 5000, BudgetLedger(ledger_url(world)), cost)
    with pytest.raises(preflight.PreflightError, match="of memory"):
        preflight.check_release(*args, memory_bytes=8 * 2**30)
    preflight.check_release(*args, memory_bytes=8 * 2**30, rows_in_memory=200_000)


def test_a_release_that_would_not_fit_in_memory_is_refused(world, monkeypatch):
    set_budget(world)
    monkeypatch.setattr(preflight, "available_memory_bytes", lambda: 2 * 2**30)
    result = run(world, n_directions=8192, k=64, components=500)
    assert not result.success and "of memory" in failure_message(result)
    assert_nothing_charged_or_written(world)


@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize("dataset", [SCHEMA["name"], AUTO_SCHEMA["name"]])
def test_an_unparseable_column_is_refused_before_any_charge_even_with_auto_bounds(world, dataset, streamed):
    set_budget(world, dataset=dataset)
    table = pd.read_csv(world / "input.csv")
    table["amount"] = "n/a"
    table.to_csv(world / "input.csv", index=False)
    if streamed:  # the same input as a folder of two files: the partitioned path counts and refuses the same way
        (world / "parts").mkdir()
        table.iloc[:100].to_csv(world / "parts" / "a.csv", index=False)
        table.iloc[100:].to_csv(world / "parts" / "b.csv", index=False)
    result = run(world, dataset=dataset, **({"input_path": str(world / "parts")} if streamed else {}))
    message = failure_message(result)
    assert not result.success and "column 'amount': 100%" in message and "limit 5%" in message
    assert_nothing_charged_or_written(world, dataset)


def test_a_utf8_bom_header_releases(world):
    set_budget(world)
    text = (world / "input.csv").read_text()
    (world / "input.csv").write_bytes(b"\xef\xbb\xbf" + text.encode())
    result = run(world)
    assert result.success


def test_release_json_states_the_whole_cost_bounds_estimate_included(world):
    set_budget(world, dataset=AUTO_SCHEMA["name"])
    result = run(world, dataset=AUTO_SCHEMA["name"], epsilon=1.0, bounds_share=0.1)
    assert result.success
    with BudgetLedger(ledger_url(world)) as book:
        entries = book.entries(AUTO_SCHEMA["name"])
    release_id = entries[0].release_id
    manifest = json.loads(next((world / "releases").rglob("release.json")).read_text())
    privacy = manifest["privacy"]
    assert manifest["release_id"] == release_id
    assert (privacy["epsilon"], privacy["epsilon_measurement"], privacy["bounds_noise_multiplier"]) == pytest.approx(
        (1.0, 0.9463, 17.378), rel=1e-4
    )
    assert privacy["epsilon_estimate"] == pytest.approx(epsilon_of(17.378, 1e-9), rel=1e-4)
    assert privacy["epsilon_cost"] == pytest.approx(1.0)
    assert manifest["privacy_statement"].startswith("This release satisfies (1, 1e-09)-differential privacy")
    assert "estimated the numeric bounds" in manifest["privacy_statement"]
    # Two Gaussian entries that compose exactly to the release's (1, 1e-9).
    assert compose_epsilon([e.noise_multiplier for e in entries], 1e-9) == pytest.approx(1.0, abs=1e-6)
