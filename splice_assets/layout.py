"""The public coordinate layout every stage shares: coordinates of a schema, the cells of the 1-/2-way
tables, the public directions, and decoding cube coordinates back into a table.

Everything here is a function of the public schema and public seeds (or of rows handed to it, which the
caller owns): no module here reads private data by itself.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import numpy as np

from splice_assets.kinds import kind_of
from splice_assets.kinds.scales import FLOAT32_TOLERANCE as FLOAT32_TOLERANCE
from splice_assets.kinds.scales import LOGIT_OFFSET as LOGIT_OFFSET
from splice_assets.kinds.scales import POINT_TOLERANCE as POINT_TOLERANCE
from splice_assets.kinds.scales import _grid_position as _grid_position
from splice_assets.kinds.scales import _knot_map as _knot_map
from splice_assets.kinds.scales import _nearest_level as _nearest_level
from splice_assets.kinds.scales import _on_public_precision as _on_public_precision
from splice_assets.kinds.scales import _scaled as _scaled
from splice_assets.kinds.scales import at_point as at_point
from splice_assets.kinds.scales import bin_widths_on_scale as bin_widths_on_scale
from splice_assets.kinds.scales import cube_of as cube_of
from splice_assets.kinds.scales import step_range as step_range
from splice_assets.kinds.scales import value_of as value_of
from splice_assets.lowering import assemble_output
from splice_assets.schema import ColumnSpec, TableSchema

if TYPE_CHECKING:  # pandas (0.3 s) is imported to decode rows, not to plan a release
    import pandas as pd

Role = Literal["value", "exact", "missing", "binned"]


ScalingMode = Literal["ball", "l1"]


SCALING_MODES: tuple[str, ...] = ("ball", "l1")


@dataclass(frozen=True)
class Coordinate:
    """One encoded coordinate: which column it comes from and what it holds.

    ``levels`` is the number of grid points for a discrete coordinate and 0 for a continuous one. Role "exact" is
    a numeric column's sentinel (level 0: none, level i: the i-th declared sentinel). Role "binned"
    exists only in the model's view (``histogram_layout``): a continuous value coordinate modelled as a
    histogram over ``levels`` equal-width public bins, its grid points the bin centres.
    """

    column: str
    role: Role
    levels: int
    #: How many of the levels, from the first, are an ordinal column's categories in their public order (0: none).
    #: Read by the fit alone: it takes no part in comparing layouts, so a bundle's saved layout still matches.
    ordered: int = field(default=0, compare=False)

    @property
    def is_discrete(self) -> bool:
        return self.levels > 0

    @property
    def is_binned(self) -> bool:
        return self.role == "binned"

    def grid(self) -> np.ndarray:
        """The grid points of a discrete coordinate (a single level sits at 0; binned: the bin centres)."""
        if self.is_binned:
            return -1.0 + (2.0 * np.arange(self.levels) + 1.0) / self.levels
        if self.levels == 1:
            return np.zeros(1)
        return -1.0 + 2.0 * np.arange(self.levels) / (self.levels - 1)


@dataclass(frozen=True)
class EncodingLayout:
    """The coordinates of a schema, in order."""

    coordinates: tuple[Coordinate, ...]

    @property
    def d(self) -> int:
        return len(self.coordinates)

    @property
    def discrete_index(self) -> np.ndarray:
        return np.array([i for i, c in enumerate(self.coordinates) if c.is_discrete], dtype=np.int64)

    @property
    def continuous_index(self) -> np.ndarray:
        return np.array([i for i, c in enumerate(self.coordinates) if not c.is_discrete], dtype=np.int64)


def _column_coordinates(spec: ColumnSpec) -> list[Coordinate]:
    """The column's coordinates, as its kind lays them out (``Kind.coordinates``)."""
    return [Coordinate(spec.name, role, levels, ordered)  # type: ignore[arg-type]  # a kind's role is a Role
            for role, levels, ordered in kind_of(spec.kind).coordinates(spec)]


