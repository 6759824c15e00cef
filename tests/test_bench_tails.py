"""The bench's tail metrics (bench/tails.py, issue 71): the share of real rows beyond the synthetic range, and the rule
that it is at most 2 noise std of the release's best public test of that tail."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

import bench.run as bench_run
from bench.tails import TailNoise, allowance, column_tails, run_noise, summary, tail_metrics, tails_md
from splice_assets.schema import parse_schema

SCHEMA = parse_schema({
    "name": "tails", "version": 1, "n_min": 100,
    "columns": [
        # 256 fine intervals of width 0.625 in 16 coarse bins of width 10
        {"name": "amount", "kind": "continuous", "bounds": [0, 160]},
        # a public grid of 16 values: one fine cell per value
        {"name": "count", "kind": "integer", "bounds": [0, 15]},
        {"name": "colour", "kind": "categorical", "categories": ["red", "blue"]},
    ],
})
NOISE = TailNoise(marginal_noise_std=0.008, grid_weight=4, interval_weight=2, fine_bins=256, numeric_bins=16)


def tables() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Real: amount uniform on [0, 100) plus 10 rows at 150.3 (1 fine cell, in a coarse bin wholly beyond the
    synthetic maximum 100); count 0..9 plus 10 rows at 12. Synthetic: amount over [0, 100], count 0..9."""
    rng = np.random.default_rng(0)
    amount = np.concatenate([rng.uniform(0, 100, 990), np.full(10, 150.3)])
    amount[0] = 0.0
    count = np.concatenate([rng.integers(0, 10, 990), np.full(10, 12)])
    real = pd.DataFrame({"amount": amount, "count": count, "colour": "red"})
    synthetic = pd.DataFrame({"amount": np.linspace(0, 100, 500), "count": np.arange(500) % 10, "colour": "blue"})
    return real, synthetic


def test_allowance_is_two_noise_std_of_the_best_public_test_of_the_tail():
    assert allowance(np.array([], dtype=int), np.array([], dtype=int), 3, 1.0, 1.0) == 0.0
    # one fine cell: 2 t_f, whatever its bin
    assert allowance(np.array([7]), np.array([0]), 0, 0.5, 1.0) == pytest.approx(1.0)
    # 32 fine cells filling two coarse bins wholly beyond the edge: the two coarse cells test it better
    cells, parents = np.arange(32), np.repeat([14, 15], 16)
    assert allowance(cells, parents, 10, 1.0, 1.0) == pytest.approx(2 * math.sqrt(2))
    # ... unless the fine cells are much less noisy than the coarse ones: 2 sqrt(32) t_f
    assert allowance(cells, parents, 10, 0.1, 1.0) == pytest.approx(2 * math.sqrt(32) * 0.1)
    # cells in the edge bin count at t_f in the mixed test too: 4 fine + 1 coarse
    assert allowance(np.arange(20), np.repeat([10, 11], [4, 16]), 10, 1.0, 1.0) == pytest.approx(2 * math.sqrt(5))


def test_column_tails_shares_cells_and_rule():
    real, synthetic = tables()
    rows = {r["column"]: r for r in column_tails(real, synthetic, SCHEMA, NOISE)}
    assert set(rows) == {"amount", "count"}  # numeric columns only
    amount, count = rows["amount"], rows["count"]
    assert (amount["below"], amount["above"]) == (0.0, pytest.approx(0.01))
    assert (amount["cells_below"], amount["cells_above"]) == (0, 1)
    t_interval = 0.008 / math.sqrt(2)  # a fine table of intervals counts as 2 tables: its cells at t / sqrt(2)
    assert amount["allow_above"] == pytest.approx(2 * t_interval) and amount["allow_below"] == 0.0
    assert amount["within"] is True  # 1% <= 1.13%
    # the count's tail: one grid value (its own fine cell and coarse bin), a per-value table at t / sqrt(4)
    assert count["above"] == pytest.approx(0.01) and count["cells_above"] == 1
    assert count["allow_above"] == pytest.approx(2 * 0.008 / 2)
    assert count["within"] is False  # 1% > 0.8%
    assert (count["real_max"], count["synth_max"]) == (12.0, 9.0)


