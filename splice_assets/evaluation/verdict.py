"""The report's verdict: per-column statistics, real vs synthetic, and warnings in plain language (INTERNAL).

Everything here reads real rows, so it belongs to the internal report only. The warnings are the failures a user
would otherwise find by hand: a target the synthetic rows cannot predict (TSTR at or below a trivial baseline),
a point mass that vanished (exact zeros of a zero-inflated column), a category that disappeared, a numeric
column whose distribution is shifted (its empirical CDFs differ by a lot at the real quantiles), a column whose
bounds clipped a share of the input onto them (a tail the synthetic rows cannot hold), and a column whose association
with the schema's target flipped its sign or changed by a lot. Each warning says what to change (the schema entry,
epsilon, the rows measured). The verdict passes when nothing is flagged, and states the thresholds it used.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from splice_assets.evaluation.metrics import FidelityMetrics, ReferenceBand, column_codes
from splice_assets.kinds import kind_of
from splice_assets.schema import ColumnSpec, TableSchema

QUANTILES = (0.01, 0.05, 0.25, 0.50, 0.75, 0.95, 0.99)
TOP_VALUES = 5
#: A value holding at least this share of the real rows is a point mass; lost when the synthetic share is below
#: ``POINT_MASS_KEPT`` of the real one.
POINT_MASS_SHARE = 0.05
POINT_MASS_KEPT = 0.5
#: A category holding at least this share of the real rows must appear in the synthetic rows.
DROPPED_CATEGORY_SHARE = 0.01
#: Largest gap between the real and synthetic CDFs at the real quantiles (5% .. 95%) before a column is flagged.
QUANTILE_GAP = 0.10
#: A column whose bounds clipped at least this share of the input rows onto them is flagged (twice the 1% that DP
#: bounds allow themselves).
CLIPPED_SHARE = 0.02
#: The target's association with a column (a correlation where both are ordered, else bias-corrected Cramér's V):
#: a sign flip is flagged when both sides reach SIGN_FLIP_MIN in magnitude, a change larger than
#: ASSOCIATION_CHANGE always. About twice and five times the sampling noise of a correlation on 1,000 held-out rows.
SIGN_FLIP_MIN = 0.05
ASSOCIATION_CHANGE = 0.15
#: Fewer complete rows than this on either side and the association is not compared.
ASSOCIATION_MIN_ROWS = 30


def thresholds() -> dict[str, float]:
    """Every threshold the verdict uses, as the report states them beside its pass/fail line."""
    return {
        "point_mass_share": POINT_MASS_SHARE, "point_mass_kept": POINT_MASS_KEPT,
        "dropped_category_share": DROPPED_CATEGORY_SHARE, "quantile_gap": QUANTILE_GAP,
        "clipped_share": CLIPPED_SHARE, "sign_flip_min": SIGN_FLIP_MIN, "association_change": ASSOCIATION_CHANGE,
    }


def thresholds_text() -> str:
    return (f"a value with ≥ {POINT_MASS_SHARE:.0%} of the real rows keeps ≥ {POINT_MASS_KEPT:.0%} of its share; "
            f"no category with ≥ {DROPPED_CATEGORY_SHARE:.0%} of the real rows missing; CDFs within "
            f"{QUANTILE_GAP:.2f} at the real quantiles; bounds clip < {CLIPPED_SHARE:.0%} of the input; the "
            f"target's association with each column keeps its sign (where both reach {SIGN_FLIP_MIN:g}) and moves "
            f"by ≤ {ASSOCIATION_CHANGE:g}; TSTR above a trivial model; 2-way TVD no worse than independent marginals")


@dataclass(frozen=True)
class ColumnStats:
    """One column of one table: quantiles, share of zeros (numeric only), share of missing and the top values."""

    quantiles: dict[str, float] | None
    zero_share: float | None
    missing_share: float
    top: list[tuple[str, float]]


@dataclass(frozen=True)
class Finding:
    """One warning: what kind, which column (None for the whole table), a sentence quoting the numbers and what to
    change (the schema entry, epsilon, the rows measured)."""

    kind: str
    column: str | None
    message: str
    fix: str = ""


@dataclass(frozen=True)
class Verdict:
    """The report's first section: a plain-language summary, the scores beside their references, the warnings."""

    summary: str
    scores: list[dict[str, Any]]
    findings: list[Finding]
    has_holdout: bool
    skipped: list[str] = field(default_factory=list)
    columns: dict[str, dict[str, ColumnStats]] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return not self.findings

    def result_line(self) -> str:
        """PASS or FAIL, with the thresholds it used."""
        n = len(self.findings)
        status = "PASS" if self.passed else f"FAIL ({n} warning{'s' if n != 1 else ''})"
        return f"{status}: thresholds: {thresholds_text()}."

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "result": self.result_line(),
            "thresholds": thresholds(),
            "summary": self.summary,
            "has_holdout": self.has_holdout,
            "skipped": list(self.skipped),
            "scores": self.scores,
            "findings": [asdict(f) for f in self.findings],
            "columns": {name: {side: asdict(s) for side, s in sides.items()} for name, sides in self.columns.items()},
        }


