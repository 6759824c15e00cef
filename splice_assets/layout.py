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

from splice_assets.derived import DerivedColumn
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
    if spec.is_discrete:
        assert spec.categories is not None
        ordered = len(spec.categories) if spec.kind == "ordinal" else 0
        return [Coordinate(spec.name, "value", len(spec.categories) + int(spec.nullable), ordered)]
    coords = [Coordinate(spec.name, "value", 0)]
    if spec.sentinels:
        coords.append(Coordinate(spec.name, "exact", len(spec.sentinels) + 1))
    if spec.nullable:
        coords.append(Coordinate(spec.name, "missing", 2))
    return coords


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


def _grid_position(index: np.ndarray, levels: int) -> np.ndarray:
    if levels == 1:
        return np.zeros(index.shape)
    return -1.0 + 2.0 * index / (levels - 1)


def _nearest_level(x: np.ndarray, levels: int) -> np.ndarray:
    if levels == 1:
        return np.zeros(x.shape, dtype=np.int64)
    pos = np.rint((np.clip(x, -1.0, 1.0) + 1.0) * (levels - 1) / 2.0)
    return pos.astype(np.int64)



#: ``logit`` scale: the offset a in log((u + a) / (1 - u + a)), u the value's position in its bounds. The bins next
#: to either bound then hold u <= 0.8% and the middle 40% of the range spans 3 of 16 bins.
LOGIT_OFFSET = 0.01


def cube_of(values: np.ndarray, lo: float, hi: float, scale: str = "linear", knots: tuple[float, ...] = ()
            ) -> np.ndarray:
    """Values in [lo, hi] -> [-1, 1], affine in v, in log(1 + v - lo) (``log``), in asinh(v) (``symlog``) or in
    log((u + a) / (1 - u + a)) with u = (v - lo) / (hi - lo) (``logit``): the public encoding of a numeric column.
    With ``knots`` (values, lo first and hi last) that position is then mapped piecewise linearly so that the knots
    land at equally spaced points of [-1, 1] (the coarse bins' edges when there are bins + 1 of them). Values
    outside the bounds map outside [-1, 1], under ``logit`` and with knots onto its ends; callers clip."""
    z = _scaled(np.asarray(values, dtype=np.float64), lo, hi, scale)
    return np.interp(z, *_knot_map(knots, lo, hi, scale)) if knots else z


def value_of(z: np.ndarray, lo: float, hi: float, scale: str = "linear", knots: tuple[float, ...] = ()
             ) -> np.ndarray:
    """Inverse of ``cube_of``."""
    if knots:
        z = np.interp(z, *_knot_map(knots, lo, hi, scale)[::-1])
    if scale == "log":
        return lo + np.expm1((z + 1.0) * math.log1p(hi - lo) / 2.0)
    if scale == "symlog":
        return np.sinh(math.asinh(lo) + (z + 1.0) * (math.asinh(hi) - math.asinh(lo)) / 2.0)
    if scale == "logit":
        a = LOGIT_OFFSET
        r = np.exp(np.asarray(z, dtype=np.float64) * math.log((1.0 + a) / a))
        return lo + (hi - lo) * np.clip((r * (1.0 + a) - a) / (1.0 + r), 0.0, 1.0)
    return lo + (z + 1.0) * (hi - lo) / 2.0


def _knot_map(knots: tuple[float, ...], lo: float, hi: float, scale: str) -> tuple[np.ndarray, np.ndarray]:
    """The knots' positions on the scale, and the equally spaced points of [-1, 1] they map to."""
    return _scaled(np.asarray(knots, dtype=np.float64), lo, hi, scale), np.linspace(-1.0, 1.0, len(knots))


def bin_widths_on_scale(knots: tuple[float, ...], lo: float, hi: float, scale: str) -> np.ndarray:
    """The width on the column's scale of each bin between consecutive ``knots`` (lo first and hi last)."""
    return np.diff(_scaled(np.asarray(knots, dtype=np.float64), lo, hi, scale))


