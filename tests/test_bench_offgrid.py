"""The bench's off-grid metrics (bench/offgrid.py) on small tables whose answers are known."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from bench.offgrid import bootstrap, dp_marginals, offgrid_metrics, spike_values
from splice_assets.schema import parse_schema

SCHEMA = parse_schema({
    "name": "offgrid", "version": 1, "n_min": 100,
    "columns": [
        {"name": "length", "kind": "continuous", "bounds": [0, 100]},
        {"name": "width", "kind": "continuous", "bounds": [0, 100]},
        {"name": "age", "kind": "integer", "bounds": [18, 90]},
        {"name": "colour", "kind": "categorical", "categories": ["red", "green", "blue"]},
    ],
})


def dependent(n: int, seed: int) -> pd.DataFrame:
    """length ~ width (near-identical columns), skewed; age on every integer; colour tied to length."""
    rng = np.random.default_rng(seed)
    length = rng.lognormal(2.0, 0.6, n).clip(0, 100)
    return pd.DataFrame({
        "length": length, "width": (length * rng.normal(1.0, 0.01, n)).clip(0, 100),
        "age": rng.integers(18, 91, n), "colour": np.where(length > 8, "red", rng.choice(["green", "blue"], n)),
    })


def test_a_table_scores_zero_against_itself():
    t = dependent(3000, 0)
    m = offgrid_metrics(t, t, SCHEMA)
    assert m["qtvd1"] == m["qtvd2"] == m["qtvd3"] == m["range_mae"] == 0.0
    assert m["missing_values"] == 0 and m["det_auc_max"] == pytest.approx(0.5, abs=0.03)


def test_independent_columns_lose_the_dependence_a_bootstrap_keeps():
    t = dependent(4000, 1)
    rng = np.random.default_rng(2)
    independent = pd.DataFrame({c: rng.permutation(t[c].to_numpy()) for c in t.columns})
    boot, ind = offgrid_metrics(t, bootstrap(t, 3), SCHEMA), offgrid_metrics(t, independent, SCHEMA)
    assert ind["qtvd1"] == pytest.approx(0.0, abs=1e-12)  # the same values, shuffled
    assert ind["qtvd2"] > 4 * boot["qtvd2"] and ind["range_mae"] > 3 * boot["range_mae"]


def test_strong_pairs_halved_and_flipped_signs_are_seen():
    """length ~ width has r near 1: kept by a bootstrap (error below .02, no flip); a synthetic width that is half
    the real one plus noise keeps its sign but loses r; a mirrored width flips it."""
    t = dependent(4000, 8)
    rng = np.random.default_rng(9)
    boot = offgrid_metrics(t, bootstrap(t, 10), SCHEMA)
    assert boot["pair_r_strong"] >= 1 and boot["pair_r_err"] < 0.02 and boot["pair_r_flips"] == 0
    halved, mirrored = t.copy(), t.copy()
    spread = t["length"].std()
    halved["width"] = (t["length"] + rng.normal(0, 1.7 * spread, len(t))).clip(0, 100)
    mirrored["width"] = (100 - t["length"]).clip(0, 100)
    weak = offgrid_metrics(t, halved, SCHEMA)
    assert 0.3 < weak["pair_r_err"] < 0.7 and weak["pair_r_flips"] == 0
    flipped = offgrid_metrics(t, mirrored, SCHEMA)
    assert flipped["pair_r_err"] > 1.5 and flipped["pair_r_flips"] >= 1


def test_integer_resolution_and_lost_values_are_seen():
    t = dependent(4000, 4)
    gappy = t.copy()
    gappy["age"] = (gappy["age"] // 2) * 2  # every odd age missing, the deciles barely move
    m = offgrid_metrics(t, gappy, SCHEMA)
    assert m["missing_values"] >= 30 and m["qtvd1"] > 0.1
    assert m["det_auc_col"] == "age" and m["det_auc_max"] > 0.7


def test_skew_is_scored_at_the_real_deciles():
    t = dependent(4000, 5)
    flat = t.copy()
    flat["length"] = np.random.default_rng(6).uniform(t["length"].min(), t["length"].max(), len(t))
    assert offgrid_metrics(t, flat, SCHEMA)["qtvd1"] > 0.1


def test_the_dp_noise_floor_falls_with_epsilon_to_the_bootstrap():
    t = dependent(4000, 7)
    floor = {eps: offgrid_metrics(t, dp_marginals(t, SCHEMA, eps, 1e-9, 8), SCHEMA) for eps in (0.3, 1000.0)}
    boot = offgrid_metrics(t, bootstrap(t, 8), SCHEMA)
    # At eps = 0.3 a cell's noise sd (~30 rows) is most of an age cell (~55 rows); at eps = 1000 only the draw of
    # n rows is left, as in the bootstrap.
    assert floor[0.3]["qtvd1"] > 2 * floor[1000.0]["qtvd1"]
    assert floor[1000.0]["qtvd1"] == pytest.approx(boot["qtvd1"], abs=0.01)
    sample = dp_marginals(t, SCHEMA, 1.0, 1e-9, 9)
    assert list(sample.columns) == list(t.columns) and len(sample) == len(t)
    assert set(sample["colour"]) <= {"red", "green", "blue"} and sample["age"].between(18, 90).all()


def test_spikes_are_point_masses_the_data_do_not_have():
    """A value at 2% of the synthetic rows that 0.1% of the real rows hold is a spike; a real point mass copied at
    float32 precision (0.0251188636 for 0.025118864315095824) is not, nor is a value below 0.2% of the rows."""
    real = pd.Series(np.r_[np.arange(1000.0), np.full(30, 0.025118864315095824)])
    synthetic = pd.Series(np.r_[np.arange(1000.0), np.full(30, np.float32(0.025118864315)), np.full(20, 7.0),
                                [500.5]])
    spikes = spike_values(real, synthetic)
    assert list(spikes.index) == [7.0]
    assert spikes.loc[7.0, "synthetic"] == pytest.approx(21 / 1051)
    assert spikes.loc[7.0, "real"] == pytest.approx(1 / 1030)


def test_rules_between_discrete_columns_are_found_and_scored():
    """``rule_share``: b = a // 2 in every real row is a rule; the synthetic rows keep it in half of them (the other
    half draw b at random from another level, or hold an a no real row holds). c, independent of a and b, makes
    no rule, and neither does a column nearly constant."""
    from bench.experiments.schema_variants import rule_share

    schema = parse_schema({"name": "rules", "version": 1, "n_min": 2, "columns": [
        {"name": "a", "kind": "categorical", "categories": list(range(8))},
        {"name": "b", "kind": "categorical", "categories": list(range(4))},
        {"name": "c", "kind": "categorical", "categories": [0, 1]},
        {"name": "d", "kind": "categorical", "categories": [0, 1]},
    ]})
    rng = np.random.default_rng(3)
    a = rng.integers(0, 8, 4000)
    real = pd.DataFrame({"a": a, "b": a // 2, "c": rng.integers(0, 2, 4000), "d": (rng.random(4000) < 0.001) * 1})
    assert rule_share(real, real, schema) == 1.0
    synthetic = real.copy()
    broken = np.arange(4000) % 2 == 1
    synthetic.loc[broken, "b"] = (synthetic.loc[broken, "b"] + 1) % 4
    synthetic.loc[np.arange(4000) % 4 == 1, "a"] = 9  # an a no real row holds breaks the rule too
    assert rule_share(real, synthetic, schema) == pytest.approx(0.5)
    assert np.isnan(rule_share(real.drop(columns="b").assign(b=rng.integers(0, 4, 4000)), real, schema))
