"""Fidelity and empirical-privacy metrics for a synthetic table against real rows (INTERNAL: reads real rows).

Every function takes *validated* tables (``validation.validate`` / ``encoding.decode`` output): identical
columns, order and dtypes. Nothing here is differentially private; the results describe private rows and
belong in the internal report only.

Conventions (the bench's, docs/benchmarks.md "Metrics", so that numbers compare with AIM/MST):

* **Discrete view** (marginal TVD, detection): numeric columns are cut into 16 equal-width bins over the
  PUBLIC schema bounds, discrete columns use their schema category positions; missing is always its own
  (last) level.
* **Cube view** (sliced W1, MMD, DCR): ``encoding.encode`` into [-1, 1]^d.
* **Associations**: Pearson r for numeric-numeric pairs, Cramér's V for nominal-nominal pairs and the
  correlation ratio eta for nominal-numeric pairs. *Ordinal columns are treated as numeric* (their 0-based
  schema position), because the order is meaningful; categorical and boolean columns are nominal.
  Missing values: a nominal column's missing level is a category of its own; rows where a numeric/ordinal
  value is missing are left out of that pair.
* **Seeds**: each metric draws from ``SeedSequence([seed, tag])`` with its own tag. The sliced-W1 evaluation
  directions use a tag different from the one ``moments.draw_directions`` uses for the measurement, so the
  evaluation never reuses the directions the release was fitted on.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pandas as pd

from splice_assets.evaluation.common import _json_safe as _json_safe
from splice_assets.evaluation.common import _rng as _rng
from splice_assets.evaluation.common import _subsample as _subsample
from splice_assets.evaluation.privacy_metrics import DCR_MAX_REFERENCE as DCR_MAX_REFERENCE
from splice_assets.evaluation.privacy_metrics import DCR_MAX_SYNTHETIC as DCR_MAX_SYNTHETIC
from splice_assets.evaluation.privacy_metrics import PRIVACY_NOTE as PRIVACY_NOTE
from splice_assets.evaluation.privacy_metrics import DCRResult as DCRResult
from splice_assets.evaluation.privacy_metrics import distance_to_closest_record as distance_to_closest_record
from splice_assets.evaluation.privacy_metrics import nearest_distance as nearest_distance
from splice_assets.kinds import kind_of
from splice_assets.private.encoding import _category_codes, encode
from splice_assets.schema import ColumnSpec, TableSchema

N_BINS = 16
MAX_THREE_WAY = 200
EVAL_DIRECTIONS = 256
MMD_MAX_ROWS = 2_000
TSTR_MAX_TRAIN = 20_000
TSTR_MAX_TEST = 20_000
DETECTION_MAX_ROWS = 10_000
DETECTION_FOLDS = 5
# One thread per learner/BLAS call: on 2 cores under load, 2 OpenMP threads ran 4-5x slower.
N_JOBS = 1

# Independent streams per metric (distinct from moments.draw_directions' tag 0x5D1EC7).
_TAG_THREE_WAY = 0xE7A1_0003
_TAG_DIRECTIONS = 0xE7A1_0D1E
_TAG_MMD = 0xE7A1_0A4D
_TAG_TSTR = 0xE7A1_7578
_TAG_DETECTION = 0xE7A1_DE7E  # (DCR: privacy_metrics._TAG_DCR = 0xE7A1_0DC4)
_TAG_BASELINE = 0xE7A1_BA5E
_TAG_HALVES = 0xE7A1_4A1F
_TAG_REFERENCE = 0xE7A1_4EF0

Task = Literal["classification", "regression"]


# --------------------------------------------------------------------------------------------------------------
# Discrete view
# --------------------------------------------------------------------------------------------------------------


def column_codes(series: pd.Series, spec: ColumnSpec) -> tuple[np.ndarray, int]:
    """Integer codes of one column and its number of levels (the last level is "missing").

    Numeric columns: 16 equal-width bins over the public bounds (values at the upper bound fall in bin 15).
    Discrete columns: 0-based schema position. Boolean: False 0, True 1.
    """
    if spec.is_numeric:
        assert spec.bounds is not None, f"column {spec.name!r} has unresolved bounds"
        lo, hi = spec.bounds
        values = series.to_numpy(dtype=np.float64, na_value=np.nan)
        missing = np.isnan(values)
        bins = np.floor((np.nan_to_num(values, nan=lo) - lo) / (hi - lo) * N_BINS)
        codes = np.clip(bins, 0, N_BINS - 1).astype(np.int64)
        codes[missing] = N_BINS
        return codes, N_BINS + 1
    assert spec.categories is not None
    k = len(spec.categories)
    codes = kind_of(spec.kind).output_codes(series, spec)
    return np.where(codes < 0, k, codes).astype(np.int64), k + 1


def codes_matrix(table: pd.DataFrame, schema: TableSchema) -> tuple[np.ndarray, np.ndarray]:
    """(n, p) int64 codes of every column and the (p,) level counts (see ``column_codes``)."""
    cols, levels = [], []
    for spec in schema.columns:
        c, k = column_codes(table[spec.name], spec)
        cols.append(c)
        levels.append(k)
    codes = np.column_stack(cols) if cols else np.zeros((len(table), 0), dtype=np.int64)
    return codes, np.asarray(levels, dtype=np.int64)


def _combined(codes: np.ndarray, levels: np.ndarray, cols: tuple[int, ...]) -> tuple[np.ndarray, int]:
    key = codes[:, cols[0]].copy()
    size = int(levels[cols[0]])
    for j in cols[1:]:
        key *= int(levels[j])
        key += codes[:, j]
        size *= int(levels[j])
    return key, size


def _tvd_codes(
    real: np.ndarray, synth: np.ndarray, levels: np.ndarray, cols: tuple[int, ...], max_dense: int = 4_000_000
) -> float:
    """TVD between the joint empirical distributions of ``cols`` (0.5 * sum |p - q|)."""
    kr, size = _combined(real, levels, cols)
    ks, _ = _combined(synth, levels, cols)
    if size > max_dense:  # sparse fallback: relabel the observed cells only
        _, inverse = np.unique(np.concatenate([kr, ks]), return_inverse=True)
        kr, ks = inverse[: len(kr)], inverse[len(kr) :]
        size = int(inverse.max()) + 1 if len(inverse) else 1
    p = np.bincount(kr, minlength=size) / max(len(kr), 1)
    q = np.bincount(ks, minlength=size) / max(len(ks), 1)
    return float(0.5 * np.abs(p - q).sum())


def joint_tvd(real: pd.DataFrame, synthetic: pd.DataFrame, schema: TableSchema, columns: Sequence[str]) -> float:
    """TVD between the joint distributions of ``columns`` on the discrete view (numeric columns binned)."""
    cr, levels = codes_matrix(real, schema)
    cs, _ = codes_matrix(synthetic, schema)
    names = list(schema.column_names)
    return _tvd_codes(cr, cs, levels, tuple(names.index(c) for c in columns))


@dataclass(frozen=True)
class MarginalTVD:
    """Total variation distance of 1-, 2- and (sampled) 3-way marginals on the discrete view."""

    one_way: float
    two_way: float
    three_way: float
    n_three_way: int
    per_column: dict[str, float]
    per_pair: tuple[tuple[str, str, float], ...]

    def to_dict(self) -> dict[str, Any]:
        return _json_safe(
            {
                "one_way": self.one_way,
                "two_way": self.two_way,
                "three_way": self.three_way,
                "n_three_way": self.n_three_way,
                "per_column": self.per_column,
                "per_pair": [{"columns": [a, b], "tvd": v} for a, b, v in self.per_pair],
            }
        )


def marginal_tvd(
    real: pd.DataFrame,
    synthetic: pd.DataFrame,
    schema: TableSchema,
    seed: int,
    max_three_way: int = MAX_THREE_WAY,
) -> MarginalTVD:
    """Mean TVD over all 1-way, all 2-way and a seeded sample of up to ``max_three_way`` 3-way marginals."""
    cr, levels = codes_matrix(real, schema)
    cs, _ = codes_matrix(synthetic, schema)
    names = schema.column_names
    p = len(names)
    per_column = {names[j]: _tvd_codes(cr, cs, levels, (j,)) for j in range(p)}
    per_pair = tuple(
        (names[a], names[b], _tvd_codes(cr, cs, levels, (a, b))) for a, b in itertools.combinations(range(p), 2)
    )
    triples = list(itertools.combinations(range(p), 3))
    if len(triples) > max_three_way:
        pick = _rng(seed, _TAG_THREE_WAY).choice(len(triples), size=max_three_way, replace=False)
        triples = [triples[i] for i in np.sort(pick)]
    three = [_tvd_codes(cr, cs, levels, t) for t in triples]

    def mean(values: list[float]) -> float:
        return float(np.mean(values)) if values else float("nan")

    return MarginalTVD(
        one_way=mean(list(per_column.values())),
        two_way=mean([v for _, _, v in per_pair]),
        three_way=mean(three),
        n_three_way=len(three),
        per_column=per_column,
        per_pair=per_pair,
    )


# --------------------------------------------------------------------------------------------------------------
# Cube view: sliced W1 and MMD
# --------------------------------------------------------------------------------------------------------------


def evaluation_directions(seed: int, n_directions: int, d: int) -> np.ndarray:
    """(n_directions, d) unit directions for evaluation, independent of the measurement's directions."""
    g = _rng(seed, _TAG_DIRECTIONS).standard_normal((n_directions, d))
    norms = np.linalg.norm(g, axis=1, keepdims=True)
    g[norms[:, 0] == 0.0, 0] = 1.0
    return g / np.linalg.norm(g, axis=1, keepdims=True)


