"""Structural validation (fail fast) and total record-level cleaning of a private input table.

Structural problems (unreadable file, missing or duplicate columns, schema-version drift, too few rows, too many
non-empty cells of a column that are not numbers or not declared categories) raise ``StructuralError`` naming the
column and the problem and never quoting a cell value. Record-level problems never raise: every cell goes through
a total rule (clip, missing, declared OTHER), and what was changed is *counted* in an internal report that must
not be released.

Unseen categories (non-empty cells that match no declared category after Unicode, case and space normalisation):

* the column declares ``other``: they become ``other`` (``unseen_to_other``), whatever their share;
* no ``other``: if more than ``max_unparseable_share`` (default 5%) of the column's non-empty cells are unseen,
  the input is refused with a ``StructuralError`` naming the column; at or below that share they become missing
  if the column is nullable (``unseen_to_missing``), else the column's first declared category (``false`` for a
  boolean), counted as ``unseen_imputed_to_first_category``.

Missing cells of a non-nullable discrete column become ``other`` if declared, else the first declared category
(``missing_in_non_nullable_imputed``). Numeric columns take the same threshold: more than ``max_unparseable_share``
of non-empty cells that are not numbers is refused; at or below it they become missing (``unparseable_to_missing``),
then the bounds' midpoint if the column is not nullable (``missing_in_non_nullable_imputed``).

A cell longer than ``MAX_CELL_CHARS`` (10,000) characters is not a value: it counts as unparseable in its column
under the same share rule (in a categorical column too, where it never becomes ``other``), and at or below the share
it becomes missing (``too_long_to_missing``), then the non-nullable imputation above. A typed input (Parquet, a
DataFrame) whose column has a type that cannot hold the declared kind (a date where a number was declared) is
refused naming the type.
"""

from __future__ import annotations

import csv
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from splice_assets.defaults import DEFAULT_MAX_UNPARSEABLE_SHARE as DEFAULT_MAX_UNPARSEABLE_SHARE
from splice_assets.kinds import kind_of
from splice_assets.kinds.cells import MAX_CELL_CHARS as MAX_CELL_CHARS
from splice_assets.kinds.cells import MISSING as MISSING
from splice_assets.kinds.cells import PLAIN_NUMBER as PLAIN_NUMBER
from splice_assets.kinds.cells import TOO_LONG as TOO_LONG
from splice_assets.kinds.cells import UNSEEN as UNSEEN
from splice_assets.kinds.cells import parse_numbers as parse_numbers
from splice_assets.kinds.lowered import lowered_kind_of
from splice_assets.limits import MAX_UNPARSEABLE_SHARE, Relation
from splice_assets.lowering import is_lowered, lower_input
from splice_assets.private.row_count import CSV_ENCODING, is_parquet, open_csv_text
from splice_assets.schema import ColumnSpec, TableSchema

if TYPE_CHECKING:
    import pandera.pandas as pa


class StructuralError(ValueError):
    """The input's structure does not match the schema. Nothing was charged or released."""


@dataclass(frozen=True)
class ValidationReport:
    """INTERNAL: counts of record-level repairs per column. Computed from private rows; never release it."""

    n_rows: int
    dropped_columns: tuple[str, ...]
    counts: dict[str, dict[str, int]] = field(default_factory=dict)

    def total(self, kind: str) -> int:
        return sum(c.get(kind, 0) for c in self.counts.values())

    def shares(self, kind: str) -> dict[str, float]:
        """Per column, the share of the rows that had repair ``kind`` (columns without it left out)."""
        return {c: k[kind] / self.n_rows for c, k in self.counts.items() if k.get(kind, 0) and self.n_rows}

    def __add__(self, other: ValidationReport) -> ValidationReport:
        """The report of two disjoint sets of rows of one input."""
        names = dict.fromkeys([*self.counts, *other.counts])
        counts = {c: dict(Counter(self.counts.get(c, {})) + Counter(other.counts.get(c, {}))) for c in names}
        return ValidationReport(self.n_rows + other.n_rows, self.dropped_columns, counts)


@dataclass(frozen=True)
class ValidatedTable:
    table: pd.DataFrame
    report: ValidationReport