def _label(value: Any) -> str:
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return str(int(value))
    return str(value)


def _numeric(series: pd.Series) -> np.ndarray:
    return pd.to_numeric(series, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)


def column_stats(series: pd.Series, spec: ColumnSpec) -> ColumnStats:
    """Side-by-side statistics of one column (shares of all rows, missing included)."""
    n = max(len(series), 1)
    missing = float(series.isna().sum()) / n
    if spec.is_numeric:
        values = _numeric(series)
        present = values[~np.isnan(values)]
        quantiles = (
            {f"{round(q * 100)}%": float(v) for q, v in zip(QUANTILES, np.quantile(present, QUANTILES))}
            if len(present) else None
        )
        top = [(_label(v), float(c)) for v, c in _shares(series, spec).head(TOP_VALUES).items()]
        return ColumnStats(quantiles, float((present == 0).sum()) / n, missing, top)
    counts = _present(series, spec).value_counts()
    return ColumnStats(None, None, missing, [(str(v), float(c) / n) for v, c in counts.head(TOP_VALUES).items()])


def _present(series: pd.Series, spec: ColumnSpec) -> pd.Series:
    """The present values: numbers as floats, categories as their schema label (read through the schema's codes,
    so 22 and 22.0 or a category dtype and an object column agree)."""
    if spec.is_numeric:
        return pd.Series(_numeric(series)).dropna()
    codes, k = column_codes(series, spec)
    labels = np.array([str(c) for c in spec.categories or (False, True)] + [""], dtype=object)
    return pd.Series(labels[codes[codes < k - 1]])


def _shares(series: pd.Series, spec: ColumnSpec) -> pd.Series:
    """Share of all rows at each distinct present value."""
    return _present(series, spec).value_counts() / max(len(series), 1)


def lost_point_masses(real: pd.Series, synthetic: pd.Series, spec: ColumnSpec) -> list[Finding]:
    """Values holding >= 5% of the real rows whose synthetic share is below half of it (a vanished zero
    inflation, a top-code). A category absent altogether is reported as dropped instead."""
    real_shares, synth_shares = _shares(real, spec), _shares(synthetic, spec)
    out = []
    for value, share in real_shares[real_shares >= POINT_MASS_SHARE].items():
        synth = float(synth_shares.get(value, 0.0))
        if synth < POINT_MASS_KEPT * share and not (spec.is_discrete and synth == 0.0):
            out.append(Finding("lost point mass", spec.name,
                               f"{spec.name} = {_label(value)} holds {share:.1%} of the real rows but {synth:.1%} of "
                               f"the synthetic rows (less than half)", _point_mass_fix(spec, value)))
    return out


def _point_mass_fix(spec: ColumnSpec, value: Any) -> str:
    """What keeps a point mass: declaring it (public), `values: auto` (a DP selection), or less noise."""
    if not spec.is_numeric:
        return "raise epsilon or measure more rows (its noisy share came out low)"
    declared = any(math.isclose(float(value), v) for v in spec.exact_values)
    if declared:
        return (f"raise epsilon or measure more rows: {_label(value)} is declared in {spec.name}'s schema entry, "
                "but its noisy share came out low")
    if spec.values_auto:
        return (f"raise epsilon: `values: auto` on {spec.name} did not find {_label(value)} above the noise (or "
                f"declare it, `values: [{_label(value)}]`, if it is public)")
    return (f"in {spec.name}'s schema entry, declare `values: [{_label(value)}]` if the value is public, else set "
            "`values: auto` (a DP selection of its frequent values, charged with the DP bounds)")


