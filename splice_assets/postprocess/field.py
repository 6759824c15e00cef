"""Pairwise field: the fitted model's 1-way and 2-way tables, re-imposed with the least higher-order structure.

The mixture (K product components, a few joint pairs) and its cell tilt match the noisy 2-way tables, but their
3-way structure is the mixture's own: within a component every coordinate but a joint pair's is independent, so
a column that is nearly a function of two others (a region read off two coordinates) comes
out blurred however well each pair fits. A pairwise Markov random field over the measured cells,

    f(c)  proportional to  exp(sum_j theta_j[c_j] + sum_{a<b} theta_ab[c_a, c_b]),

fitted to the same tables, is their maximum-entropy joint: it adds no 3-way structure of its own. With noise-free
statistics, a field fitted to the mixture's tables brought the 3-way TVD (on the measured cells, against the test
split) most of the way from the tilted mixture's to the real train split's (docs/decisions/0011).

Fit (``fit_field``): the targets are the tables of a sample from the tilted mixture, which hold the mixture's
denoising (fitted straight to the noisy tables, the field scored worse than the mixture at eps <= 3). Persistent
Gibbs chains start at that sample's cells; each iteration is one sweep, then every potential moves by ``rate``
times log(target / chain frequency), a damped iterative proportional fit.

Sampling (``sample_cells``, ``values_in_cells``): the pipeline refits the cell tilt on pools drawn from the field
and samples the field times the tilt's weights, itself a field (``with_tilt``). Output rows start from the fitted
chains and take ``sweeps`` more Gibbs sweeps; each row's values inside its cells then come from the mixture
conditioned on the cells (a component by its posterior given all cells, a model level inside each cell, uniform
inside a binned level).

Privacy: post-processing. The targets and the chains come from the fitted model under the public seed; no row
enters.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

import numba
import numpy as np

from splice_assets.layout import EncodingLayout, marginal_sizes
from splice_assets.model.mixture import MixtureParameters
from splice_assets.postprocess.tilt import table_starts

#: Frequency floor inside the log-ratio update: a cell the target or the chains leave empty moves by a bounded
#: step instead of an infinite one (the chains resolve about 1 / chains anyway).
_FLOOR = 1e-4


@dataclass(frozen=True)
class PairwiseField:
    """Potentials of the 1-way tables (``moments.marginal_sizes`` order), then of every coordinate pair's table
    (``pairs``, a-major), concatenated; the fitted chains (cells, one row per chain) where sampling starts."""

    numeric_bins: int
    pairs: tuple[tuple[int, int], ...]
    potentials: np.ndarray
    chains: np.ndarray
    #: Gibbs sweeps each output row takes from its chain state.
    sweeps: int
    #: Diagnostics: fit iterations, and the mean absolute gap between the chains' and the target tables' cells.
    iterations: int
    residual: float

    def summary(self) -> dict[str, float | int]:
        """Public diagnostics for release records."""
        return {
            "iterations": int(self.iterations), "residual": float(self.residual), "chains": int(len(self.chains)),
            "sweeps": int(self.sweeps),
        }


@dataclass(frozen=True)
class FieldChoice:
    """Why the chain kept or dropped a fitted field: the holdout chi^2 per cell of the tilted mixture and of the
    tilted field against the noisy tables, the largest ratio of the two that keeps the field, and the verdict."""

    mixture_chi2: float
    field_chi2: float
    tolerance: float
    kept: bool

    def summary(self) -> dict[str, float | int]:
        """Public diagnostics for release records."""
        return {"mixture_chi2": float(self.mixture_chi2), "field_chi2": float(self.field_chi2),
                "tolerance": float(self.tolerance), "kept": int(self.kept)}


def field_pairs(d: int) -> tuple[tuple[int, int], ...]:
    """Every coordinate pair a < b, the two coordinates of one column included (a missing-value indicator and
    its value): the field's tables come from the model, not from the mechanism, so none is unmeasured."""
    return tuple(itertools.combinations(range(d), 2))


