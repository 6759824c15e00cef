"""Every choice of the DP estimate comes from the noisy counts, never the exact ones (issue 65, item 6).

The sampler is replaced by a stand-in that returns the exact counts plus a planted offset, and the estimate runs
through its real path (``estimate_bounds``). Each choice (bounds, decimals, step, frequent values, knots) must follow
the offset: code that read the exact histogram, or applied the values threshold to exact counts, gives the answer
the rows alone give and fails. The planted offsets are thousands of rows, so no noise is involved at all, except for
the empty candidates of ``values: auto`` (drawn from their law; the assertions name held codes only)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from splice_assets.measurement import RELATION_ADD_REMOVE
from splice_assets.private import mechanism
from splice_assets.private.bounds import COARSE, DECIMAL_CELLS, FINE, KNOT_CELLS, STEP_CELLS, estimate_bounds
from splice_assets.schema import TableSchema, parse_schema

PLANT = 1e5


def schema(**columns: dict) -> TableSchema:
    return parse_schema({"name": "planted", "version": 1, "n_min": 100,
                         "columns": [{"name": name, **spec} for name, spec in columns.items()]})


def rows(n: int = 2000) -> pd.DataFrame:
    """Amounts in [1, 99] with 2 decimals, 30% of them at 60; even ages in [18, 88]."""
    rng = np.random.default_rng(0)
    amount = rng.uniform(1, 99, n).round(2)
    amount[rng.uniform(size=n) < 0.3] = 60.0
    return pd.DataFrame({"amount": amount, "age": 2 * rng.integers(9, 45, n)})


def planted(monkeypatch: pytest.MonkeyPatch, offset) -> None:  # noqa: ANN001 (a function of the exact vector)
    monkeypatch.setattr(mechanism, "gaussian_noise", lambda values, sigma: np.asarray(values, float) + offset(values))


def run(table_schema: TableSchema, table: pd.DataFrame):  # noqa: ANN201
    return estimate_bounds(table, table_schema, 20.0, 1e-6, None, "planted", RELATION_ADD_REMOVE)


def test_bounds_follow_the_noisy_histograms(monkeypatch: pytest.MonkeyPatch) -> None:
    """A planted mass around 5e5, in both histograms: the upper bound moves there. The rows end below 100."""
    far = np.array([5e5])

    def offset(values: np.ndarray) -> np.ndarray:
        out = np.zeros(len(values))
        out[COARSE.bucket_of(far)] = PLANT
        out[COARSE.size + FINE.bucket_of(far)] = PLANT
        return out

    planted(monkeypatch, offset)
    resolved, estimate = run(schema(amount={"kind": "continuous", "bounds": "auto"}), rows())
    assert estimate.columns["amount"][1] >= 1e5, estimate.columns
    assert resolved.columns[0].bounds[1] >= 1e5


def test_decimals_and_step_follow_the_noisy_histograms(monkeypatch: pytest.MonkeyPatch) -> None:
    """Planted: many rows needing more than six decimals, and many odd ages. The rows have 2 decimals and step 2."""
    def offset(values: np.ndarray) -> np.ndarray:
        out = np.zeros(len(values))
        assert len(values) == DECIMAL_CELLS + len(STEP_CELLS)  # the decimals histogram, then the step histogram
        out[DECIMAL_CELLS - 1] = PLANT
        out[DECIMAL_CELLS] = PLANT  # step cell 0: no step divides
        return out

    planted(monkeypatch, offset)
    _, estimate = run(schema(amount={"kind": "continuous", "bounds": [0, 100], "decimals": "auto"},
                             age={"kind": "integer", "bounds": [0, 100], "step": "auto"}), rows())
    assert estimate.found_decimals == {"amount": None}
    assert estimate.found_steps == {"age": None}


def test_the_exact_histograms_alone_give_other_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    """The control: with no offset the same rows give 2 decimals, step 2 and bounds below 1,000, so the tests above
    tell noisy from exact."""
    planted(monkeypatch, lambda values: np.zeros(len(values)))
    _, estimate = run(schema(amount={"kind": "continuous", "bounds": "auto", "decimals": "auto"},
                             age={"kind": "integer", "bounds": [0, 100], "step": "auto"}), rows())
    assert estimate.found_decimals == {"amount": 2} and estimate.found_steps == {"age": 2}
    assert estimate.columns["amount"][1] < 1e3


def test_frequent_values_are_chosen_on_noisy_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Age (integers 0..100,000, every one a candidate): 34 is held by many rows but its noisy count is planted far
    below 0, and 35, held by one row, far above the threshold. A threshold applied to exact counts keeps 34 and
    drops 35."""
    table = rows()
    table.loc[:, "age"] = 34
    table.loc[0, "age"] = 35

    def offset(values: np.ndarray) -> np.ndarray:
        exact = np.asarray(values, float)
        return np.where(exact == 1.0, PLANT, -2 * PLANT)  # the code held once up, the code held by all down

    planted(monkeypatch, offset)
    _, estimate = run(schema(age={"kind": "integer", "bounds": [0, 100000], "values": "auto"}), table)
    found = set(estimate.found_values["age"])
    assert 35.0 in found and 34.0 not in found, found


def test_knots_follow_the_noisy_histogram(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every row of score lies in the lowest knot cell; the planted mass lies in the highest. Knots that follow the
    noise crowd toward the top: the middle knot lies above the middle of the range."""
    table = pd.DataFrame({"score": np.full(2000, 0.5)})

    def offset(values: np.ndarray) -> np.ndarray:
        out = np.zeros(len(values))
        if len(values) == KNOT_CELLS:
            out[-1] = PLANT
        return out

    planted(monkeypatch, offset)
    _, estimate = run(schema(score={"kind": "continuous", "bounds": [0, 50], "knots": "auto"}), table)
    knots = estimate.found_knots["score"]
    assert knots[len(knots) // 2] > 25.0, knots
    assert math.isclose(knots[0], 0.0) and math.isclose(knots[-1], 50.0)