def read_table(path: str | Path) -> pd.DataFrame:
    """Read a CSV (optionally gzipped) or Parquet file; every CSV cell is read as text for strict parsing."""
    path = Path(path)
    if not path.exists():
        raise StructuralError(f"input file {str(path)!r} does not exist")
    try:
        if is_parquet(path):
            table = pd.read_parquet(path)
            header = [str(c) for c in table.columns]
        else:
            with open_csv_text(path) as handle:
                header = next(csv.reader(handle), [])
            if not header:
                raise StructuralError(f"input file {str(path)!r} is empty or has no header row")
            table = pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[""], encoding=CSV_ENCODING)
    except StructuralError:
        raise
    except (UnicodeDecodeError, OSError, ValueError, pd.errors.ParserError, csv.Error) as exc:
        raise StructuralError(f"cannot read input file {str(path)!r}: {type(exc).__name__}") from None
    check_duplicate_columns(header)
    table.columns = header
    return table


def check_duplicate_columns(columns: list[str]) -> None:
    repeated = sorted(name for name, count in Counter(str(c).strip() for c in columns).items() if count > 1)
    if repeated:
        raise StructuralError(f"column {repeated[0]!r}: duplicate column name in the input ({len(repeated)} repeated)")


def _share_limit(value: object) -> float:
    MAX_UNPARSEABLE_SHARE.check(value)  # the settings model's limit and message
    return float(value)  # type: ignore[arg-type]  # checked: a real number


def check_structure(
    table: pd.DataFrame,
    schema: TableSchema,
    expected_version: int | None = None,
    require_bounds: bool = True,
    *,
    max_unparseable_share: float = DEFAULT_MAX_UNPARSEABLE_SHARE,
    relation: Relation = Relation.REPLACE_ONE,
) -> None:
    """Raise ``StructuralError`` for anything that is not a per-record problem (the row count under replace-one
    only: ``check_row_count``).

    This includes ``validate``'s limit on cells that are not numbers or not declared categories, so a caller that
    charges budget before ``validate`` (``bounds: auto``) refuses such an input before anything is charged; such a
    caller must pass the same ``max_unparseable_share`` here as to ``validate``.
    """
    limit = _share_limit(max_unparseable_share)
    _check_layout(table, schema, expected_version, require_bounds, relation)
    refuse_unparseable(schema, column_tallies(lower_input(table, schema), schema), limit)


def column_tallies(table: pd.DataFrame, schema: TableSchema) -> dict[str, tuple[int, int]]:
    """Per column: (non-empty cells, how many of them are not numbers or not declared categories that no ``other``
    takes). Tallies of disjoint row sets add up, so a partitioned input is checked by summing its parts'."""
    table = lower_input(_strip_names(table), schema)
    tallies: dict[str, tuple[int, int]] = {}
    for spec in schema.columns:
        check_dtype(table[spec.name], spec)
        values, was_missing = _parse_column(table[spec.name].reset_index(drop=True), spec)
        tallies[spec.name] = _tally(spec, values, was_missing)
    return tallies


def check_dtype(series: pd.Series, spec: ColumnSpec) -> None:
    """Refuse a typed column (Parquet, a DataFrame) whose type cannot hold the declared kind, naming the type: a
    date, duration, period or interval anywhere, a boolean where a number was declared. Text, numbers and
    categoricals pass (their cells are parsed one by one)."""
    dtype = series.dtype
    temporal = (pd.api.types.is_datetime64_any_dtype(dtype) or pd.api.types.is_timedelta64_dtype(dtype)
                or isinstance(dtype, (pd.PeriodDtype, pd.IntervalDtype)))
    wrong = kind_of(spec.kind).wrong_dtype(spec, dtype, temporal)
    if wrong is None:
        return
    declared, fix = wrong
    raise StructuralError(f"column {spec.name!r}: Parquet/DataFrame type {dtype} where {declared}; {fix}")


def _check_layout(
    table: pd.DataFrame, schema: TableSchema, expected_version: int | None, require_bounds: bool, relation: Relation
) -> None:
    check_columns(table.columns, schema, expected_version, require_bounds)
    check_row_count(len(table), schema, relation)


