"""The public fine cells of every numeric column: the layout below the coarse bins that the measurement counts
rows in (``private.statistics.fine_counts``) and that post-processing draws values in (``postprocess.fine_tables``).

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
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from splice_assets.kinds import kind_of
from splice_assets.layout import (
    DEFAULT_NUMERIC_BINS,
    at_point,
    bin_widths_on_scale,
    cube_of,
    in_cube,
    layout_for,
    step_range,
    value_of,
)
from splice_assets.schema import ColumnSpec, TableSchema

DEFAULT_FINE_BINS = 256
#: A candidate value's fine cell is drawn where its noisy count clears the threshold that about this many of a
#: column's candidates that no row holds would clear (``candidate_z``), and never below ``MIN_CANDIDATE_Z`` noise std.
FALSE_POSITIVES = 0.05
MIN_CANDIDATE_Z = 4.0
#: A column on a public grid (integers, a declared ``step``) gets one fine cell per grid value up to this many values
#: (or ``fine_bins``, if larger); beyond it, intervals. 1,024 helped some columns and cost others
#: (0025, docs/decisions/alternatives.md).
GRID_LIMIT = 256
#: The fine table of a column on a public grid with one cell per value (``FineCells.per_value``) counts as this
#: many 1-way tables, and the 1-way share of Delta^2 grows by the extra units out of the moments' share: its cells
#: carry 1/sqrt(grid_weight) of a coarse table's noise std, the other tables keep theirs (docs/decisions/0050).
DEFAULT_GRID_WEIGHT = 4
#: ... and a fine table of intervals counts as this many (docs/decisions/0052).
DEFAULT_INTERVAL_WEIGHT = 2
#: The largest either weight may be.
MAX_GRID_WEIGHT = 64
MAX_FINE_BINS = 4096


@dataclass(frozen=True)
class FineCells:
    """The public fine cells of one numeric column: ``points`` (exact values, data units, sorted), then
    ``intervals`` equal-width intervals of the (encoded) bounds; ``parents`` is the coarse bin of each cell."""

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
    knots: tuple[float, ...] = ()
    #: Index of the column's sentinel coordinate and its ``sentinels``, if it has any: a row at a sentinel keeps it
    #: exactly and is not redrawn.
    exact: int | None = None
    declared: tuple[float, ...] = ()
    #: The points that are the column's ``candidates``: drawn only where their noisy count clears ``candidate_z``.
    tentative: tuple[float, ...] = ()

    @property
    def n_cells(self) -> int:
        return len(self.points) + self.intervals

    @property
    def per_value(self) -> bool:
        """One cell per value of the column's public grid (no intervals): the table users read value by value."""
        return self.intervals == 0

    def weight_units(self, grid_weight: int, interval_weight: int) -> int:
        """How many 1-way tables this column's fine table counts as in Delta^2: ``grid_weight`` if ``per_value``,
        else ``interval_weight``."""
        return grid_weight if self.per_value else interval_weight

    @property
    def size(self) -> int:
        """The cells of the column's table block (its ``n_cells`` fine cells)."""
        return self.n_cells

    def bin_widths(self, numeric_bins: int) -> np.ndarray:
        """The width of each coarse bin on the column's scale (all equal without ``knots``), which the bin shapes
        read densities by: with knots a wide outer bin and a narrow inner one hold similar masses at very different
        densities."""
        if not self.knots or len(self.knots) != numeric_bins + 1:
            return np.ones(numeric_bins)
        return bin_widths_on_scale(self.knots, self.lo, self.hi, self.scale)

    def tentative_cells(self) -> np.ndarray:
        """Which cells are the points of ``tentative`` (a mask over the ``n_cells`` fine cells)."""
        mask = np.zeros(self.n_cells, dtype=bool)
        mask[[self.points.index(v) for v in self.tentative]] = True
        return mask

    def values(self, z: np.ndarray) -> np.ndarray:
        return value_of(z, self.lo, self.hi, self.scale, self.knots)

    def cube(self, values: np.ndarray) -> np.ndarray:
        return cube_of(values, self.lo, self.hi, self.scale, self.knots)

    def cells_of(self, z: np.ndarray) -> np.ndarray:
        """Fine cell of every cube value ``z`` in [-1, 1] (a deterministic public map)."""
        z = in_cube(z)
        values = self.values(z)
        points = np.asarray(self.points, dtype=np.float64)
        if self.intervals == 0:  # a grid: the nearest grid point
            if len(points) == 1:
                return np.zeros(len(z), dtype=np.int64)
            right = np.clip(np.searchsorted(points, values), 1, len(points) - 1)
            nearer_left = values - points[right - 1] <= points[right] - values
            return np.where(nearer_left, right - 1, right).astype(np.int64)
        cells = self.interval_cells(z)
        for i, point in enumerate(points):
            cells[at_point(values, point, self.lo, self.hi)] = i
        return cells

    def interval_cells(self, z: np.ndarray) -> np.ndarray:
        """The interval cell (index among all fine cells) that holds every cube value ``z``, points aside."""
        z = in_cube(z)
        return (len(self.points) + np.minimum(np.floor((z + 1.0) * self.intervals / 2.0), self.intervals - 1)).astype(
            np.int64)

    def holds_values(self) -> np.ndarray:
        """Which cells can hold a value: all but the intervals of an integer column with no integer inside (narrow
        intervals of a log scale near its lower bound)."""
        ok = np.ones(self.n_cells, dtype=bool)
        if self.integer and self.intervals:
            first, last = self._integers(np.arange(self.intervals))
            ok[len(self.points):] = first <= last
        return ok

    def capacities(self) -> np.ndarray:
        """How much of a straight density (on the encoded scale) each fine cell holds, relative to an interval: 1
        for an interval of a continuous column and for a point; for an integer column's interval, the encoded width
        of its integers' unit cells (the span of first - 1/2 .. last + 1/2, within the bounds) over the interval's.
        On a linear scale that is the count of integers inside, 1 or 2 alternating where the bounds span 256 to 512
        integers; 0 for an interval that holds none."""
        out = np.ones(self.n_cells)
        if self.integer and self.intervals:
            first, last = self._integers(np.arange(self.intervals))
            low = self.cube(np.clip(first - 0.5, self.lo, self.hi))
            high = self.cube(np.clip(last + 0.5, self.lo, self.hi))
            out[len(self.points):] = np.where(last >= first, (high - low) * self.intervals / 2.0, 0.0)
        return out

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