def dropped_categories(real: pd.Series, synthetic: pd.Series, spec: ColumnSpec) -> list[Finding]:
    """Categories holding >= 1% of the real rows that no synthetic row has."""
    if not spec.is_discrete:
        return []
    real_shares, synth_shares = _shares(real, spec), _shares(synthetic, spec)
    return [
        Finding("dropped category", spec.name,
                f"{spec.name} = {value!r} holds {share:.1%} of the real rows and is absent from the synthetic rows",
                "raise epsilon or measure more rows (its noisy count fell below the noise); or merge rare "
                f"categories of {spec.name} into its `other` in the schema")
        for value, share in real_shares[real_shares >= DROPPED_CATEGORY_SHARE].items()
        if float(synth_shares.get(value, 0.0)) == 0.0
    ]


def quantile_gap(real: pd.Series, synthetic: pd.Series) -> tuple[float, float, float, float]:
    """(largest |F_real - F_synth| at the real 5..95% quantiles, its probability p, real and synthetic p-quantiles).
    In probability units, so it reads the same on skewed and zero-inflated columns."""
    r, s = _numeric(real), _numeric(synthetic)
    r, s = np.sort(r[~np.isnan(r)]), np.sort(s[~np.isnan(s)])
    if not len(r) or not len(s):
        return 0.0, 0.5, math.nan, math.nan
    worst = (0.0, 0.5)
    for p in QUANTILES[1:-1]:
        x = np.quantile(r, p)
        gap = max(abs(np.searchsorted(r, x, "right") / len(r) - np.searchsorted(s, x, "right") / len(s)),
                  abs(np.searchsorted(r, x, "left") / len(r) - np.searchsorted(s, x, "left") / len(s)))
        if gap > worst[0]:
            worst = (float(gap), p)
    return worst[0], worst[1], float(np.quantile(r, worst[1])), float(np.quantile(s, worst[1]))


def shifted_quantiles(real: pd.Series, synthetic: pd.Series, spec: ColumnSpec) -> list[Finding]:
    if not spec.is_numeric:
        return []
    gap, p, q_real, q_synth = quantile_gap(real, synthetic)
    if gap <= QUANTILE_GAP:
        return []
    return [Finding("quantiles far off", spec.name,
                    f"{spec.name}: real and synthetic CDFs differ by {gap:.2f} at the real {p:.0%} quantile (real "
                    f"{q_real:.4g}, synthetic {q_synth:.4g}; flagged above {QUANTILE_GAP:.2f})",
                    f"in {spec.name}'s schema entry, set bounds that fit the data (a wide range puts the values in a "
                    "few coarse bins) or `knots: auto`; or raise epsilon")]


def clipped_to_bounds(spec: ColumnSpec, clipped_share: float) -> list[Finding]:
    """A column whose bounds clipped ``clipped_share`` (>= ``CLIPPED_SHARE``) of the input rows onto them."""
    if clipped_share < CLIPPED_SHARE or spec.bounds is None:
        return []
    lo, hi = spec.bounds
    return [Finding("clipped to the bounds", spec.name,
                    f"{clipped_share:.1%} of the input rows lay outside {spec.name}'s bounds [{lo:g}, {hi:g}] and "
                    "were clipped onto them: the synthetic rows hold no value beyond the bounds. Declare the "
                    "column's range in the schema (bounds estimated with `auto` clip a tail that clears the noise "
                    "in no decade).", f"widen {spec.name}'s bounds in the schema to the range the data take")]


def _tstr_finding(metrics: FidelityMetrics) -> list[Finding]:
    """TSTR at or below what a model that ignores the features scores: R^2 <= 0 (the mean), ROC AUC within two
    standard errors of 0.5 (a coin flip; the null AUC's standard error is about sqrt(1 / (3 n)) on n test rows)."""
    t = metrics.tstr
    if t is None:
        return []
    value = t.best_tstr.get(t.primary)
    trivial, limit = (0.0, 0.0) if t.primary == "r2" else (0.5, 0.5 + 2 * math.sqrt(1 / (3 * max(t.n_test, 1))))
    if value is None or not math.isfinite(value) or value > limit:
        return []
    what = "predicting the mean" if t.primary == "r2" else "a coin flip"
    ceiling = (t.best_trtr or {}).get(t.primary)  # what the real rows allow: a low one means a hard target
    return [Finding("TSTR at or below trivial", t.target,
                    f"a model trained on the synthetic rows predicts {t.target} on real rows with {t.primary} "
                    f"{value:.3f} ({t.best_learner}): no better than {what} ({t.primary} {trivial:g}"
                    + ("" if limit == trivial else f", flagged up to {limit:.3f} for {t.n_test:,} test rows") + ")"
                    + ("" if ceiling is None else f"; trained on the real rows: {ceiling:.3f}"),
                    "raise epsilon or measure more rows; check the target's schema entry (its categories or "
                    "bounds) and that the schema names it as `target` (its 3-way tables)")]


