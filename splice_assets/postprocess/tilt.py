"""Cell tilt: a log-linear correction of the fitted mixture toward the noisy 1-way and 2-way tables (and, as a last
step, toward the target's noisy 3-way tables).

The mixture q fits the moments and the tables together and cannot hold every 2-way structure the tables show
(a K-component product mixture). The tilt adds it back as potentials on the measured cells:

    p(x)  proportional to  q(x) * exp(-sum_t lambda_t[cell_t(x)])     over the 1-way and 2-way tables t.

The potentials are fitted by multiplicative weights on a pool of draws from q, minimising the Gaussian chi^2 of
the tables against their noisy values (each cell's residual over its noise std). The fit is stopped on a second,
holdout pool: when its chi^2 per cell reaches ``chi2_target`` (1 = the noise level: the discrepancy principle;
fitting further fits the noise) or stops improving. Sampling draws a pool from q and resamples it by the tilt
weights (sampling-importance-resampling). The same fit, on pools drawn from the finished sampler, tilts it toward
the target's 3-way tables while it holds the 1-way and 2-way ones (``CellTilt.triples``, ``chain.fit_target_tilt``).

Privacy: post-processing. The fit reads only the mechanism's noisy tables, their public noise stds and draws from
q under the public seed; no row enters.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numba
import numpy as np

from splice_assets.layout import EncodingLayout, marginal_cells, marginal_sizes, triple_cell_index, triple_sizes


@dataclass(frozen=True)
class CellTilt:
    """Potentials per cell of the 1-way tables (``moments.marginal_sizes`` order), then of the 2-way tables of
    ``pairs`` (a-major), then of the 3-way tables of ``triples`` (t-major): the order of the measurement's noisy
    marginals, pairs and triples, concatenated."""

    numeric_bins: int
    pairs: tuple[tuple[int, int], ...]
    potentials: np.ndarray
    #: Pool rows drawn per output row when sampling.
    pool_factor: int
    #: Diagnostics: holdout chi^2 per cell without and with the potentials, and the iterations used.
    chi2_start: float
    chi2_end: float
    iterations: int
    triples: tuple[tuple[int, int, int], ...] = ()

    def summary(self) -> dict[str, float | int]:
        """Public diagnostics for release records: chi^2 of noisy statistics against the model, iterations, and the
        sampling pool factor (larger when the tilt was refitted on wider pools)."""
        return {
            "chi2_start": float(self.chi2_start), "chi2_end": float(self.chi2_end), "iterations": int(self.iterations),
            "pool_factor": int(self.pool_factor),
        }


def _table_offsets(
    layout: EncodingLayout, numeric_bins: int, pairs: Sequence[tuple[int, int]],
    triples: Sequence[tuple[int, int, int]] = (),
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each coordinate's 1-way cell count, and where each 1-way, each 2-way and each 3-way table starts in the
    concatenated cells (the ``CellTilt`` order)."""
    sizes = np.asarray(marginal_sizes(layout, numeric_bins), dtype=np.int64)
    pair_cells = np.array([sizes[a] * sizes[b] for a, b in pairs], dtype=np.int64)
    three_way = np.asarray(triple_sizes(layout, triples, numeric_bins), dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(np.concatenate([sizes, pair_cells, three_way]))[:-1]]).astype(np.int64)
    d, p = layout.d, len(pairs)
    return sizes, starts[:d], starts[d : d + p], starts[d + p :]


def table_starts(
    layout: EncodingLayout, numeric_bins: int, pairs: Sequence[tuple[int, int]],
    triples: Sequence[tuple[int, int, int]] = (),
) -> np.ndarray:
    """Where each table's cells start in the tables concatenated (the ``CellTilt`` order): 1-way, 2-way, 3-way."""
    return np.concatenate(_table_offsets(layout, numeric_bins, pairs, triples)[1:])


def table_cells(
    cube: np.ndarray, layout: EncodingLayout, numeric_bins: int, pairs: Sequence[tuple[int, int]],
    order: Literal["C", "F"] = "F", local: bool = False, triples: Sequence[tuple[int, int, int]] = (),
) -> np.ndarray:
    """(n, d + len(pairs) + len(triples)) int32: every row's cell in every 1-way table, then in every 2-way and
    3-way table, as indices into the tables concatenated (1-way cells first). Built one table at a time;
    column-major by default (read one table at a time), row-major with ``order="C"`` (what ``fit_tilt``'s kernels
    read, without a copy).

    With ``local``, each table's own cell index instead (add ``table_starts`` for the concatenated one), as uint16
    when every table has at most 65,536 cells: half the memory of the tilt's wide pools."""
    sizes, starts, pair_starts, triple_starts = _table_offsets(layout, numeric_bins, pairs, triples)
    dtype: type[np.integer[Any]] = np.int32
    if local:
        largest = max([int(sizes.max(initial=1))] + [int(sizes[a] * sizes[b]) for a, b in pairs]
                      + list(triple_sizes(layout, triples, numeric_bins)))
        dtype = np.uint16 if largest <= np.iinfo(np.uint16).max + 1 else np.int32
        starts, pair_starts, triple_starts = (np.zeros_like(s) for s in (starts, pair_starts, triple_starts))
    cells = marginal_cells(cube, layout, numeric_bins)
    out = np.empty((len(cube), layout.d + len(pairs) + len(triples)), dtype=dtype, order=order)
    out[:, : layout.d] = cells + starts
    for column, ((a, b), start) in enumerate(zip(pairs, pair_starts), start=layout.d):  # no (n, pairs) temporaries
        out[:, column] = cells[:, a] * sizes[b] + cells[:, b] + start
    for column, (triple, start) in enumerate(zip(triples, triple_starts), start=layout.d + len(pairs)):
        out[:, column] = triple_cell_index(cells, sizes, triple) + start
    return out


