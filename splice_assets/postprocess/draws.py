"""Drawing rows from a post-processed model (``SyntheticModel``) in the cube encoding: the mixture's draws, matched
onto the 1-way targets (``match_to_marginals``), its links redrawn, resampled by its cell tilt or drawn from its
pairwise field (``matched_rows``). Post-processing reads these rows under the public seed (the tilt's pools, the
field's chains); ``sampling`` turns them into a table.

Rows are drawn in the cube encoding: component by the weights, each discrete coordinate exactly on its grid
levels, the continuous block as mu + U g + sqrt(D) g' (vectorised per component), then clipped to [-1, 1].
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import cast

import numpy as np

from splice_assets.cell_kernels import (
    alias_tables,
    assign_by_counts,
    clip_to_cells,
    draw_levels,
    level_values,
)
from splice_assets.kinds import kind_of
from splice_assets.layout import (
    Coordinate,
    EncodingLayout,
    coordinate_cells,
    data_layout,
    layout_for,
)
from splice_assets.model.fit import MarginalTargets
from splice_assets.model.mixture import MixtureParameters
from splice_assets.model.product_em import simplex_projection
from splice_assets.postprocess.field import sample_cells, values_in_cells, with_tilt
from splice_assets.postprocess.links import Link, redraw_linked
from splice_assets.postprocess.synthetic_model import SyntheticModel
from splice_assets.postprocess.tilt import cell_log_weights, pool_log_weights, systematic_resample
from splice_assets.schema import TableSchema

# Spread of the continuous part around each component's mean when sampling is matched onto the marginals.
# The fit bounds every sd by (1 - |mean|) / 6 only to keep its closed-form moments bounded; sampling does not
# need that bound, and matching restores the 1-way marginals, so widening smooths the joint ("lumpy" narrow
# components) without moving them. 1.5 lowered the 2-way and 3-way TVD; 2.0 lowered them further but lost TSTR
# and MMD (docs/decisions/0005). Measured with Gaussian numerics: with the default
# histogram numerics the model has no continuous coordinate, so the spread has nothing to act on.
MATCHED_SPREAD = 1.5
#: Output rows per resampling chunk of a tilted model (its pool is ``pool_factor`` times larger).
TILT_CHUNK_ROWS = 25_000
#: Default threads that resample a tilted model's chunks: every core this process may run on (each chunk draws from
#: its own stream, so the output does not depend on the number).
SAMPLING_THREADS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def matched_rows(
    model: SyntheticModel,
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


def _cells_suffice(model: SyntheticModel, tilt_bins: int, bins: int) -> bool:
    """Whether a tilted model's pools can be kept as levels and cells (``matched_rows``): no links (they redraw
    values), every coordinate discrete or binned, each bin inside one of the ``bins`` measured cells, and the tilt
    on those cells."""
    return (not model.links and tilt_bins == bins and not len(model.layout.continuous_index)
            and all(c.levels % bins == 0 for c in model.layout.coordinates if c.is_binned))


def proposal_rows(
    model: SyntheticModel,
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
    model: SyntheticModel,
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
    model: SyntheticModel, n_rows: int, rng: np.random.Generator, spread: float = 1.0, out: np.ndarray | None = None,
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
    model: SyntheticModel, n_rows: int, rng: np.random.Generator, out: np.ndarray | None = None,
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
        if c.role == "value" and kind_of(specs[c.column].kind).integral and specs[c.column].scale == "linear"
        and not specs[c.column].knots
    }


def _target_tilted_rows(
    model: SyntheticModel,
    n_rows: int,
    rng: np.random.Generator,
    integer_bounds: Mapping[int, tuple[float, float]] | None,
    spread: float,
    threads: int,
) -> np.ndarray:
    """``matched_rows`` of a model with a target tilt: per chunk of ``TILT_CHUNK_ROWS`` output rows, the model's rows
    without it, ``pool_factor`` per output row, resampled by its weights (``chain.fit_target_tilt``), then matched
    onto the 1-way targets again (the resampling holds them only to their noise; docs/decisions/0049)."""
    tilt, inner, layout = model.target_tilt, replace(model, target_tilt=None), data_layout(model.layout)
    assert tilt is not None and model.marginal_targets is not None
    out = np.empty((n_rows, layout.d), order="F")
    for start in range(0, n_rows, TILT_CHUNK_ROWS):
        rows = min(TILT_CHUNK_ROWS, n_rows - start)
        pool = matched_rows(inner, tilt.pool_factor * rows, rng, integer_bounds, spread, threads)
        log_w = pool_log_weights(tilt.potentials, pool, layout, tilt.numeric_bins, tilt.pairs, tilt.triples)
        out[start : start + rows] = pool[systematic_resample(log_w, rows, rng)]
    return match_to_marginals(out, model.layout, model.marginal_targets, rng, integer_bounds, model.links, out=out)
