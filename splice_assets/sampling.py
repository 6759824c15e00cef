"""Sampling rows from a fitted mixture, decoding them to a table, and storing/loading fitted models.

Rows are drawn in the cube encoding: component by the weights, each discrete coordinate exactly on its grid
levels, the continuous block as mu + U g + sqrt(D) g' (vectorised per component), then clipped to [-1, 1].
A model is stored as ``<stem>.npz`` (arrays) + ``<stem>.json`` (layout, config and fit record).
"""

from __future__ import annotations

import json
import math
import os
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd

from splice_assets.cell_kernels import (
    alias_tables,
    assign_by_counts,
    clip_to_cells,
    draw_levels,
    level_values,
)
from splice_assets.engine import Engine, LocalEngine
from splice_assets.layout import (
    Coordinate,
    EncodingLayout,
    coordinate_cells,
    data_layout,
    decode,
    layout_for,
)
from splice_assets.model.fit import FitConfig, FittedMixture, MarginalTargets
from splice_assets.model.mixture import MixtureParameters
from splice_assets.model.product_em import simplex_projection
from splice_assets.postprocess.field import (
    FieldChoice,
    PairwiseField,
    sample_cells,
    values_in_cells,
    with_tilt,
)
from splice_assets.postprocess.links import Link, redraw_linked
from splice_assets.postprocess.tilt import (
    CellTilt,
    cell_log_weights,
    pool_log_weights,
    systematic_resample,
)
from splice_assets.resolution import FineTables, fine_cells
from splice_assets.schema import TableSchema

# Model files: version 2 is written only for a model with joint parts, a pairwise field or fine tables, so that a
# reader that predates them refuses the file instead of silently sampling without them; every other model stays 1.
FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)
# Spread of the continuous part around each component's mean when sampling is matched onto the marginals.
# The fit bounds every sd by (1 - |mean|) / 6 only to keep its closed-form moments bounded; sampling does not
# need that bound, and matching restores the 1-way marginals, so widening smooths the joint ("lumpy" narrow
# components) without moving them. Measured at eps = 1, one fit each, spread 1 -> 1.5: adult 2-way TVD
# 0.100 -> 0.092, 3-way 0.205 -> 0.189, SW1 0.0060 -> 0.0058, TSTR AUC 0.843 -> 0.847; california 2-way
# 0.192 -> 0.168, 3-way 0.369 -> 0.327, SW1 0.0091 -> 0.0086, TSTR R^2 0.614 -> 0.617, MMD 0.019 -> 0.021.
# (2.0 gave lower TVD still but lost california TSTR and MMD.) Measured with Gaussian numerics: with the default
# histogram numerics the model has no continuous coordinate, so the spread has nothing to act on.
MATCHED_SPREAD = 1.5
#: Output rows per resampling chunk of a tilted model (its pool is ``pool_factor`` times larger).
TILT_CHUNK_ROWS = 25_000
#: Default threads that resample a tilted model's chunks: every core this process may run on (each chunk draws from
#: its own stream, so the output does not depend on the number).
SAMPLING_THREADS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
# Stream of the public seed that draws values inside their coarse bins (distinct from the rows' stream).
_TAG_FINE = 0xF1E5_B001


def sample_cube(
    model: FittedMixture,
    n_rows: int,
    seed: int,
    match_marginals: bool = True,
    integer_bounds: Mapping[int, tuple[float, float]] | None = None,
    spread: float = MATCHED_SPREAD,
    threads: int | None = None,
) -> np.ndarray:
    """``n_rows`` rows (n, d) in [-1, 1] from the fitted mixture; deterministic given ``seed``, whatever the
    ``threads`` (default ``SAMPLING_THREADS``).

    When the rows are matched, continuous deviations from each component's mean are scaled by ``spread``
    (see ``MATCHED_SPREAD``); unmatched samples are draws from the fitted model itself.

    With ``match_marginals`` (default) and noisy 1-way marginals in the model, each coordinate is then re-mapped
    onto them keeping row ranks (``match_to_marginals``): post-processing of mechanism outputs, no privacy cost.
    The mixture then supplies the dependence (the rank order), the noisy marginals the 1-way distributions.
    Measured on adult at eps = 1 (moments-only fit, share 0.3): 1-/2-/3-way TVD 0.015 / 0.098 / 0.201 with it,
    SW1 0.008, MMD 0.016, TSTR AUC 0.83; without marginals at all (the paper's method) 0.27 / 0.45 / 0.60.

    A model with a cell tilt (``tilt``) is sampled, when matched, by ``matched_rows``: from its pairwise field
    tilted, if it has one, else by resampling matched mixture draws by their tilt weights.
    """
    if n_rows < 0:
        raise ValueError(f"n_rows must be >= 0, got {n_rows}")
    if not spread >= 1.0:
        raise ValueError(f"spread must be >= 1, got {spread!r}")
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x5A3B1E]))
    matched = match_marginals and model.marginal_targets is not None and n_rows > 0
    if not matched or model.tilt is None:
        return mixture_draws(model, n_rows, rng, matched, integer_bounds, spread)
    return matched_rows(model, n_rows, rng, integer_bounds, spread, threads)


