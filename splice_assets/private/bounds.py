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

The measurement takes ``share`` of the release's Gaussian privacy: with z the noise multiplier that alone spends
the release's (epsilon, delta), the bounds use z / sqrt(share) and the main measurement z / sqrt(1 - share), so
the two compose exactly to one Gaussian with multiplier z (``mechanism.split_privacy``). The noise grows with
sqrt(columns), not with their number as in the pure-DP quantiles this replaced (at 0.1 of epsilon = 1 over 28
columns they put bounds at 10^6 for data within 200). Decision record 0018.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pandas as pd

from splice_assets.measurement import RELATION_REPLACE_ONE
from splice_assets.schema import ColumnSpec, TableSchema


@dataclass(frozen=True)
class LogGrid:
    """Buckets of a public log grid: negatives (outermost first), 0 alone, positives; ``per_decade`` per decade of
    |v| over [1e-3, 1e9]. Each bucket covers [lower, upper], open on the side toward zero."""

    per_decade: int

    @property
    def magnitudes(self) -> np.ndarray:
        return np.geomspace(1e-3, 1e9, 12 * self.per_decade + 1)

    @property
    def zero(self) -> int:
        return len(self.magnitudes)

    @property
    def size(self) -> int:
        return 2 * len(self.magnitudes) + 1

    @property
    def lower(self) -> np.ndarray:
        inner = np.concatenate([[0.0], self.magnitudes[:-1]])
        return np.concatenate([-self.magnitudes[::-1], [0.0], inner])

    @property
    def upper(self) -> np.ndarray:
        inner = np.concatenate([[0.0], self.magnitudes[:-1]])
        return np.concatenate([-inner[::-1], [0.0], self.magnitudes])

    def inside(self, lower: float, upper: float) -> np.ndarray:
        """Indices, ascending in value, of this grid's buckets within [lower, upper] (0's own only for [0, 0])."""
        within = (self.lower >= lower) & (self.upper <= upper)
        within[self.zero] = lower == upper == 0.0
        return np.flatnonzero(within)

    def bucket_of(self, values: np.ndarray) -> np.ndarray:
        """Bucket of each value (NaN -> -1, counted nowhere); values beyond 1e9 fall in the outermost bucket."""
        magnitudes = self.magnitudes
        step = np.searchsorted(magnitudes, np.minimum(np.abs(values), magnitudes[-1]), side="left")
        index = np.where(values > 0, self.zero + 1 + step, self.zero - 1 - step)
        index = np.where(values == 0, self.zero, index)
        return np.where(np.isnan(values), -1, index)


COARSE, FINE = LogGrid(1), LogGrid(5)
#: A decade is in the data when its noisy count exceeds COARSE_Z noise standard deviations.
COARSE_Z = 4.0
#: An end moves inward only while the noisy mass it clips stays within this share of the noisy row count.
CLIP_SHARE = 0.01
DEFAULT_BOUNDS_SHARE = 0.05
MECHANISM = "gaussian/dp-bounds-histogram"
#: Histograms per column (coarse and fine): each row adds 1 to one bucket of each.
HISTOGRAMS = 2


