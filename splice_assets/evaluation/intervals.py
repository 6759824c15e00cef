"""The fidelity report's "Answers with intervals" section: a public set of count queries whose 95% intervals are
exact (``queries.QueryAnswerer``'s sums of whole measured cells), each beside its real answer on the measured rows.

The queries are chosen from public information only (the schema and the noisy measurement), so the choice itself
leaks nothing: each discrete column's largest categories by noisy 1-way share, the largest noisy cell of the
measured pairs of discrete columns with the largest such cells, and for each numeric column the range from its
lower bound to the public bin edge where the noisy cumulative share first reaches one half. Only exact intervals
are kept: a bootstrap interval needs re-noised refits, which a release does not pay for in its report.

The real answers are INTERNAL: they go to the report's HTML and JSON in the release's internal folder and nowhere
else (not to ``ReportResult``, which is a Dagster step output, nor to a log).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from splice_assets.conditions import parse_where
from splice_assets.fine_cells import fine_cells, per_column
from splice_assets.kinds.scales import value_of
from splice_assets.layout import layout_for, pair_tables
from splice_assets.measurement import Measurement
from splice_assets.queries import Query, QueryAnswerer
from splice_assets.schema import ColumnSpec, TableSchema

#: Largest categories asked of each discrete column, measured pairs asked of, and queries in all.
TOP_CATEGORIES = 2
TOP_PAIRS = 6
MAX_QUERIES = 30


@dataclass(frozen=True)
class IntervalRow:
    """One query: the release's estimate and exact 95% interval, the real answer, and whether the interval holds it."""

    query: str
    estimate: float
    lower: float
    upper: float
    real: float
    holds: bool
    interval: str = "exact"


@dataclass(frozen=True)
class IntervalCheck:
    """INTERNAL: the section's rows (``real`` is read off the measured rows) and how many intervals hold."""

    rows: tuple[IntervalRow, ...]
    #: What the real answers were counted on (the measured rows, or a sample of them scaled to their count).
    real_rows: str
    #: Candidate queries whose interval was not exact (left out).
    skipped: int
    seconds: float

    @property
    def held(self) -> int:
        return sum(r.holds for r in self.rows)

    def summary(self) -> str:
        return f"{self.held} of {len(self.rows)} intervals hold the real answer (95% expected)"

    def to_dict(self) -> dict[str, Any]:
        return {"summary": self.summary(), "held": self.held, "queries": len(self.rows), "real_rows": self.real_rows,
                "skipped_not_exact": self.skipped, "seconds": round(self.seconds, 3),
                "rows": [asdict(r) for r in self.rows]}


def public_queries(measurement: Measurement, schema: TableSchema) -> list[Query]:
    """The section's count queries, from the schema and the noisy measurement only (module doc), at most
    ``MAX_QUERIES``, in a fixed order: categories, pairs, numeric ranges."""
    wheres = [*_category_wheres(measurement, schema), *_pair_wheres(measurement, schema),
              *_range_wheres(measurement, schema)]
    return [Query("count", parse_where(w, schema)) for w in wheres[:MAX_QUERIES]]


def _discrete_coordinates(schema: TableSchema) -> dict[int, ColumnSpec]:
    """Coordinate index -> spec of each discrete column's one coordinate (its levels: the categories, then a
    nullable column's missing level)."""
    specs = {s.name: s for s in schema.columns}
    return {i: specs[c.column] for i, c in enumerate(layout_for(schema).coordinates)
            if specs[c.column].categories is not None and c.role == "value"}


def _category_wheres(measurement: Measurement, schema: TableSchema) -> Iterator[dict[str, Any]]:
    tables = measurement.marginals()
    for i, spec in _discrete_coordinates(schema).items():
        assert spec.categories is not None
        shares = tables[i][: len(spec.categories)]  # the missing level is no category to ask for
        for level in np.argsort(-shares, kind="stable")[:TOP_CATEGORIES]:
            yield {spec.name: spec.categories[int(level)]}