def layout_for(schema: TableSchema) -> EncodingLayout:
    """The coordinate layout a schema implies (public: depends on the schema only)."""
    return EncodingLayout(tuple(c for spec in schema.columns for c in _column_coordinates(spec)))


def histogram_layout(layout: EncodingLayout, levels: int) -> EncodingLayout:
    """The model's view of ``layout`` with every continuous value coordinate as a histogram over ``levels``
    equal-width public bins of [-1, 1] (role "binned"); discrete coordinates are unchanged."""
    if levels < 1:
        raise ValueError(f"a histogram needs >= 1 bins, got {levels!r}")
    return EncodingLayout(
        tuple(c if c.is_discrete else Coordinate(c.column, "binned", levels) for c in layout.coordinates)
    )


def data_layout(layout: EncodingLayout) -> EncodingLayout:
    """The encoding layout behind a model layout: binned coordinates back to continuous value coordinates."""
    return EncodingLayout(tuple(Coordinate(c.column, "value", 0) if c.is_binned else c for c in layout.coordinates))


def unit_ball_scale(d: int) -> float:
    """The public factor sqrt(d) that maps [-1, 1]^d into the unit ball."""
    return math.sqrt(max(d, 1))


def decode(x: np.ndarray, schema: TableSchema, seed: int = 0, first_row: int = 0) -> pd.DataFrame:
    """Cube coordinates (n, d) -> a table in the schema's output columns, order, dtypes and categories.

    Coordinates are clipped to [-1, 1]; discrete coordinates snap to the nearest grid point; integers are
    rounded; a sentinel level decodes to that sentinel; a missing level or a positive missing indicator
    decodes to NA. The lowered columns are then assembled from their parts and the derived ones computed
    (``lowering.assemble_output``: keys for rows ``first_row`` on, from the public ``seed``).
    """
    import pandas as pd

    layout = layout_for(schema)
    if x.ndim != 2 or x.shape[1] != layout.d:
        raise ValueError(f"expected an (n, {layout.d}) array for schema {schema.name!r}, got shape {x.shape}")
    x = in_cube(x)
    out: dict[str, pd.Series] = {}
    j = 0
    for spec in schema.columns:
        kind = kind_of(spec.kind)
        width = len(kind.coordinates(spec))
        out[spec.name] = kind.decode(x[:, j:j + width], spec)
        j += width
    return assemble_output(pd.DataFrame(out, columns=list(schema.column_names)), schema, seed, first_row)


def in_cube(z: np.ndarray) -> np.ndarray:
    """``z`` clipped to [-1, 1] with NaN at 0 (a copy). ``np.nan_to_num`` first would cost twice the time: it also
    tests for infinities, which the clip already sends to the bounds."""
    out = np.clip(np.asarray(z, dtype=np.float64), -1.0, 1.0)
    np.copyto(out, 0.0, where=np.isnan(out))
    return out


def output_dtypes(schema: TableSchema) -> dict[str, str]:
    """The pandas dtype each decoded column has (public, from the schema)."""
    return {spec.name: kind_of(spec.kind).output_dtype(spec) for spec in schema.columns}


def draw_directions(seed: int, n_directions: int, d: int) -> np.ndarray:
    """L unit directions uniform on S^(d-1), from the recorded *public* seed (never the noise source)."""
    if n_directions < 1:
        raise ValueError(f"number of directions L must be >= 1, got {n_directions!r}")
    if d < 1:
        raise ValueError(f"dimension d must be >= 1, got {d!r}")
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x5D1EC7]))
    g = rng.standard_normal((n_directions, d))
    norms = np.linalg.norm(g, axis=1, keepdims=True)
    # A zero draw has probability 0; guard anyway so the map is total.
    g[norms[:, 0] == 0.0, 0] = 1.0
    return g / np.linalg.norm(g, axis=1, keepdims=True)


def direction_scales(directions: np.ndarray, mode: ScalingMode) -> np.ndarray:
    """Public per-direction divisor s_l with |theta_l^T x| / s_l <= 1 for every x in [-1, 1]^d."""
    if mode == "ball":
        return np.full(directions.shape[0], unit_ball_scale(directions.shape[1]))
    if mode == "l1":
        return np.abs(directions).sum(axis=1)
    raise ValueError(f"scaling mode must be 'ball' or 'l1', got {mode!r}")


