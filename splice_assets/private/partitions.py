"""PRIVATE streaming of a partitioned input: the whole-table path's checks, DP-bounds counts, holdout split and exact
sums, one bounded batch at a time, in this process or on Dask workers (``engine``).

A source is a file, a directory or a glob of Parquet or CSV (optionally .gz) files at any fsspec URL. It is cut into
partitions (a Parquet file's row groups, a CSV file whole) read in batches of ``batch_rows`` rows, so a worker's
memory is bounded by one batch whatever n. Every pass is a function of one partition that returns integer counts
and sums; the driver adds them up, exactly (integers), so the result is the same bit for bit in any partitioning
and order, and equal to the whole-table path's (tests/test_partitions.py):

1. ``scan``: the header against the schema, the row count, the unparseable-cell tallies, the exact histograms
   of ``bounds: auto`` columns (a datetime's month histogram, a ``resolution: auto`` one's unit histogram) and the
   exact key counts of ``categories: auto`` columns (added key by key). The
   driver then refuses bad input and runs the pre-flight before anything is charged, and charges the DP bounds
   (``bounds.estimate_bounds_from_counts``); with ``values: auto`` (``knots: auto``) columns a second pass
   (``value_counts_partition``) counts their candidates (knot cells) on the resolved bounds inside that charge;
2. replace-one with a holdout only: ``key_histogram`` and ``boundary_keys`` find the rank cut of the holdout's
   row keys (``holdout_split``: the measured rows are the n - round(f n) smallest keys), with a per-partition
   quota for identical rows at the cut, so the measured multiset is the whole-table path's;
3. ``measure_partition``: record-level cleaning, the split, the encoding and ``measuring.exact_sums`` of the
   measured rows, with the repair counts and bounded report samples (rows kept by a keyed hash at a rate the
   driver sets: every row when the table is small, as in the whole-table path).

Workers return exact sums and samples of private rows to the driver's memory and write nothing; the noise is drawn
once, on the driver, after the ledger reservation (``measuring.measure_exact``).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import reduce
from operator import add
from pathlib import PurePosixPath

import numpy as np
import pandas as pd

from splice_assets.engine import Engine, LocalEngine
from splice_assets.kinds.temporal import MONTH_CELLS, UNIT_CELLS
from splice_assets.layout import draw_directions, layout_for
from splice_assets.limits import Relation
from splice_assets.lowering import lower_input
from splice_assets.private.bounds import (
    COARSE,
    DECIMAL_CELLS,
    FINE,
    STEP_CELLS,
    KeyCounts,
    ValueCounts,
    add_value_counts,
    auto_columns,
    categories_auto_columns,
    decimals_auto_columns,
    exact_category_counts,
    exact_decimals,
    exact_histograms,
    exact_months,
    exact_steps,
    exact_units,
    exact_value_counts,
    period_auto_columns,
    resolution_auto_columns,
    steps_auto_columns,
)
from splice_assets.private.encoding import encode
from splice_assets.private.holdout_split import key_threshold, row_keys
from splice_assets.private.measuring import ExactSums, MeasurementPlan, exact_sums
from splice_assets.private.row_count import CSV_ENCODING, is_parquet
from splice_assets.private.validation import (
    StructuralError,
    ValidationReport,
    check_columns,
    check_duplicate_columns,
    clean_records,
    column_tallies,
)
from splice_assets.schema import ColumnSpec, TableSchema

#: PRIVATE: per column, exact counts of a cleaned batch (``bounds.exact_value_counts``, ``bounds.exact_knot_counts``).
CountsOf = Callable[[pd.DataFrame, Sequence[ColumnSpec]], list[ValueCounts]]

#: Rows per batch: pandera's fixed cost per validated batch (about 0.15 s) stays below 5% of the pass.
DEFAULT_BATCH_ROWS = 2**18
#: Report samples: at most about this many measured and as many held-out rows reach the internal report.
DEFAULT_REPORT_ROWS = 50_000
#: Streams of the public seed beside the holdout's 0 and 1: the report sample's row keys.
_SAMPLE_STREAM = 2
#: The rank cut of replace-one holdouts looks at the top bits of the row keys first.
_KEY_BITS = 16


@dataclass(frozen=True)
class Partition:
    """One unit of work: a Parquet file's row groups (``None``: all) or a whole CSV file, at an fsspec URL."""

    index: int
    url: str
    row_groups: tuple[int, ...] | None = None

    @property
    def is_parquet(self) -> bool:
        return is_parquet(_path_of(self.url))