def _reference_findings(metrics: FidelityMetrics, refs: ReferenceBand | None) -> list[Finding]:
    """The 2-way TVD worse than the independent-marginals reference: the dependence is lost."""
    if refs is None:
        return []
    ours, floor = metrics.marginals.two_way, refs.independent.marginals.two_way
    if not (math.isfinite(ours) and math.isfinite(floor)) or ours <= floor:
        return []
    return [Finding("worse than independent marginals", None,
                    f"2-way TVD {ours:.3f} is worse than the non-DP independent-marginals reference {floor:.3f}: the "
                    "synthetic rows keep less of the column dependence than ignoring it would",
                    "raise epsilon or measure more rows (the pair tables are below the noise)")]


def _ordered(spec: ColumnSpec) -> bool:
    """A column whose codes have an order a correlation can read: numeric, ordered (an ordinal), two categories (a
    boolean too)."""
    return spec.is_numeric or kind_of(spec.kind).ordered or len(spec.categories or ()) == 2


def _ordered_values(series: pd.Series, spec: ColumnSpec) -> np.ndarray:
    """Numbers for a numeric column, schema positions for a discrete one; NaN where missing."""
    if spec.is_numeric:
        return _numeric(series)
    codes, k = column_codes(series, spec)
    return np.where(codes == k - 1, np.nan, codes).astype(np.float64)


def _cramers_v(x: np.ndarray, y: np.ndarray) -> float:
    """Bias-corrected Cramér's V (Bergsma 2013) of two code arrays: about 0 for independent columns on few rows."""
    _, xi = np.unique(x, return_inverse=True)
    _, yi = np.unique(y, return_inverse=True)
    r, c, n = int(xi.max()) + 1, int(yi.max()) + 1, len(x)
    if r < 2 or c < 2 or n < 2:
        return 0.0
    table = np.zeros((r, c))
    np.add.at(table, (xi, yi), 1.0)
    expected = table.sum(1, keepdims=True) * table.sum(0, keepdims=True) / n
    phi2 = float(((table - expected) ** 2 / expected).sum()) / n
    phi2 = max(0.0, phi2 - (r - 1) * (c - 1) / (n - 1))
    rc, cc = r - (r - 1) ** 2 / (n - 1), c - (c - 1) ** 2 / (n - 1)
    scale = min(rc - 1, cc - 1)
    return math.sqrt(phi2 / scale) if scale > 0 else 0.0


def association(table: pd.DataFrame, target: ColumnSpec, spec: ColumnSpec) -> tuple[float, str] | None:
    """(the target's association with ``spec``'s column, its name): Pearson's correlation (signed) where both are
    ordered, else bias-corrected Cramér's V (numbers in the 16 public bins); None on too few complete rows."""
    if _ordered(target) and _ordered(spec):
        x, y = _ordered_values(table[target.name], target), _ordered_values(table[spec.name], spec)
        keep = ~(np.isnan(x) | np.isnan(y))
        x, y = x[keep], y[keep]
        if len(x) < ASSOCIATION_MIN_ROWS or x.std() == 0 or y.std() == 0:
            return None
        return float(np.corrcoef(x, y)[0, 1]), "correlation"
    (x, kx), (y, ky) = column_codes(table[target.name], target), column_codes(table[spec.name], spec)
    keep = (x < kx - 1) & (y < ky - 1)
    if int(keep.sum()) < ASSOCIATION_MIN_ROWS:
        return None
    return _cramers_v(x[keep], y[keep]), "Cramér's V"