def harmonic(k: int) -> float:
    return math.fsum(1.0 / j for j in range(1, k + 1))


DEFAULT_NUMERIC_BINS = 16


def marginal_sizes(layout: EncodingLayout, numeric_bins: int = DEFAULT_NUMERIC_BINS) -> tuple[int, ...]:
    """Number of cells of each coordinate's 1-way histogram: its grid levels, or ``numeric_bins`` equal-width public
    bins for a numeric coordinate (continuous in the data's layout, binned in a model's)."""
    if numeric_bins < 1:
        raise ValueError(f"numeric_bins must be >= 1, got {numeric_bins!r}")
    return tuple(c.levels if c.is_discrete and not c.is_binned else numeric_bins for c in layout.coordinates)


def marginal_cells(x: np.ndarray, layout: EncodingLayout, numeric_bins: int = DEFAULT_NUMERIC_BINS) -> np.ndarray:
    """(n, d) cell index of every coordinate: nearest grid level, or the equal-width bin of [-1, 1] (int64).

    Column-major; filled in blocks of rows by a compiled loop (``cell_kernels.cells_into``), the same cells as
    ``coordinate_cells`` column by column with NaN as 0 and values clipped to [-1, 1].
    """
    from splice_assets.cell_kernels import cells_into  # numba: imported when rows are binned, not before

    cells = np.empty(x.shape, dtype=np.int64, order="F")
    levels = np.array([c.levels if c.is_discrete else 0 for c in layout.coordinates], dtype=np.int64)
    cells_into(np.asarray(x, dtype=np.float64), levels, int(numeric_bins), cells)
    return cells


def coordinate_cells(z: np.ndarray, coord: Coordinate, numeric_bins: int = DEFAULT_NUMERIC_BINS) -> np.ndarray:
    """Cell index of one coordinate's values ``z`` in [-1, 1] (see ``marginal_cells``)."""
    if coord.is_discrete:
        bins = coord.levels
        return np.rint((z + 1.0) * (bins - 1) / 2.0).astype(np.int64) if bins > 1 else np.zeros(len(z), np.int64)
    return np.minimum(np.floor((z + 1.0) * numeric_bins / 2.0), numeric_bins - 1).astype(np.int64)


def coordinate_pairs(layout: EncodingLayout) -> tuple[tuple[int, int], ...]:
    """Every pair (a, b), a < b, of coordinates from different columns: the 2-way query family (public)."""
    cols = [c.column for c in layout.coordinates]
    return tuple((a, b) for a in range(layout.d) for b in range(a + 1, layout.d) if cols[a] != cols[b])


def pair_sizes(
    layout: EncodingLayout, pairs: Sequence[tuple[int, int]], numeric_bins: int = DEFAULT_NUMERIC_BINS
) -> tuple[int, ...]:
    """Number of cells of each pair's 2-way histogram (a's cells x b's cells, a-major)."""
    sizes = marginal_sizes(layout, numeric_bins)
    return tuple(sizes[a] * sizes[b] for a, b in pairs)


#: The target's 3-way tables are measured when they number at most this many (0 = never; ``triples_with_target``),
DEFAULT_TARGET_TRIPLES = 45
#: ... each of at most this many cells: a table of a numeric pair (16 x 16 coarse cells per class) spreads the
#: target's rows too thin for its noise.
MAX_TRIPLE_CELLS = 128


