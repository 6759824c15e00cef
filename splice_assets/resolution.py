"""Resolution below the coarse bins: the public fine cells of every numeric column, and the post-processing that
draws a sampled value inside its coarse bin from the column's noisy fine table.

A numeric column's fine cells are a function of its public schema entry and ``fine_bins`` only:

- a column on a public grid (an integer column, or one with a declared ``step``) with at most ``fine_bins`` grid
  values in its bounds: one cell per grid value, plus one per declared exact value off the grid;
- otherwise: one cell per declared exact value (``values``: a sentinel, 0, a top code), then ``fine_bins``
  equal-width intervals of the bounds for every other value.

Each cell lies inside one coarse bin (``fine_bins`` is a multiple of the coarse bin count; a point is in the bin
that holds it), so the model keeps choosing the coarse bin of every value (and with it the dependence) and the
fine table only says where inside the bin the value sits. The fine tables are 1-way histograms of the one
Gaussian measurement (``private.measuring``): each measured row adds 1 to one cell of its column's table (a
missing value to none), at the 1-way tables' weight.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from splice_assets.layout import DEFAULT_NUMERIC_BINS, layout_for
from splice_assets.schema import ColumnSpec, TableSchema

DEFAULT_FINE_BINS = 256
MAX_FINE_BINS = 4096
#: Fine cells whose noisy frequency is at most this many noise standard deviations are read as empty.
DEFAULT_FINE_THRESHOLD = 1.0
#: Numeric pairs at least this rank-correlated in their noisy coarse table share their draws inside the bins.
DEFAULT_FINE_COUPLING = 0.9
#: Relative tolerance (of the bounds' width) within which a value is a declared point.
POINT_TOLERANCE = 1e-9


@dataclass(frozen=True)
class FineCells:
    """The public fine cells of one numeric column: ``points`` (exact values, data units, sorted), then
    ``intervals`` equal-width intervals of the bounds; ``parents`` is the coarse bin of each cell."""

    column: str
    coordinate: int
    missing: int | None
    lo: float
    hi: float
    integer: bool
    points: tuple[float, ...]
    intervals: int
    parents: tuple[int, ...]

    @property
    def size(self) -> int:
        return len(self.points) + self.intervals

    def cells_of(self, z: np.ndarray) -> np.ndarray:
        """Fine cell of every cube value ``z`` in [-1, 1] (a deterministic public map)."""
        z = np.clip(np.nan_to_num(z, nan=0.0), -1.0, 1.0)
        values = self.lo + (z + 1.0) * (self.hi - self.lo) / 2.0
        points = np.asarray(self.points, dtype=np.float64)
        if self.intervals == 0:  # a grid: the nearest grid point
            right = np.clip(np.searchsorted(points, values), 1, len(points) - 1) if len(points) > 1 else None
            if right is None:
                return np.zeros(len(z), dtype=np.int64)
            nearer_left = values - points[right - 1] <= points[right] - values
            return np.where(nearer_left, right - 1, right).astype(np.int64)
        cells = len(points) + np.minimum(np.floor((z + 1.0) * self.intervals / 2.0), self.intervals - 1)
        cells = cells.astype(np.int64)
        tolerance = POINT_TOLERANCE * (self.hi - self.lo)
        for i, point in enumerate(points):
            cells[np.abs(values - point) <= tolerance] = i
        return cells

    def ordered(self) -> np.ndarray:
        """Cell indices in the order of their values (a point before an interval that starts at it)."""
        width = (self.hi - self.lo) / max(self.intervals, 1)
        keys = np.concatenate([np.asarray(self.points, dtype=np.float64), self.lo + np.arange(self.intervals) * width])
        ties = np.concatenate([np.zeros(len(self.points)), np.ones(self.intervals)])
        return np.lexsort((ties, keys))

    def at(self, cells: np.ndarray, position: np.ndarray) -> np.ndarray:
        """Cube values at ``position`` in [0, 1) inside the given fine cells: a point exactly, an interval at that
        fraction of its width (integer columns: the integer at that fraction of the integers inside it)."""
        out = np.empty(len(cells))
        n_points = len(self.points)
        is_point = cells < n_points
        out[is_point] = np.asarray(self.points, dtype=np.float64)[cells[is_point]]
        j, fraction = cells[~is_point] - n_points, position[~is_point]
        width = (self.hi - self.lo) / max(self.intervals, 1)
        start, stop = self.lo + j * width, self.lo + (j + 1) * width
        if self.integer:
            first = np.ceil(start)
            last = np.maximum(np.ceil(stop) - 1.0, first)
            out[~is_point] = np.minimum(first + np.floor(fraction * (last - first + 1.0)), last)
        else:
            out[~is_point] = start + fraction * (stop - start)
        return -1.0 + 2.0 * (out - self.lo) / (self.hi - self.lo)


def _grid(spec: ColumnSpec, limit: int) -> np.ndarray | None:
    """The public grid values of a column inside its bounds, if it has a grid of at most ``limit`` values."""
    assert spec.bounds is not None
    step = spec.step if spec.step is not None else (1.0 if spec.kind == "integer" else None)
    if step is None:
        return None
    lo, hi = spec.bounds
    first, last = math.ceil(lo / step - 1e-9), math.floor(hi / step + 1e-9)
    if last - first + 1 > limit or last < first:
        return None
    return np.arange(first, last + 1, dtype=np.float64) * step


def column_fine_cells(
    spec: ColumnSpec, coordinate: int, missing: int | None, fine_bins: int, numeric_bins: int = DEFAULT_NUMERIC_BINS
) -> FineCells:
    """The fine cells of one numeric column (see the module docstring). Before its ``auto`` bounds are resolved, a
    column has ``fine_bins`` placeholder intervals (the plan's weights depend only on the number of tables)."""
    if spec.bounds is None:
        return FineCells(spec.name, coordinate, missing, -1.0, 1.0, spec.kind == "integer", (), fine_bins,
                         tuple(int(p) for p in np.arange(fine_bins) * numeric_bins // fine_bins))
    lo, hi = spec.bounds
    declared = [v for v in spec.values if lo <= v <= hi]
    grid = _grid(spec, fine_bins)
    if grid is not None:
        points, intervals = np.unique(np.concatenate([grid, declared])), 0
    else:
        points, intervals = np.unique(np.asarray(declared, dtype=np.float64)), fine_bins
    cube = -1.0 + 2.0 * (points - lo) / (hi - lo)
    point_parents = np.minimum(np.floor((np.clip(cube, -1.0, 1.0) + 1.0) * numeric_bins / 2.0), numeric_bins - 1)
    interval_parents = np.arange(intervals) * numeric_bins // max(intervals, 1)
    parents = np.concatenate([point_parents, interval_parents]).astype(np.int64)
    return FineCells(spec.name, coordinate, missing, float(lo), float(hi), spec.kind == "integer",
                     tuple(float(p) for p in points), intervals, tuple(int(p) for p in parents))


def fine_cells(
    schema: TableSchema, fine_bins: int, numeric_bins: int = DEFAULT_NUMERIC_BINS
) -> tuple[FineCells, ...]:
    """The fine cells of every numeric column of a (resolved) schema; none when ``fine_bins`` is 0."""
    if isinstance(fine_bins, bool) or not isinstance(fine_bins, int) or fine_bins < 0:
        raise ValueError(f"fine_bins must be an integer >= 0 (0 = no fine tables), got {fine_bins!r}")
    if fine_bins == 0:
        return ()
    if fine_bins % numeric_bins:
        raise ValueError(f"fine_bins must be a multiple of the {numeric_bins} coarse bins, got {fine_bins!r}")
    layout = layout_for(schema)
    position = {(c.column, c.role): i for i, c in enumerate(layout.coordinates)}
    return tuple(
        column_fine_cells(spec, position[(spec.name, "value")], position.get((spec.name, "missing")), fine_bins,
                          numeric_bins)
        for spec in schema.columns
        if spec.is_numeric
    )


@dataclass(frozen=True)
class FineTables:
    """The noisy fine tables of a measurement (concatenated in ``fine_cells`` order) and their noise std: public
    mechanism output, stored with the model. ``threshold`` (in noise std) reads a cell at or below it as empty."""

    frequencies: np.ndarray
    noise_std: float
    fine_bins: int
    threshold: float = DEFAULT_FINE_THRESHOLD
    #: (follower, leader, sign) positions in ``fine_cells`` order: the follower's draw inside its bin is the
    #: leader's (sign +1) or its mirror (-1); see ``choose_couplings``.
    couplings: tuple[tuple[int, int, int], ...] = ()

    def per_column(self, cells: tuple[FineCells, ...]) -> list[np.ndarray]:
        sizes = [c.size for c in cells]
        if sum(sizes) != self.frequencies.size:
            raise ValueError(f"the fine tables hold {self.frequencies.size} cells but the schema implies {sum(sizes)}")
        return list(np.split(np.asarray(self.frequencies, dtype=np.float64), np.cumsum(sizes)[:-1]))

    def kept(self, table: np.ndarray) -> np.ndarray:
        """A column's fine table with cells at or below the threshold set to 0 (post-processing)."""
        return np.where(table > self.threshold * self.noise_std, table, 0.0)

    def refine(
        self, x: np.ndarray, cells: tuple[FineCells, ...], rng: np.random.Generator,
        numeric_bins: int = DEFAULT_NUMERIC_BINS,
    ) -> np.ndarray:
        """Rows ``x`` (cube) with every present numeric value redrawn inside its coarse bin from the column's kept
        fine table restricted to that bin, by the inverse of that table's distribution function at a uniform
        draw; coupled columns (``couplings``) share their draw, so their values keep their order inside the bins.
        A bin whose kept cells are all empty keeps its values as drawn."""
        out = x.copy()
        uniforms = rng.uniform(size=(len(x), len(cells)))
        for follower, leader, sign in self.couplings:
            uniforms[:, follower] = uniforms[:, leader] if sign > 0 else 1.0 - uniforms[:, leader]
        for c, (column, table) in enumerate(zip(cells, self.per_column(cells))):
            weights, order = self.kept(table), column.ordered()
            parents = np.asarray(column.parents)[order]
            z = np.clip(out[:, column.coordinate], -1.0, 1.0)
            coarse = np.minimum(np.floor((z + 1.0) * numeric_bins / 2.0), numeric_bins - 1).astype(np.int64)
            present = np.ones(len(x), dtype=bool) if column.missing is None else out[:, column.missing] <= 0.0
            for bin_ in np.unique(coarse[present]):
                inside = order[parents == bin_]
                mass = weights[inside]
                if not mass.sum() > 0:
                    continue
                rows = np.flatnonzero(present & (coarse == bin_))
                cdf = np.cumsum(mass) / mass.sum()
                u = uniforms[rows, c]
                k = np.minimum(np.searchsorted(cdf, u, side="right"), len(inside) - 1)  # skips empty cells
                below = np.where(k > 0, cdf[np.maximum(k - 1, 0)], 0.0)
                position = np.clip((u - below) / np.maximum(cdf[k] - below, 1e-300), 0.0, 1.0 - 1e-12)
                out[rows, column.coordinate] = column.at(inside[k], position)
        return out


def below_noise(
    tables: FineTables, cells: tuple[FineCells, ...], limit: int = 20
) -> dict[str, list[float]]:
    """Declared exact values (and grid values) of each column whose noisy frequency is at or below the threshold:
    what the noise hides, from the noisy tables only. At most ``limit`` values per column."""
    out: dict[str, list[float]] = {}
    for column, table in zip(cells, tables.per_column(cells)):
        floor = tables.threshold * tables.noise_std
        hidden = [p for p, f in zip(column.points, table[: len(column.points)]) if f <= floor]
        if hidden:
            out[column.column] = hidden[:limit]
    return out


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