def target_associations(compared: pd.DataFrame, synthetic: pd.DataFrame, schema: TableSchema) -> list[Finding]:
    """Columns whose association with the schema's target flipped sign (both sides at least ``SIGN_FLIP_MIN`` in
    magnitude) or changed by more than ``ASSOCIATION_CHANGE``, real rows against synthetic."""
    if schema.target is None:
        return []
    target = schema.column(schema.target)
    out = []
    for spec in schema.columns:
        if spec.name == target.name:
            continue
        real, synth = association(compared, target, spec), association(synthetic, target, spec)
        if real is None or synth is None:
            continue
        (a, measure), (b, _) = real, synth
        flipped = measure == "correlation" and min(abs(a), abs(b)) >= SIGN_FLIP_MIN and a * b < 0
        if not flipped and abs(a - b) <= ASSOCIATION_CHANGE:
            continue
        kind = "target association flipped" if flipped else "target association changed"
        what = (f"flips sign (both at least {SIGN_FLIP_MIN:g} in magnitude)" if flipped
                else f"changes by {abs(a - b):.2f} (flagged above {ASSOCIATION_CHANGE:g})")
        hint = ("set bounds that fit the data or `knots: auto`" if spec.is_numeric
                else "merge its rare categories into an `other`")
        out.append(Finding(kind, spec.name,
                           f"the {measure} of {target.name} with {spec.name} is {a:+.2f} in the real rows and "
                           f"{b:+.2f} in the synthetic rows: it {what}",
                           f"raise epsilon or measure more rows (the target's tables with {spec.name} are near the "
                           f"noise); in {spec.name}'s schema entry, {hint}"))
    return out


_SCORES = (
    ("tvd_1way", "1-way marginal TVD", "lower"),
    ("tvd_2way", "2-way marginal TVD", "lower"),
    ("tstr_r2", "TSTR R²", "higher"),
    ("tstr_roc_auc", "TSTR ROC AUC", "higher"),
)


def _scores(metrics: FidelityMetrics, refs: ReferenceBand | None) -> list[dict[str, Any]]:
    head = metrics.headline()
    ind = refs.independent.headline() if refs else {}
    halves = refs.real_halves.headline() if refs else {}
    rows = []
    for key, label, better in _SCORES:
        if head.get(key) is None:
            continue
        good = halves.get(key)
        rows.append({
            "metric": label, "synthetic": head.get(key), "independent_marginals": ind.get(key),
            "real_vs_real": good, "better": better,
            "good_looks_like": None if good is None else f"close to the real-vs-real {good:.3f}",
        })
    return rows


def verdict(
    compared: pd.DataFrame, synthetic: pd.DataFrame, schema: TableSchema, metrics: FidelityMetrics,
    references: ReferenceBand | None, has_holdout: bool, clipped_shares: Mapping[str, float] | None = None,
) -> Verdict:
    """The verdict of one synthetic table against ``compared`` (the real holdout, or the measured rows when
    there is none: ``has_holdout`` False). ``clipped_shares``: per column, the share of the input rows its bounds
    clipped (from the validation's repair counts; ``compared`` holds them clipped already)."""
    findings: list[Finding] = []
    columns: dict[str, dict[str, ColumnStats]] = {}
    for spec in schema.columns:
        real, synth = compared[spec.name], synthetic[spec.name]
        columns[spec.name] = {"real": column_stats(real, spec), "synthetic": column_stats(synth, spec)}
        findings += lost_point_masses(real, synth, spec)
        findings += dropped_categories(real, synth, spec)
        findings += shifted_quantiles(real, synth, spec)
        findings += clipped_to_bounds(spec, (clipped_shares or {}).get(spec.name, 0.0))
    findings += target_associations(compared, synthetic, schema)
    findings += _tstr_finding(metrics) + _reference_findings(metrics, references)
    skipped = [] if has_holdout else [
        "TSTR (needs real rows the model never saw)",
        "distance to closest record (needs held-out rows to compare with)",
        "reference band (independent marginals and real-vs-real halves are scored on held-out rows)",
    ]
    against = "the real held-out rows" if has_holdout else (
        "the measured rows themselves (no held-out rows: holdout_fraction = 0, so every comparison is in-sample)")
    head = metrics.headline()
    tvd = f"1-way TVD {head['tvd_1way']:.3f}, 2-way TVD {head['tvd_2way']:.3f}"
    status = (f"{len(findings)} warning{'s' if len(findings) != 1 else ''} below" if findings
              else "no warnings")
    summary = f"{'PASS' if not findings else 'FAIL'}: synthetic rows compared with {against}: {tvd}; {status}."
    return Verdict(summary, _scores(metrics, references), findings, has_holdout, skipped, columns)