def triples_with_target(
    layout: EncodingLayout, target: str | None, cap: int, numeric_bins: int = DEFAULT_NUMERIC_BINS,
    max_cells: int = MAX_TRIPLE_CELLS,
) -> tuple[tuple[int, int, int], ...]:
    """The 3-way query family (public): (t, a, b) for the target column's first coordinate t and every pair (a, b),
    a < b, of coordinates from two other columns whose table has at most ``max_cells`` cells, ``coordinate_pairs``
    order. None without a target, or when they would number more than ``cap`` (0 = none): their tables then share
    the pair weight with too many others."""
    cols = [c.column for c in layout.coordinates]
    if target is None or target not in cols or cap <= 0:
        return ()
    t, sizes = cols.index(target), marginal_sizes(layout, numeric_bins)
    triples = tuple(
        (t, a, b) for a, b in coordinate_pairs(layout)
        if target not in (cols[a], cols[b]) and sizes[t] * sizes[a] * sizes[b] <= max_cells
    )
    return triples if len(triples) <= cap else ()


#: A workload's 3-way table has at most this many cells: three numeric columns on their 16 coarse bins.
MAX_WORKLOAD_CELLS = 4096
#: A workload's 3-way table counts as this many tables of the pair family in Delta^2: its cells get a quarter of a
#: pair cell's noise (docs/decisions/0073).
WORKLOAD_UNITS = 16


def first_coordinates(layout: EncodingLayout) -> dict[str, int]:
    """Each column's first coordinate (a numeric column's values, before its sentinels' and missing flags'): the one
    a column's 3-way table reads."""
    first: dict[str, int] = {}
    for i, coordinate in enumerate(layout.coordinates):
        first.setdefault(coordinate.column, i)
    return first


def column_cells(layout: EncodingLayout, numeric_bins: int = DEFAULT_NUMERIC_BINS) -> dict[str, int]:
    """Each column's cell count on its first coordinate (``first_coordinates``): its side of a 3-way table."""
    sizes = marginal_sizes(layout, numeric_bins)
    return {column: sizes[i] for column, i in first_coordinates(layout).items()}


def workload_triples(
    layout: EncodingLayout, workload: Sequence[Sequence[str]], known: Sequence[tuple[int, int, int]] = (),
) -> tuple[tuple[int, int, int], ...]:
    """The 3-way tables a workload adds (public): for each entry (x, y, z) of modelled column names, (t, a, b) with
    t the first coordinate of x and a < b the first coordinates of y and z. An entry whose three coordinates a
    ``known`` triple (the target's) or an earlier entry already has adds nothing. The names are checked where the
    settings meet the schema (``config.check_workload``)."""
    first = first_coordinates(layout)
    seen = {frozenset(triple) for triple in known}
    triples = []
    for x, y, z in workload:
        a, b = sorted((first[y], first[z]))
        triple = (first[x], a, b)
        if frozenset(triple) not in seen:
            seen.add(frozenset(triple))
            triples.append(triple)
    return tuple(triples)


def triple_sizes(
    layout: EncodingLayout, triples: Sequence[tuple[int, int, int]], numeric_bins: int = DEFAULT_NUMERIC_BINS
) -> tuple[int, ...]:
    """Number of cells of each triple's 3-way histogram (t's cells x a's x b's, t-major)."""
    sizes = marginal_sizes(layout, numeric_bins)
    return tuple(sizes[t] * sizes[a] * sizes[b] for t, a, b in triples)


def triple_cell_index(
    cells: np.ndarray, sizes: Sequence[int] | np.ndarray, triple: tuple[int, int, int]
) -> np.ndarray:
    """Each row's cell in one triple's table (its own index, t-major) from the rows' 1-way cells
    (``marginal_cells``)."""
    t, a, b = triple
    return (cells[:, t] * sizes[a] + cells[:, a]) * sizes[b] + cells[:, b]


def pair_tables(
    frequencies: np.ndarray, pairs: Sequence[tuple[int, int]], sizes: Sequence[int]
) -> list[np.ndarray]:
    """Concatenated 2-way histograms (``pair_counts`` order) as one (cells of a, cells of b) table per pair;
    ``sizes`` are the coordinates' 1-way cell counts (``marginal_sizes``)."""
    cuts = np.cumsum([sizes[a] * sizes[b] for a, b in pairs])[:-1]
    blocks = np.split(np.asarray(frequencies, dtype=np.float64), cuts)
    return [block.reshape(sizes[a], sizes[b]) for (a, b), block in zip(pairs, blocks)]