def _scaled(values: np.ndarray, lo: float, hi: float, scale: str) -> np.ndarray:
    """A value's position in [-1, 1] on the column's scale (``cube_of`` without knots)."""
    if scale == "log":
        return -1.0 + 2.0 * np.log1p(np.maximum(values - lo, 0.0)) / math.log1p(hi - lo)
    if scale == "symlog":
        return -1.0 + 2.0 * (np.arcsinh(values) - math.asinh(lo)) / (math.asinh(hi) - math.asinh(lo))
    if scale == "logit":
        u = np.clip((values - lo) / (hi - lo), 0.0, 1.0)
        a = LOGIT_OFFSET
        return np.log((u + a) / (1.0 - u + a)) / math.log((1.0 + a) / a)
    return -1.0 + 2.0 * (values - lo) / (hi - lo)


def unit_ball_scale(d: int) -> float:
    """The public factor sqrt(d) that maps [-1, 1]^d into the unit ball."""
    return math.sqrt(max(d, 1))


def decode(x: np.ndarray, schema: TableSchema) -> pd.DataFrame:
    """Cube coordinates (n, d) -> a table in the schema's columns, order, dtypes and categories.

    Coordinates are clipped to [-1, 1]; discrete coordinates snap to the nearest grid point; integers are
    rounded; a sentinel level decodes to that sentinel; a missing level or a positive missing indicator
    decodes to NA. The schema's derived columns are then computed from the decoded row.
    """
    import pandas as pd

    layout = layout_for(schema)
    if x.ndim != 2 or x.shape[1] != layout.d:
        raise ValueError(f"expected an (n, {layout.d}) array for schema {schema.name!r}, got shape {x.shape}")
    x = in_cube(x)
    out: dict[str, pd.Series] = {}
    j = 0
    for spec in schema.columns:
        if spec.is_discrete:
            assert spec.categories is not None
            levels = len(spec.categories) + int(spec.nullable)
            codes = _nearest_level(x[:, j], levels)
            j += 1
            if spec.nullable:
                codes = np.where(codes == levels - 1, -1, codes)
            out[spec.name] = _categorical_series(codes, spec)
            continue
        assert spec.bounds is not None
        lo, hi = spec.bounds
        values = value_of(x[:, j], lo, hi, spec.scale, spec.knots)
        j += 1
        if spec.sentinels:
            level = _nearest_level(x[:, j], len(spec.sentinels) + 1)
            exact = np.asarray((np.nan, *spec.sentinels))[level]
            values = np.where(level > 0, exact, values)
            j += 1
        missing = np.zeros(len(x), dtype=bool)
        if spec.nullable:
            missing = x[:, j] > 0.0
            j += 1
        out[spec.name] = _numeric_series(values, missing, spec)
    for derived in schema.derived:
        inputs = {name: out[name].to_numpy(dtype=np.float64, na_value=np.nan) for name in derived.inputs}
        out[derived.name] = _derived_series(derived.values(inputs), derived)
    return pd.DataFrame(out, columns=list(schema.output_names))


def _derived_series(values: np.ndarray, derived: DerivedColumn) -> pd.Series:
    """A derived column's values (NaN: missing) in the dtype a modelled column of its kind and nullability has."""
    import pandas as pd

    if derived.kind != "integer":
        return pd.Series(values, dtype=np.float64)
    missing = np.isnan(values)
    series = pd.Series(pd.array(np.where(missing, 0, values).astype(np.int64), dtype="Int64"))
    return series.mask(missing) if derived.nullable else series.astype(np.int64)


def in_cube(z: np.ndarray) -> np.ndarray:
    """``z`` clipped to [-1, 1] with NaN at 0 (a copy). ``np.nan_to_num`` first would cost twice the time: it also
    tests for infinities, which the clip already sends to the bounds."""
    out = np.clip(np.asarray(z, dtype=np.float64), -1.0, 1.0)
    np.copyto(out, 0.0, where=np.isnan(out))
    return out