@dataclass(frozen=True)
class _Structure:
    """The field's tables as index arrays for the numba kernels."""

    sizes: np.ndarray
    starts: np.ndarray  # where each 1-way table starts, then each pair's
    pairs: np.ndarray  # (P, 2)
    neighbour: np.ndarray  # per coordinate j (from neighbour_start[j]): the other coordinate k of each pair with j,
    neighbour_start: np.ndarray
    block_start: np.ndarray  # and where that pair's potentials start in the oriented copy (``orient``)
    orient: np.ndarray  # potentials[orient]: each pair's table twice, as (c_k, c_j) blocks for either coordinate j
    n_cells: int


def _structure(layout: EncodingLayout, numeric_bins: int, pairs: tuple[tuple[int, int], ...]) -> _Structure:
    sizes = np.asarray(marginal_sizes(layout, numeric_bins), dtype=np.int64)
    table_sizes = np.concatenate([sizes, [sizes[a] * sizes[b] for a, b in pairs]]).astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(table_sizes)[:-1]]).astype(np.int64)
    per: list[list[tuple[int, np.ndarray]]] = [[] for _ in range(layout.d)]
    for p, (a, b) in enumerate(pairs):
        table = starts[layout.d + p] + np.arange(sizes[a] * sizes[b]).reshape(sizes[a], sizes[b])
        per[a].append((b, table.T.ravel()))  # for a's conditional: rows c_b, contiguous over c_a
        per[b].append((a, table.ravel()))
    flat = [item for items in per for item in items]
    blocks = [index for _, index in flat]
    return _Structure(
        sizes, starts, np.asarray(pairs, dtype=np.int64).reshape(-1, 2),
        np.array([k for k, _ in flat], dtype=np.int64),
        np.concatenate([[0], np.cumsum([len(items) for items in per])]).astype(np.int64),
        np.concatenate([[0], np.cumsum([len(index) for index in blocks])[:-1]]).astype(np.int64),
        np.concatenate(blocks).astype(np.int64) if blocks else np.zeros(0, np.int64), int(table_sizes.sum()),
    )


#: Rows per task of the parallel sweep (each task keeps one scratch vector of logits).
_SWEEP_BLOCK = 1024