def _pair_wheres(measurement: Measurement, schema: TableSchema) -> Iterator[dict[str, Any]]:
    """The largest noisy cell of each of the ``TOP_PAIRS`` measured pairs of discrete columns whose largest cell is
    largest (a cell of many rows: its real count is well away from the noise)."""
    m, discrete = measurement, _discrete_coordinates(schema)
    cells: list[tuple[float, dict[str, Any]]] = []
    for (a, b), table in zip(m.pairs, pair_tables(m.noisy_pairs, m.pairs, m.marginal_sizes)):
        if a not in discrete or b not in discrete:
            continue
        sa, sb = discrete[a], discrete[b]
        assert sa.categories is not None and sb.categories is not None
        block = table[: len(sa.categories), : len(sb.categories)]
        x, y = np.unravel_index(int(np.argmax(block)), block.shape)
        cells.append((float(block[x, y]), {sa.name: sa.categories[int(x)], sb.name: sb.categories[int(y)]}))
    cells.sort(key=lambda cell: -cell[0])
    yield from (where for _, where in cells[:TOP_PAIRS])


def _range_wheres(measurement: Measurement, schema: TableSchema) -> Iterator[dict[str, Any]]:
    """Per numeric column, [lower bound, the first public edge where the noisy cumulative share reaches 1/2]: on
    the per-value fine table's values for a column that has one, else on the coarse 1-way table's bin edges."""
    m, layout = measurement, layout_for(schema)
    fine = fine_cells(schema, m.fine_bins, m.numeric_bins) if m.fine_sizes else ()
    per_value = {c.column: (c, t) for c, t in zip(fine, per_column(m.noisy_fine, fine)) if c.per_value}
    tables = m.marginals()
    for spec in schema.columns:
        if spec.categories is not None or spec.bounds is None:
            continue
        lo, hi = spec.bounds
        if spec.name in per_value:
            cells, table = per_value[spec.name]
            at = _half_way(table)
            if at < len(cells.points) - 1:
                yield {spec.name: (lo, float(cells.points[at]))}
            continue
        coordinate = next(i for i, c in enumerate(layout.coordinates) if c.column == spec.name and c.role == "value")
        bins = m.numeric_bins
        edge = min(_half_way(tables[coordinate]) + 1, bins - 1)  # the bin's upper edge, short of the upper bound
        z = -1.0 + 2.0 * edge / bins
        yield {spec.name: (lo, float(value_of(np.array([z]), lo, hi, spec.scale, spec.knots)[0]))}


def _half_way(shares: np.ndarray) -> int:
    """The first cell at which the noisy cumulative share (negative cells counted as 0) reaches half the total."""
    clipped = np.clip(shares, 0.0, None)
    total = float(clipped.sum())
    return int(np.searchsorted(np.cumsum(clipped), total / 2.0)) if total > 0 else 0


def interval_check(measurement: Measurement, schema: TableSchema, measured: pd.DataFrame,
                   measured_count: int | None = None) -> IntervalCheck:
    """The section's rows. ``measured``: the measured rows (validated, the modelled columns), or a sample of them
    when ``measured_count`` (their exact number) is larger: its real counts are then its shares times that number."""
    t0 = time.perf_counter()
    count = len(measured) if measured_count is None else int(measured_count)
    sampled = count != len(measured)
    real_rows = (f"a sample of {len(measured):,} measured rows, scaled to the {count:,} measured" if sampled
                 else f"the {count:,} measured rows")
    if not measurement.marginal_sizes:  # no 1-way tables: nothing a public rule could pick, nothing exact to ask
        return IntervalCheck((), real_rows, 0, time.perf_counter() - t0)
    answerer = QueryAnswerer(measurement, schema)  # exact answers only: no model rows, no refits
    scale = count / max(len(measured), 1)
    rows: list[IntervalRow] = []
    skipped = 0
    for query in public_queries(measurement, schema):
        answer = answerer.exact(query)
        if answer is None:
            skipped += 1
            continue
        real = float(query.where.holds(measured, schema).sum()) * scale
        rows.append(IntervalRow(answer.query, answer.estimate, answer.lower, answer.upper, real,
                                bool(answer.lower <= real <= answer.upper)))
    return IntervalCheck(tuple(rows), real_rows, skipped, time.perf_counter() - t0)
