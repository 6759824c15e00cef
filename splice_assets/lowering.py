"""The two conversions between a table as the user holds it and as the model holds it (``kinds.lowered``).

``lower_input`` replaces each lowered column of an input by its modelled parts (a datetime by its week, weekday and
time of day; a rule's later column by its offset from the earlier one) and drops ``id`` columns, which are never
read. ``assemble_output`` does the reverse on decoded rows: it builds each lowered column from its parts (in rule
order, so a later column is placed after its earlier one), generates the keys, computes the derived columns and
puts the columns in the schema's order. Both are functions of the public schema and of the rows handed to them.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np

from splice_assets.derived import DerivedColumn
from splice_assets.kinds import kind_of
from splice_assets.kinds.lowered import LoweredColumn, lowered_kind_of, part_cells
from splice_assets.kinds.temporal import UNITS, Temporal

if TYPE_CHECKING:
    import pandas as pd

    from splice_assets.schema import ColumnSpec, TableSchema


def _in_rule_order(schema: TableSchema) -> list[LoweredColumn]:
    """The lowered columns, each after the earlier column of its rule."""
    done: list[LoweredColumn] = []
    pending = list(schema.lowered)
    while pending:
        ready = [c for c in pending if c.base is None or c.base in {d.name for d in done}
                 or c.base not in {p.name for p in pending}]
        if not ready:
            raise ValueError(f"schema {schema.name!r}: the rules between {[c.name for c in pending]} form a cycle")
        done.extend(ready)
        pending = [c for c in pending if c not in ready]
    return done


def is_lowered(table: pd.DataFrame, schema: TableSchema) -> bool:
    """Whether ``table`` already holds the modelled parts (a validated table, or one ``lower_input`` returned)."""
    names = set(map(str, table.columns))
    return all(p in names for c in schema.lowered for p in c.parts)


def lower_input(table: pd.DataFrame, schema: TableSchema) -> pd.DataFrame:
    """An input (or synthetic) table -> the same rows with each lowered column replaced by its parts' cells; a
    table that holds them already, or lacks a lowered column (the header check names it), is returned as it is."""
    if not schema.lowered or is_lowered(table, schema):
        return table
    table = table.rename(columns=lambda c: str(c).strip())
    if any(c.name not in table.columns for c in schema.lowered if c.parts or c.base is not None):
        return table
    out = table.reset_index(drop=True).copy()
    axis: dict[str, np.ndarray] = {}  # each column's values on its own axis (seconds, or the number), for the rules
    for column in _in_rule_order(schema):
        if not column.parts and column.base is None:
            out = out.drop(columns=[column.name], errors="ignore")  # an id is never read
            continue
        series = out[column.name]
        cells: dict[str, object] = {}
        if column.spec is not None:  # a number a rule lowered
            values = _number_axis(series)
        else:
            cells, seconds = lowered_kind_of(column.kind).lower(series, column)
            values = seconds if seconds is not None else np.full(len(out), np.nan)
        unread = np.isnan(values) & series.notna().to_numpy()
        axis[column.name] = values
        if column.base is not None:
            base = axis[column.base] if column.base in axis else _number_axis(out[column.base])
            if column.spec is None:  # on the later column's resolution: a date is after a datetime's day
                unit = UNITS[column.resolution or "second"]
                offset = np.floor(values / unit) - np.floor(base / unit)
            else:
                offset = values - base
            cells = {column.parts[0]: part_cells(offset, unread)}
        position = list(out.columns).index(column.name)
        out = out.drop(columns=[column.name])
        for k, (name, part) in enumerate(cells.items()):
            out.insert(position + k, name, part)
    return out


def _number_axis(series: pd.Series) -> np.ndarray:
    from splice_assets.kinds.cells import parse_numbers

    return parse_numbers(series.reset_index(drop=True))


def assemble_output(frame: pd.DataFrame, schema: TableSchema, seed: int = 0, first_row: int = 0) -> pd.DataFrame:
    """Decoded rows (the modelled columns) -> the output table: lowered columns built from their parts, keys
    generated for rows ``first_row`` on (their positions in the whole synthetic table), derived columns computed,
    in the schema's order and dtypes."""
    import pandas as pd

    rows = range(first_row, first_row + len(frame))
    out: dict[str, pd.Series] = {name: frame[name].reset_index(drop=True) for name in frame.columns}
    axis: dict[str, np.ndarray] = {}
    for column in _in_rule_order(schema):
        parts = {p: out[p] for p in column.parts}
        if column.base is None:
            out[column.name] = lowered_kind_of(column.kind).assemble(parts, column, rows, seed)
        else:
            base = axis.get(column.base)
            if base is None:
                base = out[column.base].to_numpy(dtype=np.float64, na_value=np.nan)
            offset = out[column.parts[0]].to_numpy(dtype=np.float64, na_value=np.nan)
            out[column.name] = _after(base, offset, column, schema.column(column.parts[0]))
        if column.spec is None and isinstance(lowered_kind_of(column.kind), Temporal):
            axis[column.name] = wall_seconds(out[column.name])
        elif column.spec is not None:
            axis[column.name] = out[column.name].to_numpy(dtype=np.float64, na_value=np.nan)
    for derived in schema.derived:
        inputs = {name: axis[name] if name in axis else out[name].to_numpy(dtype=np.float64, na_value=np.nan)
                  for name in derived.inputs}
        out[derived.name] = _derived_series(derived.values(inputs), derived)
    return pd.DataFrame({name: out[name] for name in schema.output_names})