def log_weights(potentials: np.ndarray, cells: np.ndarray) -> np.ndarray:
    """Unnormalised log tilt weight of every row: minus the sum of its cells' potentials (one table at a time,
    so no (rows, tables) temporary)."""
    log_w = np.zeros(len(cells))
    for column in cells.T:
        log_w -= potentials[column]
    return log_w


def pool_log_weights(
    potentials: np.ndarray, cube: np.ndarray, layout: EncodingLayout, numeric_bins: int,
    pairs: Sequence[tuple[int, int]], triples: Sequence[tuple[int, int, int]] = (),
) -> np.ndarray:
    """``log_weights(potentials, table_cells(cube, ...))`` without the (rows, tables) cell matrix: what sampling
    needs for every pool."""
    cells = marginal_cells(cube, layout, numeric_bins)
    return cell_log_weights(potentials, cells, layout, numeric_bins, pairs, triples)


def cell_log_weights(
    potentials: np.ndarray, cells: np.ndarray, layout: EncodingLayout, numeric_bins: int,
    pairs: Sequence[tuple[int, int]], triples: Sequence[tuple[int, int, int]] = (),
) -> np.ndarray:
    """``pool_log_weights`` of rows given by their 1-way cells (``marginal_cells``)."""
    sizes, starts, pair_starts, triple_starts = _table_offsets(layout, numeric_bins, pairs, triples)
    potentials = np.asarray(potentials, dtype=np.float64)
    out = _pool_log_weights(
        potentials, cells, starts, np.asarray(pairs, dtype=np.int64).reshape(-1, 2), sizes, pair_starts,
    )
    for triple, start in zip(triples, triple_starts):
        out -= potentials[start + triple_cell_index(cells, sizes, triple)]
    return out


#: Rows per block of ``_pool_log_weights``: a block's sums stay in the L1 cache while each table is read.
_WEIGHT_BLOCK = 1024


@numba.njit(cache=True, nogil=True)  # no fastmath: the sums keep log_weights' order, so the weights are the same bits
def _pool_log_weights(potentials, cells, offsets, pairs, sizes, pair_offsets):  # pragma: no cover - numba
    """Table by table within blocks of rows: each row's sum runs over its tables in the same order as a row-by-row
    loop (the same bits), while a pair's potentials and the two columns it reads stay in the cache (a row at a
    time, a column-major pool was read across every column: 2.3x slower)."""
    rows = cells.shape[0]
    out = np.zeros(rows)
    for start in range(0, rows, _WEIGHT_BLOCK):
        stop = min(start + _WEIGHT_BLOCK, rows)
        for i in range(cells.shape[1]):
            offset = offsets[i]
            for r in range(start, stop):
                out[r] -= potentials[cells[r, i] + offset]
        for p in range(pairs.shape[0]):
            a, b = pairs[p, 0], pairs[p, 1]
            size, offset = sizes[b], pair_offsets[p]
            for r in range(start, stop):
                out[r] -= potentials[cells[r, a] * size + cells[r, b] + offset]
    return out


def _normalised(log_w: np.ndarray) -> np.ndarray:
    w = np.exp(log_w - log_w.max())
    return w / w.sum()


@numba.njit(cache=True)
def _row_sums(cells, starts, values):  # pragma: no cover - numba
    """A v for the rows x cells 0/1 incidence A of ``cells`` (rows, tables; table t's cell i is starts[t] + i):
    each row's sum of its cells' values."""
    out = np.zeros(cells.shape[0])
    for r in range(cells.shape[0]):
        total = 0.0
        for t in range(cells.shape[1]):
            total += values[starts[t] + cells[r, t]]
        out[r] = total
    return out


@numba.njit(cache=True)
def _cell_sums(cells, starts, weights, n_cells):  # pragma: no cover - numba
    """A^T w: every cell's summed row weights (the weighted tables, concatenated)."""
    out = np.zeros(n_cells)
    for r in range(cells.shape[0]):
        w = weights[r]
        for t in range(cells.shape[1]):
            out[starts[t] + cells[r, t]] += w
    return out


