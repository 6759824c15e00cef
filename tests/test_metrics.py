"""Tests for splice_assets.metrics (self-contained: synthetic tables, no shared datasets)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from splice_assets.evaluation import metrics as M
from splice_assets.private.encoding import encode
from splice_assets.private.validation import validate
from splice_assets.schema import parse_schema

MIXED = {
    "name": "toy_mixed",
    "version": 1,
    "n_min": 10,
    "target": "label",
    "task": "classification",
    "columns": [
        {"name": "age", "kind": "integer", "bounds": [18, 90]},
        {"name": "income", "kind": "continuous", "bounds": [0, 100], "nullable": True},
        {"name": "score", "kind": "continuous", "bounds": [-4, 4]},
        {"name": "edu", "kind": "ordinal", "categories": ["low", "mid", "high"]},
        {"name": "job", "kind": "categorical", "categories": ["a", "b", "c", "d"], "nullable": True},
        {"name": "owner", "kind": "boolean"},
        {"name": "label", "kind": "categorical", "categories": ["no", "yes"]},
    ],
}


def mixed_schema():
    return parse_schema(MIXED)


def raw_mixed(n: int, seed: int, shift: float = 0.0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    z = rng.standard_normal(n)
    edu = np.clip(np.rint(1 + z + rng.normal(0, 0.7, n)), 0, 2).astype(int)
    income = np.clip(40 + 15 * z + 5 * edu + rng.normal(0, 5, n) + 20 * shift, 0, 100)
    income[rng.random(n) < 0.05] = np.nan
    job = np.array(["a", "b", "c", "d", None], dtype=object)[np.clip(edu + rng.integers(0, 3, n), 0, 4)]
    logit = 2.5 * z + 0.5 * (edu - 1) + shift
    return pd.DataFrame(
        {
            "age": np.clip(np.rint(40 + 10 * z + rng.normal(0, 6, n) + 15 * shift), 18, 90),
            "income": income,
            "score": np.clip(z + rng.normal(0, 0.3, n) + shift, -4, 4),
            "edu": np.array(["low", "mid", "high"])[edu],
            "job": job,
            "owner": (z + rng.normal(0, 1, n) + shift) > 0,
            "label": np.where(rng.random(n) < 1 / (1 + np.exp(-logit)), "yes", "no"),
        }
    )


def mixed_table(n: int, seed: int, shift: float = 0.0, schema=None) -> pd.DataFrame:
    return validate(raw_mixed(n, seed, shift), schema or mixed_schema()).table


@pytest.fixture(scope="module")
def schema():
    return mixed_schema()


@pytest.fixture(scope="module")
def tables(schema):
    return {
        "train": mixed_table(3000, 1, schema=schema),
        "holdout": mixed_table(1500, 2, schema=schema),
        "same": mixed_table(1500, 3, schema=schema),
        "shifted": mixed_table(1500, 4, shift=1.0, schema=schema),
    }


# ---------------------------------------------------------------- TVD


def test_tvd_hand_computed_categorical_and_numeric():
    schema = parse_schema(
        {
            "name": "t",
            "version": 1,
            "n_min": 1,
            "columns": [
                {"name": "c", "kind": "categorical", "categories": ["a", "b", "c"]},
                {"name": "x", "kind": "continuous", "bounds": [0, 16], "nullable": True},
            ],
        }
    )
    real = validate(pd.DataFrame({"c": ["a", "a", "b", "c"], "x": [0.5, 1.5, 15.9, None]}), schema).table
    syn = validate(pd.DataFrame({"c": ["a", "b", "b", "b"], "x": [1.2, 1.7, 16.0, 3.0]}), schema).table
    # c: p = (.5, .25, .25), q = (.25, .75, 0) -> 0.5 * (.25 + .5 + .25) = 0.5
    # x bins: real (0, 1, 15, missing), syn (1, 1, 15, 3) -> 0.5 * (.25 + .25 + 0 + .25 + .25) = 0.5
    res = M.marginal_tvd(real, syn, schema, seed=0)
    assert res.per_column["c"] == pytest.approx(0.5)
    assert res.per_column["x"] == pytest.approx(0.5)
    assert res.one_way == pytest.approx(0.5)
    # joint cells: real (a,0) (a,1) (b,15) (c,miss); syn (a,1) (b,1) (b,15) (b,3): overlap (a,1), (b,15) -> 0.5
    assert res.per_pair == (("c", "x", pytest.approx(0.5)),)
    assert res.n_three_way == 0


def test_tvd_two_way_sees_what_one_way_misses():
    schema = parse_schema(
        {
            "name": "b",
            "version": 1,
            "n_min": 1,
            "columns": [{"name": "u", "kind": "boolean"}, {"name": "v", "kind": "boolean"}],
        }
    )
    real = validate(pd.DataFrame({"u": [True, False], "v": [True, False]}), schema).table
    syn = validate(pd.DataFrame({"u": [True, False], "v": [False, True]}), schema).table
    res = M.marginal_tvd(real, syn, schema, seed=0)
    assert res.one_way == pytest.approx(0.0)
    assert res.two_way == pytest.approx(1.0)


def test_tvd_identical_zero_and_grows(schema, tables):
    same = M.marginal_tvd(tables["holdout"], tables["holdout"], schema, seed=0)
    assert same.one_way == same.two_way == same.three_way == 0.0
    assert same.n_three_way == 35  # C(7, 3) <= 200: all triples
    fresh = M.marginal_tvd(tables["holdout"], tables["same"], schema, seed=0)
    shifted = M.marginal_tvd(tables["holdout"], tables["shifted"], schema, seed=0)
    for order in ("one_way", "two_way", "three_way"):
        assert getattr(shifted, order) > 2 * getattr(fresh, order) > 0
    assert fresh.one_way <= fresh.two_way <= fresh.three_way


def test_three_way_sample_is_seeded_and_capped(schema, tables):
    a = M.marginal_tvd(tables["holdout"], tables["same"], schema, seed=5, max_three_way=10)
    b = M.marginal_tvd(tables["holdout"], tables["same"], schema, seed=5, max_three_way=10)
    assert a.n_three_way == 10 and a.three_way == b.three_way


# ---------------------------------------------------------------- SW1 / MMD


def test_sliced_w1_known_shift_1d():
    schema = parse_schema(
        {"name": "s", "version": 1, "n_min": 1, "columns": [{"name": "x", "kind": "continuous", "bounds": [0, 10]}]}
    )
    rng = np.random.default_rng(0)
    base = rng.uniform(0, 5, 2000)
    real = validate(pd.DataFrame({"x": base}), schema).table
    syn = validate(pd.DataFrame({"x": base + 1.0}), schema).table
    # a shift of 1 on [0, 10] is 0.2 in the cube; with d = 1 every direction is +-1
    sw = M.sliced_wasserstein(encode(real, schema), encode(syn, schema), seed=0, n_directions=16)
    assert sw == pytest.approx(0.2, abs=1e-12)
    assert M.sliced_wasserstein(encode(real, schema), encode(real, schema), seed=0) == 0.0


def test_w1_unequal_sizes_exact():
    x = np.array([[0.0], [1.0]])
    y = np.array([[0.0], [0.0], [1.0]])
    # CDFs differ by 1/2 - 2/3 on [0, 1): W1 = 1/6
    assert M.sliced_wasserstein(x, y, seed=0, n_directions=8) == pytest.approx(1 / 6)


def test_evaluation_directions_differ_from_measurement():
    from splice_assets.layout import draw_directions

    ev = M.evaluation_directions(0, 16, 5)
    np.testing.assert_allclose(np.linalg.norm(ev, axis=1), 1.0)
    assert not np.allclose(ev, draw_directions(0, 16, 5))


def test_sw1_and_mmd_order(schema, tables):
    xh, xs, xsh = (encode(tables[k], schema) for k in ("holdout", "same", "shifted"))
    assert M.sliced_wasserstein(xh, xsh, 0) > 3 * M.sliced_wasserstein(xh, xs, 0)
    same = M.mmd_rbf(xh, xh, seed=0)
    fresh = M.mmd_rbf(xh, xs, seed=0)
    shifted = M.mmd_rbf(xh, xsh, seed=0)
    assert abs(same.mmd2) < 2e-3 and abs(fresh.mmd2) < 2e-3
    assert shifted.mmd2 > 0.02 and shifted.mmd > 5 * fresh.mmd
    assert same.bandwidth > 0


# ---------------------------------------------------------------- associations


def test_association_identical_zero_and_shuffle_grows(schema, tables):
    h = tables["holdout"]
    res = M.association_error(h, h, schema)
    assert res.error == 0.0
    assert res.real.shape == (7, 7) and np.allclose(np.diag(res.real), 1.0)
    kinds = M.association_kinds(schema)
    names = list(schema.column_names)
    assert kinds[names.index("age"), names.index("score")] == "pearson"
    assert kinds[names.index("age"), names.index("edu")] == "pearson"  # ordinal as numeric codes
    assert kinds[names.index("job"), names.index("owner")] == "cramers_v"
    assert kinds[names.index("job"), names.index("score")] == "eta"
    broken = M.independent_marginals_baseline(h, schema, len(h), seed=0)
    assert M.association_error(h, broken, schema).error > 5 * M.association_error(h, tables["same"], schema).error
    a = res.real
    assert a[names.index("age"), names.index("score")] > 0.5  # built-in correlation
    assert 0.0 <= a[names.index("job"), names.index("edu")] <= 1.0


def test_cramers_v_and_eta_extremes():
    codes = np.array([0, 1, 2, 0, 1, 2])
    assert M._cramers_v(codes, 3, codes, 3) == pytest.approx(1.0)
    assert M._correlation_ratio(codes, 3, codes.astype(float) * 2.0) == pytest.approx(1.0)
    assert M._correlation_ratio(codes, 3, np.ones(6)) == 0.0


# ---------------------------------------------------------------- TSTR / detection / DCR


def test_tstr_and_trtr(schema, tables):
    res = M.tstr(tables["train"], tables["holdout"], tables["same"], schema, seed=0)
    assert res is not None and res.task == "classification" and res.primary == "roc_auc"
    assert {s.learner for s in res.learners} == {"logistic", "random_forest", "xgboost"}
    assert res.best_trtr["roc_auc"] > 0.8 and res.best_trtr["accuracy"] > 0.7
    assert res.best_tstr["roc_auc"] > 0.8
    baseline = M.independent_marginals_baseline(tables["train"], schema, 3000, seed=0)
    weak = M.tstr(tables["train"], tables["holdout"], baseline, schema, seed=0, trtr=False)
    assert weak.best_trtr is None
    assert weak.best_tstr["roc_auc"] < res.best_tstr["roc_auc"] - 0.15


def test_tstr_regression_and_degenerate_training():
    raw = dict(MIXED, target="score", task="regression")
    schema = parse_schema(raw)
    train, hold = mixed_table(1500, 1, schema=schema), mixed_table(800, 2, schema=schema)
    res = M.tstr(train, hold, train, schema, seed=0)
    assert res.primary == "r2" and res.best_trtr["r2"] > 0.5
    # a synthetic table with a single class still scores (constant predictor, AUC 0.5)
    cls = mixed_schema()
    one_class = mixed_table(500, 3, schema=cls)
    one_class["label"] = pd.Categorical(["no"] * len(one_class), dtype=one_class["label"].dtype)
    r = M.tstr(mixed_table(500, 1, schema=cls), mixed_table(500, 2, schema=cls), one_class, cls, seed=0, trtr=False)
    assert r.best_tstr["roc_auc"] == pytest.approx(0.5)


def test_no_target_gives_none():
    schema = parse_schema({k: v for k, v in MIXED.items() if k not in ("target", "task")})
    t = mixed_table(200, 1, schema=schema)
    assert M.tstr(t, t, t, schema, seed=0) is None


def test_detection_auc(schema, tables):
    fresh = M.detection_auc(tables["holdout"], tables["same"], schema, seed=0)
    shifted = M.detection_auc(tables["holdout"], tables["shifted"], schema, seed=0)
    assert fresh.n_per_class == 1500
    assert fresh.logistic_auc < 0.6 and fresh.xgboost_auc < 0.6
    assert shifted.logistic_auc > 0.75 and shifted.xgboost_auc > 0.75


def test_dcr_copying_is_flagged(schema, tables):
    train, holdout = tables["same"], tables["holdout"]  # equal sizes: no subsampling of the references
    copied = M.distance_to_closest_record(train, holdout, train, schema, seed=0)
    fresh = M.distance_to_closest_record(train, holdout, tables["train"], schema, seed=0)
    assert copied.n_reference == 1500
    assert copied.note == "empirical evidence, not a guarantee"
    assert copied.median_to_train == 0.0 < copied.median_to_holdout
    assert copied.share_closer_to_train > 0.99 and copied.exact_match_train == 1.0
    assert fresh.exact_match_train < 0.05
    assert 0.4 < fresh.share_closer_to_train < 0.6


def test_nearest_distance_matches_bruteforce():
    rng = np.random.default_rng(0)
    q, r = rng.uniform(-1, 1, (300, 4)), rng.uniform(-1, 1, (200, 4))
    brute = np.sqrt(((q[:, None, :] - r[None, :, :]) ** 2).sum(-1)).min(1)
    np.testing.assert_allclose(M.nearest_distance(q, r, chunk=64), brute, atol=1e-9)


# ---------------------------------------------------------------- references / everything


def test_baseline_and_halves_keep_dtypes(schema, tables):
    t = tables["train"]
    base = M.independent_marginals_baseline(t, schema, 1000, seed=1)
    assert len(base) == 1000 and list(base.columns) == list(t.columns)
    assert all(base[c].dtype == t[c].dtype for c in t.columns)
    assert M.marginal_tvd(t, base, schema, 0).one_way < 0.05
    a, b = M.real_halves(t, seed=1)
    assert len(a) + len(b) == len(t) and abs(len(a) - len(b)) <= 1
    assert all(a[c].dtype == t[c].dtype for c in t.columns)


def test_fidelity_metrics_identical_and_json(schema, tables):
    fm = M.fidelity_metrics(tables["train"], tables["holdout"], tables["holdout"], schema, seed=0, with_tstr=False)
    h = fm.headline()
    assert h["tvd_1way"] == h["tvd_2way"] == h["tvd_3way"] == 0.0
    assert h["sliced_w1"] == 0.0 and h["association_error"] == 0.0
    assert h["mmd"] < 0.05
    assert h["detection_auc_logistic"] < 0.55 and h["detection_auc_xgboost"] < 0.55
    # the "synthetic" table is the holdout itself: DCR says it is closer to the holdout
    assert fm.privacy.share_closer_to_train < 0.1
    d = fm.to_dict()
    text = json.dumps(d, allow_nan=False)
    assert "per_pair" in text and d["association"]["real"][0][0] == 1.0
    assert fm.tstr is None and "tstr_roc_auc" not in h
    assert set(fm.seconds) >= {"marginals", "sliced_w1", "mmd", "association", "detection", "dcr"}
