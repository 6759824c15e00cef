"""DP estimates of numeric bounds the schema leaves as ``auto``: a Gaussian histogram on a public log grid.

Every ``auto`` column gets a histogram over public, data-independent buckets: 0 alone, and 20 buckets per decade
of |v| from 10^-3 to 10^9 on each side of it (values beyond 10^9 count in the outermost bucket). All the columns'
histograms are one Gaussian measurement, charged to the ledger as its own entry before its noise is drawn. The
bounds are post-processing of the noisy counts: the outer edges of the outermost buckets whose noisy count clears
``TAIL_Z`` noise standard deviations (a bucket with no rows does that with probability 3e-7), so rows in a thin
tail are clipped and the bounds follow where the data are, within one bucket (12%).

The measurement takes ``share`` of the release's Gaussian privacy: with z the noise multiplier that alone spends
the release's (epsilon, delta), the bounds use z / sqrt(share) and the main measurement z / sqrt(1 - share), so
the two compose exactly to one Gaussian with multiplier z (``mechanism.split_privacy``). Under the log grid a
column of many auto columns costs sqrt(columns), not columns, in noise: this is what the pure-DP quantiles it
replaced could not do (at 0.1 of epsilon = 1 over 28 columns they placed bounds at 10^6 for data within 200).
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

#: |v| bucket edges: 20 per decade over [1e-3, 1e9] (public, data-independent).
MAGNITUDES = np.geomspace(1e-3, 1e9, 241)
#: Buckets: negatives (outermost first), the zero bucket, positives.
N_BUCKETS = 2 * len(MAGNITUDES) + 1
ZERO_BUCKET = len(MAGNITUDES)
#: A bucket is in the data when its noisy count exceeds TAIL_Z noise standard deviations.
TAIL_Z = 5.0
DEFAULT_BOUNDS_SHARE = 0.05
MECHANISM = "gaussian/dp-bounds-histogram"

_INNER = np.concatenate([[0.0], MAGNITUDES[:-1]])
#: Closed interval [lower, upper] each bucket covers (the interval is open on the side toward zero).
BUCKET_LOWER = np.concatenate([-MAGNITUDES[::-1], [0.0], _INNER])
BUCKET_UPPER = np.concatenate([-_INNER[::-1], [0.0], MAGNITUDES])


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


def auto_columns(schema: TableSchema) -> list[ColumnSpec]:
    return [c for c in schema.columns if c.is_numeric and c.bounds_auto]


def bucket_of(values: np.ndarray) -> np.ndarray:
    """Bucket index of each finite value (NaN -> -1, counted nowhere). Values beyond 1e9 fall in the outer bucket."""
    magnitude = np.minimum(np.abs(values), MAGNITUDES[-1])
    step = np.searchsorted(MAGNITUDES, magnitude, side="left")
    index = np.where(values > 0, ZERO_BUCKET + 1 + step, ZERO_BUCKET - 1 - step)
    index = np.where(values == 0, ZERO_BUCKET, index)
    return np.where(np.isnan(values), -1, index)


def histogram_sensitivity(columns: int, relation: str) -> float:
    """l2 sensitivity of the stacked histograms of ``columns`` columns.

    Each row adds 1 to at most one bucket of each column's histogram (a missing value to none). Add-remove: one
    row more or less moves each histogram by at most 1 in one cell, so sqrt(columns). Replace-one: the replaced
    row leaves one cell and enters another in each histogram, so sqrt(2 columns).
    """
    return math.sqrt((2.0 if relation == RELATION_REPLACE_ONE else 1.0) * columns)


def exact_histograms(raw: pd.DataFrame, columns: list[ColumnSpec]) -> np.ndarray:
    """PRIVATE: (columns, N_BUCKETS) exact counts. Cells are parsed strictly; a missing or unparseable cell counts
    nowhere."""
    from splice_assets.private.validation import parse_numbers

    counts = np.zeros((len(columns), N_BUCKETS), dtype=np.float64)
    for row, spec in enumerate(columns):
        values = parse_numbers(raw[spec.name].reset_index(drop=True))
        values = np.where(np.isfinite(values) | np.isnan(values), values, np.sign(values) * MAGNITUDES[-1])
        index = bucket_of(values)
        counts[row] = np.bincount(index[index >= 0], minlength=N_BUCKETS)
    return counts


def bounds_from_noisy(noisy: np.ndarray, threshold: float, integer: bool) -> tuple[float, float]:
    """Post-processing of one column's noisy histogram: the outer edges of the outermost buckets above
    ``threshold`` (the largest bucket when none is), rounded outward for integer columns, never degenerate."""
    above = np.flatnonzero(noisy > threshold)
    if above.size == 0:
        above = np.array([int(np.argmax(noisy))])
    lo, hi = float(BUCKET_LOWER[above[0]]), float(BUCKET_UPPER[above[-1]])
    if integer:
        lo, hi = float(math.floor(lo)), float(math.ceil(hi))
        return (lo, hi) if hi > lo else (lo, lo + 1.0)
    if hi <= lo:  # only the zero bucket: widen to the next public edge on the side with more noisy mass
        upward = noisy[ZERO_BUCKET + 1:].sum() >= noisy[:ZERO_BUCKET].sum()
        return (lo, float(MAGNITUDES[0])) if upward else (-float(MAGNITUDES[0]), hi)
    return lo, hi


def estimate_bounds(
    raw: pd.DataFrame,
    schema: TableSchema,
    noise_multiplier: float,
    delta: float,
    ledger: GaussianSpendRecorder | None,
    release_id: str,
    relation: str,
) -> tuple[TableSchema, BoundsEstimate]:
    """Resolve every ``auto`` column of ``schema`` from one noisy histogram each; one ledger entry for all.

    Sensitivity: ``histogram_sensitivity`` (Delta); the noise is N(0, (noise_multiplier * Delta)^2) per bucket from
    OpenDP's float-safe sampler (OS entropy), drawn after the ledger reservation. Returns the resolved schema and
    the public record.
    """
    from splice_assets.private.ledger import params_hash
    from splice_assets.private.mechanism import epsilon_of, gaussian_noise

    columns = auto_columns(schema)
    if not columns:
        return schema, BoundsEstimate(0.0, {}, None)
    if not (math.isfinite(noise_multiplier) and noise_multiplier > 0):
        raise ValueError(f"bounds estimation needs a noise multiplier > 0 for columns "
                         f"{[c.name for c in columns]}, got {noise_multiplier!r}")
    for spec in columns:
        if spec.name not in raw.columns:
            raise ValueError(f"column {spec.name!r}: required by the schema but missing from the input")
    exact = exact_histograms(raw, columns)
    sensitivity = histogram_sensitivity(len(columns), relation)
    sigma = noise_multiplier * sensitivity
    epsilon = epsilon_of(noise_multiplier, delta)
    entry_id = None
    if ledger is not None:
        entry_id = ledger.reserve(
            dataset=schema.name, release_id=release_id, mechanism=MECHANISM, noise_multiplier=noise_multiplier,
            sigma=sigma, sensitivity=sensitivity, epsilon=epsilon, delta=delta, relation=relation,
            params_hash=params_hash({"columns": [c.name for c in columns], "buckets": N_BUCKETS,
                                     "tail_z": TAIL_Z}),
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
    threshold = TAIL_Z * sigma
    resolved = {spec.name: bounds_from_noisy(noisy[i], threshold, spec.kind == "integer")
                for i, spec in enumerate(columns)}
    new_columns = tuple(
        dataclasses.replace(c, bounds=resolved[c.name], bounds_auto=False) if c.name in resolved else c
        for c in schema.columns
    )
    return dataclasses.replace(schema, columns=new_columns), BoundsEstimate(
        epsilon, resolved, entry_id, noise_multiplier, sigma, sensitivity, threshold
    )
