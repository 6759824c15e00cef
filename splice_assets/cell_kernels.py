"""Compiled (numba) loops over cells: every coordinate's cell of encoded rows (``layout.marginal_cells``, read by
the exact statistics and by sampling), and the sampler's discrete draws and rank matching by counts.

Each replaces a numpy formulation that made several passes and temporaries over a (rows, coordinates) array, and
computes the same cells, or draws from the same distributions, in one pass. Sampling's hot path at 10^7 rows was
these loops: the tilt draws ``pool_factor`` matched mixture rows per output row. The cells kernel is exact integer
binning, equal to ``layout.coordinate_cells`` (tested); the others read model parameters and synthetic rows only.
"""

from __future__ import annotations

import numba
import numpy as np

#: Rows per block of the cells kernel: the block's input rows stay in cache while each column is written.
_CELL_BLOCK = 1024


@numba.njit(cache=True, nogil=True)
def _cell(z, levels, numeric_bins):  # pragma: no cover - numba
    """``layout.coordinate_cells`` for one value (NaN as 0, clipped to [-1, 1]); ``levels`` 0 for a numeric one."""
    if np.isnan(z):
        z = 0.0
    z = min(max(z, -1.0), 1.0)
    if levels > 1:
        return np.int64(np.rint((z + 1.0) * (levels - 1) / 2.0))
    if levels == 1:
        return np.int64(0)
    return np.int64(min(np.floor((z + 1.0) * numeric_bins / 2.0), numeric_bins - 1))


@numba.njit(cache=True, nogil=True)
def cells_into(x, levels, numeric_bins, out):  # pragma: no cover - numba
    """``out[r, i]``: the cell of ``x[r, i]`` (``_cell``), in blocks of rows (any memory order of either array)."""
    n, d = x.shape
    for start in range(0, n, _CELL_BLOCK):
        stop = min(start + _CELL_BLOCK, n)
        for i in range(d):
            for r in range(start, stop):
                out[r, i] = _cell(x[r, i], levels[i], numeric_bins)


@numba.njit(cache=True, nogil=True)
def alias_tables(probabilities, offsets, sizes, tables):  # pragma: no cover - numba
    """Walker's alias tables (Vose's construction) of ``tables`` distributions per group g, each of ``sizes[g]``
    cells at ``probabilities[offsets[g] + t * sizes[g]:]`` (normalised here; an all-zero one is uniform): a cell j
    keeps ``keep[j]`` of its slot and gives the rest to ``alias[j]``, so a draw costs one uniform and no search."""
    keep = np.ones(len(probabilities))
    alias = np.zeros(len(probabilities), dtype=np.int64)
    for g in range(len(sizes)):
        m = sizes[g]
        small = np.empty(m, dtype=np.int64)
        large = np.empty(m, dtype=np.int64)
        scaled = np.empty(m)
        for t in range(tables):
            base = offsets[g] + t * m
            total = 0.0
            for j in range(m):
                total += max(probabilities[base + j], 0.0)
            n_small, n_large = 0, 0
            for j in range(m):
                scaled[j] = max(probabilities[base + j], 0.0) * m / total if total > 0 else 1.0
                alias[base + j] = j
                if scaled[j] < 1.0:
                    small[n_small] = j
                    n_small += 1
                else:
                    large[n_large] = j
                    n_large += 1
            while n_small > 0 and n_large > 0:
                n_small -= 1
                s = small[n_small]
                big = large[n_large - 1]
                keep[base + s] = scaled[s]
                alias[base + s] = big
                scaled[big] = (scaled[big] + scaled[s]) - 1.0
                if scaled[big] < 1.0:
                    n_large -= 1
                    small[n_small] = big
                    n_small += 1
            for q in range(n_small):  # what rounding leaves keeps its whole slot
                keep[base + small[q]] = 1.0
            for q in range(n_large):
                keep[base + large[q]] = 1.0
    return keep, alias