def _w1_sorted(sx: np.ndarray, sy: np.ndarray) -> np.ndarray:
    """Exact W1 per column between empirical distributions given column-sorted samples of any sizes.

    W1 = int_0^1 |F^-1(u) - G^-1(u)| du; both quantile functions are step functions with breaks at i/n1 and
    j/n2, so the integral is an exact sum over the merged breakpoints.
    """
    n1, n2 = len(sx), len(sy)
    u = np.union1d(np.arange(1, n1 + 1) / n1, np.arange(1, n2 + 1) / n2)
    du = np.diff(u, prepend=0.0)
    mid = u - du / 2.0
    ix = np.minimum((mid * n1).astype(np.int64), n1 - 1)
    iy = np.minimum((mid * n2).astype(np.int64), n2 - 1)
    return du @ np.abs(sx[ix] - sy[iy])


def sliced_wasserstein(
    x: np.ndarray, y: np.ndarray, seed: int, n_directions: int = EVAL_DIRECTIONS, chunk: int = 32
) -> float:
    """Mean over evaluation directions of W1 between projections theta^T x / sqrt(d) and theta^T y / sqrt(d)."""
    if len(x) == 0 or len(y) == 0:
        return float("nan")
    d = x.shape[1]
    theta = evaluation_directions(seed, n_directions, d) / math.sqrt(d)
    out = np.empty(n_directions)
    for start in range(0, n_directions, chunk):
        t = theta[start : start + chunk].T
        sx = np.sort(x @ t, axis=0)
        sy = np.sort(y @ t, axis=0)
        out[start : start + chunk] = _w1_sorted(sx, sy)
    return float(out.mean())