def _path_of(url: str) -> PurePosixPath:
    return PurePosixPath(url.split("::")[-1].split("?")[0])


def list_partitions(source: str, row_groups_per_partition: int = 1) -> list[Partition]:
    """The partitions of a file, a directory (its Parquet and CSV files, recursively, in name order) or a glob.

    Parquet files split into groups of ``row_groups_per_partition`` row groups (a file with none is one empty
    partition); CSV files stay whole (a quoted cell may span lines, so a CSV cannot be cut at a byte offset)."""
    import fsspec

    if not (isinstance(row_groups_per_partition, int) and row_groups_per_partition >= 1):
        raise ValueError(f"row_groups_per_partition must be an integer >= 1, got {row_groups_per_partition!r}")
    fs, _, paths = fsspec.get_fs_token_paths(source)
    files: list[str] = []
    for path in sorted(paths):
        if fs.isdir(path):
            files += sorted(p for p in fs.find(path) if _is_table_file(p))
        elif fs.exists(path):
            files.append(path)
    if not files:
        raise StructuralError(f"input {source!r} matches no Parquet or CSV file")
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    urls = [p if protocol in ("file", "local") else f"{protocol}://{p}" for p in files]
    partitions: list[Partition] = []
    for url in urls:
        if not is_parquet(_path_of(url)):
            partitions.append(Partition(len(partitions), url))
            continue
        groups = _row_group_count(url)
        for start in range(0, max(groups, 1), row_groups_per_partition):
            chunk = tuple(range(start, min(start + row_groups_per_partition, groups)))
            partitions.append(Partition(len(partitions), url, chunk))
    return partitions


def _is_table_file(path: str) -> bool:
    p = _path_of(path)
    return not p.name.startswith((".", "_")) and (is_parquet(p) or p.suffix.lower() == ".csv"
                                                 or p.name.lower().endswith(".csv.gz"))


def _row_group_count(url: str) -> int:
    import fsspec
    import pyarrow.parquet as pq

    with fsspec.open(url, "rb") as handle:
        return int(pq.ParquetFile(handle).metadata.num_row_groups)


def read_batches(partition: Partition, batch_rows: int = DEFAULT_BATCH_ROWS) -> Iterator[pd.DataFrame]:
    """A partition's rows in batches of at most ``batch_rows``, typed as ``validation.read_table`` reads them (CSV
    cells as text); at least one (possibly empty) batch, so the header is always checked."""
    import fsspec

    try:
        if partition.is_parquet:
            import pyarrow as pa
            import pyarrow.parquet as pq

            with fsspec.open(partition.url, "rb") as handle:
                file = pq.ParquetFile(handle)
                schema = file.schema_arrow
                yielded = False
                if partition.row_groups:
                    for batch in file.iter_batches(batch_size=batch_rows, row_groups=list(partition.row_groups)):
                        yielded = True
                        yield pa.Table.from_batches([batch], schema=schema).to_pandas()
                if not yielded:
                    yield schema.empty_table().to_pandas()
            return
        with fsspec.open(partition.url, "rb", compression="infer") as raw:
            text = io.TextIOWrapper(raw, encoding=CSV_ENCODING, newline="")
            header = next(csv.reader(text), [])
            if not header:
                raise StructuralError(f"input file {partition.url!r} is empty or has no header row")
            check_duplicate_columns(header)
            reader = pd.read_csv(text, header=None, names=header, dtype=str, keep_default_na=False,
                                 na_values=[""], chunksize=batch_rows)
            yielded = False
            for chunk in reader:
                yielded = True
                yield chunk
            if not yielded:
                yield pd.DataFrame({name: pd.Series([], dtype=str) for name in header})
    except StructuralError:
        raise
    except (UnicodeDecodeError, OSError, ValueError, pd.errors.ParserError, csv.Error) as exc:
        raise StructuralError(f"cannot read input file {partition.url!r}: {type(exc).__name__}") from None