def matched_rows(
    model: FittedMixture,
    n_rows: int,
    rng: np.random.Generator,
    integer_bounds: Mapping[int, tuple[float, float]] | None = None,
    spread: float = MATCHED_SPREAD,
    threads: int | None = None,
) -> np.ndarray:
    """The matched rows of a tilted model (``sample_cube`` after its checks), in chunks of ``TILT_CHUNK_ROWS`` output
    rows, matched onto the 1-way targets at the end. With a pairwise field, the tilt's weights fold into the
    field's potentials (``field.with_tilt``) and the rows are Gibbs draws from that field, values inside their cells
    from the mixture. Without one, ``tilt.pool_factor`` matched mixture draws per output row are resampled by
    their tilt weights: chunk i from its own stream of ``rng`` (``Generator.spawn``), on ``threads`` threads
    (default ``SAMPLING_THREADS``; the compiled loops release the GIL), the same rows on any number of them."""
    threads = SAMPLING_THREADS if threads is None else threads
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"sampling threads must be an integer >= 1, got {threads!r}")
    if model.target_tilt is not None:
        return _target_tilted_rows(model, n_rows, rng, integer_bounds, spread, threads)
    tilt, layout = model.tilt, data_layout(model.layout)
    if tilt is None or model.marginal_targets is None:
        raise ValueError("matched_rows needs a model with a cell tilt and 1-way targets")
    bins, targets = model.marginal_targets.numeric_bins, model.marginal_targets
    out = np.empty((n_rows, layout.d), order="F")
    starts = range(0, n_rows, TILT_CHUNK_ROWS)
    if model.field is not None:
        tilted_field = with_tilt(model.field, layout, tilt.potentials, tilt.pairs)
        for start in starts:
            cells = sample_cells(tilted_field, layout, min(TILT_CHUNK_ROWS, n_rows - start), rng)
            out[start : start + len(cells)] = values_in_cells(model.params, model.layout, cells,
                                                              tilted_field.numeric_bins, rng)
    elif not _cells_suffice(model, tilt.numeric_bins, bins):
        for start in starts:
            rows = min(TILT_CHUNK_ROWS, n_rows - start)
            pool = proposal_rows(model, tilt.pool_factor * rows, rng, integer_bounds, spread)
            log_w = pool_log_weights(tilt.potentials, pool, layout, tilt.numeric_bins, tilt.pairs)
            out[start : start + rows] = pool[systematic_resample(log_w, rows, rng)]
    else:
        frequencies = targets.per_coordinate(model.layout)
        tables = _discrete_tables(model.layout, model.params)
        buffers = threading.local()  # each thread's pool levels and cells, reused by its chunks (a fresh 20 MB pool
        # per chunk is paged in afresh each time: at 10^6 rows 40% of sampling went to page faults)

        def resampled_chunk(start: int, stream: np.random.Generator) -> None:
            """The pool as levels and matched cells (the cells ``match_to_marginals`` gives ``proposal_rows``' draws,
            without their values); only the rows kept get values, placed in their cells."""
            rows = min(TILT_CHUNK_ROWS, n_rows - start)
            size = tilt.pool_factor * rows
            if not hasattr(buffers, "levels"):
                shape = (tilt.pool_factor * min(TILT_CHUNK_ROWS, n_rows), layout.d)
                buffers.levels, buffers.cells = (np.empty(shape, np.int64, order="F") for _ in range(2))
            _, levels = discrete_levels(model, size, stream, buffers.levels[:size], tables)
            cells = buffers.cells[:size]
            for i, (coord, freq) in enumerate(zip(model.layout.coordinates, frequencies)):
                cells[:, i] = assign_by_counts(levels[:, i], coord.levels, target_counts(freq, size), stream)
            kept = systematic_resample(cell_log_weights(tilt.potentials, cells, layout, bins, tilt.pairs), rows, stream)
            values = np.empty((rows, layout.d))
            level_values(levels[kept], model.layout.discrete_index, tables.grids, tables.grid_offsets, tables.jitter,
                         stream, values)
            place_in_cells(values, cells[kept], model.layout, bins, stream, integer_bounds,
                           out=out[start : start + rows])

        streams = rng.spawn(len(starts))
        if len(starts) > 1 and threads > 1:
            with ThreadPoolExecutor(min(threads, len(starts))) as executor:
                list(executor.map(resampled_chunk, starts, streams))
        else:
            for start, stream in zip(starts, streams):
                resampled_chunk(start, stream)
    return match_to_marginals(out, model.layout, targets, rng, integer_bounds, model.links, out=out)


def _cells_suffice(model: FittedMixture, tilt_bins: int, bins: int) -> bool:
    """Whether a tilted model's pools can be kept as levels and cells (``matched_rows``): no links (they redraw
    values), every coordinate discrete or binned, each bin inside one of the ``bins`` measured cells, and the tilt
    on those cells."""
    return (not model.links and tilt_bins == bins and not len(model.layout.continuous_index)
            and all(c.levels % bins == 0 for c in model.layout.coordinates if c.is_binned))


def proposal_rows(
    model: FittedMixture,
    n_rows: int,
    rng: np.random.Generator,
    integer_bounds: Mapping[int, tuple[float, float]] | None = None,
    spread: float = MATCHED_SPREAD,
) -> np.ndarray:
    """The pool the cell tilt is fitted on: the pairwise field's rows when the model has one (its cells, values
    inside them from the mixture), else matched draws from the mixture."""
    if model.field is None:
        return mixture_draws(model, n_rows, rng, True, integer_bounds, spread)
    cells = sample_cells(model.field, data_layout(model.layout), n_rows, rng)
    return values_in_cells(model.params, model.layout, cells, model.field.numeric_bins, rng)