def check_columns(
    columns: Iterable[object], schema: TableSchema, expected_version: int | None, require_bounds: bool
) -> None:
    """The input's header against the schema: version drift, duplicate and missing columns, unresolved bounds."""
    if expected_version is not None and expected_version != schema.version:
        raise StructuralError(
            f"schema {schema.name!r}: version drift, the run expects version {expected_version} "
            f"but the schema file is version {schema.version}"
        )
    names = [str(c) for c in columns]
    check_duplicate_columns(names)
    present = {c.strip() for c in names}
    for name in schema.input_names:
        owner = next((c for c in schema.lowered if c.name == name), None)
        held = owner is not None and all(p in present for p in owner.parts)  # a lowered input
        if name not in present and not held:
            raise StructuralError(f"column {name!r}: required by schema {schema.name!r} but missing from the input")
    for spec in schema.columns:
        if require_bounds and spec.is_numeric and spec.bounds is None:
            raise StructuralError(f"column {spec.name!r}: bounds are 'auto' and have not been resolved")


def check_row_count(rows: int, schema: TableSchema, relation: Relation = Relation.REPLACE_ONE,
                    what: str = "table has") -> None:
    """Refuse fewer ``rows`` than the schema's public n_min, under replace-one only.

    Under add-remove the row count is private, and a refusal that depends on it would publish one bit of it
    (n < n_min) in the run's outcome, which anyone who can read the Dagster event log or the CLI sees. The guarantee
    does not need n >= n_min there (the noise ignores n; delta < 1/n_min is checked on the public n_min), so the
    release goes on whatever the count."""
    if relation == Relation.REPLACE_ONE and rows < schema.n_min:
        raise StructuralError(
            f"{what} fewer rows than the schema's public minimum n_min={schema.n_min}; nothing was released"
        )


def _strip_names(table: pd.DataFrame) -> pd.DataFrame:
    return table.rename(columns=lambda c: str(c).strip())


def _tally(spec: ColumnSpec, values: np.ndarray, was_missing: np.ndarray) -> tuple[int, int]:
    """(non-empty cells, how many of them the column's kind counts as unparseable)."""
    return kind_of(spec.kind).tally(spec, values, was_missing)


def refuse_unparseable(schema: TableSchema, tallies: dict[str, tuple[int, int]], limit: float) -> None:
    """Refuse the input if any column is over the limit, naming the first in schema order and how many are."""
    shares = {name: (bad / non_empty if non_empty else 0.0) for name, (non_empty, bad) in tallies.items()}
    over = [spec for spec in schema.columns if shares[spec.name] > limit]
    if not over:
        return
    spec = over[0]
    what, fix = kind_of(spec.kind).unparseable(spec)
    owner = schema.owner(spec.name)
    name = spec.name if owner is None else owner.name
    if owner is not None and owner.spec is None:  # a part: the lowered column's cells could not be read
        what, fix = lowered_kind_of(owner.kind).unreadable
    # Rounded up, so a share just over the limit never reads as the limit itself.
    share = math.ceil(round(100 * shares[spec.name], 9))
    raise StructuralError(
        f"column {name!r}: {share}% of its non-empty cells are {what} (limit {100 * limit:g}%); {fix}; "
        f"{len(over)} of {len(schema.columns)} columns are over the limit "
        "(operator-only message: computed from the private input)"
    )


def _parse_column(series: pd.Series, spec: ColumnSpec) -> tuple[np.ndarray, np.ndarray]:
    """(values, was the cell empty) before any repair, by the column's kind (``Kind.parse``): numbers for a numeric
    column (NaN where empty or not a number), category codes for a discrete one (``MISSING`` where empty,
    ``UNSEEN`` where not a declared category, ``TOO_LONG``)."""
    return kind_of(spec.kind).parse(series, spec)


