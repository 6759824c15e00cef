"""DP estimates of numeric bounds the schema leaves as ``auto``: Gaussian histograms on a public log grid.

Every ``auto`` column gets two histograms over public, data-independent buckets of |v| on each side of 0 (which
is a bucket of its own) from 10^-3 to 10^9 (values beyond count in the outermost bucket): a coarse one, one bucket
per decade, and a fine one, five per decade, nested in it. All the columns' histograms are one Gaussian
measurement, charged to the ledger as its own entry before its noise is drawn. The bounds are post-processing of
the noisy counts (``bounds_from_noisy``): the coarse range is the outermost decades whose noisy count clears
``COARSE_Z`` noise standard deviations (an empty decade does that with probability 3e-5); each end then moves
inward, in fine buckets, while the noisy mass it would clip stays within ``CLIP_SHARE`` of the noisy row count
(or within the noise of the buckets passed, up to 1.5 times that share: ``_inward``). Where the noise hides the
tail, the bounds stay at the decade: wide rather than clipping a tail into a spike at the bound. Where the two
noisy counts of the zero bucket, pooled, clear ``COARSE_Z`` noise standard deviations, 0 is an exact value of the
column (``zero_is_frequent``): it gets a fine cell of its own in the main measurement, as if declared in ``values``.

A column with ``decimals: auto`` or ``step: auto`` gets a third or a fourth histogram in the same draw (its precision
or its step: ``precision_steps``); a ``datetime`` or ``date`` column with ``bounds: auto`` a fifth, of its months, and
a ``datetime`` or ``time`` with ``resolution: auto`` a sixth, of its wall-clock units (``calendar_estimate``).

A column with ``values: auto`` then gets its frequent exact values from the same measurement, in a second step on
the bounds the first resolved (``select_values``): each row adds 1 to the count of its cleaned value among the
column's public candidates (``value_candidates``: every point of its public grid, i.e. integers or multiples of
``step`` where the grid is too large for a fine cell per point, multiples of 10^-decimals always (they have no fine
cells); a value matches a point within its float32 or float64 storage precision; else its bounds, 0 and, for a
proportion (bounds inside [0, 1]), the fractions p/q with q up to ``MAX_DENOMINATOR``: a share of a few people). A
candidate whose noisy count clears the threshold, set so that about ``FALSE_POSITIVES`` candidates that no row holds
pass per column, becomes an exact value (a fine cell of its own, as if declared). Only the chosen values are
released; no noisy count is kept.

A column with ``knots: auto`` then gets its coarse bins' edges from the same measurement, in a last step on the
schema the earlier ones resolved (``select_knots``: ``estimate_knots``).

The measurement takes ``share`` of the release's Gaussian privacy: with z the noise multiplier that alone spends
the release's (epsilon, delta), the bounds use z / sqrt(share) and the main measurement z / sqrt(1 - share), so
the two compose exactly to one Gaussian with multiplier z (``mechanism.split_privacy``). The noise grows with
sqrt(columns), not with their number as in the pure-DP quantiles this replaced (at 0.1 of epsilon = 1 over 28
columns they put bounds at 10^6 for data within 200). The steps share one reservation and one noise
multiplier, so they compose (adaptively) into one Gaussian whose sensitivity is ``estimate_sensitivity``.
Decision records 0018 and 0026. The month and unit histograms are two more such histograms: a row adds 1 to at most
one cell of each, so under add-remove each moves by 1 in one cell (1 each in the squared sensitivity) and under
replace-one by 1 in two cells (2 each): Delta^2 = f (2 B + D + S + V + K + C + M + U), f = 1 (add-remove) or 2
(replace-one), M the ``bounds: auto`` datetime and date columns, U the ``resolution: auto`` ones.

A categorical column with ``categories: auto`` (an open domain) gets its frequent values by Gaussian thresholding
(``select_categories``: ``open_categories``, whose docstring gives its sensitivity and the delta it adds).

Every choice is post-processing of noisy counts in which every public cell is noised, so both neighbours see
the same distribution of choices up to the (epsilon, delta) charged: the bounds, the exact zero and the clipped
tails read the dense coarse and fine histograms of the whole public grid; the precision and the step their dense
histograms; a datetime's period and unit the dense month and unit histograms; the knots their dense 64 cells.
The frequent values are the one sparse draw, and ``select_values`` shows that it has the dense draw's law.
``tests/test_estimate_reads_noise.py`` plants noise and sees every choice follow it; ``bench.audit`` measures each
step against its claim.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import TYPE_CHECKING, Protocol

import numpy as np

from splice_assets.defaults import ESTIMATE_MECHANISM
from splice_assets.fine_cells import FALSE_POSITIVES, GRID_LIMIT, candidate_z
from splice_assets.kinds import kind_of
from splice_assets.kinds.fields import open_entry
from splice_assets.kinds.lowered import LoweredColumn
from splice_assets.kinds.scales import stands_for
from splice_assets.kinds.temporal import GRID_END, GRID_START, MONTH_CELLS, UNIT_CELLS
from splice_assets.layout import at_point, step_range
from splice_assets.measurement import RELATION_REPLACE_ONE
from splice_assets.private.calendar_estimate import MONTH_Z as MONTH_Z
from splice_assets.private.calendar_estimate import _units_of
from splice_assets.private.calendar_estimate import exact_months as exact_months
from splice_assets.private.calendar_estimate import exact_units as exact_units
from splice_assets.private.calendar_estimate import period_from_noisy as period_from_noisy
from splice_assets.private.calendar_estimate import resolution_from_noisy as resolution_from_noisy
from splice_assets.private.estimate_grids import CLIP_SHARE as CLIP_SHARE
from splice_assets.private.estimate_grids import COARSE as COARSE
from splice_assets.private.estimate_grids import COARSE_Z as COARSE_Z
from splice_assets.private.estimate_grids import FINE as FINE
from splice_assets.private.estimate_grids import LogGrid as LogGrid
from splice_assets.private.estimate_grids import ValueCounts as ValueCounts
from splice_assets.private.estimate_knots import KNOT_CELLS as KNOT_CELLS
from splice_assets.private.estimate_knots import KNOT_SCALE_SHARE as KNOT_SCALE_SHARE
from splice_assets.private.estimate_knots import exact_knot_counts as exact_knot_counts
from splice_assets.private.estimate_knots import knot_cells as knot_cells
from splice_assets.private.estimate_knots import knots_from_noisy as knots_from_noisy
from splice_assets.private.estimate_knots import select_knots as select_knots
from splice_assets.private.open_categories import KeyCounts as KeyCounts
from splice_assets.private.open_categories import _with_categories
from splice_assets.private.open_categories import category_threshold as category_threshold
from splice_assets.private.open_categories import exact_category_counts as exact_category_counts
from splice_assets.private.open_categories import select_categories as select_categories
from splice_assets.private.open_categories import threshold_delta as threshold_delta
from splice_assets.private.precision_steps import DECIMAL_CELLS as DECIMAL_CELLS
from splice_assets.private.precision_steps import MAX_DECIMALS as MAX_DECIMALS
from splice_assets.private.precision_steps import STEP_CELLS as STEP_CELLS
from splice_assets.private.precision_steps import STEP_NOISE_SHARE as STEP_NOISE_SHARE
from splice_assets.private.precision_steps import decimals_from_noisy as decimals_from_noisy
from splice_assets.private.precision_steps import decimals_needed as decimals_needed
from splice_assets.private.precision_steps import exact_decimals as exact_decimals
from splice_assets.private.precision_steps import exact_steps as exact_steps
from splice_assets.private.precision_steps import step_cells as step_cells
from splice_assets.private.precision_steps import step_from_noisy as step_from_noisy
from splice_assets.schema import ColumnSpec, TableSchema, with_resolved_lowered

if TYPE_CHECKING:  # pandas (0.5 s) is imported where rows are read, not to plan a release
    import pandas as pd


#: A run of decades beyond the resolved bounds whose noisy count clears this many noise sd is reported as clipped.
CLIPPED_Z = 3.5
DEFAULT_BOUNDS_SHARE = 0.05
MECHANISM = ESTIMATE_MECHANISM
#: Histograms per column (coarse and fine): each row adds 1 to one bucket of each.
HISTOGRAMS = 2
#: ``values: auto``: at most this many values found per column (the largest noisy counts).
MAX_FOUND = 32
#: ``values: auto`` on a proportion: the largest denominator of its fraction candidates (45 fractions in (0, 1)).
MAX_DENOMINATOR = 12
#: ``categories: auto``: the share of the release's delta that pays for the keys held by one row passing the
#: threshold (split equally over the release's open columns); the Gaussian parts compose to the rest.
SELECTION_DELTA_SHARE = 0.1


class GaussianSpendRecorder(Protocol):
    def reserve(
        self, *, dataset: str, release_id: str, mechanism: str, noise_multiplier: float, sigma: float,
        sensitivity: float, epsilon: float, delta: float, relation: str, params_hash: str,
        selection_delta: float = 0.0,
    ) -> str: ...

    def commit(self, entry_id: str) -> None: ...

    def abort(self, entry_id: str) -> None: ...


@dataclass(frozen=True)
class BoundsEstimate:
    """Public record of a bounds estimation: which columns, the estimates, the noise and the ledger entry.

    ``epsilon`` is what the bounds measurement alone would spend at the release's delta (for the record); the
    release's guarantee composes its ``noise_multiplier`` with the main measurement's."""

    epsilon: float
    columns: dict[str, tuple[float, float]]
    ledger_entry_id: str | None
    noise_multiplier: float | None = None
    sigma: float = 0.0
    sensitivity: float = 0.0
    threshold: float = 0.0
    mechanism: str = MECHANISM
    #: Auto columns whose pooled noisy count of exact zeros cleared the threshold: 0 became an exact value.
    exact_zero: tuple[str, ...] = ()
    #: ``values: auto`` columns: the exact values their selection found (possibly none).
    found_values: dict[str, tuple[float, ...]] = dataclasses.field(default_factory=dict)
    #: ``decimals: auto`` columns: the precision their noisy histogram gave (None: more than ``MAX_DECIMALS``).
    found_decimals: dict[str, int | None] = dataclasses.field(default_factory=dict)
    #: ``step: auto`` columns: the step their noisy histogram gave (None: no step above 1).
    found_steps: dict[str, int | None] = dataclasses.field(default_factory=dict)
    #: Auto columns whose bounds probably clip a tail: the noisy share of the rows beyond them (``clipped_tails``).
    clipped: dict[str, float] = dataclasses.field(default_factory=dict)
    #: ``knots: auto`` columns: the coarse bins' edges their noisy histogram placed.
    found_knots: dict[str, tuple[float, ...]] = dataclasses.field(default_factory=dict)
    #: ``categories: auto`` columns: the values their selection kept (sorted; the public ones not repeated).
    found_categories: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    #: ``categories: auto``: the delta the threshold spends (``selection_delta``) and the threshold (rows).
    selection_delta: float = 0.0
    category_threshold: float = 0.0
    #: ``bounds: auto`` datetime and date columns: the period their noisy month histogram gave (ISO dates).
    found_periods: dict[str, tuple[str, str]] = dataclasses.field(default_factory=dict)
    #: ``resolution: auto`` columns: the unit their noisy unit histogram gave.
    found_resolutions: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def spent(self) -> bool:
        """Whether an estimate was measured (its noise multiplier composes into the release's guarantee)."""
        return self.sensitivity > 0


def auto_columns(schema: TableSchema) -> list[ColumnSpec]:
    """The columns with ``bounds: auto``."""
    return [c for c in schema.columns if c.is_numeric and c.bounds_auto]


def values_auto_columns(schema: TableSchema) -> list[ColumnSpec]:
    """The columns with ``values: auto``."""
    return [c for c in schema.columns if c.is_numeric and c.values_auto]


def decimals_auto_columns(schema: TableSchema) -> list[ColumnSpec]:
    """The columns with ``decimals: auto``."""
    return [c for c in schema.columns if c.decimals_auto]


def steps_auto_columns(schema: TableSchema) -> list[ColumnSpec]:
    """The columns with ``step: auto``."""
    return [c for c in schema.columns if c.step_auto]


def knots_auto_columns(schema: TableSchema) -> list[ColumnSpec]:
    """Columns whose coarse bins' edges the estimate places (``knots: auto``)."""
    return [c for c in schema.columns if c.knots_auto]


def categories_auto_columns(schema: TableSchema) -> list[ColumnSpec]:
    """Categorical columns with ``categories: auto`` (an open domain) not yet resolved."""
    return [c for c in schema.columns if c.is_discrete and open_entry(c.categories) is not None]


def period_auto_columns(schema: TableSchema) -> list[LoweredColumn]:
    """The ``datetime`` and ``date`` columns with ``bounds: auto`` (or one end ``auto``) not yet resolved."""
    return [c for c in schema.lowered if c.spec is None and c.base is None and any(c.bounds_auto)]


def resolution_auto_columns(schema: TableSchema) -> list[LoweredColumn]:
    """The ``datetime`` and ``time`` columns with ``resolution: auto`` not yet resolved."""
    return [c for c in schema.lowered if c.spec is None and c.base is None and c.resolution_auto]


def needs_estimate(schema: TableSchema) -> bool:
    """Whether a release of this schema spends on the estimate (``auto`` bounds, values, decimals, step, knots,
    categories, or a datetime's period or resolution)."""
    return bool(auto_columns(schema) or values_auto_columns(schema) or decimals_auto_columns(schema)
                or steps_auto_columns(schema) or knots_auto_columns(schema) or categories_auto_columns(schema)
                or period_auto_columns(schema) or resolution_auto_columns(schema))


def selection_delta(schema: TableSchema, delta: float) -> float:
    """The public share of a release's ``delta`` that its ``categories: auto`` thresholds spend (0 without them)."""
    return SELECTION_DELTA_SHARE * float(delta) if categories_auto_columns(schema) else 0.0


def histogram_sensitivity(columns: int, relation: str) -> float:
    """l2 sensitivity of the stacked histograms of ``columns`` columns (``HISTOGRAMS`` each).

    Each row adds 1 to at most one bucket of each histogram (a missing value to none). Add-remove: one row more or
    less moves each histogram by at most 1 in one cell, so sqrt(H columns). Replace-one: the replaced row leaves
    one cell and enters another in each histogram, so sqrt(2 H columns).
    """
    return estimate_sensitivity(columns, 0, relation)


def estimate_sensitivity(bounds_columns: int, values_columns: int, relation: str, decimals_columns: int = 0,
                         step_columns: int = 0, knots_columns: int = 0, category_columns: int = 0,
                         period_columns: int = 0, resolution_columns: int = 0) -> float:
    """l2 sensitivity of the whole estimate: the bounds histograms (``histogram_sensitivity``), one decimals
    histogram per ``decimals: auto`` column, one step histogram per ``step: auto`` column, the value counts of
    ``values_columns`` columns and one knot histogram per ``knots: auto`` column; a row adds 1 to at most one cell
    of each (its cleaned value's candidate, if it is one; a step cell only for a nonzero value; a knot cell only
    for a present value off the column's exact values). Replace-one doubles every squared term (one cell left,
    one entered). The later steps' queries depend on the first step's noisy output (the bounds clip the values,
    the found values leave the knot histograms), and all draw noise at the same multiplier: adaptive composition
    of the Gaussians is one Gaussian with this sensitivity. A ``categories: auto`` column counts as a values column:
    a row adds 1 to one key's count (``select_categories``). A datetime's month histogram (``period_columns``) and
    unit histogram (``resolution_columns``) are one histogram each: a row adds 1 to at most one month (none when
    missing or unreadable) and one unit, so 1 each under add-remove and 2 each under replace-one."""
    factor = 2.0 if relation == RELATION_REPLACE_ONE else 1.0
    return math.sqrt(factor * (HISTOGRAMS * bounds_columns + decimals_columns + step_columns + values_columns
                               + knots_columns + category_columns + period_columns + resolution_columns))


def schema_sensitivity(schema: TableSchema, relation: str) -> float:
    """``estimate_sensitivity`` of the estimate ``schema``'s ``auto`` entries draw (every kind of them counted)."""
    return estimate_sensitivity(len(auto_columns(schema)), len(values_auto_columns(schema)), relation,
                                len(decimals_auto_columns(schema)), len(steps_auto_columns(schema)),
                                len(knots_auto_columns(schema)), len(categories_auto_columns(schema)),
                                len(period_auto_columns(schema)), len(resolution_auto_columns(schema)))


@dataclass(frozen=True)
class Candidates:
    """A column's public candidates for frequent values: ``count`` grid points ``first + i * step``, or ``points``."""

    lo: float
    hi: float
    first: float = 0.0
    step: float = 0.0
    count: int = 0
    points: tuple[float, ...] = ()

    @property
    def size(self) -> int:
        return self.count if self.step else len(self.points)

    def index_of(self, values: np.ndarray) -> np.ndarray:
        """Candidate index of each value (-1: no candidate, or missing)."""
        values = np.asarray(values, dtype=np.float64)
        if self.step:
            index = np.rint((values - self.first) / self.step)
            # Within the value's storage precision (``stands_for``): 0.2 written from float32 is the grid point 0.2
            # (the nearest point only: a value still matches one candidate at most).
            on_grid = stands_for(values, self.first + index * self.step, max(abs(self.step), 1.0))
            inside = np.isfinite(values) & on_grid & (index >= 0) & (index < self.count)
            return np.where(inside, index, -1).astype(np.int64)
        out = np.full(len(values), -1, dtype=np.int64)
        for i, point in enumerate(self.points):
            out[at_point(values, point, self.lo, self.hi)] = i
        return out

    def value(self, index: np.ndarray) -> np.ndarray:
        index = np.asarray(index, dtype=np.int64)
        points: np.ndarray = np.asarray(self.points, dtype=np.float64)
        return self.first + index.astype(np.float64) * self.step if self.step else points[index]


def value_candidates(spec: ColumnSpec) -> Candidates | None:
    """A resolved column's public candidates (see the module docstring); None when every point of its grid is a
    fine cell already (at most ``GRID_LIMIT`` points), so there is nothing to find."""
    assert spec.bounds is not None
    lo, hi = spec.bounds
    step = kind_of(spec.kind).grid_step(spec)
    if step is not None:
        first, last = step_range(lo, hi, step)
        return None if last - first + 1 <= GRID_LIMIT else Candidates(lo, hi, first * step, step, last - first + 1)
    if spec.decimals is not None:  # multiples of 10^-decimals: never fine cells of their own, however few they are
        step = 10.0 ** -spec.decimals
        first, last = step_range(lo, hi, step)
        if last >= first:
            return Candidates(lo, hi, first * step, step, last - first + 1)
    points = {lo, hi, *([0.0] if lo < 0.0 < hi else [])}
    if 0.0 <= lo and hi <= 1.0:  # a proportion: its simple fractions, 1/2 and 2/3 of a small count
        points |= {p / q for q in range(2, MAX_DENOMINATOR + 1) for p in range(1, q) if lo < p / q < hi}
    declared = np.asarray(spec.exact_values, dtype=np.float64)
    kept = [p for p in sorted(points) if not at_point(declared, p, lo, hi).any()]
    return Candidates(lo, hi, points=tuple(kept))


def unfound_candidates(spec: ColumnSpec, estimated: tuple[bool, bool]) -> tuple[float, ...]:
    """A resolved column's point candidates that its ``values`` (the selection's finds among them) do not hold,
    with its declared ``candidates``: they are left to the main measurement, whose noise is several times lower
    (``ColumnSpec.candidates``). A grid's points are not (there are too many), nor an ``estimated`` bound: rows
    beyond it are clipped onto it, and a spike there would be an artefact of the clipping."""
    candidates = value_candidates(spec)
    if candidates is None or candidates.step:
        return spec.candidates
    assert spec.bounds is not None
    ends = {end for end, is_estimated in zip(spec.bounds, estimated) if is_estimated}
    return tuple(sorted({*spec.candidates, *(p for p in candidates.points if p not in ends)}))


def _with_found(spec: ColumnSpec, found: Sequence[float], estimated: tuple[bool, bool]) -> ColumnSpec:
    """A ``values: auto`` column resolved: the found values join its ``values``, the unfound point candidates its
    ``candidates``."""
    values = tuple(sorted({*spec.values, *found} - set(spec.sentinels)))
    spec = dataclasses.replace(spec, values_auto=False, values=values)
    return dataclasses.replace(spec, candidates=unfound_candidates(spec, estimated))


def exact_value_counts(cleaned: pd.DataFrame, columns: Sequence[ColumnSpec]) -> list[ValueCounts]:
    """PRIVATE: per column, the exact counts of the candidates its cleaned values hold (those of disjoint parts add
    up, ``add_value_counts``)."""
    import pandas as pd

    out = []
    for spec in columns:
        candidates = value_candidates(spec)
        if candidates is None:
            out.append((np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)))
            continue
        index = candidates.index_of(pd.to_numeric(cleaned[spec.name], errors="coerce").to_numpy(dtype=np.float64))
        held, counts = np.unique(index[index >= 0], return_counts=True)
        out.append((held, counts.astype(np.int64)))
    return out


