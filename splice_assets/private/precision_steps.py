"""The DP estimate of a numeric column's precision and step: its decimals and step histograms (``private.bounds``).

A column with ``decimals: auto`` gets a third histogram in the same draw: each row adds 1 to the cell of the number of
decimals its value needs (0 to ``MAX_DECIMALS``, or more; within its float32 or float64 storage precision, so 0.2
written from float32 needs 1: ``decimals_needed``); its precision is the fewest decimals that leave at most
``CLIP_SHARE`` of the noisy rows (or the noise of the cells passed) with more (``decimals_from_noisy``).

A column with ``step: auto`` (integer columns) gets a fourth: each nonzero value adds 1 to the cell of the largest of
the ``STEP_CELLS`` (1, 2, 5, 10, 50, ..., 10,000) that divides it (a declared exact value such as a top code counts
nowhere); its step is the largest of them that divides all but ``CLIP_SHARE`` of the noisy nonzero rows (or 2 noise
sd of the cells it does not divide, where that noise is within ``STEP_NOISE_SHARE``: ``step_from_noisy``). An
even-only sensor gets step 2; a credit limit in tens of thousands gets 10,000.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from splice_assets.kinds.scales import stands_for
from splice_assets.private.estimate_grids import CLIP_SHARE
from splice_assets.schema import ColumnSpec

if TYPE_CHECKING:
    import pandas as pd

#: ``step: auto`` is decided only where the noise sd of a step's off-grid cells is within this share of the noisy
#: nonzero rows: at tighter shares a large column never got its step, or got a wrong one (docs/decisions/0032).
STEP_NOISE_SHARE = 0.03
#: ``decimals: auto``: cells 0..MAX_DECIMALS decimals, then one for values that need more.
MAX_DECIMALS = 6
DECIMAL_CELLS = MAX_DECIMALS + 2
#: ``step: auto``: the steps it can find, one histogram cell each. The lcm of any two is in the list, so the largest
#: that divides a value is a multiple of every other that does: a value is off a step's grid exactly when its cell
#: is. Fewer cells than the 25 divisors of 10,000 (4, 20, 25, 250, ... are left out) mean less noise on the cells off
#: a grid: five for the grid of 100 instead of sixteen (docs/decisions/0032).
STEP_CELLS = np.array([1, 2, 5, 10, 50, 100, 500, 1_000, 5_000, 10_000], dtype=np.int64)


def decimals_needed(values: np.ndarray) -> np.ndarray:
    """Decimals each value needs (0 to ``MAX_DECIMALS``; ``MAX_DECIMALS + 1`` for more; -1 for NaN): the fewest d
    such that the value is its rounding to d decimals within its storage precision (``scales.stands_for``: 1e-9 of
    max(1, |v|), or, for a float32 number written with float64 digits, the rounding is the same float32), so that 0.2
    written from float32 (0.2000000029802322) needs 1 and 265.1 written from float64 (265.10000000000002) needs 1. A
    per-row function: each row still adds 1 to one cell of the histogram."""
    values = np.asarray(values, dtype=np.float64)
    out = np.full(len(values), MAX_DECIMALS + 1, dtype=np.int64)
    for places in range(MAX_DECIMALS, -1, -1):
        out[stands_for(values, np.round(values, places))] = places
    return np.where(np.isnan(values), -1, out)


def exact_decimals(raw: pd.DataFrame, columns: list[ColumnSpec]) -> np.ndarray:
    """PRIVATE: (columns, DECIMAL_CELLS) exact counts of the decimals each parsed value needs (missing: none)."""
    from splice_assets.private.validation import parse_numbers

    counts = np.zeros((len(columns), DECIMAL_CELLS), dtype=np.float64)
    for row, spec in enumerate(columns):
        places = decimals_needed(parse_numbers(raw[spec.name].reset_index(drop=True)))
        counts[row] = np.bincount(places[places >= 0], minlength=DECIMAL_CELLS)
    return counts


def decimals_from_noisy(noisy: np.ndarray, sigma: float) -> int | None:
    """Post-processing of one column's noisy decimals histogram: the fewest decimals k such that the noisy rows
    needing more stay within ``CLIP_SHARE`` of the noisy row count, or within the noise of those cells (3 sd: a
    column is given more decimals than its data have with probability about 1e-3); None when only the last cell
    (more than ``MAX_DECIMALS``) does."""
    allowed = CLIP_SHARE * max(float(noisy.sum()), 0.0)
    for places in range(MAX_DECIMALS + 1):
        beyond = noisy[places + 1:]
        if beyond.sum() <= max(allowed, 3.0 * sigma * math.sqrt(len(beyond))):
            return places
    return None


def step_cells(values: np.ndarray) -> np.ndarray:
    """Step cell of each value: the index in ``STEP_CELLS`` of the largest step that divides a nonzero integral value, 0
    (no step divides it) for a fractional one, -1 (counted nowhere) for 0 and missing or infinite values."""
    values = np.asarray(values, dtype=np.float64)
    counted = np.isfinite(values) & (values != 0.0)
    magnitude = np.abs(np.where(counted, values, 1.0))
    integral = magnitude == np.floor(magnitude)
    largest = int(STEP_CELLS[-1])  # every cell divides it, so v mod it keeps v's divisibility by each
    residue = np.fmod(np.where(integral, magnitude, 1.0), largest).astype(np.int64)
    cell = np.zeros(len(values), dtype=np.int64)
    for index, step in enumerate(STEP_CELLS[1:], start=1):
        cell[residue % step == 0] = index
    return np.where(counted, cell, -1)


def exact_steps(raw: pd.DataFrame, columns: list[ColumnSpec]) -> np.ndarray:
    """PRIVATE: (columns, len(STEP_CELLS)) exact counts of the step cells of each parsed value. A value the
    schema declares exact (a top code such as 500,001) counts nowhere: it is reproduced exactly, off the grid or
    not, so it must not hide the grid of the other values. Each row still adds at most 1 per column."""
    from splice_assets.private.validation import parse_numbers

    counts = np.zeros((len(columns), len(STEP_CELLS)), dtype=np.float64)
    for row, spec in enumerate(columns):
        values = parse_numbers(raw[spec.name].reset_index(drop=True))
        cells = np.where(np.isin(values, spec.exact_values), -1, step_cells(values))
        counts[row] = np.bincount(cells[cells >= 0], minlength=len(STEP_CELLS))
    return counts


def step_from_noisy(noisy: np.ndarray, sigma: float) -> int | None:
    """Post-processing of one column's noisy step histogram: the largest step s (of ``STEP_CELLS``, above 1) whose
    noisy count of the nonzero rows it does not divide stays within ``CLIP_SHARE`` of the noisy nonzero rows, or
    within 2 noise sd of those cells (a column whose values all are multiples of s passes with probability .98). A
    step is tried only where that noise sd is itself within ``STEP_NOISE_SHARE`` of the rows, so the threshold is at
    most 6% of them, and a column with more than 21% of its nonzero rows off the step gets it with probability below
    3e-7 (5 sd). None: no step."""
    total = max(float(noisy.sum()), 0.0)
    for index in range(len(STEP_CELLS) - 1, 0, -1):
        off = STEP_CELLS % STEP_CELLS[index] != 0
        noise = sigma * math.sqrt(int(off.sum()))
        if noise <= STEP_NOISE_SHARE * total and noisy[off].sum() <= max(CLIP_SHARE * total, 2.0 * noise):
            return int(STEP_CELLS[index])
    return None