def fit_tilt(
    pool: np.ndarray,
    holdout: np.ndarray,
    targets1: np.ndarray,
    std1: float | np.ndarray,
    targets2: np.ndarray,
    std2: float | np.ndarray,
    chi2_target: float = 1.0,
    max_iterations: int = 300,
    patience: int = 10,
    step: float = 0.05,
    momentum: float = 0.8,
    initial: np.ndarray | None = None,
    starts: np.ndarray | None = None,
) -> tuple[np.ndarray, float, float, int]:
    """Potentials fitted on the ``pool`` cells (draws from the mixture) that bring a fresh ``holdout`` pool's
    weighted tables toward the noisy targets (``std1``: the 1-way cells' noise std, one or one per cell; ``std2``
    alike for the 2-way and 3-way cells).

    Multiplicative weights with heavy-ball momentum on the pool rows. The gradient of chi^2 / 2 with respect to
    a row's log weight is g, the sum of its cells' residuals over their noise variances; each iteration adds
    ``step / max|g|`` times the scaled residuals to the potentials (no row's log weight moves by more than
    ``step``), plus ``momentum`` times the previous move. A move that raises the pool's chi^2 is undone, the
    momentum dropped and the step halved. Momentum reaches chi^2 = 1 in several times fewer iterations
    (docs/decisions/0008).

    Stopping looks at the holdout, which stands for the pools sampling will draw: the fit stops once its chi^2
    per cell is <= ``chi2_target`` (1 = the noise level: fitting further fits the noise), or has not improved
    for ``patience`` iterations, and returns the potentials with the best holdout chi^2. Without the holdout,
    potentials of cells that only a few pool rows reach grow until those rows dominate (at high eps, fitting on
    doubled the 2-way TVD; docs/decisions/0008). ``pool`` and ``holdout`` are ``table_cells`` of the two pools:
    concatenated indices, or each table's own (``local=True``) with the ``table_starts`` given as ``starts``.
    ``initial`` potentials (default none) start a refit, e.g. on wider pools from where a narrower fit stopped,
    unless the holdout scores them worse than none (a long narrow fit can leave cells that its pools rarely reach
    with potentials that let a few rows of a wider pool dominate: chi^2 322 from none, 3,883 from them).
    Returns the potentials (``CellTilt`` order), holdout chi^2 per cell at the start and with them, and the
    iterations used.
    """
    if not np.all(np.asarray(std1) > 0) or not np.all(np.asarray(std2) > 0):
        raise ValueError(f"noise stds must be > 0, got {std1!r} and {std2!r}")
    if not chi2_target > 0:
        raise ValueError(f"chi2_target must be > 0, got {chi2_target!r}")
    size1, size2 = targets1.size, targets2.size
    # Row-major cells, read in place by the incidence kernels (no sparse matrix, no data array).
    fit_cells, held_cells = (np.ascontiguousarray(cells) for cells in (pool, holdout))
    starts = np.zeros(fit_cells.shape[1], dtype=np.int64) if starts is None else np.asarray(starts, dtype=np.int64)
    targets = np.concatenate([targets1, targets2])
    inverse_variance = np.concatenate([np.broadcast_to(np.asarray(std1, dtype=np.float64) ** -2.0, (size1,)),
                                       np.broadcast_to(np.asarray(std2, dtype=np.float64) ** -2.0, (size2,))])

    def chi2_of(cells: np.ndarray, potentials: np.ndarray) -> tuple[float, np.ndarray]:
        residual = _cell_sums(cells, starts, _normalised(-_row_sums(cells, starts, potentials)), targets.size)
        residual -= targets
        scaled = residual * inverse_variance
        return float(residual @ scaled) / targets.size, scaled

    potentials = np.zeros(targets.size)
    start = best_chi2 = chi2_of(held_cells, potentials)[0]
    if initial is not None and chi2_of(held_cells, np.asarray(initial, dtype=np.float64))[0] < start:
        potentials = np.array(initial, dtype=np.float64)
        start = best_chi2 = chi2_of(held_cells, potentials)[0]
    velocity = np.zeros(targets.size)
    chi2, scaled = chi2_of(fit_cells, potentials)
    best, since_best, iterations = potentials.copy(), 0, 0
    while best_chi2 > chi2_target and since_best < patience and iterations < max_iterations:
        iterations += 1
        rate = step / max(float(np.abs(_row_sums(fit_cells, starts, scaled)).max()), 1e-300)
        move = momentum * velocity + rate * scaled
        trial_chi2, trial_scaled = chi2_of(fit_cells, potentials + move)
        if trial_chi2 > chi2:
            step /= 2.0
            velocity[:] = 0.0
            continue
        potentials = potentials + move
        velocity, chi2, scaled = move, trial_chi2, trial_scaled
        held = chi2_of(held_cells, potentials)[0]
        if held < best_chi2:
            best, best_chi2, since_best = potentials, held, 0
        else:
            since_best += 1
    return best, start, best_chi2, iterations


def systematic_resample(log_w: np.ndarray, n_rows: int, rng: np.random.Generator) -> np.ndarray:
    """Indices of ``n_rows`` pool rows drawn in proportion to exp(log_w) by systematic resampling (the fewest
    repeats for given weights), in random order."""
    cdf = np.cumsum(_normalised(log_w))
    picks = np.searchsorted(cdf, (rng.random() + np.arange(n_rows)) / n_rows, side="right")
    return rng.permutation(np.minimum(picks, len(log_w) - 1))