class GaussianSpendRecorder(Protocol):
    def reserve(
        self, *, dataset: str, release_id: str, mechanism: str, noise_multiplier: float, sigma: float,
        sensitivity: float, epsilon: float, delta: float, relation: str, params_hash: str,
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


def auto_columns(schema: TableSchema) -> list[ColumnSpec]:
    return [c for c in schema.columns if c.is_numeric and c.bounds_auto]


def histogram_sensitivity(columns: int, relation: str) -> float:
    """l2 sensitivity of the stacked histograms of ``columns`` columns (``HISTOGRAMS`` each).

    Each row adds 1 to at most one bucket of each histogram (a missing value to none). Add-remove: one row more or
    less moves each histogram by at most 1 in one cell, so sqrt(H columns). Replace-one: the replaced row leaves
    one cell and enters another in each histogram, so sqrt(2 H columns).
    """
    return math.sqrt((2.0 if relation == RELATION_REPLACE_ONE else 1.0) * HISTOGRAMS * columns)


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


def bounds_from_noisy(noisy: np.ndarray, sigma: float, integer: bool) -> tuple[float, float]:
    """Post-processing of one column's noisy histograms (coarse then fine): the outermost decades above
    ``COARSE_Z`` sigma (the largest when none is), each end moved inward in fine buckets while the clipped noisy
    mass stays within ``CLIP_SHARE`` of the noisy row count; rounded outward for integer columns, never
    degenerate."""
    coarse, fine = noisy[:COARSE.size], noisy[COARSE.size:]
    above = np.flatnonzero(coarse > COARSE_Z * sigma)
    if above.size == 0:
        above = np.array([int(np.argmax(coarse))])
    allowed = CLIP_SHARE * max(float(coarse.sum()), 0.0)
    low_bucket, high_bucket = int(above[0]), int(above[-1])
    low_fine = FINE.inside(COARSE.lower[low_bucket], COARSE.upper[low_bucket])
    high_fine = FINE.inside(COARSE.lower[high_bucket], COARSE.upper[high_bucket])[::-1]
    lo = float(FINE.lower[low_fine[_inward(fine, low_fine, sigma, allowed)]])
    hi = float(FINE.upper[high_fine[_inward(fine, high_fine, sigma, allowed)]])
    if integer:
        lo, hi = float(math.floor(lo)), float(math.ceil(hi))
        return (lo, hi) if hi > lo else (lo, lo + 1.0)
    if hi <= lo:  # only the zero bucket: widen to the first public edge on the side with more noisy mass
        upward = coarse[COARSE.zero + 1:].sum() >= coarse[:COARSE.zero].sum()
        edge = float(FINE.magnitudes[0])
        return (lo, edge) if upward else (-edge, hi)
    return lo, hi


def zero_is_frequent(noisy: np.ndarray, sigma: float) -> bool:
    """Post-processing of one column's noisy histograms: whether the zero bucket, whose count both histograms
    hold (each with noise std ``sigma``; their mean has sigma / sqrt(2)), clears ``COARSE_Z`` noise std. A column
    with no zeros does so with probability 3e-5."""
    pooled = (noisy[COARSE.zero] + noisy[COARSE.size + FINE.zero]) / 2.0
    return bool(pooled > COARSE_Z * sigma / math.sqrt(2.0))


def estimate_bounds(
    raw: pd.DataFrame,
    schema: TableSchema,
    noise_multiplier: float,
    delta: float,
    ledger: GaussianSpendRecorder | None,
    release_id: str,
    relation: str,
) -> tuple[TableSchema, BoundsEstimate]:
    """Resolve every ``auto`` column of ``schema`` from its two noisy histograms; one ledger entry for all.

    Sensitivity: ``histogram_sensitivity`` (Delta); the noise is N(0, (noise_multiplier * Delta)^2) per bucket from
    OpenDP's float-safe sampler (OS entropy), drawn after the ledger reservation. Returns the resolved schema and
    the public record.
    """
    columns = auto_columns(schema)
    for spec in columns:
        if spec.name not in raw.columns:
            raise ValueError(f"column {spec.name!r}: required by the schema but missing from the input")
    return estimate_bounds_from_counts(exact_histograms(raw, columns), schema, noise_multiplier, delta, ledger,
                                       release_id, relation)


def estimate_bounds_from_counts(
    exact: np.ndarray,
    schema: TableSchema,
    noise_multiplier: float,
    delta: float,
    ledger: GaussianSpendRecorder | None,
    release_id: str,
    relation: str,
) -> tuple[TableSchema, BoundsEstimate]:
    """``estimate_bounds`` from the exact histograms of the ``auto`` columns (``exact_histograms``; those of
    disjoint partitions add up), so a partitioned input pays for one estimate like a whole table."""
    from splice_assets.private.ledger import params_hash
    from splice_assets.private.mechanism import epsilon_of, gaussian_noise

    columns = auto_columns(schema)
    if not columns:
        return schema, BoundsEstimate(0.0, {}, None)
    if not (math.isfinite(noise_multiplier) and noise_multiplier > 0):
        raise ValueError(f"bounds estimation needs a noise multiplier > 0 for columns "
                         f"{[c.name for c in columns]}, got {noise_multiplier!r}")
    if exact.shape != (len(columns), COARSE.size + FINE.size):
        raise ValueError(f"exact histograms of shape {exact.shape} do not match {len(columns)} auto columns")
    sensitivity = histogram_sensitivity(len(columns), relation)
    sigma = noise_multiplier * sensitivity
    epsilon = epsilon_of(noise_multiplier, delta)
    entry_id = None
    if ledger is not None:
        entry_id = ledger.reserve(
            dataset=schema.name, release_id=release_id, mechanism=MECHANISM, noise_multiplier=noise_multiplier,
            sigma=sigma, sensitivity=sensitivity, epsilon=epsilon, delta=delta, relation=relation,
            params_hash=params_hash({"columns": [c.name for c in columns], "grids": [COARSE.per_decade,
                                     FINE.per_decade], "coarse_z": COARSE_Z, "clip_share": CLIP_SHARE}),
        )
    try:
        noisy = gaussian_noise(exact, sigma)
    except BaseException:
        if ledger is not None and entry_id is not None:
            ledger.abort(entry_id)
        raise
    del exact
    if ledger is not None and entry_id is not None:
        ledger.commit(entry_id)
    resolved = {spec.name: bounds_from_noisy(noisy[i], sigma, spec.kind == "integer")
                for i, spec in enumerate(columns)}
    exact_zero = tuple(spec.name for i, spec in enumerate(columns)
                       if zero_is_frequent(noisy[i], sigma) and 0.0 not in spec.exact_values
                       and resolved[spec.name][0] <= 0.0 <= resolved[spec.name][1])
    new_columns = tuple(
        dataclasses.replace(c, bounds=resolved[c.name], bounds_auto=False,
                            values=tuple(sorted({*c.values, 0.0})) if c.name in exact_zero else c.values)
        if c.name in resolved else c
        for c in schema.columns
    )
    return dataclasses.replace(schema, columns=new_columns), BoundsEstimate(
        epsilon, resolved, entry_id, noise_multiplier, sigma, sensitivity, COARSE_Z * sigma, exact_zero=exact_zero
    )