def add_value_counts(a: list[ValueCounts], b: list[ValueCounts]) -> list[ValueCounts]:
    """The counts of two disjoint parts of the rows, added (exact integers: the result is the same in any order)."""
    out = []
    for (index_a, count_a), (index_b, count_b) in zip(a, b):
        held, position = np.unique(np.concatenate([index_a, index_b]), return_inverse=True)
        out.append((held, np.bincount(position, weights=np.concatenate([count_a, count_b]),
                                      minlength=len(held)).astype(np.int64)))
    return out


def selection_z(candidates: int) -> float:
    """Threshold in noise std above which a noisy count selects its candidate: the main measurement's rule for
    its candidates' cells (``fine_cells.candidate_z``: about ``FALSE_POSITIVES`` that no row holds pass)."""
    return candidate_z(candidates)


def select_values(
    counts: Sequence[ValueCounts], columns: Sequence[ColumnSpec], sigma: float, entropy: np.random.Generator
) -> dict[str, tuple[float, ...]]:
    """The noisy selection of every ``values: auto`` column's frequent values: each candidate's count plus N(0,
    sigma^2), selected above ``selection_z`` sigma, the ``MAX_FOUND`` largest kept. Only the chosen values leave.

    Privacy. The mechanism is the Gaussian mechanism on the stacked candidate histograms of all the columns (every
    candidate, held by a row or not, gets its count plus independent N(0, sigma^2)) followed by post-processing
    (a threshold, then the largest ``MAX_FOUND`` per column). A row adds 1 to at most one candidate of each column,
    so its sensitivity is the ``values_columns`` term of ``estimate_sensitivity`` (one cell per column under
    add-remove; one cell left and one entered under replace-one). Both neighbours therefore see the same
    distribution of selected sets up to the (epsilon, delta) charged, for any threshold and any cap.

    The implementation draws exactly that distribution without noising millions of empty candidates. Held
    candidates are noised by OpenDP's sampler (``gaussian_noise``). The A empty candidates of a column have i.i.d.
    N(0, sigma^2) noisy counts, so the ones above z sigma are: K ~ Binomial(A, Phi(-z)) of them, a uniformly random
    K-subset of the empty candidates, with noisy counts i.i.d. N(0, sigma^2) conditioned on exceeding z sigma
    (``_empty_above``). The joint law of the (candidate, noisy count) pairs above the threshold is the dense one,
    and the kept set is a function of those pairs. (Giving the empty ones z sigma and ranking them last, as before,
    is not that law: once more than the cap passed, a code held by one row could be kept but the same code held by
    none never could; ``tests/test_selection_privacy.py``.) No noisy count is released, so the float sampler used
    for the empty candidates (``entropy``, OS entropy, never seeded) leaks no low bits."""
    from splice_assets.private.mechanism import gaussian_noise

    sizes = [len(held) for held, _ in counts]
    exact = np.concatenate([count for _, count in counts]).astype(np.float64) if sum(sizes) else np.zeros(0)
    noisy = np.split(gaussian_noise(exact, sigma), np.cumsum(sizes)[:-1]) if len(exact) else [np.zeros(0)] * len(sizes)
    found: dict[str, tuple[float, ...]] = {}
    for spec, (held, _), noisy_counts in zip(columns, counts, noisy):
        candidates = value_candidates(spec)
        if candidates is None:
            continue
        z = selection_z(candidates.size)
        empty_index, empty_noisy = _empty_above(np.sort(held), candidates.size, z, sigma, entropy)
        index = np.concatenate([held, empty_index]).astype(np.int64)
        values = np.concatenate([noisy_counts, empty_noisy])
        passed = np.flatnonzero(values > z * sigma)
        ranked = passed[np.argsort(-values[passed], kind="stable")][:MAX_FOUND]
        kept = np.sort(index[ranked])
        # Rounded so that the schema reads well (2/3 as 0.666666666667), but never past a bound: a DP estimate's
        # bound has all its digits, and clipped rows make it a frequent value.
        found[spec.name] = tuple(min(max(round(float(v), 12), candidates.lo), candidates.hi)
                                 for v in candidates.value(kept))
    return found