def _sq_dists(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    d = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2.0 * (a @ b.T)
    return np.maximum(d, 0.0)


@dataclass(frozen=True)
class MMDResult:
    """Gaussian-kernel MMD: unbiased MMD^2 (may be slightly negative), mmd = sqrt(max(MMD^2, 0))."""

    mmd2: float
    mmd: float
    bandwidth: float
    n_rows: int

    def to_dict(self) -> dict[str, Any]:
        return _json_safe(self.__dict__)


def mmd_rbf(x: np.ndarray, y: np.ndarray, seed: int, max_rows: int = MMD_MAX_ROWS) -> MMDResult:
    """Unbiased MMD^2 with k(a, b) = exp(-|a-b|^2 / (2 sigma^2)), sigma = median pairwise distance (pooled)."""
    rng = _rng(seed, _TAG_MMD)
    x = x[_subsample(len(x), max_rows, rng)]
    y = y[_subsample(len(y), max_rows, rng)]
    m, n = len(x), len(y)
    if m < 2 or n < 2:
        return MMDResult(float("nan"), float("nan"), float("nan"), min(m, n))
    pooled = np.vstack([x, y])
    probe = pooled[_subsample(len(pooled), 1_000, rng)]
    dd = _sq_dists(probe, probe)[np.triu_indices(len(probe), k=1)]
    med = float(np.median(dd))
    if med <= 0.0:
        positive = dd[dd > 0]
        med = float(np.median(positive)) if len(positive) else 1.0
    gamma = 1.0 / (2.0 * med)
    kxx = np.exp(-gamma * _sq_dists(x, x))
    kyy = np.exp(-gamma * _sq_dists(y, y))
    kxy = np.exp(-gamma * _sq_dists(x, y))
    mmd2 = (kxx.sum() - np.trace(kxx)) / (m * (m - 1)) + (kyy.sum() - np.trace(kyy)) / (n * (n - 1)) - 2.0 * kxy.mean()
    return MMDResult(float(mmd2), float(math.sqrt(max(mmd2, 0.0))), float(math.sqrt(med)), min(m, n))


# --------------------------------------------------------------------------------------------------------------
# Pairwise associations
# --------------------------------------------------------------------------------------------------------------


def _is_nominal(spec: ColumnSpec) -> bool:
    return spec.is_discrete and not kind_of(spec.kind).ordered


def _numeric_values(series: pd.Series, spec: ColumnSpec) -> np.ndarray:
    if spec.is_numeric:
        return series.to_numpy(dtype=np.float64, na_value=np.nan)
    codes = _category_codes(series, spec).astype(np.float64)  # ordinal: schema position
    codes[codes < 0] = np.nan
    return codes


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
    ok = ~(np.isnan(a) | np.isnan(b))
    if ok.sum() < 2:
        return 0.0
    a, b = a[ok] - a[ok].mean(), b[ok] - b[ok].mean()
    den = math.sqrt(float(a @ a) * float(b @ b))
    return float(a @ b / den) if den > 0 else 0.0


def _cramers_v(a: np.ndarray, ka: int, b: np.ndarray, kb: int) -> float:
    n = len(a)
    if n == 0:
        return 0.0
    table = np.bincount(a * kb + b, minlength=ka * kb).reshape(ka, kb).astype(np.float64)
    table = table[table.sum(1) > 0][:, table.sum(0) > 0]
    r, c = table.shape
    if min(r, c) < 2:
        return 0.0
    expected = table.sum(1, keepdims=True) * table.sum(0, keepdims=True) / n
    chi2 = float(((table - expected) ** 2 / expected).sum())
    return float(min(1.0, math.sqrt(chi2 / n / (min(r, c) - 1))))


def _correlation_ratio(codes: np.ndarray, k: int, values: np.ndarray) -> float:
    ok = ~np.isnan(values)
    codes, values = codes[ok], values[ok]
    if len(values) < 2:
        return 0.0
    total = float(((values - values.mean()) ** 2).sum())
    if total <= 0:
        return 0.0
    counts = np.bincount(codes, minlength=k).astype(np.float64)
    sums = np.bincount(codes, weights=values, minlength=k)
    nz = counts > 0
    between = float((sums[nz] ** 2 / counts[nz]).sum() - values.sum() ** 2 / len(values))
    return float(math.sqrt(min(max(between / total, 0.0), 1.0)))


def association_matrix(table: pd.DataFrame, schema: TableSchema) -> np.ndarray:
    """(p, p) association matrix: Pearson r (numeric/ordinal pairs, signed), Cramér's V, eta; diagonal 1."""
    specs = schema.columns
    p = len(specs)
    nominal = [_is_nominal(s) for s in specs]
    values: list[Any] = []
    for spec in specs:
        if _is_nominal(spec):
            values.append(column_codes(table[spec.name], spec))
        else:
            values.append(_numeric_values(table[spec.name], spec))
    out = np.eye(p)
    for i, j in itertools.combinations(range(p), 2):
        if nominal[i] and nominal[j]:
            v = _cramers_v(values[i][0], values[i][1], values[j][0], values[j][1])
        elif nominal[i]:
            v = _correlation_ratio(values[i][0], values[i][1], values[j])
        elif nominal[j]:
            v = _correlation_ratio(values[j][0], values[j][1], values[i])
        else:
            v = _pearson(values[i], values[j])
        out[i, j] = out[j, i] = v
    return out


def association_kinds(schema: TableSchema) -> np.ndarray:
    """(p, p) labels of the association used per pair: 'pearson', 'cramers_v' or 'eta' (diagonal '')."""
    p = len(schema.columns)
    nominal = [_is_nominal(s) for s in schema.columns]
    out = np.full((p, p), "", dtype=object)
    for i, j in itertools.combinations(range(p), 2):
        kind = "cramers_v" if nominal[i] and nominal[j] else ("eta" if nominal[i] or nominal[j] else "pearson")
        out[i, j] = out[j, i] = kind
    return out


@dataclass(frozen=True)
class AssociationResult:
    """Mean |A_real - A_synthetic| over column pairs, and both matrices (rows/columns in ``columns`` order)."""

    error: float
    columns: tuple[str, ...]
    real: np.ndarray
    synthetic: np.ndarray

    def to_dict(self) -> dict[str, Any]:
        return _json_safe(
            {"error": self.error, "columns": list(self.columns), "real": self.real, "synthetic": self.synthetic}
        )


def association_error(real: pd.DataFrame, synthetic: pd.DataFrame, schema: TableSchema) -> AssociationResult:
    a_real = association_matrix(real, schema)
    a_syn = association_matrix(synthetic, schema)
    iu = np.triu_indices(len(schema.columns), k=1)
    err = float(np.abs(a_real[iu] - a_syn[iu]).mean()) if len(iu[0]) else 0.0
    return AssociationResult(err, schema.column_names, a_real, a_syn)


# --------------------------------------------------------------------------------------------------------------
# Train-synthetic-test-real
# --------------------------------------------------------------------------------------------------------------


def design_matrix(table: pd.DataFrame, schema: TableSchema, exclude: str | None = None) -> np.ndarray:
    """Model features from the schema alone (same columns for any table).

    Numeric: min-max scaled to [-1, 1] by the public bounds, missing imputed at 0 (the bounds' midpoint) plus a
    missing indicator for nullable columns. Discrete (categorical, ordinal, boolean): one-hot over the schema
    categories, plus a "missing" column for nullable ones.
    """
    parts: list[np.ndarray] = []
    n = len(table)
    for spec in schema.columns:
        if spec.name == exclude:
            continue
        if spec.is_numeric:
            assert spec.bounds is not None
            lo, hi = spec.bounds
            v = table[spec.name].to_numpy(dtype=np.float64, na_value=np.nan)
            missing = np.isnan(v)
            parts.append(np.where(missing, 0.0, np.clip(-1.0 + 2.0 * (v - lo) / (hi - lo), -1.0, 1.0))[:, None])
            if spec.nullable:
                parts.append(missing.astype(np.float64)[:, None])
        else:
            codes, k = column_codes(table[spec.name], spec)
            width = k if spec.nullable else k - 1
            onehot = np.zeros((n, width))
            keep = codes < width
            onehot[np.nonzero(keep)[0], codes[keep]] = 1.0
            parts.append(onehot)
    return np.hstack(parts) if parts else np.zeros((n, 0))


def _target_values(table: pd.DataFrame, schema: TableSchema, task: Task) -> np.ndarray:
    """Classification: class index (float, NaN when missing); regression: numeric value (ordinal: position)."""
    assert schema.target is not None
    spec = schema.column(schema.target)
    series = table[spec.name]
    if spec.is_discrete:
        codes, k = column_codes(series, spec)
        out = codes.astype(np.float64)
        out[codes == k - 1] = np.nan
        return out
    return series.to_numpy(dtype=np.float64, na_value=np.nan)


@dataclass(frozen=True)
class LearnerScores:
    learner: str
    tstr: dict[str, float]
    trtr: dict[str, float] | None


@dataclass(frozen=True)
class TSTRResult:
    """Train on synthetic, test on the real holdout; TRTR (train on real train) is the ceiling."""

    target: str
    task: str
    primary: str
    learners: tuple[LearnerScores, ...]
    best_learner: str
    best_tstr: dict[str, float]
    best_trtr_learner: str | None
    best_trtr: dict[str, float] | None
    n_train: int
    n_test: int

    def to_dict(self) -> dict[str, Any]:
        return _json_safe(
            {
                "target": self.target,
                "task": self.task,
                "primary": self.primary,
                "learners": [{"learner": s.learner, "tstr": s.tstr, "trtr": s.trtr} for s in self.learners],
                "best_learner": self.best_learner,
                "best_tstr": self.best_tstr,
                "best_trtr_learner": self.best_trtr_learner,
                "best_trtr": self.best_trtr,
                "n_train": self.n_train,
                "n_test": self.n_test,
            }
        )


def _macro_ovr_auc(y: np.ndarray, proba: np.ndarray) -> float:
    """Macro one-vs-rest ROC AUC over the classes present in ``y`` (equals the plain AUC for two classes)."""
    from sklearn.metrics import roc_auc_score

    scores = []
    for c in np.unique(y).astype(np.int64):
        positive = y == c
        if 0 < positive.sum() < len(y):
            scores.append(roc_auc_score(positive, proba[:, c]))
    return float(np.mean(scores)) if scores else float("nan")


def _learners(task: Task, seed: int) -> dict[str, Callable[[], Any]]:
    from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor
    from sklearn.linear_model import LogisticRegression, Ridge
    from xgboost import XGBClassifier, XGBRegressor

    xgb_common = dict(
        n_estimators=150, max_depth=6, learning_rate=0.1, subsample=0.9, tree_method="hist",
        n_jobs=N_JOBS, random_state=seed, verbosity=0,
    )  # fmt: skip
    rf_common = dict(
        n_estimators=50, max_depth=12, min_samples_leaf=3, max_features="sqrt", n_jobs=N_JOBS, random_state=seed
    )
    if task == "classification":
        return {
            "logistic": lambda: LogisticRegression(max_iter=300, C=1.0),
            "random_forest": lambda: RandomForestClassifier(**rf_common),
            "xgboost": lambda: XGBClassifier(**xgb_common),
        }
    return {
        "ridge": lambda: Ridge(alpha=1.0),
        "random_forest": lambda: RandomForestRegressor(**rf_common),
        "xgboost": lambda: XGBRegressor(**xgb_common),
    }


def _score(
    make: Callable[[], Any], task: Task, x_tr: np.ndarray, y_tr: np.ndarray, x_te: np.ndarray, y_te: np.ndarray,
    n_classes: int,
) -> dict[str, float]:  # fmt: skip
    from sklearn.metrics import r2_score

    if len(y_tr) == 0 or len(y_te) == 0:
        return {"accuracy": float("nan"), "roc_auc": float("nan")} if task == "classification" else {"r2": float("nan")}
    if task == "regression":
        if np.ptp(y_tr) == 0:
            pred = np.full(len(y_te), y_tr[0])
        else:
            pred = make().fit(x_tr, y_tr).predict(x_te)
        return {"r2": float(r2_score(y_te, pred))}
    present = np.unique(y_tr).astype(np.int64)
    proba = np.zeros((len(y_te), n_classes))
    if len(present) < 2:
        proba[:, present[0]] = 1.0
    else:
        local = np.searchsorted(present, y_tr.astype(np.int64))
        proba[:, present] = make().fit(x_tr, local).predict_proba(x_te)
    accuracy = float((proba.argmax(1) == y_te).mean())
    return {"accuracy": accuracy, "roc_auc": _macro_ovr_auc(y_te, proba)}


def tstr(
    real_train: pd.DataFrame,
    real_holdout: pd.DataFrame,
    synthetic: pd.DataFrame,
    schema: TableSchema,
    seed: int,
    trtr: bool = True,
    max_train: int = TSTR_MAX_TRAIN,
) -> TSTRResult | None:
    """TSTR (and TRTR) for the schema's target with logistic/ridge, random forest and XGBoost.

    Returns None when the schema has no target. The training sets are subsampled to ``max_train`` rows and
    the test set to ``TSTR_MAX_TEST``; rows with a missing target are dropped.
    Classification: accuracy and ROC AUC (macro one-vs-rest for multiclass); regression: R^2.
    Non-numeric targets are always classification; a numeric target without ``task`` is regression.
    """
    if schema.target is None:
        return None
    spec = schema.column(schema.target)
    task: Task = "classification" if (schema.task == "classification" or spec.is_discrete) else "regression"
    if spec.is_numeric and task == "classification":
        # Numeric target declared as classification: classes are the observed distinct values.
        raw = [t[spec.name].to_numpy(dtype=np.float64, na_value=np.nan) for t in (real_train, real_holdout, synthetic)]
        classes = np.unique(np.concatenate([r[~np.isnan(r)] for r in raw]))
        ys = [np.where(np.isnan(r), np.nan, np.searchsorted(classes, np.nan_to_num(r))) for r in raw]
        n_classes = len(classes)
    else:
        ys = [_target_values(t, schema, task) for t in (real_train, real_holdout, synthetic)]
        n_classes = len(spec.categories or ()) if spec.is_discrete else 0
    rng = _rng(seed, _TAG_TSTR)

    def prepared(table: pd.DataFrame, y: np.ndarray, cap: int) -> tuple[np.ndarray, np.ndarray]:
        rows = np.nonzero(~np.isnan(y))[0]
        rows = rows[_subsample(len(rows), cap, rng)]
        return design_matrix(table.iloc[rows], schema, exclude=spec.name), y[rows]

    x_syn, y_syn = prepared(synthetic, ys[2], max_train)
    x_te, y_te = prepared(real_holdout, ys[1], TSTR_MAX_TEST)
    x_real, y_real = prepared(real_train, ys[0], max_train) if trtr else (None, None)
    primary = "roc_auc" if task == "classification" else "r2"
    scores = []
    for name, make in _learners(task, seed).items():
        s_tstr = _score(make, task, x_syn, y_syn, x_te, y_te, n_classes)
        s_trtr = (
            _score(make, task, x_real, y_real, x_te, y_te, n_classes)
            if trtr and x_real is not None and y_real is not None else None
        )
        scores.append(LearnerScores(name, s_tstr, s_trtr))

    def key(d: dict[str, float] | None) -> float:
        v = (d or {}).get(primary, float("nan"))
        return -math.inf if v is None or not math.isfinite(v) else v

    best = max(scores, key=lambda s: key(s.tstr))
    best_real = max(scores, key=lambda s: key(s.trtr)) if trtr else None
    return TSTRResult(
        target=spec.name,
        task=task,
        primary=primary,
        learners=tuple(scores),
        best_learner=best.learner,
        best_tstr=best.tstr,
        best_trtr_learner=best_real.learner if best_real else None,
        best_trtr=best_real.trtr if best_real else None,
        n_train=len(y_syn),
        n_test=len(y_te),
    )


# --------------------------------------------------------------------------------------------------------------
# Detection (classifier two-sample test)
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DetectionResult:
    """Mean 5-fold ROC AUC of classifiers telling real from synthetic rows (0.5 = indistinguishable)."""

    logistic_auc: float
    xgboost_auc: float
    n_per_class: int

    def to_dict(self) -> dict[str, Any]:
        return _json_safe(self.__dict__)


def detection_auc(
    real: pd.DataFrame,
    synthetic: pd.DataFrame,
    schema: TableSchema,
    seed: int,
    max_rows: int = DETECTION_MAX_ROWS,
    folds: int = DETECTION_FOLDS,
) -> DetectionResult:
    """Classifier two-sample test on the discrete view (numeric columns as their 16 bin codes).

    Equal numbers of real and synthetic rows (up to ``max_rows`` each). Logistic regression sees one-hot codes;
    XGBoost sees the integer codes (bins are ordered; trees can isolate any category with a few splits).
    """
    from scipy import sparse
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score
    from sklearn.model_selection import StratifiedKFold
    from xgboost import XGBClassifier

    rng = _rng(seed, _TAG_DETECTION)
    m = min(len(real), len(synthetic), max_rows)
    if m < folds:
        return DetectionResult(float("nan"), float("nan"), m)
    cr, levels = codes_matrix(real.iloc[_subsample(len(real), m, rng)], schema)
    cs, _ = codes_matrix(synthetic.iloc[_subsample(len(synthetic), m, rng)], schema)
    codes = np.vstack([cr, cs])
    label = np.r_[np.zeros(m), np.ones(m)]
    offsets = np.r_[0, np.cumsum(levels)[:-1]]
    n_rows, p = codes.shape
    onehot = sparse.csr_matrix(
        (np.ones(n_rows * p), (codes + offsets).ravel(), np.arange(0, n_rows * p + 1, p)),
        shape=(n_rows, int(levels.sum())),
    )
    aucs: dict[str, list[float]] = {"logistic": [], "xgboost": []}
    split = StratifiedKFold(n_splits=folds, shuffle=True, random_state=int(rng.integers(2**31 - 1)))
    for tr, te in split.split(codes, label):
        lr = LogisticRegression(max_iter=300, C=1.0).fit(onehot[tr], label[tr])
        aucs["logistic"].append(roc_auc_score(label[te], lr.predict_proba(onehot[te])[:, 1]))
        xgb = XGBClassifier(
            n_estimators=100, max_depth=5, learning_rate=0.1, tree_method="hist", n_jobs=N_JOBS,
            random_state=seed, verbosity=0,
        ).fit(codes[tr].astype(np.float32), label[tr])  # fmt: skip
        aucs["xgboost"].append(roc_auc_score(label[te], xgb.predict_proba(codes[te].astype(np.float32))[:, 1]))
    return DetectionResult(float(np.mean(aucs["logistic"])), float(np.mean(aucs["xgboost"])), m)


# --------------------------------------------------------------------------------------------------------------
# Reference tables
# --------------------------------------------------------------------------------------------------------------


def independent_marginals_baseline(table: pd.DataFrame, schema: TableSchema, n: int, seed: int) -> pd.DataFrame:
    """Non-DP reference: each column resampled independently (with replacement) from the real marginal."""
    rng = _rng(seed, _TAG_BASELINE)
    out = {}
    for spec in schema.columns:
        rows = rng.integers(0, len(table), size=n) if len(table) else np.zeros(0, dtype=np.int64)
        out[spec.name] = table[spec.name].iloc[rows].reset_index(drop=True)
    return pd.DataFrame(out, columns=list(schema.column_names))


def real_halves(table: pd.DataFrame, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Split a real table into two random halves (the real-vs-real reference)."""
    perm = _rng(seed, _TAG_HALVES).permutation(len(table))
    half = len(table) // 2
    a = table.iloc[np.sort(perm[:half])].reset_index(drop=True)
    b = table.iloc[np.sort(perm[half:])].reset_index(drop=True)
    return a, b


# --------------------------------------------------------------------------------------------------------------
# Everything together
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FidelityMetrics:
    """All fidelity metrics of one synthetic table (INTERNAL: computed from real rows)."""

    n_train: int
    n_holdout: int
    n_synthetic: int
    seed: int
    marginals: MarginalTVD
    sliced_w1: float
    mmd: MMDResult
    association: AssociationResult
    tstr: TSTRResult | None
    detection: DetectionResult | None
    privacy: DCRResult | None
    seconds: dict[str, float] = field(default_factory=dict)

    def headline(self) -> dict[str, float | None]:
        """The few numbers for a summary card (None when not computed)."""
        out: dict[str, float | None] = {
            "tvd_1way": self.marginals.one_way,
            "tvd_2way": self.marginals.two_way,
            "tvd_3way": self.marginals.three_way,
            "sliced_w1": self.sliced_w1,
            "mmd": self.mmd.mmd,
            "association_error": self.association.error,
        }
        if self.tstr is not None:
            for k, v in self.tstr.best_tstr.items():
                out[f"tstr_{k}"] = v
            for k, v in (self.tstr.best_trtr or {}).items():
                out[f"trtr_{k}"] = v
        if self.detection is not None:
            out["detection_auc_logistic"] = self.detection.logistic_auc
            out["detection_auc_xgboost"] = self.detection.xgboost_auc
        if self.privacy is not None:
            out["dcr_share_closer_to_train"] = self.privacy.share_closer_to_train
        return _json_safe(out)

    def to_dict(self) -> dict[str, Any]:
        return _json_safe(
            {
                "n_train": self.n_train,
                "n_holdout": self.n_holdout,
                "n_synthetic": self.n_synthetic,
                "seed": self.seed,
                "headline": self.headline(),
                "marginals": self.marginals.to_dict(),
                "sliced_w1": self.sliced_w1,
                "mmd": self.mmd.to_dict(),
                "association": self.association.to_dict(),
                "tstr": self.tstr.to_dict() if self.tstr else None,
                "detection": self.detection.to_dict() if self.detection else None,
                "privacy": self.privacy.to_dict() if self.privacy else None,
                "seconds": self.seconds,
            }
        )


def fidelity_metrics(
    real_train: pd.DataFrame,
    real_holdout: pd.DataFrame,
    synthetic: pd.DataFrame,
    schema: TableSchema,
    seed: int,
    *,
    with_tstr: bool = True,
    with_trtr: bool = True,
    with_detection: bool = True,
    with_privacy: bool = True,
) -> FidelityMetrics:
    """Every metric of ``synthetic`` against ``real_holdout``; TRTR trains on ``real_train``; DCR uses both.

    BLAS/OpenMP pools are limited to ``N_JOBS`` threads while it runs (see ``N_JOBS``).
    """
    from threadpoolctl import threadpool_limits

    from splice_assets.private.validation import modelled_view

    synthetic = modelled_view(synthetic, schema)  # datetimes as their parts, keys left out, as the real rows are
    with threadpool_limits(limits=N_JOBS):
        return _fidelity_metrics(
            real_train, real_holdout, synthetic, schema, seed, with_tstr, with_trtr, with_detection, with_privacy
        )


def _fidelity_metrics(
    real_train: pd.DataFrame,
    real_holdout: pd.DataFrame,
    synthetic: pd.DataFrame,
    schema: TableSchema,
    seed: int,
    with_tstr: bool,
    with_trtr: bool,
    with_detection: bool,
    with_privacy: bool,
) -> FidelityMetrics:
    seconds: dict[str, float] = {}

    def timed(name: str, fn: Callable[[], Any]) -> Any:
        t0 = time.perf_counter()
        value = fn()
        seconds[name] = round(time.perf_counter() - t0, 3)
        return value

    marginals = timed("marginals", lambda: marginal_tvd(real_holdout, synthetic, schema, seed))
    x_real = timed("encode", lambda: encode(real_holdout, schema))
    x_syn = encode(synthetic, schema)
    sw1 = timed("sliced_w1", lambda: sliced_wasserstein(x_real, x_syn, seed))
    mmd = timed("mmd", lambda: mmd_rbf(x_real, x_syn, seed))
    assoc = timed("association", lambda: association_error(real_holdout, synthetic, schema))
    tstr_result = (
        timed("tstr", lambda: tstr(real_train, real_holdout, synthetic, schema, seed, trtr=with_trtr))
        if with_tstr
        else None
    )
    detection = (
        timed("detection", lambda: detection_auc(real_holdout, synthetic, schema, seed)) if with_detection else None
    )
    privacy = (
        timed("dcr", lambda: distance_to_closest_record(real_train, real_holdout, synthetic, schema, seed))
        if with_privacy
        else None
    )
    return FidelityMetrics(
        n_train=len(real_train),
        n_holdout=len(real_holdout),
        n_synthetic=len(synthetic),
        seed=int(seed),
        marginals=marginals,
        sliced_w1=sw1,
        mmd=mmd,
        association=assoc,
        tstr=tstr_result,
        detection=detection,
        privacy=privacy,
        seconds=seconds,
    )


@dataclass(frozen=True)
class ReferenceBand:
    """Non-DP references computed in the same run: independent marginals and two halves of the real train."""

    independent: FidelityMetrics
    real_halves: FidelityMetrics

    def to_dict(self) -> dict[str, Any]:
        return {"independent": self.independent.to_dict(), "real_halves": self.real_halves.to_dict()}


def reference_band(
    real_train: pd.DataFrame,
    real_holdout: pd.DataFrame,
    schema: TableSchema,
    seed: int,
    n_synthetic: int | None = None,
    *,
    with_tstr: bool = True,
    with_detection: bool = True,
    with_privacy: bool = True,
) -> ReferenceBand:
    """Metrics of (a) ``independent_marginals_baseline(real_train)`` with ``n_synthetic`` rows (default: as many
    as ``real_train``) and (b) half B of ``real_train`` treated as "synthetic" with half A as its train set, both
    scored against ``real_holdout`` exactly like a release (TRTR is skipped: it is the release's ceiling).
    """
    ref_seed = int(np.random.SeedSequence([int(seed), _TAG_REFERENCE]).generate_state(1)[0])
    n = len(real_train) if n_synthetic is None else n_synthetic
    flags = dict(with_tstr=with_tstr, with_trtr=False, with_detection=with_detection, with_privacy=with_privacy)
    baseline = independent_marginals_baseline(real_train, schema, n, ref_seed)
    independent = fidelity_metrics(real_train, real_holdout, baseline, schema, seed, **flags)
    half_a, half_b = real_halves(real_train, ref_seed)
    halves = fidelity_metrics(half_a, real_holdout, half_b, schema, seed, **flags)
    return ReferenceBand(independent, halves)
