"""Resolution below the coarse bins: the public fine cells of every numeric column, and the post-processing that
draws a sampled value inside its coarse bin from the column's noisy fine table.

A numeric column's fine cells are a function of its public schema entry and ``fine_bins`` only:

- a column on a public grid (an integer column, or one with a declared ``step``) with at most ``fine_bins`` grid
  values in its bounds: one cell per grid value, plus one per declared exact value off the grid;
- otherwise: one cell per declared exact value (``values``: 0, a top-code; ``sentinels``: codes such as "not
  tested"), then ``fine_bins`` equal-width intervals of the bounds for every other value.

Each cell lies inside one coarse bin (``fine_bins`` is a multiple of the coarse bin count; a point is in the bin
that holds it), so the model keeps choosing the coarse bin of every value (and with it the dependence) and the
fine table only says where inside the bin the value sits. The fine tables are 1-way histograms of the one
Gaussian measurement (``private.measuring``): each measured row adds 1 to one cell of its column's table (a
missing value to none), at the 1-way tables' weight.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from splice_assets.layout import DEFAULT_NUMERIC_BINS, at_point, cube_of, layout_for, step_range, value_of
from splice_assets.measurement import Measurement
from splice_assets.schema import ColumnSpec, TableSchema

DEFAULT_FINE_BINS = 256
#: A column on a public grid (integers, a declared ``step``) gets one fine cell per grid value up to this many values
#: (or ``fine_bins``, if larger); beyond it, intervals. 1,024 helped pol and cost churn (docs/decisions/0025).
GRID_LIMIT = 256
#: Finer cells per fine interval in the second fine table (0 = one fine table only). Off by default: measured in
#: docs/decisions/0017, it helps columns whose public bounds are far wider than their data and costs the others.
DEFAULT_FINE_SPLIT = 0
MAX_FINE_SPLIT = 64
MAX_FINE_BINS = 4096
#: Fine cells whose noisy frequency is at most this many noise standard deviations are read as empty before the
#: projection (0 = the projection alone, measured best in docs/decisions/0017).
DEFAULT_FINE_THRESHOLD = 0.0
#: Shrink each coarse bin's noisy fine cells toward the bin's coarse shape before the projection (``_shrunk``).
DEFAULT_FINE_SHRINK = True
#: Numeric pairs at least this rank-correlated in their noisy coarse table share their draws inside the bins.
DEFAULT_FINE_COUPLING = 0.9


@dataclass(frozen=True)
class FineCells:
    """The public fine cells of one numeric column: ``points`` (exact values, data units, sorted), then
    ``intervals`` equal-width intervals of the (encoded) bounds; ``parents`` is the coarse bin of each cell. With
    ``split`` > 0 the column has a second, finer table: every interval cut into ``split`` equal sub-intervals. Its
    table block holds the ``n_cells`` fine cells, then the ``intervals * split`` finer ones."""

    column: str
    coordinate: int
    missing: int | None
    lo: float
    hi: float
    integer: bool
    points: tuple[float, ...]
    intervals: int
    parents: tuple[int, ...]
    scale: str = "linear"
    split: int = 0
    #: Index of the column's sentinel coordinate and its ``sentinels``, if it has any: a row at a sentinel keeps it
    #: exactly and is not redrawn.
    exact: int | None = None
    declared: tuple[float, ...] = ()

    @property
    def n_cells(self) -> int:
        return len(self.points) + self.intervals

    @property
    def size(self) -> int:
        return self.n_cells + self.intervals * self.split

    @property
    def tables(self) -> int:
        """How many 1-way tables the column's block holds (each row adds 1 to at most one cell of each)."""
        return 1 + int(self.intervals * self.split > 0)

    def finer_of(self, z: np.ndarray) -> np.ndarray:
        """Finer cell (in [0, intervals * split)) of every cube value ``z``, read only for values in an interval."""
        finer = self.intervals * self.split
        z = np.clip(np.nan_to_num(z, nan=0.0), -1.0, 1.0)
        return np.minimum(np.floor((z + 1.0) * finer / 2.0), finer - 1).astype(np.int64)

    def values(self, z: np.ndarray) -> np.ndarray:
        return value_of(z, self.lo, self.hi, self.scale)

    def cube(self, values: np.ndarray) -> np.ndarray:
        return cube_of(values, self.lo, self.hi, self.scale)

    def cells_of(self, z: np.ndarray) -> np.ndarray:
        """Fine cell of every cube value ``z`` in [-1, 1] (a deterministic public map)."""
        z = np.clip(np.nan_to_num(z, nan=0.0), -1.0, 1.0)
        values = self.values(z)
        points = np.asarray(self.points, dtype=np.float64)
        if self.intervals == 0:  # a grid: the nearest grid point
            if len(points) == 1:
                return np.zeros(len(z), dtype=np.int64)
            right = np.clip(np.searchsorted(points, values), 1, len(points) - 1)
            nearer_left = values - points[right - 1] <= points[right] - values
            return np.where(nearer_left, right - 1, right).astype(np.int64)
        cells = len(points) + np.minimum(np.floor((z + 1.0) * self.intervals / 2.0), self.intervals - 1)
        cells = cells.astype(np.int64)
        for i, point in enumerate(points):
            cells[at_point(values, point, self.lo, self.hi)] = i
        return cells

    def holds_values(self) -> np.ndarray:
        """Which cells can hold a value: all but the intervals of an integer column with no integer inside (narrow
        intervals of a log scale near its lower bound)."""
        ok = np.ones(self.n_cells, dtype=bool)
        if self.integer and self.intervals:
            first, last = self._integers(np.arange(self.intervals))
            ok[len(self.points):] = first <= last
        return ok

    def _integers(self, intervals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """First and last integer inside each of the given intervals (last < first: none); the last interval holds
        the upper bound."""
        start = self.values(-1.0 + 2.0 * intervals / self.intervals)
        stop = self.values(-1.0 + 2.0 * (intervals + 1) / self.intervals)
        last = np.where(intervals == self.intervals - 1, np.floor(self.hi + 1e-9), np.ceil(stop - 1e-9) - 1.0)
        return np.ceil(start - 1e-9), last

    def ordered(self) -> np.ndarray:
        """Cell indices in the order of their values (a point before an interval that starts at it)."""
        starts = -1.0 + 2.0 * np.arange(self.intervals) / max(self.intervals, 1)
        keys = np.concatenate([self.cube(np.asarray(self.points, dtype=np.float64)), starts])
        ties = np.concatenate([np.zeros(len(self.points)), np.ones(self.intervals)])
        return np.lexsort((ties, keys))

    def at(self, cells: np.ndarray, position: np.ndarray) -> np.ndarray:
        """Cube values at ``position`` in [0, 1) inside the given fine cells: a point exactly, an interval at that
        fraction of its (encoded) width; on an integer column the integer at that fraction of those inside it."""
        out = np.empty(len(cells))
        n_points = len(self.points)
        is_point = cells < n_points
        out[is_point] = self.cube(np.asarray(self.points, dtype=np.float64)[cells[is_point]])
        j, fraction = cells[~is_point] - n_points, position[~is_point]
        start = -1.0 + 2.0 * j / max(self.intervals, 1)
        stop = -1.0 + 2.0 * (j + 1) / max(self.intervals, 1)
        if self.integer:
            first, last = self._integers(j)
            last = np.maximum(last, first)  # an interval holding no integer (never drawn): its nearest one
            out[~is_point] = self.cube(np.minimum(first + np.floor(fraction * (last - first + 1.0)), last))
        else:
            out[~is_point] = start + fraction * (stop - start)
        return out


def _grid(spec: ColumnSpec, limit: int) -> np.ndarray | None:
    """The public grid values of a column inside its bounds, if it has a grid of at most ``limit`` values."""
    assert spec.bounds is not None
    step = spec.step if spec.step is not None else (1.0 if spec.kind == "integer" else None)
    if step is None:
        return None
    first, last = step_range(*spec.bounds, step)
    if last - first + 1 > limit or last < first:
        return None
    return np.arange(first, last + 1, dtype=np.float64) * step


def column_fine_cells(
    spec: ColumnSpec, coordinate: int, missing: int | None, fine_bins: int, numeric_bins: int = DEFAULT_NUMERIC_BINS,
    split: int = 0,
) -> FineCells:
    """The fine cells of one numeric column (see the module docstring). Before its ``auto`` bounds are resolved, a
    column has ``fine_bins`` placeholder intervals (the plan's weights depend only on the number of tables)."""
    if spec.bounds is None:
        return FineCells(spec.name, coordinate, missing, -1.0, 1.0, spec.kind == "integer", (), fine_bins,
                         tuple(int(p) for p in np.arange(fine_bins) * numeric_bins // fine_bins), split=split)
    lo, hi = spec.bounds
    declared = [v for v in spec.exact_values if lo <= v <= hi]
    grid = _grid(spec, max(fine_bins, GRID_LIMIT))
    if grid is not None:
        points, intervals = np.unique(np.concatenate([grid, declared])), 0
    else:
        points, intervals = np.unique(np.asarray(declared, dtype=np.float64)), fine_bins
    cube = cube_of(points, lo, hi, spec.scale)
    point_parents = np.minimum(np.floor((np.clip(cube, -1.0, 1.0) + 1.0) * numeric_bins / 2.0), numeric_bins - 1)
    interval_parents = np.arange(intervals) * numeric_bins // max(intervals, 1)
    parents = np.concatenate([point_parents, interval_parents]).astype(np.int64)
    return FineCells(spec.name, coordinate, missing, float(lo), float(hi), spec.kind == "integer",
                     tuple(float(p) for p in points), intervals, tuple(int(p) for p in parents), spec.scale,
                     split if intervals else 0)


def fine_cells(
    schema: TableSchema, fine_bins: int, numeric_bins: int = DEFAULT_NUMERIC_BINS, split: int = 0
) -> tuple[FineCells, ...]:
    """The fine cells of every numeric column of a (resolved) schema, intervals cut into ``split`` finer cells
    (0 = no finer tables); none when ``fine_bins`` is 0."""
    if isinstance(fine_bins, bool) or not isinstance(fine_bins, int) or fine_bins < 0:
        raise ValueError(f"fine_bins must be an integer >= 0 (0 = no fine tables), got {fine_bins!r}")
    if fine_bins == 0:
        return ()
    if fine_bins % numeric_bins:
        raise ValueError(f"fine_bins must be a multiple of the {numeric_bins} coarse bins, got {fine_bins!r}")
    layout = layout_for(schema)
    position = {(c.column, c.role): i for i, c in enumerate(layout.coordinates)}
    return tuple(
        dataclasses.replace(
            column_fine_cells(spec, position[(spec.name, "value")], position.get((spec.name, "missing")), fine_bins,
                              numeric_bins, split),
            exact=position.get((spec.name, "exact")), declared=spec.sentinels,
        )
        for spec in schema.columns
        if spec.is_numeric
    )


def per_column(frequencies: np.ndarray, cells: tuple[FineCells, ...]) -> list[np.ndarray]:
    """Concatenated fine tables split into each column's block (``fine_cells`` order)."""
    sizes = [c.size for c in cells]
    if sum(sizes) != frequencies.size:
        raise ValueError(f"the fine tables hold {frequencies.size} cells but the schema implies {sum(sizes)}")
    return list(np.split(np.asarray(frequencies, dtype=np.float64), np.cumsum(sizes)[:-1]))


@dataclass(frozen=True)
class FineTables:
    """The noisy fine tables of a measurement (concatenated in ``fine_cells`` order) and their noise std: public
    mechanism output, stored with the model. ``threshold`` (in noise std) reads a cell at or below it as empty."""

    frequencies: np.ndarray
    noise_std: float
    fine_bins: int
    threshold: float = DEFAULT_FINE_THRESHOLD
    split: int = 0
    #: (follower, leader, sign) positions in ``fine_cells`` order: the follower's draw inside its bin is the
    #: leader's (sign +1) or its mirror (-1); see ``choose_couplings``.
    couplings: tuple[tuple[int, int, int], ...] = ()
    shrink: bool = DEFAULT_FINE_SHRINK

    def per_column(self, cells: tuple[FineCells, ...]) -> list[np.ndarray]:
        return per_column(self.frequencies, cells)

    def kept(self, table: np.ndarray) -> np.ndarray:
        """A column's fine table with cells at or below the threshold set to 0 (post-processing)."""
        return np.where(table > self.threshold * self.noise_std, table, 0.0)

    def consistent(
        self, column: FineCells, table: np.ndarray, coarse: np.ndarray | None = None,
        numeric_bins: int = DEFAULT_NUMERIC_BINS,
    ) -> tuple[np.ndarray, np.ndarray]:
        """A column's fine and finer tables made consistent (post-processing): the cells of each coarse bin
        (thresholded, ``kept``) projected onto the non-negative tables summing to the bin's mass in ``coarse`` (the
        noisy coarse 1-way table; default: the fine cells' own sum), then each interval's finer cells onto that
        interval's mass. The Euclidean projection is a soft threshold whose level the sum sets, so it removes
        the noise of many empty cells in a sparse bin and little of a smooth one. A sentinel's cell is left out
        (its rows sit on it through the sentinel coordinate), and so is its mass from the bin's."""
        fine = np.where(column.holds_values(), self.kept(table[: column.n_cells]), 0.0)
        declared = np.isin(np.arange(column.n_cells), [column.points.index(v) for v in column.declared
                                                       if v in column.points])
        parents = np.asarray(column.parents)
        weights = np.zeros(column.n_cells)
        inside_of = [np.flatnonzero((parents == bin_) & ~declared) for bin_ in range(numeric_bins)]
        points = [np.clip(fine[(parents == bin_) & declared], 0.0, None).sum() for bin_ in range(numeric_bins)]
        masses = np.array([fine[inside].sum() if coarse is None else max(coarse[bin_] - points[bin_], 0.0)
                           for bin_, inside in enumerate(inside_of)])
        for bin_, inside in enumerate(inside_of):
            if len(inside):
                cells = fine[inside]
                if self.shrink:
                    cells = _shrunk(cells, _bin_shape(masses, bin_, len(inside)), self.noise_std)
                weights[inside] = _project(cells[None, :], np.array([masses[bin_]]))[0]
        finer = self.kept(table[column.n_cells :])
        if finer.size:
            children = _project(finer.reshape(column.intervals, column.split), weights[len(column.points) :])
            finer = children.ravel()
        return weights, finer

    def refine(
        self, x: np.ndarray, cells: tuple[FineCells, ...], rng: np.random.Generator,
        coarse: list[np.ndarray] | None = None, numeric_bins: int = DEFAULT_NUMERIC_BINS,
    ) -> np.ndarray:
        """Rows ``x`` (cube) with every present numeric value redrawn inside its coarse bin from the column's
        consistent fine tables (``consistent``; ``coarse``: each column's noisy coarse table) restricted to that
        bin, by the inverse of their distribution function at a uniform draw; coupled columns (``couplings``) share
        their draw, so their values keep their order inside the bins. A bin whose fine cells are all empty keeps
        its values as drawn."""
        out = x.copy()
        uniforms = rng.uniform(size=(len(x), len(cells)))
        for follower, leader, sign in self.couplings:
            uniforms[:, follower] = uniforms[:, leader] if sign > 0 else 1.0 - uniforms[:, leader]
        for c, (column, table) in enumerate(zip(cells, self.per_column(cells))):
            weights, finer = self.consistent(column, table, None if coarse is None else coarse[c], numeric_bins)
            order = column.ordered()
            parents = np.asarray(column.parents)[order]
            z = np.clip(out[:, column.coordinate], -1.0, 1.0)
            row_bins = np.minimum(np.floor((z + 1.0) * numeric_bins / 2.0), numeric_bins - 1).astype(np.int64)
            present = np.ones(len(x), dtype=bool) if column.missing is None else out[:, column.missing] <= 0.0
            if column.exact is not None:  # a row at a sentinel (its coordinate's level) sits on it exactly
                levels = len(column.declared) + 1
                level = np.rint((np.clip(out[:, column.exact], -1, 1) + 1.0) * (levels - 1) / 2.0).astype(np.int64)
                on_point = present & (level > 0)
                declared = column.cube(np.asarray(column.declared, dtype=np.float64))
                out[on_point, column.coordinate] = declared[level[on_point] - 1]
                present &= level == 0
            for bin_ in np.unique(row_bins[present]):
                inside = order[parents == bin_]
                mass = weights[inside]
                if not mass.sum() > 0:
                    continue
                rows = np.flatnonzero(present & (row_bins == bin_))
                cdf = np.cumsum(mass) / mass.sum()
                u = uniforms[rows, c]
                k = np.minimum(np.searchsorted(cdf, u, side="right"), len(inside) - 1)  # skips empty cells
                below = np.where(k > 0, cdf[np.maximum(k - 1, 0)], 0.0)
                position = np.clip((u - below) / np.maximum(cdf[k] - below, 1e-300), 0.0, 1.0 - 1e-12)
                if finer.size:
                    position = _inside_interval(inside[k] - len(column.points), position, finer, column.split)
                out[rows, column.coordinate] = column.at(inside[k], position)
        return out


def _shrunk(cells: np.ndarray, target: np.ndarray, noise_std: float, spike: float = 3.0) -> np.ndarray:
    """A coarse bin's noisy fine cells shrunk toward ``target`` (the bin's mass spread along the slope its
    neighbours show, ``_bin_shape``) by positive-part James-Stein, which never raises the expected squared error for
    three or more cells; spikes (cells more than ``spike`` noise std above the target: exact values held by many
    rows) are left alone, and the others' target holds the bin's mass less theirs. Without it the projection alone
    zeroes every cell whose count is below the bin's noise level, so a smooth integer column came out with half its
    values never drawn; with it cells the noise cannot tell apart follow the coarse shape (post-processing)."""
    out = cells.astype(np.float64, copy=True)
    rest = out <= target + spike * noise_std
    k = int(rest.sum())
    if k < 3 or not noise_std > 0:
        return out
    level = target[rest] * max(target.sum() - out[~rest].sum(), 0.0) / max(target[rest].sum(), 1e-300)
    residual = out[rest] - level
    spread = float(residual @ residual)
    factor = max(0.0, 1.0 - (k - 2) * noise_std**2 / spread) if spread > 0 else 0.0
    out[rest] = level + factor * residual
    return out


def _bin_shape(masses: np.ndarray, bin_: int, cells: int) -> np.ndarray:
    """The mass of coarse bin ``bin_`` spread over its ``cells`` equal cells along a straight density whose slope
    is the difference of the neighbouring bins' masses (a missing neighbour counts as this bin), clipped at 0."""
    here = max(float(masses[bin_]), 0.0)
    below = max(float(masses[bin_ - 1]), 0.0) if bin_ > 0 else here
    above = max(float(masses[bin_ + 1]), 0.0) if bin_ + 1 < len(masses) else here
    position = (np.arange(cells) + 0.5) / cells - 0.5
    density = np.clip(here + (above - below) / 2.0 * position, 0.0, None)
    total = density.sum()
    return density * (here / total) if total > 0 else np.full(cells, here / cells)


def _project(values: np.ndarray, totals: np.ndarray) -> np.ndarray:
    """Each row of ``values`` projected (Euclidean) onto the non-negative vectors summing to its ``totals`` entry
    (0 where the total is not positive): max(v - lambda, 0) with lambda set by the sum (Duchi et al. 2008)."""
    out = np.zeros_like(values)
    rows = np.flatnonzero(totals > 0)
    if not len(rows):
        return out
    v, t = values[rows], totals[rows]
    ordered = -np.sort(-v, axis=1)
    steps = (np.cumsum(ordered, axis=1) - t[:, None]) / np.arange(1, v.shape[1] + 1)
    last = (ordered > steps).sum(axis=1) - 1  # the largest j with v_(j) > (sum_{i<=j} v_(i) - t) / j
    level = steps[np.arange(len(rows)), np.maximum(last, 0)]
    out[rows] = np.maximum(v - level[:, None], 0.0)
    return out


def _inside_interval(interval: np.ndarray, position: np.ndarray, finer: np.ndarray, split: int) -> np.ndarray:
    """Positions in [0, 1) inside the chosen intervals (``interval`` < 0: a point, unchanged) re-drawn through the
    interval's kept finer table (inverse distribution function, ``position`` the uniform draw); an interval whose
    finer cells are all empty keeps its uniform position."""
    out = position.copy()
    rows = np.flatnonzero(interval >= 0)
    children = finer.reshape(-1, split)[interval[rows]]
    total = children.sum(axis=1)
    rows, children, total = rows[total > 0], children[total > 0], total[total > 0]
    cdf = np.cumsum(children, axis=1) / total[:, None]
    p = position[rows]
    k = np.minimum((cdf <= p[:, None]).sum(axis=1), split - 1)  # skips empty children
    taken = np.arange(len(rows))
    below = np.where(k > 0, cdf[taken, np.maximum(k - 1, 0)], 0.0)
    within = np.clip((p - below) / np.maximum(cdf[taken, k] - below, 1e-300), 0.0, 1.0 - 1e-12)
    out[rows] = np.minimum((k + within) / split, 1.0 - 1e-12)
    return out


def below_noise(
    measurement: Measurement, schema: TableSchema, sigmas: float = 2.0, limit: int = 20
) -> dict[str, list[Any]]:
    """What the noise hides, from the noisy statistics only: per column, the categories and the exact (declared or
    grid) values whose noisy frequency is below ``sigmas`` noise std, so the release cannot tell them from absent
    (at most ``limit`` per column, rarest first)."""
    floor = sigmas * measurement.marginal_noise_std()
    out: dict[str, list[Any]] = {}
    layout = layout_for(schema)
    for coordinate, table in zip(layout.coordinates, measurement.marginals()):
        spec = schema.column(coordinate.column)
        if spec.is_discrete and coordinate.role == "value" and spec.categories is not None:
            labels = [*spec.categories, *(["<missing>"] if spec.nullable else [])]
            out[spec.name] = [labels[i] for i in np.argsort(table) if table[i] < floor][:limit]
    if measurement.fine_sizes:
        cells = fine_cells(schema, measurement.fine_bins, measurement.numeric_bins, measurement.fine_split)
        for column, table in zip(cells, per_column(measurement.noisy_fine, cells)):
            points = table[: len(column.points)]
            out[column.column] = [column.points[i] for i in np.argsort(points) if points[i] < floor][:limit]
    return {name: values for name, values in out.items() if values}


def choose_couplings(
    noisy_pairs: np.ndarray, pairs: tuple[tuple[int, int], ...], sizes: tuple[int, ...],
    cells: tuple[FineCells, ...], minimum: float,
) -> tuple[tuple[int, int, int], ...]:
    """Numeric column pairs whose noisy coarse 2-way table has a rank correlation of at least ``minimum`` in absolute
    value (post-processing of mechanism output): each becomes a (follower, leader, sign) coupling, strongest first,
    a column following at most one leader and a leader following none."""
    if not 0.0 < minimum <= 1.0 or not pairs:
        return ()
    position = {column.coordinate: i for i, column in enumerate(cells)}
    candidates = []
    starts = np.concatenate([[0], np.cumsum([sizes[a] * sizes[b] for a, b in pairs])])
    for (a, b), start in zip(pairs, starts[:-1]):
        if a in position and b in position:
            table = np.clip(noisy_pairs[start : start + sizes[a] * sizes[b]].reshape(sizes[a], sizes[b]), 0.0, None)
            r = _rank_correlation(table)
            if abs(r) >= minimum:
                candidates.append((abs(r), position[a], position[b], 1 if r > 0 else -1))
    leaders: set[int] = set()
    followers: dict[int, tuple[int, int]] = {}
    for _, a, b, sign in sorted(candidates, reverse=True):
        for leader, follower in ((a, b), (b, a)):
            if follower not in followers and follower not in leaders and leader not in followers:
                followers[follower] = (leader, sign)
                leaders.add(leader)
                break
    return tuple((f, leader, sign) for f, (leader, sign) in sorted(followers.items()))


def _rank_correlation(table: np.ndarray) -> float:
    """Spearman correlation of a 2-way frequency table (mid-ranks of the rows' and columns' cells)."""
    total = table.sum()
    if not total > 0:
        return 0.0
    p = table / total
    ranks = []
    for margin in (p.sum(axis=1), p.sum(axis=0)):
        ranks.append(np.cumsum(margin) - margin / 2.0)
    ra, rb = ranks
    pa, pb = p.sum(axis=1), p.sum(axis=0)
    mean_a, mean_b = ra @ pa, rb @ pb
    cov = (ra - mean_a) @ p @ (rb - mean_b)
    var = ((ra - mean_a) ** 2 @ pa) * ((rb - mean_b) ** 2 @ pb)
    return float(cov / math.sqrt(var)) if var > 0 else 0.0
