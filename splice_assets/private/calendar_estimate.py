"""The DP estimate of a datetime's period and resolution: its month and unit histograms (``private.bounds``).

A ``datetime`` or ``date`` column with ``bounds: auto`` (or one end ``auto``) gets a fifth histogram: one cell
per calendar month of the public grid 1970-01 to 2099-12 (``MONTH_CELLS``; a present value adds 1 to its month, one
outside the grid to the outermost month, a missing or unreadable one counts nowhere), read from the week and weekday
parts. Its period is the first and the last month whose noisy count clears ``MONTH_Z`` noise std (4.87: as many false
months per column as the log grid's false decades; the largest when none does; only months inside a public end count),
from the start of the first to the start of the month after the last (``period_from_noisy``). A ``datetime`` or ``time``
with ``resolution: auto`` gets a sixth: each present value adds 1 to the coarsest of day, hour, minute and second it is
a multiple of on the wall clock (``UNIT_CELLS``); its unit is the coarsest that leaves at most ``CLIP_SHARE`` of the
noisy rows (or 3 noise sd of the cells passed) finer (``resolution_from_noisy``). Until then their parts are laid out
for the grid's ends and for seconds; the resolved schema's parts are rebuilt (``schema.with_resolved_lowered``). A
rule's later column takes neither (its offset is what is modelled).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist
from typing import TYPE_CHECKING

import numpy as np

from splice_assets.kinds.lowered import LoweredColumn, lowered_kind_of
from splice_assets.kinds.temporal import (
    MONTH_CELLS,
    UNIT_CELLS,
    UNITS,
    WEEKDAYS,
    Temporal,
    bound_seconds,
    month_cells,
    month_start,
    unit_cells,
)
from splice_assets.private.estimate_grids import CLIP_SHARE, COARSE, COARSE_Z

if TYPE_CHECKING:
    import pandas as pd

#: A month of a datetime's grid is in the data when its noisy count exceeds MONTH_Z noise sd: the z at which an empty
#: column of ``MONTH_CELLS`` months has as many false months as the coarse log grid has false decades at COARSE_Z
#: (8.6e-4 per column; at COARSE_Z itself 1,560 empty months would put one into 4.9% of the periods).
MONTH_Z = -NormalDist().inv_cdf(COARSE.size * NormalDist().cdf(-COARSE_Z) / MONTH_CELLS)


def _temporal_parts(raw: pd.DataFrame, column: LoweredColumn) -> tuple[np.ndarray, np.ndarray]:
    """(days since 1970, wall-clock seconds of the day) of a lowered column's values, read from its parts in ``raw``
    (NaN where a part is missing or unreadable; days NaN for a ``time``, seconds 0 for a column without a time
    part)."""
    from splice_assets.private.validation import parse_numbers

    n = len(raw)
    days, seconds = np.full(n, np.nan), np.zeros(n)
    week, weekday = np.full(n, np.nan), np.full(n, np.nan)
    unit = UNITS[column.resolution or "second"]
    for part in column.parts:
        series = raw[part].reset_index(drop=True)
        if part.endswith(".week"):
            week = parse_numbers(series)
        elif part.endswith(".weekday"):
            weekday = series.astype(object).map({w: float(i) for i, w in enumerate(WEEKDAYS)}).to_numpy(
                dtype=np.float64, na_value=np.nan)
        else:
            seconds = parse_numbers(series) * unit
    if _has_date(column):
        days = week * 7.0 + weekday - 3.0  # week w, weekday d: day 7 w + d - 3 (1970-01-01 was a Thursday)
        seconds = np.where(np.isnan(days), np.nan, seconds)
    return days, seconds


def _has_date(column: LoweredColumn) -> bool:
    kind = lowered_kind_of(column.kind)
    return isinstance(kind, Temporal) and kind.has_date


def exact_months(raw: pd.DataFrame, columns: Sequence[LoweredColumn]) -> np.ndarray:
    """PRIVATE: (columns, MONTH_CELLS) exact counts of the month of each value (``temporal.month_cells``), read from
    the lowered parts; a missing or unreadable value counts nowhere. A row adds 1 to at most one cell per column."""
    counts = np.zeros((len(columns), MONTH_CELLS), dtype=np.float64)
    for row, column in enumerate(columns):
        cells = month_cells(_temporal_parts(raw, column)[0])
        counts[row] = np.bincount(cells[cells >= 0], minlength=MONTH_CELLS)
    return counts


def exact_units(raw: pd.DataFrame, columns: Sequence[LoweredColumn]) -> np.ndarray:
    """PRIVATE: (columns, len(UNIT_CELLS)) exact counts of the coarsest unit each value is a multiple of
    (``temporal.unit_cells``; the parts are laid out for seconds until resolved); missing or unreadable: nowhere."""
    counts = np.zeros((len(columns), len(UNIT_CELLS)), dtype=np.float64)
    for row, column in enumerate(columns):
        cells = unit_cells(_temporal_parts(raw, column)[1])
        counts[row] = np.bincount(cells[cells >= 0], minlength=len(UNIT_CELLS))
    return counts


def _month_edges() -> np.ndarray:
    """Wall-clock seconds since 1970 of the grid's month starts (MONTH_CELLS + 1 of them)."""
    return np.arange(MONTH_CELLS + 1).astype("datetime64[M]").astype("datetime64[s]").astype(np.int64)


def period_from_noisy(noisy: np.ndarray, sigma: float, column: LoweredColumn) -> tuple[str, str]:
    """Post-processing of one column's noisy month histogram: the first and last months whose noisy count clears
    ``MONTH_Z`` noise std (4.87: an empty column's 1,560 months put one in with probability 8.6e-4, as the coarse
    log grid's decades at ``COARSE_Z``; the largest noisy count when none does),
    among the months inside the column's public end if it has one; the period runs from the start of the first to the
    start of the month after the last. A public end is kept."""
    edges = _month_edges()
    lo_s, hi_s = bound_seconds(column)
    (lo_auto, hi_auto) = column.bounds_auto
    inside = np.ones(MONTH_CELLS, dtype=bool)
    if not lo_auto:
        inside &= edges[1:] > lo_s
    if not hi_auto:
        inside &= edges[:-1] < hi_s
    above = np.flatnonzero((noisy > MONTH_Z * sigma) & inside)
    if above.size == 0:
        above = np.array([int(np.argmax(np.where(inside, noisy, -np.inf)))])
    assert column.bounds is not None
    lo = month_start(int(above[0])) if lo_auto else column.bounds[0]
    hi = month_start(int(above[-1]) + 1) if hi_auto else column.bounds[1]
    return lo, hi


def resolution_from_noisy(noisy: np.ndarray, sigma: float, units: Sequence[str]) -> str:
    """Post-processing of one column's noisy unit histogram (``UNIT_CELLS``, coarsest first): the coarsest of
    ``units`` such that the noisy rows on a finer unit stay within ``CLIP_SHARE`` of the noisy row count, or within
    3 noise sd of those cells (as ``decimals_from_noisy``); the finest of ``units`` when none does."""
    allowed = CLIP_SHARE * max(float(noisy.sum()), 0.0)
    for index, unit in enumerate(UNIT_CELLS):
        finer = noisy[index + 1:]
        if unit in units and finer.sum() <= max(allowed, 3.0 * sigma * math.sqrt(len(finer))):
            return unit
    return min(units, key=lambda u: UNITS[u])

def _units_of(column: LoweredColumn) -> list[str]:
    kind = lowered_kind_of(column.kind)
    assert isinstance(kind, Temporal)
    return kind.units()