def _lowered_batches(partition: Partition, schema: TableSchema, batch_rows: int) -> Iterator[pd.DataFrame]:
    """``read_batches`` with each lowered column replaced by its modelled parts (``lowering.lower_input``)."""
    for batch in read_batches(partition, batch_rows):
        yield lower_input(batch, schema)


# -- pass 1: header, row count, tallies, DP-bounds histograms ----------------------------------------------------


@dataclass(frozen=True)
class Scan:
    """PRIVATE: the first pass's counts over a set of rows (they add up over partitions)."""

    rows: int
    tallies: dict[str, tuple[int, int]]
    bounds_counts: np.ndarray
    decimals_counts: np.ndarray
    steps_counts: np.ndarray
    #: PRIVATE: per ``categories: auto`` column, the exact count of each key its raw cells hold
    #: (``bounds.exact_category_counts``); one entry per distinct key, so it grows with the open domain, not with n.
    category_counts: tuple[KeyCounts, ...] = ()
    #: PRIVATE: the month histograms of ``bounds: auto`` datetime and date columns (``bounds.exact_months``) and the
    #: unit histograms of ``resolution: auto`` ones (``bounds.exact_units``); None: no such column.
    months_counts: np.ndarray | None = None
    units_counts: np.ndarray | None = None

    def __add__(self, other: Scan) -> Scan:
        tallies = {c: (cells + other.tallies[c][0], bad + other.tallies[c][1])
                   for c, (cells, bad) in self.tallies.items()}
        return Scan(self.rows + other.rows, tallies, self.bounds_counts + other.bounds_counts,
                    self.decimals_counts + other.decimals_counts, self.steps_counts + other.steps_counts,
                    add_category_counts(self.category_counts, other.category_counts),
                    _add(self.months_counts, other.months_counts), _add(self.units_counts, other.units_counts))