def _empty_above(held: np.ndarray, size: int, z: float, sigma: float, entropy: np.random.Generator
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The candidates of ``range(size)`` outside the sorted ``held`` whose N(0, sigma^2) noisy count exceeds z sigma,
    and those counts, drawn as the dense draw would give them (``select_values``): how many from their binomial
    law, which ones uniformly without replacement, their counts from the normal law truncated below at z sigma."""
    from scipy.stats import truncnorm

    empty = size - len(held)
    above = int(entropy.binomial(empty, NormalDist().cdf(-z))) if empty > 0 else 0
    if above == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    rank = np.sort(entropy.choice(empty, size=above, replace=False))
    # The rank-th empty candidate: rank plus the held candidates below it (held[j] - j counts empties before held[j]).
    index = rank + np.searchsorted(held - np.arange(len(held)), rank, side="right")
    return index.astype(np.int64), sigma * truncnorm.rvs(z, np.inf, size=above, random_state=entropy)


def open_category_threshold(schema: TableSchema, noise_multiplier: float, delta: float, relation: str
                            ) -> float | None:
    """The rows a value of a ``categories: auto`` column must hold, about, to be kept by the estimate of ``schema``
    at ``noise_multiplier`` (None without such a column). Public: ``splice plan`` prints it before anything is
    spent, so that a user sees whether an open list can keep anything at this size and epsilon."""
    columns = categories_auto_columns(schema)
    if not columns:
        return None
    sigma = noise_multiplier * schema_sensitivity(schema, relation)
    return category_threshold(sigma, selection_delta(schema, delta) / len(columns), relation)


def exact_histograms(raw: pd.DataFrame, columns: list[ColumnSpec]) -> np.ndarray:
    """PRIVATE: (columns, COARSE.size + FINE.size) exact counts, the coarse histogram then the fine one. Cells are
    parsed strictly; a missing or unparseable cell counts nowhere."""
    from splice_assets.private.validation import parse_numbers

    counts = np.zeros((len(columns), COARSE.size + FINE.size), dtype=np.float64)
    for row, spec in enumerate(columns):
        values = parse_numbers(raw[spec.name].reset_index(drop=True))
        values = np.where(np.isinf(values), np.sign(values) * 1e9, values)
        for offset, grid in ((0, COARSE), (COARSE.size, FINE)):
            index = grid.bucket_of(values)
            counts[row, offset:offset + grid.size] = np.bincount(index[index >= 0], minlength=grid.size)
    return counts


def _inward(fine: np.ndarray, buckets: np.ndarray, sigma: float, allowed: float) -> int:
    """How many of ``buckets`` (fine, from the outside in) an end passes over, keeping at least the innermost one.

    It stops at the first bucket that takes the noisy mass passed over beyond ``allowed`` rows, or beyond what
    the noise of that many empty buckets reaches (2 sd) when that is larger, and never beyond 1.5 ``allowed``: where
    the noise is below the allowance the clipped mass is within it; where it is above, empty buckets are still
    passed over and at most 1.5 times the allowance is clipped."""
    passed = 0
    for k in range(1, len(buckets)):
        if fine[buckets[:k]].sum() > min(max(allowed, 2.0 * sigma * math.sqrt(k)), 1.5 * allowed):
            break
        passed = k
    return passed


def bounds_from_noisy(noisy: np.ndarray, sigma: float, integer: bool,
                      known_end: tuple[float | None, float | None] = (None, None)) -> tuple[float, float]:
    """Post-processing of one column's noisy histograms (coarse then fine): the outermost decades above
    ``COARSE_Z`` sigma (the largest when none is), each end moved inward in fine buckets while the clipped noisy
    mass stays within ``CLIP_SHARE`` of the noisy row count; rounded outward for integer columns, never
    degenerate or inverted (ends that cross inside one decade keep the whole decade). A public end
    (``known_end``, from ``bounds: [0, auto]``) is kept, and only decades on the inner side of it count for the
    other."""
    coarse, fine = noisy[:COARSE.size], noisy[COARSE.size:]
    known_lo, known_hi = known_end
    inside = np.ones(COARSE.size, dtype=bool)
    if known_lo is not None:
        inside &= COARSE.upper > known_lo
    if known_hi is not None:
        inside &= COARSE.lower < known_hi
    above = np.flatnonzero((coarse > COARSE_Z * sigma) & inside)
    if above.size == 0:
        above = np.array([int(np.argmax(np.where(inside, coarse, -np.inf)))])
    allowed = CLIP_SHARE * max(float(coarse.sum()), 0.0)
    low_bucket, high_bucket = int(above[0]), int(above[-1])
    low_fine = FINE.inside(COARSE.lower[low_bucket], COARSE.upper[low_bucket])
    high_fine = FINE.inside(COARSE.lower[high_bucket], COARSE.upper[high_bucket])[::-1]
    lo = float(FINE.lower[low_fine[_inward(fine, low_fine, sigma, allowed)]]) if known_lo is None else known_lo
    hi = float(FINE.upper[high_fine[_inward(fine, high_fine, sigma, allowed)]]) if known_hi is None else known_hi
    if known_lo is None and known_hi is None and hi <= lo and low_bucket != COARSE.zero:
        # Both ends moved inward through one decade of noise-sized counts and crossed: keep the whole decade.
        lo, hi = float(FINE.lower[low_fine[0]]), float(FINE.upper[high_fine[0]])
    if known_lo is not None and hi <= lo:  # nothing clears the noise above the public end: one fine bucket above it
        hi = float(FINE.upper[np.flatnonzero(FINE.upper > lo)[0]])
    if known_hi is not None and hi <= lo:
        lo = float(FINE.lower[np.flatnonzero(FINE.lower < hi)[-1]])
    if integer:  # outward, but never past a public end
        lo = float(math.floor(lo)) if known_lo is None else lo
        hi = float(math.ceil(hi)) if known_hi is None else hi
        return (lo, hi) if hi > lo else (lo, lo + 1.0)
    if hi <= lo:  # only the zero bucket: widen to the first public edge on the side with more noisy mass
        upward = coarse[COARSE.zero + 1:].sum() >= coarse[:COARSE.zero].sum()
        edge = float(FINE.magnitudes[0])
        return (lo, edge) if upward else (-edge, hi)
    return lo, hi


def clipped_tails(noisy: np.ndarray, sigma: float, bounds: tuple[float, float]) -> float:
    """Post-processing of one column's noisy coarse histogram: the noisy share of the rows in the decades wholly
    beyond the resolved ``bounds`` when a run of them next to the bounds clears ``CLIPPED_Z`` noise sd (that is, the
    bounds probably clip a tail onto themselves: a tail of many rows spread over a few decades can clear 4 sigma in
    none of them, and the range ends below it; docs/decisions/0018); 0 otherwise. A column whose data end inside its
    bounds is reported with probability about 2.4e-3 (measured over 5,000 draws)."""
    coarse, (lo, hi) = noisy[:COARSE.size], bounds
    total = max(float(coarse.sum()), 1.0)
    outside = np.ones(COARSE.size, dtype=bool)
    outside[COARSE.zero] = not lo <= 0.0 <= hi
    beyond = 0.0
    for side in (np.flatnonzero(outside & (COARSE.lower >= hi)), np.flatnonzero(outside & (COARSE.upper <= lo))[::-1]):
        runs = np.cumsum(coarse[side])
        if len(side) and np.any(runs > CLIPPED_Z * sigma * np.sqrt(np.arange(1, len(side) + 1))):
            beyond += float(runs.max())
    return beyond / total


def zero_is_frequent(noisy: np.ndarray, sigma: float) -> bool:
    """Post-processing of one column's noisy histograms: whether the zero bucket, whose count both histograms
    hold (each with noise std ``sigma``; their mean has sigma / sqrt(2)), clears ``COARSE_Z`` noise std. A column
    with no zeros does so with probability 3e-5."""
    pooled = (noisy[COARSE.zero] + noisy[COARSE.size + FINE.zero]) / 2.0
    return bool(pooled > COARSE_Z * sigma / math.sqrt(2.0))


#: PRIVATE: the exact value counts of the given (resolved) ``values: auto`` columns, from the rows being estimated.
ValueCounter = Callable[[TableSchema, list[ColumnSpec]], list[ValueCounts]]


def estimate_bounds(
    raw: pd.DataFrame,
    schema: TableSchema,
    noise_multiplier: float,
    delta: float,
    ledger: GaussianSpendRecorder | None,
    release_id: str,
    relation: str,
    on_noisy: Callable[[BoundsEstimate], object] | None = None,
) -> tuple[TableSchema, BoundsEstimate]:
    """Resolve every ``auto`` column of ``schema`` from its two noisy histograms, then select the frequent values of
    its ``values: auto`` columns, then place the knots of its ``knots: auto`` columns; one ledger entry for all.

    Sensitivity: ``estimate_sensitivity`` (Delta); the noise is N(0, (noise_multiplier * Delta)^2) per bucket and
    per candidate (OpenDP's float-safe sampler, OS entropy), drawn after the ledger reservation. ``on_noisy``
    persists the public record before the entry is committed, as a measurement's is. Returns the resolved schema
    and the public record.
    """
    from splice_assets.lowering import lower_input
    from splice_assets.private.validation import clean_records

    raw = lower_input(raw, schema)
    for spec in (auto_columns(schema) + values_auto_columns(schema) + decimals_auto_columns(schema)
                 + steps_auto_columns(schema) + knots_auto_columns(schema) + categories_auto_columns(schema)):
        if spec.name not in raw.columns:
            raise ValueError(f"column {spec.name!r}: required by the schema but missing from the input")
    for column in period_auto_columns(schema) + resolution_auto_columns(schema):
        if any(part not in raw.columns for part in column.parts):
            raise ValueError(f"column {column.name!r}: required by the schema but missing from the input")
    return estimate_bounds_from_counts(
        exact_histograms(raw, auto_columns(schema)), schema, noise_multiplier, delta, ledger, release_id, relation,
        lambda resolved, columns: exact_value_counts(clean_records(raw, resolved)[0].table, columns),
        exact_decimals(raw, decimals_auto_columns(schema)), exact_steps(raw, steps_auto_columns(schema)),
        lambda resolved, columns: exact_knot_counts(clean_records(raw, resolved)[0].table, columns), on_noisy,
        categories=exact_category_counts(raw, categories_auto_columns(schema)),
        months=exact_months(raw, period_auto_columns(schema)), units=exact_units(raw, resolution_auto_columns(schema)),
    )


def estimate_bounds_from_counts(
    exact: np.ndarray,
    schema: TableSchema,
    noise_multiplier: float,
    delta: float,
    ledger: GaussianSpendRecorder | None,
    release_id: str,
    relation: str,
    count_values: ValueCounter | None = None,
    decimals: np.ndarray | None = None,
    steps: np.ndarray | None = None,
    count_knots: ValueCounter | None = None,
    on_noisy: Callable[[BoundsEstimate], object] | None = None,
    *,
    categories: Sequence[KeyCounts] | None = None,
    months: np.ndarray | None = None,
    units: np.ndarray | None = None,
) -> tuple[TableSchema, BoundsEstimate]:
    """``estimate_bounds`` from the exact histograms of the ``auto`` columns (``exact_histograms``), of the
    ``decimals: auto`` columns (``exact_decimals``) and of the ``step: auto`` columns (``exact_steps``); those of
    disjoint partitions add up, so a partitioned input pays for one estimate like a whole table. ``count_values``
    counts the values of the ``values: auto`` columns on the schema the bounds resolved (a second pass over a
    partitioned input); it is required when the schema has such columns, and ``count_knots`` (``exact_knot_counts``
    on the schema the earlier steps resolved) when it has ``knots: auto`` columns. ``categories``: the exact key counts
    of the ``categories: auto`` columns (``exact_category_counts``; a partitioned input's, added key by key over its
    partitions: ``partitions.Scan``), required when it has such columns (refused before anything is reserved here
    without them). ``months`` and ``units``: the exact month and unit histograms of the ``bounds: auto`` datetime and
    date columns (``exact_months``) and of the ``resolution: auto`` ones (``exact_units``), required when it has such
    columns. ``on_noisy``: as ``estimate_bounds``."""
    from splice_assets.private.ledger import params_hash
    from splice_assets.private.mechanism import epsilon_of, gaussian_noise

    columns, value_columns = auto_columns(schema), values_auto_columns(schema)
    decimal_columns, step_columns = decimals_auto_columns(schema), steps_auto_columns(schema)
    knot_columns, category_columns = knots_auto_columns(schema), categories_auto_columns(schema)
    period_columns, resolution_columns = period_auto_columns(schema), resolution_auto_columns(schema)
    for given, wanted, cells, what in ((months, period_columns, MONTH_CELLS, "bounds: auto datetime/date"),
                                       (units, resolution_columns, len(UNIT_CELLS), "resolution: auto")):
        if wanted and (given is None or given.shape != (len(wanted), cells)):
            raise ValueError(f"columns {[c.name for c in wanted]} are {what} columns but "
                             + ("no exact histograms were given (bounds.exact_months, bounds.exact_units)"
                                if given is None else f"the exact histograms' shape is {given.shape}"))
    months = np.zeros((len(period_columns), MONTH_CELLS)) if months is None else months
    units = np.zeros((len(resolution_columns), len(UNIT_CELLS))) if units is None else units
    if category_columns and (categories is None or len(categories) != len(category_columns)):
        raise ValueError(f"columns {[c.name for c in category_columns]} have categories: auto but no exact key counts "
                         "were given (bounds.exact_category_counts)"
                         if categories is None else "exact category counts do not match the categories: auto columns")
    if (not columns and not value_columns and not decimal_columns and not step_columns and not knot_columns
            and not category_columns and not period_columns and not resolution_columns):
        return schema, BoundsEstimate(0.0, {}, None)
    decimals = np.zeros((0, DECIMAL_CELLS)) if decimals is None else decimals
    if decimals.shape != (len(decimal_columns), DECIMAL_CELLS):
        raise ValueError(f"exact decimals histograms of shape {decimals.shape} do not match {len(decimal_columns)} "
                         "decimals: auto columns")
    steps = np.zeros((0, len(STEP_CELLS))) if steps is None else steps
    if steps.shape != (len(step_columns), len(STEP_CELLS)):
        raise ValueError(f"exact step histograms of shape {steps.shape} do not match {len(step_columns)} "
                         "step: auto columns")
    if value_columns and count_values is None:
        raise ValueError(f"columns {[c.name for c in value_columns]} have values: auto but no value counter was given")
    if knot_columns and count_knots is None:
        raise ValueError(f"columns {[c.name for c in knot_columns]} have knots: auto but no knot counter was given")
    if not (math.isfinite(noise_multiplier) and noise_multiplier > 0):
        raise ValueError(f"bounds estimation needs a noise multiplier > 0 for columns "
                         f"{[c.name for c in columns + value_columns + decimal_columns + step_columns + knot_columns]}"
                         f"{[c.name for c in category_columns]}"
                         f"{[c.name for c in period_columns + resolution_columns]}"
                         ", got "
                         f"{noise_multiplier!r}")
    if exact.shape != (len(columns), COARSE.size + FINE.size):
        raise ValueError(f"exact histograms of shape {exact.shape} do not match {len(columns)} auto columns")
    sensitivity = schema_sensitivity(schema, relation)
    sigma = noise_multiplier * sensitivity
    epsilon = epsilon_of(noise_multiplier, delta)
    held_delta = selection_delta(schema, delta)
    threshold = open_category_threshold(schema, noise_multiplier, delta, relation) or 0.0
    entry_id = None
    if ledger is not None:
        described = {"columns": [c.name for c in columns], "grids": [COARSE.per_decade, FINE.per_decade],
                     "coarse_z": COARSE_Z, "clip_share": CLIP_SHARE}
        if value_columns:
            described.update({"values_columns": [c.name for c in value_columns], "false_positives": FALSE_POSITIVES,
                              "max_found": MAX_FOUND})
        if decimal_columns:
            described.update({"decimals_columns": [c.name for c in decimal_columns], "max_decimals": MAX_DECIMALS})
        if step_columns:
            described.update({"step_columns": [c.name for c in step_columns], "step_cells": STEP_CELLS.tolist()})
        if knot_columns:
            described.update({"knots_columns": [c.name for c in knot_columns], "knot_cells": KNOT_CELLS,
                              "knot_scale_share": KNOT_SCALE_SHARE})
        if category_columns:
            described.update({"categories_columns": [c.name for c in category_columns],
                              "max_categories": [open_entry(c.categories).max_categories  # type: ignore[union-attr]
                                                 for c in category_columns],
                              "selection_delta": held_delta, "category_threshold": threshold})
        if period_columns:
            described.update({"period_columns": [c.name for c in period_columns], "month_grid": [GRID_START, GRID_END]})
        if resolution_columns:
            described.update({"resolution_columns": [c.name for c in resolution_columns],
                              "unit_cells": list(UNIT_CELLS)})
        entry_id = ledger.reserve(
            dataset=schema.name, release_id=release_id, mechanism=MECHANISM, noise_multiplier=noise_multiplier,
            sigma=sigma, sensitivity=sensitivity, epsilon=epsilon, delta=delta, relation=relation,
            params_hash=params_hash(described), selection_delta=held_delta,  # the thresholds' delta, counted too
        )
    try:  # step 1: the bounds, decimals, step, month and unit histograms, one draw
        drawn = gaussian_noise(np.concatenate([exact.ravel(), decimals.ravel(), steps.ravel(), months.ravel(),
                                               units.ravel()]), sigma)
    except BaseException:
        if ledger is not None and entry_id is not None:
            ledger.abort(entry_id)
        raise
    n_months, n_units = months.size, units.size
    del exact, decimals, steps, months, units
    noisy_units = drawn[len(drawn) - n_units:].reshape(len(resolution_columns), len(UNIT_CELLS))
    noisy_months = drawn[len(drawn) - n_units - n_months: len(drawn) - n_units].reshape(len(period_columns),
                                                                                        MONTH_CELLS)
    drawn = drawn[: len(drawn) - n_units - n_months]
    noisy = drawn[: len(columns) * (COARSE.size + FINE.size)].reshape(len(columns), COARSE.size + FINE.size)
    noisy_decimals = drawn[noisy.size: noisy.size + len(decimal_columns) * DECIMAL_CELLS].reshape(
        len(decimal_columns), DECIMAL_CELLS)
    noisy_steps = drawn[noisy.size + noisy_decimals.size:].reshape(len(step_columns), len(STEP_CELLS))
    found_decimals = {spec.name: decimals_from_noisy(noisy_decimals[i], sigma)
                      for i, spec in enumerate(decimal_columns)}
    found_steps = {spec.name: step_from_noisy(noisy_steps[i], sigma) for i, spec in enumerate(step_columns)}
    resolved = {spec.name: bounds_from_noisy(noisy[i], sigma, kind_of(spec.kind).integral, spec.known_end)
                for i, spec in enumerate(columns)}
    clipped = {spec.name: share for i, spec in enumerate(columns)
               if (share := clipped_tails(noisy[i], sigma, resolved[spec.name])) > 0.0}
    exact_zero = tuple(spec.name for i, spec in enumerate(columns)
                       if zero_is_frequent(noisy[i], sigma) and 0.0 not in spec.exact_values
                       and resolved[spec.name][0] <= 0.0 <= resolved[spec.name][1])
    new_columns = tuple(
        dataclasses.replace(c, bounds=resolved[c.name], bounds_auto=False, known_end=(None, None),
                            values=tuple(sorted({*c.values, 0.0})) if c.name in exact_zero else c.values)
        if c.name in resolved else c
        for c in schema.columns
    )
    new_columns = tuple(dataclasses.replace(c, decimals=found_decimals[c.name], decimals_auto=False)
                        if c.name in found_decimals else c for c in new_columns)
    steps_found = {name: None if step is None else float(step) for name, step in found_steps.items()}
    new_columns = tuple(dataclasses.replace(c, step=steps_found[c.name], step_auto=False)
                        if c.name in steps_found else c for c in new_columns)
    schema = dataclasses.replace(schema, columns=new_columns)
    found_periods = {c.name: period_from_noisy(noisy_months[i], sigma, c) for i, c in enumerate(period_columns)}
    found_resolutions = {c.name: resolution_from_noisy(noisy_units[i], sigma, _units_of(c))
                         for i, c in enumerate(resolution_columns)}
    for name in dict.fromkeys([*found_periods, *found_resolutions]):  # the parts rebuilt for the estimates
        schema = with_resolved_lowered(schema, name, found_periods.get(name), found_resolutions.get(name))
    found: dict[str, tuple[float, ...]] = {}
    if value_columns:  # step 2, on the bounds step 1 resolved; a failure leaves the reservation counted
        assert count_values is not None
        value_columns = values_auto_columns(schema)
        found = select_values(count_values(schema, value_columns), value_columns, sigma, np.random.default_rng())
        estimated = {c.name: (c.known_end[0] is None, c.known_end[1] is None) for c in columns}
        schema = dataclasses.replace(schema, columns=tuple(
            _with_found(c, found.get(c.name, ()), estimated.get(c.name, (False, False))) if c.values_auto else c
            for c in schema.columns))
    found_categories: dict[str, tuple[str, ...]] = {}
    if category_columns:  # the open domains' thresholding, after the reservation (a failure leaves it counted)
        assert categories is not None
        found_categories = select_categories(categories, category_columns, sigma, threshold)
        schema = dataclasses.replace(schema, columns=tuple(
            _with_categories(c, found_categories[c.name]) if c.name in found_categories else c
            for c in schema.columns))
    del categories
    knots: dict[str, tuple[float, ...]] = {}
    if knot_columns:  # the last step, on the schema the others resolved (bounds, exact values)
        assert count_knots is not None
        knot_columns = knots_auto_columns(schema)
        knots = select_knots(count_knots(schema, knot_columns), knot_columns, sigma)
        schema = dataclasses.replace(schema, columns=tuple(
            dataclasses.replace(c, knots_auto=False, knots=knots[c.name]) if c.knots_auto else c
            for c in schema.columns))
    estimate = BoundsEstimate(
        epsilon, resolved, entry_id, noise_multiplier, sigma, sensitivity, COARSE_Z * sigma, exact_zero=exact_zero,
        found_values=found, found_decimals=found_decimals, found_steps=found_steps, clipped=clipped,
        found_knots=knots, found_categories=found_categories, selection_delta=held_delta,
        category_threshold=threshold, found_periods=found_periods, found_resolutions=found_resolutions,
    )
    if on_noisy is not None:  # stored before the commit: a dead run's entry then resolves as its output says
        on_noisy(estimate)
    if ledger is not None and entry_id is not None:
        ledger.commit(entry_id)
    return schema, estimate