def _categorical_series(codes: np.ndarray, spec: ColumnSpec) -> pd.Series:
    import pandas as pd

    assert spec.categories is not None
    if spec.kind == "boolean":
        values = pd.array([None if c < 0 else bool(c) for c in codes], dtype="boolean")
        return pd.Series(values)
    dtype = pd.CategoricalDtype(list(spec.categories), ordered=spec.kind == "ordinal")
    return pd.Series(pd.Categorical.from_codes(codes, dtype=dtype))


def _numeric_series(values: np.ndarray, missing: np.ndarray, spec: ColumnSpec) -> pd.Series:
    import pandas as pd

    assert spec.bounds is not None
    lo, hi = spec.bounds
    values = _on_public_precision(np.clip(values, lo, hi), spec)
    if spec.kind == "integer":
        # Round inside the bounds: a public integer bound may be fractional.
        rounded = np.clip(np.rint(values), math.ceil(lo), math.floor(hi))
        series = pd.Series(pd.array(rounded.astype(np.int64), dtype="Int64"))
        if spec.nullable:
            series[missing] = pd.NA
            return series
        return series.astype(np.int64)
    series = pd.Series(values, dtype=np.float64)
    series[missing] = np.nan
    return series


#: Relative tolerance (of the bounds' width) within which a value is at a declared exact value.
POINT_TOLERANCE = 1e-9
#: Relative half-width of a float32 rounding: a value written from float32 (0.6666666865348816) still is its point.
FLOAT32_TOLERANCE = 2.0**-24


def at_point(values: np.ndarray, point: float, lo: float, hi: float) -> np.ndarray:
    """Which ``values`` are the declared exact value ``point``: within ``POINT_TOLERANCE`` of the bounds' width or
    ``FLOAT32_TOLERANCE`` of the point, whichever is wider (NaN never is)."""
    return np.abs(values - point) <= max(POINT_TOLERANCE * (hi - lo), FLOAT32_TOLERANCE * abs(point))


def step_range(lo: float, hi: float, step: float) -> tuple[int, int]:
    """First and last multiple of ``step`` (as multiples) inside [lo, hi], up to float rounding."""
    return math.ceil(lo / step - 1e-9), math.floor(hi / step + 1e-9)


def _on_public_precision(values: np.ndarray, spec: ColumnSpec) -> np.ndarray:
    """Values at the schema's public precision: a declared exact value (or candidate) exactly, others rounded to
    the ``step`` grid or to ``decimals`` (then clipped again, as rounding may step over a bound finer than the
    precision); then, on a ``float32`` column, every value to the float32 number nearest it inside the bounds."""
    assert spec.bounds is not None
    lo, hi = spec.bounds
    out = values
    if spec.step is not None:
        first, last = step_range(lo, hi, spec.step)
        out = np.clip(np.round(out / spec.step), first, last) * spec.step
    if spec.decimals is not None:
        out = np.clip(np.round(out, spec.decimals), lo, hi)
    for point in spec.exact_values + spec.candidates:  # after rounding: a top code off the step grid stays exact
        out = np.where(at_point(values, point, lo, hi), point, out)
    if spec.float32:
        single = np.asarray(out, dtype=np.float32)
        wide = single.astype(np.float64)  # compared in float64: a bound rounds to float32 too
        single = np.where(wide > hi, np.nextafter(single, np.float32(-np.inf)), single)
        single = np.where(wide < lo, np.nextafter(single, np.float32(np.inf)), single)
        out = single.astype(np.float64)
    return out


def output_dtypes(schema: TableSchema) -> dict[str, str]:
    """The pandas dtype each decoded column has (public, from the schema)."""
    out = {}
    for spec in schema.columns:
        if spec.kind == "boolean":
            out[spec.name] = "boolean"
        elif spec.is_discrete:
            out[spec.name] = "category"
        elif spec.kind == "integer":
            out[spec.name] = "Int64" if spec.nullable else "int64"
        else:
            out[spec.name] = "float64"
    return out


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