def _add(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
    return a if b is None else b if a is None else a + b


def add_category_counts(a: Sequence[KeyCounts], b: Sequence[KeyCounts]) -> tuple[KeyCounts, ...]:
    """Two parts' exact key counts added key by key, column by column (disjoint rows: the whole's counts)."""
    if len(a) != len(b):
        raise ValueError(f"category counts of {len(a)} and {len(b)} columns do not add up")
    out = []
    for left, right in zip(a, b):
        total = dict(left)
        for key, count in right.items():
            total[key] = total.get(key, 0) + count
        out.append(total)
    return tuple(out)


def scan_partition(partition: Partition, schema: TableSchema, batch_rows: int = DEFAULT_BATCH_ROWS) -> Scan:
    """Pass 1 over one partition: ``StructuralError`` for a header that does not fit the schema, else the counts."""
    auto, decimals, steps = auto_columns(schema), decimals_auto_columns(schema), steps_auto_columns(schema)
    categories = categories_auto_columns(schema)
    periods, units = period_auto_columns(schema), resolution_auto_columns(schema)
    total = Scan(0, {c.name: (0, 0) for c in schema.columns}, np.zeros((len(auto), COARSE.size + FINE.size)),
                 np.zeros((len(decimals), DECIMAL_CELLS)), np.zeros((len(steps), len(STEP_CELLS))),
                 tuple({} for _ in categories), np.zeros((len(periods), MONTH_CELLS)),
                 np.zeros((len(units), len(UNIT_CELLS))))
    for batch in _lowered_batches(partition, schema, batch_rows):
        check_columns(batch.columns, schema, None, require_bounds=False)
        total = total + Scan(len(batch), column_tallies(batch, schema), exact_histograms(batch, auto),
                             exact_decimals(batch, decimals), exact_steps(batch, steps),
                             tuple(exact_category_counts(batch, categories)), exact_months(batch, periods),
                             exact_units(batch, units))
    return total


def scan_source(partitions: Sequence[Partition], schema: TableSchema, engine: Engine | None = None,
                batch_rows: int = DEFAULT_BATCH_ROWS) -> Scan:
    results = (engine or LocalEngine()).map(scan_partition, partitions, schema=schema, batch_rows=batch_rows)
    return reduce(add, results)


def value_counts_partition(partition: Partition, schema: TableSchema, columns: list[ColumnSpec],
                           batch_rows: int = DEFAULT_BATCH_ROWS, counter: CountsOf = exact_value_counts
                           ) -> list[ValueCounts]:
    """Pass 1b (``values: auto`` or ``knots: auto`` columns, on the schema the DP bounds resolved): the exact counts
    of the candidates the cleaned values hold (``bounds.exact_value_counts``), or of their knot cells
    (``counter=bounds.exact_knot_counts``)."""
    total = counter(pd.DataFrame({c.name: pd.Series([], dtype=float) for c in columns}), columns)
    for batch in _lowered_batches(partition, schema, batch_rows):
        total = add_value_counts(total, counter(clean_records(batch, schema)[0].table, columns))
    return total


def value_counts_source(partitions: Sequence[Partition], schema: TableSchema, columns: list[ColumnSpec],
                        engine: Engine | None = None, batch_rows: int = DEFAULT_BATCH_ROWS,
                        counter: CountsOf = exact_value_counts) -> list[ValueCounts]:
    results = (engine or LocalEngine()).map(value_counts_partition, partitions, schema=schema, columns=columns,
                                            batch_rows=batch_rows, counter=counter)
    return reduce(add_value_counts, results)


# -- pass 2 (replace-one with a holdout): the rank cut of the row keys ------------------------------------------


@dataclass(frozen=True)
class HoldoutRule:
    """Which rows are measured. ``fraction`` 0: all. Add-remove: rows whose key is at or above the threshold.
    Replace-one: keys (key, key2) below ``cut``, and the first ``quota[p]`` rows of partition p whose keys equal it.
    """

    fraction: float
    seed: int
    relation: Relation
    cut: tuple[int, int] | None = None
    quota: tuple[int, ...] = ()

    def measured(self, table: pd.DataFrame, partition: int, seen_at_cut: int) -> tuple[np.ndarray, int]:
        """(mask of measured rows, rows at the cut seen so far in this partition, this batch included)."""
        if self.fraction == 0 or len(table) == 0:
            return np.ones(len(table), dtype=bool), seen_at_cut
        keys = row_keys(table, self.seed, 0)
        if self.relation == Relation.ADD_REMOVE:
            return keys >= key_threshold(self.fraction), seen_at_cut
        assert self.cut is not None
        key2 = row_keys(table, self.seed, 1)
        cut, cut2 = np.uint64(self.cut[0]), np.uint64(self.cut[1])
        below = (keys < cut) | ((keys == cut) & (key2 < cut2))
        at = np.flatnonzero((keys == cut) & (key2 == cut2))
        # Identical rows at the cut: the first ones in input order are measured, as the stable sort does.
        quota = self.quota[partition] if self.quota else 0
        take = at[: max(0, quota - seen_at_cut)]
        below[take] = True
        return below, seen_at_cut + len(at)


def key_histogram(partition: Partition, schema: TableSchema, seed: int, batch_rows: int = DEFAULT_BATCH_ROWS
                  ) -> np.ndarray:
    """Counts of the cleaned rows' holdout keys by their top ``_KEY_BITS`` bits."""
    counts = np.zeros(2**_KEY_BITS, dtype=np.int64)
    for batch in _lowered_batches(partition, schema, batch_rows):
        cleaned = clean_records(batch, schema)[0].table
        if len(cleaned):
            top = (row_keys(cleaned, seed, 0) >> np.uint64(64 - _KEY_BITS)).astype(np.int64)
            counts += np.bincount(top, minlength=counts.size)
    return counts


def boundary_keys(partition: Partition, schema: TableSchema, seed: int, bucket: int,
                  batch_rows: int = DEFAULT_BATCH_ROWS) -> np.ndarray:
    """(rows, 2) keys (key, key2) of the rows whose key falls in ``bucket``, in input order."""
    found = [np.zeros((0, 2), dtype=np.uint64)]
    for batch in _lowered_batches(partition, schema, batch_rows):
        cleaned = clean_records(batch, schema)[0].table
        if not len(cleaned):
            continue
        keys = row_keys(cleaned, seed, 0)
        inside = (keys >> np.uint64(64 - _KEY_BITS)) == np.uint64(bucket)
        if inside.any():
            found.append(np.column_stack([keys[inside], row_keys(cleaned[inside], seed, 1)]))
    return np.concatenate(found)


def holdout_rule(partitions: Sequence[Partition], schema: TableSchema, n_rows: int, fraction: float, seed: int,
                 relation: Relation, engine: Engine | None = None, batch_rows: int = DEFAULT_BATCH_ROWS) -> HoldoutRule:
    """The rule that measures exactly the rows ``holdout_split.split_holdout`` measures on the whole table."""
    if fraction == 0 or n_rows == 0 or relation == Relation.ADD_REMOVE:
        return HoldoutRule(fraction, seed, relation)
    measured = n_rows - int(round(fraction * n_rows))
    if measured == n_rows:
        return HoldoutRule(0.0, seed, relation)
    engine = engine or LocalEngine()
    histogram = reduce(add, engine.map(key_histogram, partitions, schema=schema, seed=seed, batch_rows=batch_rows))
    cumulative = np.cumsum(histogram)
    bucket = int(np.searchsorted(cumulative, measured, side="left"))  # the bucket holding the measured-th key
    before = int(cumulative[bucket - 1]) if bucket else 0
    found = engine.map(boundary_keys, partitions, schema=schema, seed=seed, bucket=bucket, batch_rows=batch_rows)
    pooled = np.concatenate(found)
    order = np.lexsort((pooled[:, 1], pooled[:, 0]))
    cut = pooled[order[measured - before - 1]]
    below = int(np.sum((pooled[:, 0] < cut[0]) | ((pooled[:, 0] == cut[0]) & (pooled[:, 1] < cut[1]))))
    remaining, quota = measured - before - below, []
    for keys in found:  # identical rows at the cut: measured in partition order, as in input order
        at = int(np.sum((keys[:, 0] == cut[0]) & (keys[:, 1] == cut[1])))
        quota.append(min(at, remaining))
        remaining -= quota[-1]
    return HoldoutRule(fraction, seed, relation, (int(cut[0]), int(cut[1])), tuple(quota))


# -- pass 3: cleaning, split, encoding, exact sums, report samples -----------------------------------------------


@dataclass(frozen=True)
class PartitionSums:
    """PRIVATE: what one partition returns to the driver (they add up): exact sums of its measured rows, its
    repair counts, and its rows in the report samples."""

    sums: ExactSums
    report: ValidationReport
    train_sample: pd.DataFrame
    holdout_sample: pd.DataFrame
    held_out: int = 0

    def __add__(self, other: PartitionSums) -> PartitionSums:
        return PartitionSums(self.sums + other.sums, self.report + other.report,
                             _concat(self.train_sample, other.train_sample),
                             _concat(self.holdout_sample, other.holdout_sample), self.held_out + other.held_out)


def _concat(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    if not len(b):
        return a
    return b if not len(a) else pd.concat([a, b], ignore_index=True)


@dataclass(frozen=True)
class SampleRates:
    """Shares of the measured and the held-out rows kept for the internal report (1: every row)."""

    train: float = 1.0
    holdout: float = 1.0
    seed: int = 0

    def keep(self, table: pd.DataFrame, rate: float) -> pd.DataFrame:
        if rate >= 1.0 or not len(table):
            return table.reset_index(drop=True)
        return table[row_keys(table, self.seed, _SAMPLE_STREAM) < key_threshold(rate)].reset_index(drop=True)


def measure_partition(partition: Partition, schema: TableSchema, plan: MeasurementPlan, rule: HoldoutRule,
                      rates: SampleRates, batch_rows: int = DEFAULT_BATCH_ROWS) -> PartitionSums:
    """Pass 3 over one partition (``schema`` with every bound resolved)."""
    layout = layout_for(schema)
    directions = draw_directions(plan.seed, plan.n_directions, layout.d)
    total: PartitionSums | None = None
    seen_at_cut = 0
    for batch in _lowered_batches(partition, schema, batch_rows):
        cleaned = clean_records(batch, schema)[0]
        measured, seen_at_cut = rule.measured(cleaned.table, partition.index, seen_at_cut)
        if measured.all():  # no copy of the batch when nothing is held out
            # copy(): an empty slice would keep the whole batch's arrays alive through every partition's result.
            train, holdout = cleaned.table, cleaned.table.iloc[:0].copy()
        else:
            train, holdout = cleaned.table[measured], cleaned.table[~measured]
        part = PartitionSums(exact_sums(encode(train, schema), plan, layout, directions), cleaned.report,
                             rates.keep(train, rates.train), rates.keep(holdout, rates.holdout), len(holdout))
        total = part if total is None else total + part
    assert total is not None  # read_batches yields at least one batch
    return total


@dataclass(frozen=True)
class StreamedInput:
    """PRIVATE: a partitioned input's exact sums (for ``measuring.statistics_of``), its repair report and the
    report samples (every measured and held-out row when there are at most ``report_rows`` of each)."""

    sums: ExactSums
    report: ValidationReport
    train_sample: pd.DataFrame
    holdout_sample: pd.DataFrame
    n_rows: int
    n_held_out: int
    partitions: int = 0
    dropped_columns: tuple[str, ...] = field(default_factory=tuple)


def measure_source(partitions: Sequence[Partition], schema: TableSchema, plan: MeasurementPlan, n_rows: int,
                   holdout_fraction: float, relation: Relation, engine: Engine | None = None,
                   report_rows: int = DEFAULT_REPORT_ROWS, batch_rows: int = DEFAULT_BATCH_ROWS) -> StreamedInput:
    """Passes 2 and 3 over every partition, reduced on the driver (``n_rows`` from pass 1)."""
    engine = engine or LocalEngine()
    rule = holdout_rule(partitions, schema, n_rows, holdout_fraction, plan.seed, relation, engine, batch_rows)
    n_held = int(round(holdout_fraction * n_rows))
    rates = SampleRates(min(1.0, report_rows / max(n_rows - n_held, 1)), min(1.0, report_rows / max(n_held, 1)),
                        plan.seed)
    parts = engine.map(measure_partition, partitions, schema=schema, plan=plan, rule=rule, rates=rates,
                       batch_rows=batch_rows)
    total = reduce(add, parts)
    report = ValidationReport(total.report.n_rows, _dropped(total.report, parts), total.report.counts)
    return StreamedInput(total.sums, report, total.train_sample, total.holdout_sample, n_rows, total.held_out,
                         len(partitions))


def _dropped(report: ValidationReport, parts: list[PartitionSums]) -> tuple[str, ...]:
    names = {c for p in parts for c in p.report.dropped_columns}
    return tuple(sorted(names)) if names else report.dropped_columns