def test_rule_follows_the_noise_and_peers_get_shares_only():
    real, synthetic = tables()
    loud = TailNoise(0.02, 4, 2, 256, 16)
    assert all(r["within"] for r in column_tails(real, synthetic, SCHEMA, loud))
    peer = column_tails(real, synthetic, SCHEMA, None)
    assert all(r["within"] is None and r["allow_above"] is None for r in peer)
    assert summary(peer) == {"tail_beyond_max": pytest.approx(0.01), "tail_beyond_col": "count>",
                             "tail_cols_over_rule": None}
    judged = tail_metrics(real, synthetic, SCHEMA, NOISE)
    assert judged["tail_cols_over_rule"] == 1
    # identical tables: nothing beyond
    assert tail_metrics(real, real, SCHEMA, NOISE) == {"tail_beyond_max": 0.0, "tail_beyond_col": "",
                                                       "tail_cols_over_rule": 0}
    assert {"tail_beyond_max", "tail_beyond_col", "tail_cols_over_rule"} <= set(bench_run.COLUMNS)


def test_missing_values_count_in_the_denominator_and_no_synthetic_values_leave_all_beyond():
    real = pd.DataFrame({"amount": [1.0, 2.0, np.nan, 50.0], "count": [1, 2, 3, 4], "colour": "red"})
    synthetic = pd.DataFrame({"amount": [1.0, 2.0], "count": [np.nan, np.nan], "colour": "red"})
    rows = {r["column"]: r for r in column_tails(real, synthetic, SCHEMA, NOISE)}
    assert rows["amount"]["above"] == pytest.approx(0.25)
    assert (rows["count"]["below"], rows["count"]["above"]) == (1.0, 0.0)


def test_run_noise_reads_the_runner_entry_or_replans_older_runs():
    stored = NOISE.to_dict()
    assert run_noise(SCHEMA, {"tail_noise": stored}, 1.0) == NOISE
    assert run_noise(SCHEMA, {"relation": "add_remove", "epsilon_training": 1.0}, 1.0) is None  # a peer's stats
    measurement = SimpleNamespace(marginal_noise_std=lambda: 0.03, grid_weight=4, interval_weight=2, fine_bins=256,
                                  numeric_bins=16)
    assert TailNoise.of(measurement) == TailNoise(0.03, 4, 2, 256, 16)
    from splice_assets.api import Synthesizer

    older = {"sigma": 0.05, "relation": "add-remove", "n": 1000, "n_measured": 1003}
    noise = run_noise(SCHEMA, older, 1.0)
    plan, _ = Synthesizer(SCHEMA, 1.0, bench_run.DELTA, "add-remove").plan(1003)
    assert noise == TailNoise(0.05 / plan.marginal_weight, plan.grid_weight, plan.interval_weight, plan.fine_bins,
                              plan.numeric_bins)


def test_tails_md_lists_the_runs_and_the_columns_beyond_the_threshold():
    real, synthetic = tables()
    rows = [{"dataset": "toy", "method": m, "n_train": len(real), **r}
            for m, noise in (("splice_add_remove", NOISE), ("mst", None))
            for r in column_tails(real, synthetic, SCHEMA, noise)]
    md = tails_md(rows, 1.0, 0.005)
    assert "| toy | splice_add_remove | 1000 | 2 | 1.00% | count> | 1 |" in md
    assert "| toy | mst | 1000 | 2 | 1.00% | count> |  |" in md
    assert "| toy | amount | splice_add_remove | 0 .. 150.3 | 0 .. 100 | 0.00% | 1.00% | 0.00% | 1.13% | yes |" in md
    assert "| toy | count | splice_add_remove | 0 .. 12 | 0 .. 9 | 0.00% | 1.00% | 0.00% | 0.80% | **no** |" in md
    assert "| toy | amount | mst |" in md
    assert "No cached runs found." in tails_md([], 1.0, 0.005)