@numba.njit(cache=True, nogil=True)
def draw_levels(component, rng, keep, alias, offsets, sizes, first, second, second_levels,
                levels):  # pragma: no cover - numba
    """Every discrete coordinate's level (grid point, or bin of a binned one) of each row given its mixture
    ``component``, written to ``levels[r, coordinate]``.

    Draw group g (a discrete coordinate, or the two of a joint part) draws its cell from the component's alias table
    (``alias_tables``; at ``offsets[g] + c * sizes[g]``) with a uniform from ``rng`` (a numpy Generator, drawn
    from here: no (rows, groups) array of uniforms). A joint part's flat index splits into ``first[g]``'s level
    (row of its table) and ``second[g]``'s (column, ``second_levels[g]`` of them); a single coordinate has
    ``second[g] = -1``."""
    n, groups = component.shape[0], len(sizes)
    for r in range(n):
        c = component[r]
        for g in range(groups):
            m = sizes[g]
            base = offsets[g] + c * m
            x = rng.random() * m
            j = min(np.int64(x), m - 1)
            cell = j if x - j < keep[base + j] else alias[base + j]
            if second[g] < 0:
                levels[r, first[g]] = cell
            else:
                levels[r, first[g]] = cell // second_levels[g]
                levels[r, second[g]] = cell % second_levels[g]


@numba.njit(cache=True, nogil=True)
def level_values(levels, coordinates, grids, grid_offsets, jitter, rng, out):  # pragma: no cover - numba
    """``out[r, i]`` for the discrete ``coordinates`` i: the grid point of ``levels[r, i]``
    (``grids[grid_offsets[i] + level]``), a binned coordinate's (``jitter[i] > 0``, the half-width of its bins)
    uniformly inside its bin."""
    for r in range(levels.shape[0]):
        for i in coordinates:
            value = grids[grid_offsets[i] + levels[r, i]]
            if jitter[i] > 0:
                value = min(max(value + (2.0 * rng.random() - 1.0) * jitter[i], -1.0), 1.0)
            out[r, i] = value


@numba.njit(cache=True, nogil=True)
def assign_by_counts(order_cells, n_order_cells, counts, rng):  # pragma: no cover - numba
    """The cells rank matching gives: rows sorted by ``order_cells`` (codes 0 .. n_order_cells - 1, in the order
    of the target cells: the cells themselves, or finer cells nested in them), ties in random order, cut into
    consecutive runs of ``counts`` rows per target cell (``counts`` sums to the number of rows).

    Without the sort: the rows of order cell c hold ranks [S_c, S_c + m_c), which the target runs cut into
    portions (consecutive target cells). Each row, in turn, takes one of its order cell's places still free,
    uniformly (a uniform from ``rng``, a numpy Generator): a uniformly random order of the cell's rows."""
    m = n_order_cells
    have = np.zeros(m, dtype=np.int64)
    for r in range(len(order_cells)):
        have[order_cells[r]] += 1
    # An order cell's portions are consecutive entries of one flat list (target cell, free places): fewer than
    # m + len(counts) in all, as each new portion either starts an order cell or crosses a target boundary.
    n_portions = np.zeros(m, dtype=np.int64)
    portion_start = np.zeros(m, dtype=np.int64)
    targets = np.zeros(m + len(counts) + 1, dtype=np.int64)
    free = np.zeros(m + len(counts) + 1, dtype=np.int64)
    p = 0
    j = 0
    target_end = counts[0]
    source_start = 0
    for c in range(m):
        portion_start[c] = p
        source_end = source_start + have[c]
        while j < len(counts) - 1 and target_end <= source_start:
            j += 1
            target_end += counts[j]
        position = source_start
        while position < source_end:
            take = min(source_end, target_end) - position
            targets[p] = j
            free[p] = take
            p += 1
            position += take
            if position < source_end:
                j += 1
                target_end += counts[j]
        n_portions[c] = p - portion_start[c]
        source_start = source_end
    left = have.copy()
    out = np.empty(len(order_cells), dtype=np.int64)
    for r in range(len(order_cells)):
        c = order_cells[r]
        x = rng.random() * left[c]
        q = portion_start[c]
        last = q + n_portions[c] - 1
        acc = free[q]
        while x >= acc and q < last:
            q += 1
            acc += free[q]
        out[r] = targets[q]
        free[q] -= 1
        left[c] -= 1
    return out


@numba.njit(cache=True, nogil=True)
def clip_to_cells(values, cells, numeric_bins):  # pragma: no cover - numba
    """Each value clipped, in place, to a hair inside its equal-width cell of [-1, 1] (so floating-point binning
    agrees), the outer edges exactly at -1 and 1."""
    width = 2.0 / numeric_bins
    for r in range(len(values)):
        start = -1.0 + cells[r] * width
        lo = -1.0 if cells[r] == 0 else start + 1e-9 * width
        hi = 1.0 if cells[r] == numeric_bins - 1 else start + (1 - 1e-9) * width
        values[r] = min(max(values[r], lo), hi)