def mixture_draws(
    model: FittedMixture,
    n_rows: int,
    rng: np.random.Generator,
    matched: bool,
    integer_bounds: Mapping[int, tuple[float, float]] | None = None,
    spread: float = MATCHED_SPREAD,
) -> np.ndarray:
    """``n_rows`` draws from the mixture itself (no tilt); if ``matched``, the model's links redrawn (``links``)
    and every coordinate matched onto the 1-way targets."""
    out = unmatched_draws(model, n_rows, rng, spread if matched else 1.0)
    if matched and model.marginal_targets is not None and n_rows > 0:
        layout, targets = model.layout, model.marginal_targets
        out = match_to_marginals(out, layout, targets, rng, integer_bounds)
        if model.links:  # sources on their matched cells first; matching again moves few rows
            out = redraw_linked(out, data_layout(layout), targets.numeric_bins, model.links, rng)
            out = match_to_marginals(out, layout, targets, rng, integer_bounds, model.links)
    return out


def unmatched_draws(
    model: FittedMixture, n_rows: int, rng: np.random.Generator, spread: float = 1.0, out: np.ndarray | None = None,
) -> np.ndarray:
    """``n_rows`` draws from the mixture, clipped to the cube, continuous deviations from a component's mean scaled
    by ``spread``; written to ``out`` (n_rows, d) if given."""
    layout, p = model.layout, model.params
    tables = _discrete_tables(layout, p)
    component, levels = discrete_levels(model, n_rows, rng, tables=tables)
    out = np.empty((n_rows, layout.d)) if out is None else out
    if len(layout.discrete_index):
        level_values(levels, layout.discrete_index, tables.grids, tables.grid_offsets, tables.jitter, rng, out)
    cont = layout.continuous_index
    if len(cont):
        for c in range(p.K):
            rows = np.flatnonzero(component == c)
            g = rng.standard_normal((len(rows), p.R)) if p.R else np.zeros((len(rows), 0))
            deviation = g @ p.factors[c].T + rng.standard_normal((len(rows), len(cont))) * np.sqrt(p.diag[c])
            out[np.ix_(rows, cont)] = np.clip(p.means[c] + spread * deviation, -1.0, 1.0)
    return out


