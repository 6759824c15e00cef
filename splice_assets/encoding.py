"""Table <-> coordinates in [-1, 1]^d, using only the public schema.

Every column gets one *value* coordinate: numeric columns by the public min-max map, discrete columns on
the equally spaced grid ``-1 + 2c/(r-1)``. A nullable numeric column also gets a two-level *missing*
coordinate (-1 present, +1 missing); a nullable discrete column gets one extra grid level for "missing".
``to_unit_ball`` then divides by sqrt(d) so that every projection on a unit direction lies in [-1, 1].
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

from .schema import ColumnSpec, TableSchema

Role = Literal["value", "missing", "binned"]
ScalingMode = Literal["ball", "l1"]
SCALING_MODES: tuple[str, ...] = ("ball", "l1")


@dataclass(frozen=True)
class Coordinate:
    """One encoded coordinate: which column it comes from and what it holds.

    ``levels`` is the number of grid points for a discrete coordinate and 0 for a continuous one. Role "binned"
    exists only in the model's view (``histogram_layout``): a continuous value coordinate modelled as a
    histogram over ``levels`` equal-width public bins, its grid points the bin centres.
    """

    column: str
    role: Role
    levels: int

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
        return [Coordinate(spec.name, "value", len(spec.categories) + int(spec.nullable))]
    coords = [Coordinate(spec.name, "value", 0)]
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


def encode(table: pd.DataFrame, schema: TableSchema) -> np.ndarray:
    """Encode a *validated* table (see ``validation.validate``) into an (n, d) float64 array in [-1, 1].

    Total on validated input: numeric values are already clipped to the bounds, categories are schema
    categories or missing. Clipping here again guarantees the [-1, 1] range whatever the input.
    """
    n = len(table)
    columns: list[np.ndarray] = []
    for spec in schema.columns:
        series = table[spec.name]
        missing = series.isna().to_numpy()
        if spec.is_discrete:
            assert spec.categories is not None
            levels = len(spec.categories) + int(spec.nullable)
            codes = _category_codes(series, spec)
            if spec.nullable:
                codes = np.where(missing | (codes < 0), levels - 1, codes)
            codes = np.clip(codes, 0, levels - 1)
            columns.append(_grid_position(codes.astype(np.float64), levels))
            continue
        assert spec.bounds is not None, f"column {spec.name!r} has no bounds (resolve 'auto' bounds first)"
        lo, hi = spec.bounds
        values = series.to_numpy(dtype=np.float64, na_value=np.nan)
        scaled = np.clip(-1.0 + 2.0 * (np.nan_to_num(values, nan=(lo + hi) / 2.0) - lo) / (hi - lo), -1.0, 1.0)
        columns.append(np.where(missing, 0.0, scaled))
        if spec.nullable:
            columns.append(np.where(missing, 1.0, -1.0))
    return np.column_stack(columns) if columns else np.zeros((n, 0))


def _category_codes(series: pd.Series, spec: ColumnSpec) -> np.ndarray:
    """0-based schema position of each value, -1 for missing/unknown."""
    if isinstance(series.dtype, pd.CategoricalDtype) and list(series.cat.categories) == list(spec.categories or ()):
        return series.cat.codes.to_numpy().astype(np.int64)
    from .schema import category_key

    index = spec.category_index()
    return np.array([-1 if pd.isna(v) else index.get(category_key(v), -1) for v in series], dtype=np.int64)


def unit_ball_scale(d: int) -> float:
    """The public factor sqrt(d) that maps [-1, 1]^d into the unit ball."""
    return math.sqrt(max(d, 1))


def to_unit_ball(x: np.ndarray) -> np.ndarray:
    """Divide cube coordinates by sqrt(d): then |theta^T x| <= 1 for every unit theta."""
    return x / unit_ball_scale(x.shape[1])


def decode(x: np.ndarray, schema: TableSchema) -> pd.DataFrame:
    """Cube coordinates (n, d) -> a table in the schema's columns, order, dtypes and categories.

    Coordinates are clipped to [-1, 1]; discrete coordinates snap to the nearest grid point; integers are
    rounded; a missing level or a positive missing indicator decodes to NA.
    """
    layout = layout_for(schema)
    if x.ndim != 2 or x.shape[1] != layout.d:
        raise ValueError(f"expected an (n, {layout.d}) array for schema {schema.name!r}, got shape {x.shape}")
    x = np.clip(np.nan_to_num(x, nan=0.0), -1.0, 1.0)
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
        values = lo + (x[:, j] + 1.0) * (hi - lo) / 2.0
        j += 1
        missing = np.zeros(len(x), dtype=bool)
        if spec.nullable:
            missing = x[:, j] > 0.0
            j += 1
        out[spec.name] = _numeric_series(values, missing, spec)
    return pd.DataFrame(out, columns=list(schema.column_names))


def _categorical_series(codes: np.ndarray, spec: ColumnSpec) -> pd.Series:
    assert spec.categories is not None
    if spec.kind == "boolean":
        values = pd.array([None if c < 0 else bool(c) for c in codes], dtype="boolean")
        return pd.Series(values)
    dtype = pd.CategoricalDtype(list(spec.categories), ordered=spec.kind == "ordinal")
    return pd.Series(pd.Categorical.from_codes(codes, dtype=dtype))


def _numeric_series(values: np.ndarray, missing: np.ndarray, spec: ColumnSpec) -> pd.Series:
    assert spec.bounds is not None
    lo, hi = spec.bounds
    values = np.clip(values, lo, hi)
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