@numba.njit(cache=True, parallel=True)
def _sweep(state, potentials, oriented, sizes, starts, neighbour, neighbour_start, block_start,
           uniforms):  # pragma: no cover - numba
    """One Gibbs sweep over every row: each coordinate in turn drawn from its conditional given the row's other
    cells, by inversion of ``uniforms[r, j]``. ``oriented`` holds each pair's potentials as contiguous runs over one
    coordinate's cells per cell of the other. Rows are independent chains and their uniforms are drawn beforehand,
    so blocks of rows run on numba's threads (``NUMBA_NUM_THREADS``) with the same result on any number of them."""
    n, d = state.shape
    widest = sizes.max()
    for block in numba.prange((n + _SWEEP_BLOCK - 1) // _SWEEP_BLOCK):
        logits = np.empty(widest)
        for r in range(block * _SWEEP_BLOCK, min(n, (block + 1) * _SWEEP_BLOCK)):
            for j in range(d):
                size = sizes[j]
                for c in range(size):
                    logits[c] = potentials[starts[j] + c]
                for q in range(neighbour_start[j], neighbour_start[j + 1]):
                    base = block_start[q] + state[r, neighbour[q]] * size
                    for c in range(size):
                        logits[c] += oriented[base + c]
                top = logits[0]
                for c in range(1, size):
                    top = max(top, logits[c])
                total = 0.0
                for c in range(size):
                    logits[c] = np.exp(logits[c] - top)
                    total += logits[c]
                threshold, running, pick = uniforms[r, j] * total, 0.0, size - 1
                for c in range(size):
                    running += logits[c]
                    if threshold < running:
                        pick = c
                        break
                state[r, j] = pick


@numba.njit(cache=True)
def _tables(state, sizes, starts, pairs, n_cells):  # pragma: no cover - numba
    """Frequencies of every 1-way and pair table of the rows' cells, concatenated."""
    out = np.zeros(n_cells)
    n, d = state.shape
    for r in range(n):
        for j in range(d):
            out[starts[j] + state[r, j]] += 1.0
        for p in range(pairs.shape[0]):
            a, b = pairs[p, 0], pairs[p, 1]
            out[starts[d + p] + state[r, a] * sizes[b] + state[r, b]] += 1.0
    return out / n


def _run_sweeps(state: np.ndarray, potentials: np.ndarray, s: _Structure, sweeps: int, rng: np.random.Generator):
    oriented = potentials[s.orient]
    for _ in range(sweeps):
        _sweep(state, potentials, oriented, s.sizes, s.starts, s.neighbour, s.neighbour_start, s.block_start,
               rng.random(state.shape))


def fit_field(
    cells: np.ndarray, layout: EncodingLayout, numeric_bins: int, rng: np.random.Generator, iterations: int = 40,
    rate: float = 0.1, sweeps: int = 2,
) -> PairwiseField:
    """A field whose 1-way and pair tables match those of ``cells`` (a sample's measured cells, one row per row):
    persistent Gibbs chains started at those rows, one sweep per iteration, then the damped log-ratio update.

    The potentials returned are the mean over the second half of the iterations (the chains' sampling noise
    moves each iteration's); the chains then take ``sweeps`` sweeps under them, as sampling will.
    """
    if iterations < 1 or not rate > 0 or sweeps < 1:
        raise ValueError(f"iterations and sweeps must be >= 1 and rate > 0, got {iterations!r}, {sweeps!r}, {rate!r}")
    pairs = field_pairs(layout.d)
    s = _structure(layout, numeric_bins, pairs)
    state = np.ascontiguousarray(cells, dtype=np.int64)
    targets = _tables(state, s.sizes, s.starts, s.pairs, s.n_cells)
    potentials = np.zeros(s.n_cells)
    for j in range(layout.d):  # start from the independent field of the 1-way tables
        block = slice(s.starts[j], s.starts[j] + s.sizes[j])
        potentials[block] = np.log(targets[block] + _FLOOR)
    log_targets = np.log(targets + _FLOOR)
    averaged, first_averaged = np.zeros(s.n_cells), iterations // 2
    for iteration in range(iterations):
        _run_sweeps(state, potentials, s, 1, rng)
        potentials += rate * (log_targets - np.log(_tables(state, s.sizes, s.starts, s.pairs, s.n_cells) + _FLOOR))
        if iteration >= first_averaged:  # the second half's mean: the chains' sampling noise averages out
            averaged += potentials
    potentials = averaged / (iterations - first_averaged)
    _run_sweeps(state, potentials, s, sweeps, rng)
    residual = float(np.mean(np.abs(_tables(state, s.sizes, s.starts, s.pairs, s.n_cells) - targets)))
    chains = state.astype(np.int16 if s.sizes.max() <= np.iinfo(np.int16).max else np.int64)
    return PairwiseField(numeric_bins, pairs, potentials, chains, sweeps, iterations, residual)


def sample_cells(field: PairwiseField, layout: EncodingLayout, n_rows: int, rng: np.random.Generator) -> np.ndarray:
    """(n_rows, d) cells: each fitted chain used about equally often, in random order, then ``field.sweeps``
    Gibbs sweeps per row (rows that start from one chain part ways in the first sweep)."""
    s = _structure(layout, field.numeric_bins, field.pairs)
    state = np.ascontiguousarray(field.chains[rng.permutation(np.resize(np.arange(len(field.chains)), n_rows))],
                                 dtype=np.int64)
    _run_sweeps(state, field.potentials, s, field.sweeps, rng)
    return state


def _draw_rows(probabilities: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One index per row of a (rows, m) array of unnormalised probabilities, by inversion."""
    cdf = np.cumsum(probabilities, axis=1)
    threshold = rng.random(len(cdf)) * cdf[:, -1]
    return np.minimum((cdf < threshold[:, None]).sum(axis=1), probabilities.shape[1] - 1)


def values_in_cells(
    params: MixtureParameters, layout: EncodingLayout, cells: np.ndarray, numeric_bins: int, rng: np.random.Generator
) -> np.ndarray:
    """Cube rows (n, d) inside the given measured ``cells`` from the all-discrete mixture conditioned on them: a
    component by its posterior given every cell, then each coordinate's model level inside its cell (a joint
    pair's two levels together), uniform inside a binned level. ``layout`` is the model's (binned numerics)."""
    if len(layout.continuous_index):
        raise ValueError("values_in_cells needs an all-discrete model (histogram numerics)")
    n, K = len(cells), params.K
    # Each coordinate's model levels per measured cell: a binned coordinate's refine its cells, others are its cells.
    per_cell = [c.levels // numeric_bins if c.is_binned else 1 for c in layout.coordinates]
    position = {i: t for t, i in enumerate(layout.discrete_index)}
    joint = {i: (pair, table) for pair, table in zip(params.joint_pairs, params.joint) for i in pair}
    parts: list[tuple[tuple[int, ...], np.ndarray]] = []  # (coordinates, (K, cells..., levels per cell...) table)
    for i in range(layout.d):
        if i in joint:
            (a, b), table = joint[i]
            if i == a:
                shape = (K, table.shape[1] // per_cell[a], per_cell[a], table.shape[2] // per_cell[b], per_cell[b])
                parts.append(((a, b), table.reshape(shape).transpose(0, 1, 3, 2, 4)))
        else:
            table = params.probs[position[i]]
            parts.append(((i,), table.reshape(K, table.shape[1] // per_cell[i], per_cell[i])))
    log_post = np.tile(np.log(params.weights), (n, 1))
    for coords, table in parts:
        mass = table.reshape(table.shape[: 1 + len(coords)] + (-1,)).sum(axis=-1)  # (K, cells...)
        log_mass = np.log(np.maximum(mass, 1e-300))  # the log of the small table, not of n gathered rows
        log_post += log_mass[(slice(None),) + tuple(cells[:, i] for i in coords)].T
    component = _draw_rows(np.exp(log_post - log_post.max(axis=1, keepdims=True)), rng)
    out = np.empty((n, layout.d))
    for coords, table in parts:
        inside = table[(component,) + tuple(cells[:, i] for i in coords)].reshape(n, -1)
        drawn = _draw_rows(np.maximum(inside, 1e-300), rng)
        offsets = np.divmod(drawn, per_cell[coords[1]]) if len(coords) == 2 else (drawn,)  # a joint part: a-major
        for i, within in zip(coords, offsets):
            coord = layout.coordinates[i]
            out[:, i] = coord.grid()[cells[:, i] * per_cell[i] + within]
            if coord.is_binned:
                out[:, i] += rng.uniform(-1.0, 1.0, n) / coord.levels
    return np.clip(out, -1.0, 1.0)


def with_tilt(field: PairwiseField, layout: EncodingLayout, tilt_potentials: np.ndarray,
              tilt_pairs: tuple[tuple[int, int], ...]) -> PairwiseField:
    """The field times a cell tilt's weights exp(-sum lambda) as one field: the tilt's tables (1-way, then the
    measured pairs) are among the field's, so its potentials subtract cell for cell."""
    s = _structure(layout, field.numeric_bins, field.pairs)
    tilt_starts = table_starts(layout, field.numeric_bins, tilt_pairs)  # the tilt's own layout of the same cells
    one_way_cells = int(s.sizes.sum())
    combined = field.potentials.copy()
    combined[:one_way_cells] -= tilt_potentials[:one_way_cells]
    position = {pair: p for p, pair in enumerate(field.pairs)}
    for (a, b), tilt_start in zip(tilt_pairs, tilt_starts[layout.d :]):
        cells = int(s.sizes[a] * s.sizes[b])
        start = s.starts[layout.d + position[(a, b)]]
        combined[start : start + cells] -= tilt_potentials[tilt_start : tilt_start + cells]
    return replace(field, potentials=combined)