def pandera_schema(schema: TableSchema) -> pa.DataFrameSchema:
    import pandera.pandas as pa  # 0.5 s: loaded to check cleaned rows, not to refuse a bad input
    """The structural contract of a validated table: columns, order, dtypes, bounds, categories, nulls."""
    columns: dict[str, pa.Column] = {}
    for spec in schema.columns:
        columns[spec.name] = kind_of(spec.kind).pandera_column(spec)
    return pa.DataFrameSchema(columns, strict=True, ordered=True, name=schema.name)


def conform(table: pd.DataFrame, schema: TableSchema) -> None:
    """Check a table against the pandera contract; errors name columns and checks only, never values."""
    import pandera.pandas as pa

    try:
        pandera_schema(schema).validate(table, lazy=True)
    except pa.errors.SchemaErrors as exc:
        cases = exc.failure_cases
        problems = sorted({f"column {c!r}: failed {chk}" for c, chk in zip(cases["column"], cases["check"])})
        raise StructuralError("; ".join(problems)) from None


def validate(
    table: pd.DataFrame,
    schema: TableSchema,
    expected_version: int | None = None,
    *,
    max_unparseable_share: float = DEFAULT_MAX_UNPARSEABLE_SHARE,
    relation: Relation = Relation.REPLACE_ONE,
) -> ValidatedTable:
    """Structural checks, then total record-level cleaning into the schema's exact columns and dtypes.

    A column in which more than ``max_unparseable_share`` of the non-empty cells are not numbers (numeric kinds)
    or not declared categories (discrete kinds without ``other``) is refused with a ``StructuralError``; every
    column is checked first and the message names the first such column in schema order and how many there are.

    Unknown categories: a value that is not a declared category goes to the declared ``other`` if the column has
    one; else to missing if the column is nullable; else (non-nullable, no ``other``) to the column's first
    declared category (``false`` for a boolean), counted as ``unseen_imputed_to_first_category`` in the internal
    report, unless more than ``max_unparseable_share`` of the column's non-empty cells are unknown, which is
    refused as above. Missing cells of a non-nullable discrete column go to ``other`` if declared, else to the
    first declared category, counted apart as ``missing_in_non_nullable_imputed``.
    """
    limit = _share_limit(max_unparseable_share)
    _check_layout(table, schema, expected_version, True, relation)
    cleaned, tallies = clean_records(lower_input(table, schema), schema)
    # Cleaning is total, so every column is tallied before the first over the limit is named.
    refuse_unparseable(schema, tallies, limit)
    return cleaned


def modelled_view(table: pd.DataFrame, schema: TableSchema) -> pd.DataFrame:
    """A table in the user's form (synthetic rows, with datetimes and keys) as a validated table of the modelled
    columns, for the metrics that compare it with validated real rows; a table without lowered columns, or one
    already lowered, is returned as it is."""
    if not schema.lowered or is_lowered(table, schema):
        return table
    return clean_records(table, schema)[0].table


def clean_records(table: pd.DataFrame, schema: TableSchema) -> tuple[ValidatedTable, dict[str, tuple[int, int]]]:
    """The total record-level cleaning of ``validate`` without its table-level checks (row count, share limits):
    (the cleaned rows with their repair counts, ``column_tallies``). Row by row, so a partition's cleaned rows are
    those of the whole table and the counts of disjoint parts add up (``ValidationReport.__add__``)."""
    table = lower_input(_strip_names(table), schema)
    dropped = tuple(sorted(set(table.columns) - set(schema.column_names)))
    counts: dict[str, dict[str, int]] = {}
    cleaned: dict[str, pd.Series] = {}
    tallies: dict[str, tuple[int, int]] = {}
    for spec in schema.columns:
        column_counts: Counter = Counter()
        check_dtype(table[spec.name], spec)
        values, was_missing = _parse_column(table[spec.name].reset_index(drop=True), spec)
        tallies[spec.name] = _tally(spec, values, was_missing)
        cleaned[spec.name] = kind_of(spec.kind).clean(values, was_missing, spec, column_counts)
        counts[spec.name] = {k: v for k, v in column_counts.items() if v}
    out = pd.DataFrame(cleaned, columns=list(schema.column_names))
    conform(out, schema)
    return ValidatedTable(out, ValidationReport(n_rows=len(out), dropped_columns=dropped, counts=counts)), tallies
