"""`bounds: auto`: DP quantile bounds, charged to the ledger as their own entry and shown in the release."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import numpy as np
import pandas as pd
import pytest
import yaml

from splice_assets.private.bounds import MECHANISM, estimate_bounds, private_quantile
from splice_assets.private.ledger import BudgetExceeded, BudgetLedger
from splice_assets.private.mechanism import compose_epsilon
from splice_assets.private.validation import StructuralError, validate
from splice_assets.schema import parse_schema

SCHEMA = parse_schema(
    {
        "name": "auto_toy",
        "version": 1,
        "n_min": 1000,
        "columns": [
            {"name": "income", "kind": "continuous", "bounds": "auto", "nullable": True},
            {"name": "age", "kind": "integer", "bounds": [0, 120]},
        ],
    }
)


def table(n: int = 5000, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    income = rng.lognormal(10, 0.5, n)
    income[:50] = np.nan
    return pd.DataFrame({"income": income, "age": rng.integers(18, 90, n)})


def test_unresolved_auto_bounds_are_a_structural_error():
    with pytest.raises(StructuralError, match="column 'income'.*auto"):
        validate(table(), SCHEMA)


def test_private_quantile_is_accurate_at_a_reasonable_budget():
    """epsilon = 1 per quantile, n = 5,000: the exponential mechanism picks a candidate next to the true 98%
    quantile (grid step 12%); an error needs a score gap of 100 rows to lose, probability < 1e-6 per draw."""
    values = np.random.default_rng(1).normal(50, 10, 5000)
    truth = np.quantile(values, 0.98)
    for _ in range(5):
        estimate = private_quantile(values, 0.98, 1.0)
        assert 0.85 * truth <= estimate <= 1.15 * truth


def test_estimate_charges_one_entry_and_resolves_the_schema(tmp_path):
    ledger = BudgetLedger(f"sqlite:///{tmp_path / 'l.sqlite'}")
    ledger.set_budget("auto_toy", 3.0, 1e-6)
    resolved, estimate = estimate_bounds(table(), SCHEMA, 1.0, ledger, "r1", "replace-one")
    lo, hi = resolved.column("income").bounds
    true_lo, true_hi = np.nanquantile(table()["income"], [0.02, 0.98])
    assert 0.7 * true_lo <= lo <= 1.3 * true_lo and 0.7 * true_hi <= hi <= 1.3 * true_hi
    assert not resolved.column("income").bounds_auto and resolved.column("age") == SCHEMA.column("age")
    entries = ledger.entries("auto_toy")
    assert [(e.mechanism, e.status, e.epsilon, e.noise_multiplier) for e in entries] == [
        (MECHANISM, "committed", 1.0, None)
    ]
    assert estimate.ledger_entry_id == entries[0].id
    assert ledger.spent("auto_toy")[0] == pytest.approx(1.0, abs=1e-5)
    validate(table(), resolved)  # the resolved schema validates the same table


def test_bounds_spend_is_refused_before_any_quantile(tmp_path):
    ledger = BudgetLedger(f"sqlite:///{tmp_path / 'l.sqlite'}")
    ledger.set_budget("auto_toy", 0.5, 1e-6)
    with pytest.raises(BudgetExceeded):
        estimate_bounds(table(), SCHEMA, 1.0, ledger, "r1", "replace-one")
    assert ledger.entries("auto_toy") == []


def test_pure_and_gaussian_entries_compose():
    assert compose_epsilon([], 1e-6, [1.0]) == pytest.approx(1.0, abs=1e-4)
    gauss = compose_epsilon([4.2247], 1e-6)
    both = compose_epsilon([4.2247], 1e-6, [0.5])
    assert gauss == pytest.approx(1.0, abs=1e-3)
    assert max(gauss, 0.5) < both <= gauss + 0.5 + 1e-6


def test_release_job_with_auto_bounds_splits_epsilon_explicitly(tmp_path, monkeypatch, demo_table):
    from splice_assets.dagster_layer.assets import op_name
    from splice_assets.dagster_layer.automation import run_config_for
    from splice_assets.dagster_layer.config import ReleaseConfig
    from splice_assets.dagster_layer.definitions import build_definitions
    from splice_assets.datasets import schema_path

    schemas = tmp_path / "schemas"
    schemas.mkdir()
    raw = yaml.safe_load(schema_path("fair_affairs").read_text())
    for column in raw["columns"]:
        if column["name"] == "affairs":
            column["bounds"] = "auto"
    (schemas / "fair_affairs.yaml").write_text(yaml.safe_dump(raw))
    monkeypatch.setenv("SPLICE_SCHEMA_DIR", str(schemas))
    from test_dagster_pipeline import FAST, resources_in, set_budget

    set_budget(tmp_path)
    defs = build_definitions(resources_in(tmp_path))
    config = ReleaseConfig(**FAST, epsilon=2.0, bounds_epsilon_share=0.25)
    with dg.DagsterInstance.ephemeral() as instance:
        result = defs.resolve_job_def("release").execute_in_process(
            run_config=run_config_for(config), instance=instance
        )
    assert result.success
    entries = BudgetLedger(f"sqlite:///{tmp_path / 'ledger.sqlite'}").entries("fair_affairs")
    by_mechanism = {e.mechanism: e for e in entries}
    assert by_mechanism[MECHANISM].epsilon == pytest.approx(0.5)
    measurement_entry = next(e for e in entries if e.noise_multiplier is not None)
    assert measurement_entry.epsilon == pytest.approx(1.5)
    record = result.output_for_node(op_name("release"))
    manifest = json.loads((Path(record["public_dir"]) / "release.json").read_text())
    assert manifest["auto_bounds"]["epsilon"] == pytest.approx(0.5)
    lo, hi = manifest["auto_bounds"]["bounds"]["affairs"]
    assert lo <= hi
    bundle_schema = yaml.safe_load((Path(record["public_dir"]) / "schema.yaml").read_text())
    affairs = next(c for c in bundle_schema["columns"] if c["name"] == "affairs")
    assert affairs["bounds"] == [lo, hi]
    # The headline guarantee is the whole release's: measurement plus bounds.
    assert manifest["privacy"]["epsilon"] == pytest.approx(2.0)
    assert manifest["privacy"]["measurement_epsilon"] == pytest.approx(1.5)