def candidate_z(candidates: int) -> float:
    """Threshold in noise std above which a candidate's noisy count makes it an exact value: at most
    ``FALSE_POSITIVES`` of a column's ``candidates`` that no row holds pass in expectation."""
    return max(MIN_CANDIDATE_Z, noise_passes(candidates))


def noise_passes(cells: int) -> float:
    """The z that noise alone passes in ``FALSE_POSITIVES`` of ``cells`` cells, in expectation."""
    return NormalDist().inv_cdf(1.0 - FALSE_POSITIVES / max(cells, 1))


def _grid(spec: ColumnSpec, limit: int) -> np.ndarray | None:
    """The public grid values of a column inside its bounds, if it has a grid of at most ``limit`` values."""
    assert spec.bounds is not None
    step = kind_of(spec.kind).grid_step(spec)
    if step is None:
        return None
    first, last = step_range(*spec.bounds, step)
    if last - first + 1 > limit or last < first:
        return None
    return np.arange(first, last + 1, dtype=np.float64) * step


def column_fine_cells(
    spec: ColumnSpec, coordinate: int, missing: int | None, fine_bins: int, numeric_bins: int = DEFAULT_NUMERIC_BINS,
) -> FineCells:
    """The fine cells of one numeric column (see the module docstring). Before its ``auto`` bounds are resolved, a
    column has ``fine_bins`` placeholder intervals (the plan's weights depend only on the number of tables)."""
    if spec.bounds is None:
        return FineCells(spec.name, coordinate, missing, -1.0, 1.0, kind_of(spec.kind).integral, (), fine_bins,
                         tuple(int(p) for p in np.arange(fine_bins) * numeric_bins // fine_bins))
    lo, hi = spec.bounds
    declared = [v for v in spec.exact_values if lo <= v <= hi]
    grid = _grid(spec, max(fine_bins, GRID_LIMIT))
    tentative = [float(v) for v in spec.candidates if lo <= v <= hi] if grid is None else []
    if grid is not None:
        points, intervals = np.unique(np.concatenate([grid, declared])), 0
    else:
        points, intervals = np.unique(np.asarray(declared + tentative, dtype=np.float64)), fine_bins
    cube = cube_of(points, lo, hi, spec.scale, spec.knots)
    point_parents = np.minimum(np.floor((np.clip(cube, -1.0, 1.0) + 1.0) * numeric_bins / 2.0), numeric_bins - 1)
    interval_parents = np.arange(intervals) * numeric_bins // max(intervals, 1)
    parents = np.concatenate([point_parents, interval_parents]).astype(np.int64)
    return FineCells(spec.name, coordinate, missing, float(lo), float(hi), kind_of(spec.kind).integral,
                     tuple(float(p) for p in points), intervals, tuple(int(p) for p in parents), spec.scale,
                     knots=spec.knots, tentative=tuple(tentative))


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
        dataclasses.replace(
            column_fine_cells(spec, position[(spec.name, "value")], position.get((spec.name, "missing")), fine_bins,
                              numeric_bins),
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