def with_keys(frame: pd.DataFrame, schema: TableSchema, seed: int, first_row: int = 0) -> pd.DataFrame:
    """``frame`` (output rows) with its ``id`` columns' keys generated afresh for rows ``first_row`` on: for rows
    gathered from several draws (a conditional sample keeps some of each), so keys stay unique and in sequence."""
    rows = range(first_row, first_row + len(frame))
    out = frame.copy()
    for column in schema.lowered:
        if column.kind == "id":
            out[column.name] = lowered_kind_of(column.kind).assemble({}, column, rows, seed).to_numpy()
    return out


def _after(base: np.ndarray, offset: np.ndarray, column: LoweredColumn, part: ColumnSpec) -> pd.Series:
    """A rule's later column: its earlier column's value plus the (non-negative) offset ``part``, inside its public
    bounds where they allow it, never before the earlier value, at the precision the offset resolved."""
    missing = np.isnan(base) | np.isnan(offset)
    if column.spec is None:
        kind = lowered_kind_of(column.kind)
        assert isinstance(kind, Temporal)
        unit = UNITS[column.resolution or "second"]
        seconds = (np.floor(base / unit) + np.maximum(np.nan_to_num(offset), 0.0)) * unit
        return kind.from_seconds(np.nan_to_num(seconds), missing, column)
    spec = column.spec
    values = np.nan_to_num(base) + np.maximum(np.nan_to_num(offset), 0.0)
    if spec.bounds is None:  # bounds: auto on the later column: its range is the earlier's plus the offset's
        spec = dataclasses.replace(spec, bounds=(float(np.min(values, initial=0.0)),
                                                 float(np.max(values, initial=1.0))))
    if spec.decimals_auto:
        spec = dataclasses.replace(spec, decimals=part.decimals)
    assert spec.bounds is not None
    lo, hi = spec.bounds
    values = np.maximum(np.clip(values, lo, hi), np.nan_to_num(base))
    from splice_assets.kinds.scales import _on_public_precision

    numeric = kind_of(spec.kind)
    return numeric.output_series(_on_public_precision(values, spec), missing, spec)  # type: ignore[attr-defined]


def wall_seconds(series: pd.Series) -> np.ndarray:
    """A datetime output column as wall-clock seconds since 1970 (NaN where missing)."""
    import pandas as pd

    if isinstance(series.dtype, pd.DatetimeTZDtype):
        series = series.dt.tz_localize(None)
    ns = series.to_numpy(dtype="datetime64[ns]").astype(np.int64)
    return np.where(ns == np.iinfo(np.int64).min, np.nan, ns / 1e9)


def _derived_series(values: np.ndarray, derived: DerivedColumn) -> pd.Series:
    """A derived column's values (NaN: missing) in the dtype a modelled column of its kind and nullability has."""
    import pandas as pd

    if not kind_of(derived.kind).integral:
        return pd.Series(values, dtype=np.float64)
    missing = np.isnan(values)
    series = pd.Series(pd.array(np.where(missing, 0, values).astype(np.int64), dtype="Int64"))
    return series.mask(missing) if derived.nullable else series.astype(np.int64)
