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
    marginal_cells,
    marginal_sizes,
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


#: Gibbs sweeps each row of a conditioned pairwise field takes (``condition_model``): its chains start from the
#: unconditional fit's states, so they need more sweeps than the fitted field's own to forget where they started.
CONDITIONED_SWEEPS = 10
#: A conditioned field starts its rows from the fitted chains that already meet the condition when at least this
#: many do (else from all of them: the first sweep moves every clamped coordinate into the condition).
MIN_CONDITIONED_CHAINS = 256
#: Weight, in pool rows, of the mixture's closed-form 1-way laws in ``condition_model``'s sampled ones.
PRIOR_ROWS = 200
#: Cells of pool rows (rows x coordinates) ``condition_model`` draws at most for each of its two pools.
POOL_CELLS = 20_000_000


@dataclass(frozen=True)
class ConditionedModel:
    """``condition_model``'s result: the model conditioned, and the probability of the condition under it."""

    model: SyntheticModel
    #: P(condition) under the mixture: sum_k pi_k P_k(condition) (exact, closed form).
    probability: float
    #: The least share, over the conditioned coordinates, of the 1-way targets' mass inside the condition: matching
    #: maps every coordinate onto its target, so a condition the targets leave no mass cannot be met.
    target_probability: float


def condition_model(model: SyntheticModel, level_weights: Mapping[int, np.ndarray],
                    rng: np.random.Generator | None = None, pool_rows: int | None = None,
                    matched: bool = True) -> ConditionedModel:
    """The model conditioned on per-coordinate level weights (``conditions.Conditions.level_weights``: coordinate of
    ``model.layout`` -> a weight in [0, 1] per level, the share of the level inside the condition), for sampling it
    with the unchanged sampler (``sampling.sample_table``). Each stage:

    - **Mixture** (exact): component k's weight becomes pi_k P_k(C) / P(C), and each conditioned coordinate's (or
      joint part's) level table in k becomes its law restricted to the condition, P_k(level) w(level) / P_k(C).
    - **Cell tilt, target tilt** (exact up to the resampling's finite pool): p(x | C) is proportional to
      q(x | C) exp(-sum lambda), so resampling a pool of the conditioned mixture by the unchanged tilt weights draws
      the tilted model's conditional law.
    - **Pairwise field** (exact up to the Gibbs chains' mixing): each conditioned coordinate's 1-way potentials add
      log w of its cells (a cell outside: -1e6, so a sweep never draws it), so the field's Gibbs sweeps are clamped
      to the condition; rows start from the fitted chains that meet it and take ``CONDITIONED_SWEEPS`` sweeps.
      Values inside the cells come from the conditioned mixture given the cells. In a cell the range covers only
      in part, the cell's weight is the covered share of its width (uniform inside the cell, the mixture's own
      within-cell law is not): a residual at the range's two end cells only.
    - **Links**: where the sampler redraws a link's target from its source's cell (``matched``, no field), a
      condition on the target weights the source's cells by the link's mass inside it instead of weighting the
      mixture's own target levels, and the link's table is restricted to the condition.
    - **Matching**: the rank matching onto the noisy 1-way targets is a whole-sample map that moves each coordinate
      from the model's marginal p_j to the target t_j. Under the condition every coordinate is matched onto the
      model's conditional marginal instead. On an ordered coordinate (a binned numeric, an ordinal) that is the
      conditional law p_j(. | C) carried by the same map (``_transported``: the monotone coupling of p_j onto t_j,
      which the matching applies to each row in the limit). On a categorical coordinate (its order is the
      schema's and means nothing) and on a link's (matched by fewest moves, not by rank) it is
      t_j(b) p_j(b | C) / p_j(b), the same per-cell correction t_j / p_j applied to the conditional law: the rows
      the unconditional matching moves into a short category from its neighbour in the schema's order are left
      out on purpose. p_j and p_j(. | C) are the tilted model's (or the tilted field's): with ``rng``, from two
      pools of ``pool_rows`` rows (default 200,000, fewer past ``POOL_CELLS`` cells), the model's and the
      conditioned model's (mixture draws with their links redrawn, weighted by the tilt; or the tilted field's
      cells), each pooled with the mixture's closed form as a prior of ``PRIOR_ROWS`` rows; without ``rng`` or a
      tilt, the mixture's closed form. A conditioned coordinate's target is its target restricted to the
      condition. The residual: the pools' noise, the pools being unmatched where the tilt was fitted on matched
      ones, and the target tilt's weights, which the pools leave out.
    """
    layout, p = model.layout, model.params
    if len(layout.continuous_index):
        raise ValueError("conditional sampling needs a model with histogram numerics (no continuous coordinates)")
    K = p.K
    position = {int(i): t for t, i in enumerate(layout.discrete_index)}
    joint_of = {i: u for u, pair in enumerate(p.joint_pairs) for i in pair}
    weights = {int(i): np.asarray(w, dtype=np.float64) for i, w in level_weights.items()}
    for i, w in weights.items():
        if w.shape != (layout.coordinates[i].levels,):
            raise ValueError(f"coordinate {i}: {len(w)} level weights for {layout.coordinates[i].levels} levels")
    bins = model.marginal_targets.numeric_bins if model.marginal_targets is not None else 0
    mixture_weights = dict(weights)
    # ``matched``: the sampler matches the rows, and redraws its links' targets unless it draws from a field.
    redrawn = {link.target: link for link in model.links} if matched and model.field is None and bins else {}
    for target, link in redrawn.items():  # the sampler redraws the target from the link given its source's cell:
        if target in weights:  # the condition on it weights the source's cells by the link's mass inside it
            on_source = link.conditional @ _cell_weights(layout.coordinates[target], weights[target], bins)
            source = layout.coordinates[link.source]
            on_levels = np.repeat(on_source, source.levels // len(on_source))
            mixture_weights[link.source] = mixture_weights.get(link.source, np.ones(source.levels)) * on_levels
            del mixture_weights[target]
    ones = lambda i: np.ones(layout.coordinates[i].levels)  # noqa: E731
    probs = [np.asarray(table, dtype=np.float64) for table in p.probs]
    joints = [np.asarray(table, dtype=np.float64) for table in p.joint]
    factor = np.ones(K)
    for u, (a, b) in enumerate(p.joint_pairs):
        if a in mixture_weights or b in mixture_weights:
            w_ab = np.outer(mixture_weights.get(a, ones(a)), mixture_weights.get(b, ones(b)))
            table = joints[u] * w_ab[None]
            mass = table.sum(axis=(1, 2))
            factor *= mass
            joints[u] = _restricted(table.reshape(K, -1), mass, w_ab.ravel()).reshape(table.shape)
            probs[position[a]], probs[position[b]] = joints[u].sum(axis=2), joints[u].sum(axis=1)
    for i, w in mixture_weights.items():
        if i not in joint_of:
            table = probs[position[i]] * w[None, :]
            mass = table.sum(axis=1)
            factor *= mass
            probs[position[i]] = _restricted(table, mass, w)
    probability = float(np.dot(p.weights, factor))
    component_weights = p.weights * factor / probability if probability > 0 else np.asarray(p.weights)
    params = replace(p, weights=component_weights, probs=tuple(probs), joint=tuple(joints))
    conditioned = replace(model, params=params)
    if model.field is not None:
        field = model.field
        values_layout = data_layout(layout)
        sizes = marginal_sizes(values_layout, field.numeric_bins)
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        potentials = np.array(field.potentials, dtype=np.float64)
        meets = np.ones(len(field.chains), dtype=bool)
        for i, w in weights.items():
            cell_w = _cell_weights(layout.coordinates[i], w, field.numeric_bins)
            potentials[starts[i] : starts[i] + sizes[i]] += np.where(cell_w > 0, np.log(np.maximum(cell_w, 1e-300)),
                                                                     -1e6)
            meets &= cell_w[np.asarray(field.chains[:, i], dtype=np.int64)] > 0
        chains = field.chains[meets] if meets.sum() >= MIN_CONDITIONED_CHAINS else field.chains
        conditioned = replace(conditioned, field=replace(field, potentials=potentials, chains=chains,
                                                         sweeps=max(field.sweeps, CONDITIONED_SWEEPS)))
    if model.links and any(link.target in weights for link in model.links):
        links = []
        for link in model.links:
            if link.target in weights:
                cell_w = _cell_weights(layout.coordinates[link.target], weights[link.target],
                                       link.conditional.shape[1])
                table = link.conditional * cell_w[None, :]
                link = replace(link, conditional=_restricted(table, table.sum(axis=1), cell_w))
            links.append(link)
        conditioned = replace(conditioned, links=tuple(links))
    target_probability = 1.0
    if model.marginal_targets is not None:
        targets = model.marginal_targets
        before = _mixture_cells(layout, p.weights, p.probs, bins)
        after = _mixture_cells(layout, component_weights, probs, bins)
        for target, link in redrawn.items():  # a redrawn target's law: its source's, through the link
            before[target] = before[link.source] @ link.conditional
            after[target] = after[link.source] @ next(x for x in conditioned.links if x.target == target).conditional
        if rng is not None and model.tilt is not None and model.tilt.numeric_bins == bins:
            # The tilted (or field) model's 1-way laws, from pools: the mixture's, as a prior of PRIOR_ROWS rows.
            if pool_rows is None:
                pool_rows = max(20_000, min(200_000, POOL_CELLS // layout.d))
            prior = PRIOR_ROWS / (PRIOR_ROWS + pool_rows)
            before = [prior * m + (1 - prior) * s for m, s in zip(before, _tilted_cells(model, pool_rows, rng))]
            after = [prior * m + (1 - prior) * s for m, s in zip(after, _tilted_cells(conditioned, pool_rows, rng))]
        frequencies = []
        linked = {i for link in model.links for i in (link.source, link.target)}  # matched by fewest moves
        for i, freq in enumerate(targets.per_coordinate(layout)):
            cell_w = _cell_weights(layout.coordinates[i], weights[i], bins) if i in weights else np.ones(len(freq))
            projected = simplex_projection(freq)
            if i in weights:
                target_probability = min(target_probability, float(projected @ cell_w))
            coord = layout.coordinates[i]
            if i not in weights and i not in linked and (coord.is_binned or coord.ordered):  # an ordered coordinate:
                conditional = _transported(after[i], before[i], projected)  # the matching's monotone map
            else:
                supported = before[i] > 1e-12
                ratio = np.where(supported, after[i] / np.where(supported, before[i], 1.0), cell_w)
                conditional = projected * ratio
            if not conditional.sum() > 0:  # the targets leave no mass where the conditioned mixture has some
                conditional = after[i] if i not in weights else projected * cell_w
            frequencies.append(conditional / max(conditional.sum(), 1e-300))
        conditioned = replace(conditioned, marginal_targets=replace(targets, frequencies=np.concatenate(frequencies)))
    return ConditionedModel(conditioned, probability, target_probability)


def _restricted(table: np.ndarray, mass: np.ndarray, fallback: np.ndarray) -> np.ndarray:
    """Rows of ``table`` (already weighted) normalised by their ``mass``; a row with none takes ``fallback``
    normalised (its component then has weight 0, so it is never drawn)."""
    spare = fallback / max(float(fallback.sum()), 1e-300)
    return np.where(mass[:, None] > 0, table / np.where(mass > 0, mass, 1.0)[:, None], spare[None, :])


def _cell_weights(coord: Coordinate, level_weights: np.ndarray, numeric_bins: int) -> np.ndarray:
    """A coordinate's level weights on its measured cells: a binned coordinate's levels refine its ``numeric_bins``
    equal-width cells, so a cell's weight is the mean of its levels' (equal widths)."""
    if coord.is_binned:
        return level_weights.reshape(numeric_bins, -1).mean(axis=1)
    return level_weights


def _mixture_cells(layout: EncodingLayout, weights: np.ndarray, probs: Sequence[np.ndarray],
                   numeric_bins: int) -> list[np.ndarray]:
    """Each coordinate's 1-way law under the mixture on its measured cells (a binned coordinate's levels summed per
    cell)."""
    out = []
    for t, i in enumerate(layout.discrete_index):
        marginal = np.asarray(weights, dtype=np.float64) @ np.asarray(probs[t], dtype=np.float64)
        coord = layout.coordinates[int(i)]
        out.append(marginal.reshape(numeric_bins, -1).sum(axis=1) if coord.is_binned else marginal)
    return out


def _tilted_cells(model: SyntheticModel, n_rows: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Each coordinate's 1-way law on its measured cells under the tilted model, from ``n_rows`` rows: the tilted
    field's cells, or mixture draws weighted by the tilt (``condition_model``)."""
    tilt, layout = model.tilt, data_layout(model.layout)
    assert tilt is not None
    if model.field is not None:
        cells = sample_cells(with_tilt(model.field, layout, tilt.potentials, tilt.pairs), layout, n_rows, rng)
        weights = None
    else:
        rows = unmatched_draws(model, n_rows, rng)
        if model.links:
            rows = redraw_linked(rows, layout, tilt.numeric_bins, model.links, rng)
        cells = marginal_cells(rows, layout, tilt.numeric_bins)
        log_w = cell_log_weights(tilt.potentials, cells, layout, tilt.numeric_bins, tilt.pairs)
        weights = np.exp(log_w - log_w.max())
    sizes = marginal_sizes(layout, tilt.numeric_bins)
    out = []
    for i, size in enumerate(sizes):
        counts = np.bincount(cells[:, i], weights=weights, minlength=size)[:size]
        out.append(counts / max(float(counts.sum()), 1e-300))
    return out


def _transported(law: np.ndarray, source: np.ndarray, target: np.ndarray) -> np.ndarray:
    """``law`` (on ordered cells) carried by the monotone coupling of ``source`` onto ``target``: what rank matching
    does to rows drawn from ``law`` when the whole sample follows ``source``. Cell a sends to cell b the share of its
    quantile interval [S_(a-1), S_a) that lies in b's, [T_(b-1), T_b)."""
    s = np.concatenate([[0.0], np.cumsum(source)]) / max(float(np.sum(source)), 1e-300)
    t = np.concatenate([[0.0], np.cumsum(target)]) / max(float(np.sum(target)), 1e-300)
    overlap = np.clip(np.minimum(s[1:, None], t[None, 1:]) - np.maximum(s[:-1, None], t[None, :-1]), 0.0, None)
    width = s[1:] - s[:-1]
    kernel = np.where(width[:, None] > 0, overlap / np.where(width > 0, width, 1.0)[:, None], np.eye(len(law)))
    return law @ kernel
