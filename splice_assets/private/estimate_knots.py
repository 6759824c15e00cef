"""The DP estimate of a column's coarse bins' edges, ``knots: auto`` (``private.bounds``).

A column with ``knots: auto`` then gets its coarse bins' edges from the same measurement, in a last step on the
schema the earlier ones resolved (``select_knots``): each present value that is not one of the column's exact
values adds 1 to one of ``KNOT_CELLS`` equal-width cells of its encoded bounds. The knots are the quantiles at
i / bins of the clipped noisy histogram's distribution mixed with ``KNOT_SCALE_SHARE`` of the uniform one on the
column's scale (``knots_from_noisy``): the bins follow the mass, and a stretch the data leave empty keeps some
bins, so noise cannot collapse a bin to nothing. Decision record 0039.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from splice_assets.layout import DEFAULT_NUMERIC_BINS, at_point, cube_of, value_of
from splice_assets.private.estimate_grids import ValueCounts
from splice_assets.schema import ColumnSpec

if TYPE_CHECKING:
    import pandas as pd

#: ``knots: auto``: cells of the histogram the knots are read from (equal-width cells of the encoded bounds).
KNOT_CELLS = 64
#: ``knots: auto``: the share of the encoding that stays uniform on the column's scale; the rest follows the noisy
#: distribution (decision 0039).
KNOT_SCALE_SHARE = 0.4


def knot_cells(values: np.ndarray, spec: ColumnSpec) -> np.ndarray:
    """Knot-histogram cell of each value of a resolved column (-1: missing, or one of its exact values, which have
    fine cells of their own): ``KNOT_CELLS`` equal-width cells of its bounds encoded on its scale."""
    assert spec.bounds is not None
    lo, hi = spec.bounds
    values = np.asarray(values, dtype=np.float64)
    z = np.clip(cube_of(np.nan_to_num(values, nan=lo), lo, hi, spec.scale), -1.0, 1.0)
    cells = np.minimum(np.floor((z + 1.0) * KNOT_CELLS / 2.0), KNOT_CELLS - 1).astype(np.int64)
    off = ~np.isfinite(values)
    for point in spec.exact_values:
        off |= at_point(values, point, lo, hi)
    return np.where(off, -1, cells)


def exact_knot_counts(cleaned: pd.DataFrame, columns: Sequence[ColumnSpec]) -> list[ValueCounts]:
    """PRIVATE: per ``knots: auto`` column, the exact counts of its knot cells (``knot_cells``) that its cleaned
    values hold, as value counts (those of disjoint parts add up, ``add_value_counts``)."""
    import pandas as pd

    out = []
    for spec in columns:
        cells = knot_cells(pd.to_numeric(cleaned[spec.name], errors="coerce").to_numpy(dtype=np.float64), spec)
        held, counts = np.unique(cells[cells >= 0], return_counts=True)
        out.append((held, counts.astype(np.int64)))
    return out


def knots_from_noisy(noisy: np.ndarray, spec: ColumnSpec, bins: int = DEFAULT_NUMERIC_BINS) -> tuple[float, ...]:
    """Post-processing of a column's noisy knot histogram: the ``bins`` + 1 values at which the mixture of the
    clipped noisy distribution (weight 1 - ``KNOT_SCALE_SHARE``) and the uniform one on the column's scale reaches
    i / bins, lo first and hi last. The mixture's distribution function rises strictly, so the knots do too."""
    assert spec.bounds is not None
    lo, hi = spec.bounds
    mass = np.clip(np.asarray(noisy, dtype=np.float64), 0.0, None)
    edges = np.linspace(-1.0, 1.0, KNOT_CELLS + 1)
    uniform = (edges + 1.0) / 2.0
    data = np.concatenate([[0.0], np.cumsum(mass)]) / mass.sum() if mass.sum() > 0 else uniform
    mixed = (1.0 - KNOT_SCALE_SHARE) * data + KNOT_SCALE_SHARE * uniform
    knots = value_of(np.interp(np.linspace(0.0, 1.0, bins + 1), mixed, edges), lo, hi, spec.scale)
    knots[0], knots[-1] = lo, hi
    return tuple(float(v) for v in knots)


def select_knots(counts: Sequence[ValueCounts], columns: Sequence[ColumnSpec], sigma: float
                 ) -> dict[str, tuple[float, ...]]:
    """Every ``knots: auto`` column's knots from its knot histogram plus N(0, sigma^2) in every cell (OpenDP's
    sampler, OS entropy): ``knots_from_noisy``. Only the knots leave; no noisy count is kept."""
    from splice_assets.private.mechanism import gaussian_noise

    found: dict[str, tuple[float, ...]] = {}
    for spec, (held, count) in zip(columns, counts):
        dense = np.zeros(KNOT_CELLS)
        dense[held] = count
        found[spec.name] = knots_from_noisy(gaussian_noise(dense, sigma), spec)
    return found