def discrete_levels(
    model: FittedMixture, n_rows: int, rng: np.random.Generator, out: np.ndarray | None = None,
    tables: _DiscreteTables | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Each row's mixture component and the levels of its discrete coordinates (a binned one's: its bin), as
    (n_rows,) and (n_rows, d) int64 (continuous coordinates' columns unset; ``out`` if given). ``tables``: the
    model's ``_discrete_tables``, if the caller has them."""
    component = _draw_index(model.params.weights, n_rows, rng)  # independent draws: the rows come in random order
    levels = np.empty((n_rows, model.layout.d), dtype=np.int64) if out is None else out
    if len(model.layout.discrete_index):
        t = _discrete_tables(model.layout, model.params) if tables is None else tables
        draw_levels(component, rng, t.keep, t.alias, t.offsets, t.sizes, t.first, t.second, t.second_levels, levels)
    return component, levels


@dataclass(frozen=True)
class _DiscreteTables:
    """A mixture's discrete parts as ``cell_kernels.draw_levels`` and ``level_values`` read them: per draw group (a
    discrete coordinate, or a joint part's two) the alias tables of its K distributions, flattened, and per
    coordinate its grid points and, if binned, its bins' half-width."""

    keep: np.ndarray
    alias: np.ndarray
    offsets: np.ndarray
    sizes: np.ndarray
    first: np.ndarray
    second: np.ndarray
    second_levels: np.ndarray
    grids: np.ndarray
    grid_offsets: np.ndarray
    jitter: np.ndarray


def _discrete_tables(layout: EncodingLayout, p: MixtureParameters) -> _DiscreteTables:
    joint = {i: (pair, table) for pair, table in zip(p.joint_pairs, p.joint) for i in pair}
    as_int = lambda values: np.array(values, dtype=np.int64)  # noqa: E731
    groups: list[tuple[np.ndarray, int, int, int]] = []  # (K, cells) table, first, second, second's levels
    for t, i in enumerate(layout.discrete_index):
        if i not in joint:
            groups.append((p.probs[t], int(i), -1, 1))
        elif i == joint[i][0][0]:
            (a, b), table = joint[i]
            groups.append((table.reshape(p.K, -1), a, b, table.shape[2]))
    sizes = as_int([table.shape[1] for table, *_ in groups])
    offsets = as_int(np.cumsum([0] + [table.size for table, *_ in groups])[:-1])
    probabilities = np.concatenate([np.asarray(table, dtype=np.float64).ravel() for table, *_ in groups])
    keep, alias = alias_tables(probabilities, offsets, sizes, p.K)
    grids = [c.grid() if c.is_discrete else np.zeros(0) for c in layout.coordinates]
    jitter = np.array([1.0 / c.levels if c.is_binned else 0.0 for c in layout.coordinates])
    return _DiscreteTables(
        keep=keep,
        alias=alias,
        offsets=offsets,
        sizes=sizes,
        first=as_int([g[1] for g in groups]),
        second=as_int([g[2] for g in groups]),
        second_levels=as_int([g[3] for g in groups]),
        grids=np.concatenate(grids),
        grid_offsets=as_int(np.cumsum([0] + [len(grid) for grid in grids])[:-1]),
        jitter=jitter,
    )


def _draw_index(probabilities: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` draws of an index from a probability vector (inverse CDF)."""
    cdf = np.cumsum(probabilities)
    return np.minimum(np.searchsorted(cdf / cdf[-1], rng.random(n), side="right"), len(cdf) - 1)


def target_counts(frequencies: np.ndarray, n_rows: int) -> np.ndarray:
    """Integer cell counts summing to ``n_rows`` from noisy frequencies (simplex projection, largest remainder)."""
    raw = simplex_projection(frequencies) * n_rows
    counts = np.floor(raw).astype(np.int64)
    short = n_rows - counts.sum()
    counts[np.argsort(counts - raw, kind="stable")[:short]] += 1
    return counts


def match_to_marginals(
    cube: np.ndarray,
    layout: EncodingLayout,
    targets: MarginalTargets,
    rng: np.random.Generator,
    integer_bounds: Mapping[int, tuple[float, float]] | None = None,
    links: Sequence[Link] = (),
    out: np.ndarray | None = None,
) -> np.ndarray:
    """Re-map every coordinate onto its noisy 1-way marginal, keeping the order of the rows' values, one column at a
    time; column-major, in ``out`` if given (which may be ``cube`` itself).

    Rows are sorted by value (ties broken at random) and cut into consecutive runs of the target cell counts, and
    the values are then placed in those cells (``place_in_cells``). Joint structure is kept as far as ranks carry
    it. A discrete coordinate is sorted by its cell, and a binned one of a model's layout (``layout`` with binned
    coordinates) by its bin in the model, whose value inside the bin is a uniform draw that carries no order. Both
    are matched by counts, without sorting (``cell_kernels.assign_by_counts``).

    The two coordinates of a link (``links``) are matched with the fewest moves instead (``fewest_moves``), guided
    by the link's table: shifting ranks would move rows to neighbouring cells and break the pair.
    """
    out = _column_major(cube, out)
    n, bins = len(cube), targets.numeric_bins
    frequencies = targets.per_coordinate(layout)
    partners = _link_partners(links, frequencies)
    values_layout = data_layout(layout)  # a binned coordinate's cells are the measured bins of its values
    cells_of = lambda i: coordinate_cells(out[:, i], values_layout.coordinates[i], bins)  # noqa: E731
    linked = {i: cells_of(i) for i in partners}  # a link's cells, its partner's once matched
    for i, (coord, freq) in enumerate(zip(layout.coordinates, frequencies)):
        counts = target_counts(freq, n)
        current = linked[i] if i in partners else cells_of(i)
        if i in partners:
            partner, affinity = partners[i]
            assigned = linked[i] = fewest_moves(current, counts, rng, affinity, linked[partner])
        elif coord.is_binned:  # ordered by the model's finer bins, at random inside them
            finer = np.minimum(np.floor((np.clip(out[:, i], -1.0, 1.0) + 1.0) * coord.levels / 2.0), coord.levels - 1)
            assigned = assign_by_counts(finer.astype(np.int64), coord.levels, counts, rng)
        elif coord.is_discrete:
            assigned = assign_by_counts(current, len(counts), counts, rng)
        else:
            shuffled = rng.permutation(n)
            order = shuffled[np.argsort(out[shuffled, i], kind="quicksort")]  # ties broken at random by the shuffle
            assigned = np.empty(n, dtype=np.int64)
            assigned[order] = np.repeat(np.arange(len(counts)), counts)
        _place_column(out, i, coord, assigned, current, bins, rng, integer_bounds or {}, i in partners)
    return out


def place_in_cells(
    cube: np.ndarray,
    cells: np.ndarray,
    layout: EncodingLayout,
    numeric_bins: int,
    rng: np.random.Generator,
    integer_bounds: Mapping[int, tuple[float, float]] | None = None,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """``cube``'s values moved into ``cells`` (every coordinate's matched cell), column-major (in ``out`` if given,
    which may be ``cube`` itself); see ``_place_column``."""
    out = _column_major(cube, out)
    for i, (coord, value_coord) in enumerate(zip(layout.coordinates, data_layout(layout).coordinates)):
        current = coordinate_cells(out[:, i], value_coord, numeric_bins)
        _place_column(out, i, coord, cells[:, i], current, numeric_bins, rng, integer_bounds or {}, False)
    return out


def _column_major(cube: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    if out is None:
        out = np.empty(np.shape(cube), order="F")  # column-contiguous: the matching works one column at a time
    if out is not cube:
        out[...] = cube  # (np.array(cube, order="F") is 9x slower at 10^6 rows)
    return out


def _place_column(
    out: np.ndarray, i: int, coord: Coordinate, assigned: np.ndarray, current: np.ndarray, numeric_bins: int,
    rng: np.random.Generator, integer_bounds: Mapping[int, tuple[float, float]], relocate: bool,
) -> None:
    """Column i's values moved from their ``current`` cells into the ``assigned`` ones.

    A discrete coordinate takes its cell's grid level. A numeric value already inside its cell stays; one outside
    is clipped to the cell (so spikes at the public bounds survive), or, for a binned coordinate of a model's layout
    (whose position inside a cell carries no order) and with ``relocate`` (a link's, moved to a cell its partner
    favours, not next door), takes a uniform position inside it. ``integer_bounds`` (coordinate -> public bounds of
    an integer column) makes those values land on an integer inside their cell, so rounding at decode time cannot
    move them to the next cell.
    """
    if coord.is_discrete and not coord.is_binned:
        out[:, i] = coord.grid()[assigned]
        return
    if coord.is_binned or relocate:  # a moved value: uniform inside its new cell
        moved = np.flatnonzero(assigned != current)
        out[moved, i] = -1.0 + (assigned[moved] + rng.random(len(moved))) * 2.0 / numeric_bins
    if i in integer_bounds:
        out[:, i] = _integers_in_cells(out[:, i], assigned, numeric_bins, *integer_bounds[i])
    else:
        clip_to_cells(out[:, i], assigned, numeric_bins)


def _link_partners(
    links: Sequence[Link], frequencies: Sequence[np.ndarray]
) -> dict[int, tuple[int, np.ndarray]]:
    """Coordinate -> (its link partner, affinity: partner cell x own cell). The target's affinity is the link's
    conditional; the source's is its reverse by Bayes' rule with the source's (projected) 1-way target."""
    partners: dict[int, tuple[int, np.ndarray]] = {}
    for link in links:
        joint = link.conditional * simplex_projection(frequencies[link.source])[:, None]
        partners[link.target] = (link.source, link.conditional)
        partners[link.source] = (link.target, joint.T / np.maximum(joint.sum(axis=0), 1e-300)[:, None])
    return partners


def fewest_moves(
    cells: np.ndarray,
    counts: np.ndarray,
    rng: np.random.Generator,
    affinity: np.ndarray,
    partner_cells: np.ndarray,
) -> np.ndarray:
    """``cells`` changed in as few rows as possible (the summed surplus) to hold ``counts`` per cell.

    The rows that leave a cell in surplus are those whose partner cell gives it the least affinity (ties at
    random). Each draws a cell that is still short in proportion to its partner cell's affinity (by the shortfall
    if it has none for any short cell); a cell takes draws up to its shortfall, and the rows it turned away draw
    again. Every round fills at least one place, so the rounds end.
    """
    surplus = np.bincount(cells, minlength=len(counts)) - counts
    leaving = [np.zeros(0, dtype=np.int64)]
    for cell in np.flatnonzero(surplus > 0):
        rows = rng.permutation(np.flatnonzero(cells == cell))
        rows = rows[np.argsort(affinity[partner_cells[rows], cell], kind="stable")]
        leaving.append(rows[: surplus[cell]])
    out = cells.copy()
    short = np.maximum(-surplus, 0)
    pending = rng.permutation(np.concatenate(leaving))
    while len(pending):
        weights = affinity[partner_cells[pending]] * (short > 0)
        unsupported = ~(weights.sum(axis=1) > 0)
        weights[unsupported] = short
        cdf = np.cumsum(weights, axis=1)
        drawn = np.minimum((cdf <= rng.random((len(pending), 1)) * cdf[:, -1:]).sum(axis=1), len(short) - 1)
        order = np.argsort(drawn, kind="stable")  # pending is in random order: so is each cell's queue
        first = np.searchsorted(drawn[order], drawn[order])
        taken = np.zeros(len(pending), dtype=bool)
        taken[order] = np.arange(len(pending)) - first < short[drawn[order]]
        out[pending[taken]] = drawn[taken]
        short -= np.bincount(drawn[taken], minlength=len(short))
        pending = pending[~taken]
    return out


def _integers_in_cells(z: np.ndarray, cells: np.ndarray, bins: int, lo: float, hi: float) -> np.ndarray:
    """Cube values of the integers nearest to ``z`` (decoded over public bounds [lo, hi]) inside their ``cells``.

    A cell holding no integer (bins narrower than 1) keeps the nearest integer outside it.
    """
    first_int, last_int = math.ceil(lo), math.floor(hi)
    edges = lo + (hi - lo) * np.arange(bins + 1) / bins
    cell_bin = lambda v: np.minimum(np.floor((v - lo) / (hi - lo) * bins), bins - 1)  # the metrics' binning
    first = np.clip(np.ceil(edges[:-1]), first_int, last_int)
    first = np.where(cell_bin(first) < np.arange(bins), first + 1, first)  # float edge cases
    last = np.clip(np.ceil(edges[1:]) - 1, first_int, last_int)
    last[-1] = last_int
    last = np.where(cell_bin(last) > np.arange(bins), last - 1, last)
    raw = np.rint(lo + (np.clip(z, -1.0, 1.0) + 1.0) * (hi - lo) / 2.0)
    empty = first[cells] > last[cells]
    inside = np.clip(raw, first[cells], np.maximum(last[cells], first[cells]))
    values = np.clip(np.where(empty, raw, inside), first_int, last_int)
    return -1.0 + 2.0 * (values - lo) / (hi - lo)


def integer_coordinates(schema: TableSchema) -> dict[int, tuple[float, float]]:
    """Coordinate index -> public bounds of every linear integer column's value coordinate (a log-scale or knotted
    column's values are rounded when decoded, and placed on integers by its fine table)."""
    layout = layout_for(schema)
    specs = {spec.name: spec for spec in schema.columns}
    return {
        # An integer column's bounds are set (not None) once the schema is resolved.
        i: tuple(cast("tuple[float, float]", specs[c.column].bounds))  # type: ignore[misc]
        for i, c in enumerate(layout.coordinates)
        if c.role == "value" and specs[c.column].kind == "integer" and specs[c.column].scale == "linear"
        and not specs[c.column].knots
    }


def sample_table(
    model: FittedMixture, schema: TableSchema, n_rows: int, seed: int, match_marginals: bool = True,
    threads: int | None = None,
) -> pd.DataFrame:
    """Sample and decode into the schema's columns, order and dtypes. A model with fine tables then draws every
    numeric value inside its coarse bin from them (``resolution.FineTables.refine``, its own stream of ``seed``)."""
    _check_layout(model, schema)
    x = sample_cube(model, n_rows, seed, match_marginals, integer_coordinates(schema), threads=threads)
    return _refined_table(model, schema, x, seed)


def _target_tilted_rows(
    model: FittedMixture,
    n_rows: int,
    rng: np.random.Generator,
    integer_bounds: Mapping[int, tuple[float, float]] | None,
    spread: float,
    threads: int,
) -> np.ndarray:
    """``matched_rows`` of a model with a target tilt: per chunk of ``TILT_CHUNK_ROWS`` output rows, the model's rows
    without it, ``pool_factor`` per output row, resampled by its weights (``chain.fit_target_tilt``), then matched
    onto the 1-way targets again (the resampling holds them only to their noise: nursery's qtvd1 .0026 -> .0069)."""
    tilt, inner, layout = model.target_tilt, replace(model, target_tilt=None), data_layout(model.layout)
    assert tilt is not None and model.marginal_targets is not None
    out = np.empty((n_rows, layout.d), order="F")
    for start in range(0, n_rows, TILT_CHUNK_ROWS):
        rows = min(TILT_CHUNK_ROWS, n_rows - start)
        pool = matched_rows(inner, tilt.pool_factor * rows, rng, integer_bounds, spread, threads)
        log_w = pool_log_weights(tilt.potentials, pool, layout, tilt.numeric_bins, tilt.pairs, tilt.triples)
        out[start : start + rows] = pool[systematic_resample(log_w, rows, rng)]
    return match_to_marginals(out, model.layout, model.marginal_targets, rng, integer_bounds, model.links, out=out)


def _check_layout(model: FittedMixture, schema: TableSchema) -> None:
    if layout_for(schema) != data_layout(model.layout):
        raise ValueError(f"the model's layout does not match schema {schema.name!r}")


def _refined_table(model: FittedMixture, schema: TableSchema, x: np.ndarray, seed: int) -> pd.DataFrame:
    """``sample_table``'s rows ``x`` (cube, overwritten) refined inside their bins and decoded."""
    if model.fine is not None:
        rng = np.random.default_rng(np.random.SeedSequence([int(seed), _TAG_FINE]))
        cells = fine_cells(schema, model.fine.fine_bins, split=model.fine.split)
        coarse = None
        if model.marginal_targets is not None:  # the bins' masses the fine tables are made consistent with
            targets = model.marginal_targets.per_coordinate(model.layout)
            coarse = [np.clip(targets[column.coordinate], 0.0, None) for column in cells]
        x = model.fine.refine(x, cells, rng, coarse, in_place=True)
    return decode(x, schema)


#: Streams of the public seed: partition i of a partitioned sample draws from [seed, _TAG_PARTITION, i].
_TAG_PARTITION = 0x9A27_0001
#: Rows per Parquet file of a partitioned sample. Locally two files' rows are in memory at once (``write_partitions``):
#: at 500,000 rows that is what one file of 10^6 rows held before the files were pipelined (docs/decisions/0036).
DEFAULT_PARTITION_ROWS = 500_000


def partition_sizes(n_rows: int, rows_per_partition: int = DEFAULT_PARTITION_ROWS) -> list[int]:
    if not (isinstance(rows_per_partition, int) and rows_per_partition >= 1):
        raise ValueError(f"rows_per_partition must be an integer >= 1, got {rows_per_partition!r}")
    full, rest = divmod(int(n_rows), rows_per_partition)
    return [rows_per_partition] * full + ([rest] if rest else [])


def write_partitions(model: FittedMixture, schema: TableSchema, n_rows: int, seed: int, folder: str,
                     rows_per_partition: int = DEFAULT_PARTITION_ROWS, engine: Engine | None = None,
                     match_marginals: bool = True) -> list[str]:
    """``n_rows`` synthetic rows as Parquet files ``part-00000.parquet``, ... in ``folder`` (any fsspec URL), written
    in parallel on the ``engine``. Partition i samples from its own stream of the public seed, so each file is the
    same whatever the engine, the number of workers and the order they run in. Returns the files' URLs. On Dask
    each partition samples on one thread (its worker's). Locally a partition's draws run on every core while the
    previous partition is refined, decoded and written on one (those steps are mostly single-threaded: they were
    a third of a partition's time), so at most two partitions are in memory."""
    sizes = partition_sizes(n_rows, rows_per_partition)
    engine = engine or LocalEngine()
    if engine.name == "dask":
        return engine.map(_write_partition, list(enumerate(sizes)), model=model, schema=schema, seed=seed,
                          folder=folder, match_marginals=match_marginals, threads=1)
    _check_layout(model, schema)
    integer_bounds = integer_coordinates(schema)
    urls: list[str] = []
    with ThreadPoolExecutor(1) as finisher:
        writing = None
        for index, rows in enumerate(sizes):
            stream = _partition_stream(seed, index)
            x = sample_cube(model, rows, stream, match_marginals, integer_bounds)
            if writing is not None:
                urls.append(writing.result())
            writing = finisher.submit(_finish_partition, model, schema, x, stream, folder, index)
        if writing is not None:
            urls.append(writing.result())
    return urls


def _partition_stream(seed: int, index: int) -> int:
    return int(np.random.SeedSequence([int(seed), _TAG_PARTITION, index]).generate_state(1)[0])


def _write_partition(item: tuple[int, int], model: FittedMixture, schema: TableSchema, seed: int, folder: str,
                     match_marginals: bool, threads: int | None) -> str:
    index, rows = item
    stream = _partition_stream(seed, index)
    return _write_parquet(sample_table(model, schema, rows, stream, match_marginals, threads), folder, index)


def _finish_partition(model: FittedMixture, schema: TableSchema, x: np.ndarray, stream: int, folder: str,
                      index: int) -> str:
    return _write_parquet(_refined_table(model, schema, x, stream), folder, index)


def _write_parquet(table: pd.DataFrame, folder: str, index: int) -> str:
    import fsspec

    url = f"{folder.rstrip('/')}/part-{index:05d}.parquet"
    fs, path = fsspec.core.url_to_fs(url)
    fs.makedirs(fs._parent(path), exist_ok=True)
    with fs.open(path, "wb") as handle:
        table.to_parquet(handle, index=False)
    return url


def save_model(model: FittedMixture, stem: str | Path) -> tuple[Path, Path]:
    """Write ``<stem>.npz`` and ``<stem>.json``; returns both paths."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    npz, meta_path = stem.with_suffix(".npz"), stem.with_suffix(".json")
    p = model.params
    arrays: dict[str, Any] = {
        "weights": p.weights,
        "means": p.means,
        "factors": p.factors,
        "diag": p.diag,
        "loss_curve": model.loss_curve,
    }
    arrays.update({f"probs_{t}": table for t, table in enumerate(p.probs)})
    arrays.update({f"joint_{u}": table for u, table in enumerate(p.joint)})
    if model.marginal_targets is not None:
        arrays["marginal_frequencies"] = np.asarray(model.marginal_targets.frequencies, dtype=np.float64)
    if model.fine is not None:
        arrays["fine_frequencies"] = np.asarray(model.fine.frequencies, dtype=np.float64)
    tilt, target_tilt = model.tilt, model.target_tilt
    if tilt is not None:
        arrays["tilt_potentials"] = tilt.potentials
    if target_tilt is not None:
        arrays["target_tilt_potentials"] = target_tilt.potentials
    arrays.update({f"link_conditional_{i}": link.conditional for i, link in enumerate(model.links)})
    pairwise = model.field
    if pairwise is not None:
        arrays["field_potentials"], arrays["field_chains"] = pairwise.potentials, pairwise.chains
    np.savez(npz, **arrays)
    meta = {
        "format_version": FORMAT_VERSION if (p.joint_pairs or pairwise is not None or model.fine is not None
                                             or target_tilt is not None) else 1,
        "layout": [[c.column, c.role, c.levels] for c in model.layout.coordinates],
        "n_probs": len(p.probs),
        "joint_pairs": [list(pair) for pair in p.joint_pairs],
        "k": model.k,
        "final_loss": model.final_loss,
        "noise_floor": model.noise_floor,
        "steps": model.steps,
        "converged": model.converged,
        "device": model.device,
        "seconds": model.seconds,
        "seconds_per_step": model.seconds_per_step,
        "config": asdict(model.config),
        "marginal_weight": None if model.marginal_targets is None else model.marginal_targets.weight,
        "numeric_bins": None if model.marginal_targets is None else model.marginal_targets.numeric_bins,
        "tilt": None if tilt is None else _tilt_meta(tilt),
        "target_tilt": None if target_tilt is None else _tilt_meta(target_tilt),
        "links": [[link.source, link.target, link.strength] for link in model.links],
        "fine": None if model.fine is None else {
            "noise_std": model.fine.noise_std, "fine_bins": model.fine.fine_bins, "threshold": model.fine.threshold,
            "split": model.fine.split, "couplings": [list(c) for c in model.fine.couplings],
            "shrink": model.fine.shrink, "level_first": model.fine.level_first,
            "exponential_tails": model.fine.exponential_tails, "knot_shapes": model.fine.knot_shapes,
            "stratified": model.fine.stratified,
            "grid_weight": model.fine.grid_weight, "interval_weight": model.fine.interval_weight,
            "followers": list(model.fine.followers),
            "capacity_shapes": model.fine.capacity_shapes, "corrected_spikes": model.fine.corrected_spikes,
        },
        "field": None if pairwise is None else {
            "numeric_bins": pairwise.numeric_bins, "pairs": [list(pair) for pair in pairwise.pairs],
            "sweeps": pairwise.sweeps, "iterations": pairwise.iterations, "residual": pairwise.residual,
        },
        "field_choice": None if model.field_choice is None else asdict(model.field_choice),
    }
    meta_path.write_text(json.dumps(meta, indent=2, sort_keys=True))
    return npz, meta_path


def _tilt_meta(tilt: CellTilt) -> dict[str, Any]:
    """A cell tilt's JSON part (its potentials go to the npz)."""
    return {
        "numeric_bins": tilt.numeric_bins, "pairs": [list(pair) for pair in tilt.pairs],
        "triples": [list(triple) for triple in tilt.triples], "pool_factor": tilt.pool_factor,
        "chi2_start": tilt.chi2_start, "chi2_end": tilt.chi2_end, "iterations": tilt.iterations,
    }


def _tilt_from(tilt_meta: dict[str, Any] | None, data: Any, potentials: str) -> CellTilt | None:
    """Inverse of ``_tilt_meta`` with the npz's ``potentials`` array (models written before 0049 hold no triples)."""
    if tilt_meta is None:
        return None
    return CellTilt(
        numeric_bins=int(tilt_meta["numeric_bins"]),
        pairs=tuple((int(a), int(b)) for a, b in tilt_meta["pairs"]),
        potentials=data[potentials],
        pool_factor=int(tilt_meta["pool_factor"]),
        chi2_start=float(tilt_meta["chi2_start"]),
        chi2_end=float(tilt_meta["chi2_end"]),
        iterations=int(tilt_meta["iterations"]),
        triples=tuple((int(t), int(a), int(b)) for t, a, b in tilt_meta.get("triples", [])),
    )


def load_model(stem: str | Path) -> FittedMixture:
    """Inverse of ``save_model``."""
    stem = Path(stem)
    meta = json.loads(stem.with_suffix(".json").read_text())
    if meta.get("format_version") not in READABLE_VERSIONS:
        raise ValueError(f"model {str(stem)!r} has an unsupported format version")
    layout = EncodingLayout(tuple(Coordinate(col, role, int(levels)) for col, role, levels in meta["layout"]))
    with np.load(stem.with_suffix(".npz")) as data:
        params = MixtureParameters(
            weights=data["weights"],
            probs=tuple(data[f"probs_{t}"] for t in range(meta["n_probs"])),
            means=data["means"],
            factors=data["factors"],
            diag=data["diag"],
            joint_pairs=tuple((int(a), int(b)) for a, b in meta.get("joint_pairs", [])),
            joint=tuple(data[f"joint_{u}"] for u in range(len(meta.get("joint_pairs", [])))),
        )
        curve = data["loss_curve"]
        targets = None
        if "marginal_frequencies" in data:
            targets = MarginalTargets(
                data["marginal_frequencies"], float(meta["marginal_weight"]), int(meta["numeric_bins"])
            )
        tilt = _tilt_from(meta.get("tilt"), data, "tilt_potentials")
        target_tilt = _tilt_from(meta.get("target_tilt"), data, "target_tilt_potentials")
        links = tuple(
            Link(int(source), int(target), data[f"link_conditional_{i}"], float(strength))
            for i, (source, target, strength) in enumerate(meta.get("links", []))
        )
        fine_meta = meta.get("fine")
        if fine_meta is not None:
            _refuse_removed_fine_options(stem, fine_meta)
        fine = None if fine_meta is None else FineTables(
            data["fine_frequencies"], float(fine_meta["noise_std"]), int(fine_meta["fine_bins"]),
            float(fine_meta["threshold"]), int(fine_meta["split"]),
            tuple((int(f), int(l), float(r)) for f, l, r in fine_meta["couplings"]),
            shrink=bool(fine_meta.get("shrink", False)),  # models written before the shrinkage sample without it
            level_first=bool(fine_meta.get("level_first", False)),  # models written before it sample as they did
            exponential_tails=bool(fine_meta.get("exponential_tails", False)),
            stratified=bool(fine_meta.get("stratified", False)),
            knot_shapes=bool(fine_meta.get("knot_shapes", False)),
            grid_weight=int(fine_meta.get("grid_weight", 1)),
            interval_weight=int(fine_meta.get("interval_weight", 1)),
            followers=tuple(int(f) for f in fine_meta.get("followers", ())),
            capacity_shapes=bool(fine_meta.get("capacity_shapes", False)),  # written before it: as they did
            corrected_spikes=bool(fine_meta.get("corrected_spikes", False)),
        )
        field_meta = meta.get("field")
        pairwise = None if field_meta is None else PairwiseField(
            numeric_bins=int(field_meta["numeric_bins"]),
            pairs=tuple((int(a), int(b)) for a, b in field_meta["pairs"]),
            potentials=data["field_potentials"],
            chains=data["field_chains"],
            sweeps=int(field_meta["sweeps"]),
            iterations=int(field_meta["iterations"]),
            residual=float(field_meta["residual"]),
        )
    params.check(layout)
    known = {f.name for f in fields(FitConfig)}
    # Settings removed since the model was written (candidate_K, link_null, ...: issue 66) are dropped; the model
    # holds what they chose (its K, links and tables).
    cfg = {k: v for k, v in meta["config"].items() if k in known}
    return FittedMixture(
        layout=layout,
        params=params,
        k=int(meta["k"]),
        loss_curve=curve,
        final_loss=float(meta["final_loss"]),
        noise_floor=float(meta["noise_floor"]),
        steps=int(meta["steps"]),
        converged=bool(meta["converged"]),
        device=str(meta["device"]),
        seconds=float(meta["seconds"]),
        seconds_per_step=float(meta["seconds_per_step"]),
        config=FitConfig(**cfg),
        marginal_targets=targets,
        tilt=tilt,
        links=links,
        field=pairwise,
        fine=fine,
        target_tilt=target_tilt,
        field_choice=None if meta.get("field_choice") is None else FieldChoice(**meta["field_choice"]),
    )


#: FineTables options removed in issue 66 (docs/decisions/0037, 0057): models written before then carry them, false.
_REMOVED_FINE_OPTIONS = ("smooth", "tail_runs")


def _refuse_removed_fine_options(stem: Path, fine_meta: dict[str, Any]) -> None:
    """A model written with a removed fine-table option on would now sample differently: refused, naming it."""
    on = [name for name in _REMOVED_FINE_OPTIONS if fine_meta.get(name)]
    if on:
        raise ValueError(f"model {str(stem)!r} was written with the fine-table option(s) {on} on, removed in issue 66; "
                         "sample it with the release that wrote it")


def from_parameters(params: MixtureParameters, layout: EncodingLayout, k: int = 0) -> FittedMixture:
    """Wrap bare parameters (e.g. a hand-made model in a test) as a ``FittedMixture`` with an empty fit record."""
    params.check(layout)
    return FittedMixture(
        layout=layout,
        params=params,
        k=k,
        loss_curve=np.zeros(0),
        final_loss=float("nan"),
        noise_floor=float("nan"),
        steps=0,
        converged=False,
        device="cpu",
        seconds=0.0,
        seconds_per_step=0.0,
        config=FitConfig(K=params.K, R=params.R),
    )
