"""Answers to a user's questions of a release, each with a 95% interval: counts and shares of rows meeting a
conjunction of conditions, and the mean or sum of a numeric column over them (``Synthesizer.answer``,
``splice query``).

Everything here reads public information only: the noisy measurement and its sigma, the fitted model, the schema
and public seeds. Two kinds of interval, and every answer says which it is:

- ``exact``: a count or share whose condition is a union of whole cells of one measured table (a 1-way table or a
  numeric column's fine table, a measured pair, or one of the target's measured 3-way tables). The answer is the
  sum of those noisy cells, and the interval the Gaussian mechanism's own: the cells' noise is N(0, sigma_T^2) each,
  independent, so the sum's is N(0, cells * sigma_T^2) exactly (under add-remove the share divides by the noisy n,
  whose spread is added).
- ``bootstrap``: everything else. The answer is the model's, read off a large sample drawn with a public seed.
  Its spread from the noise is a parametric bootstrap: the measurement re-noised at its own sigma (a seeded
  generator: this is post-processing, not privacy noise) and refitted ``replicates`` times at zero cost
  (``QueryBasis``); the replicates' shift from the answer counts as bias beside their spread. The model's misfit
  on the query's measured projection is added: the answer that weights the measured cells of the tables inside
  the query's columns by the model's share of each cell meeting the query differs from the model's own by more
  than that table's noise explains only where the model misses it.

The bench's query-calibration command (``python -m bench.query_calibration``) measures coverage and width on the
shared tables; docs/method.md states the method.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from splice_assets.conditions import ColumnCondition, Conditions, parse_where
from splice_assets.encoding import encode
from splice_assets.fine_cells import FineCells, fine_cells, per_column
from splice_assets.kinds import kind_of
from splice_assets.layout import histogram_layout, layout_for, marginal_cells, marginal_sizes, pair_tables
from splice_assets.limits import Relation
from splice_assets.lowering import lower_input
from splice_assets.measurement import Measurement
from splice_assets.schema import TableSchema

if TYPE_CHECKING:
    import pandas as pd

    from splice_assets.api import Synthesizer

Statistic = Literal["count", "share", "mean", "sum"]
#: The two-sided 95% normal quantile.
Z95 = 1.959963984540054
#: Rows of the model's sample the answers read, and of each bootstrap replicate's.
DEFAULT_ROWS = 200_000
REPLICATE_ROWS = 50_000
DEFAULT_REPLICATES = 20
_QUERY = re.compile(r"^\s*(?:(?P<plain>count|share)|(?P<fn>mean|sum)\s*\(\s*`?(?P<col>[^()`]+?)`?\s*\))"
                    r"\s*(?:where\s+(?P<where>.+?))?\s*$", re.IGNORECASE | re.DOTALL)


@dataclass(frozen=True)
class Query:
    """``statistic`` of the rows meeting ``where``: their count, their share of all rows, or the mean or sum of the
    numeric ``column`` over them."""

    statistic: Statistic
    where: Conditions
    column: str | None = None

    def describe(self) -> str:
        head = self.statistic if self.column is None else f"{self.statistic}({self.column})"
        return head + (f" where {self.where.describe()}" if self.where else "")


def parse_query(query: Query | str, schema: TableSchema) -> Query:
    """A query checked against ``schema``: ``"count where status == 'paid' and amount >= 100"``, ``"share where
    ..."``, ``"mean(amount) where ..."`` or ``"sum(amount)"`` (the condition as ``conditions.parse_where_text``
    reads it). Raises ``ValueError`` quoting what it cannot read, or naming the column it cannot average."""
    if isinstance(query, Query):
        return query
    match = _QUERY.match(query) if isinstance(query, str) else None
    if match is None:
        raise ValueError(f"query: cannot read {query!r}: write count, share, mean(column) or sum(column), "
                         "optionally followed by 'where' and conditions such as status == 'paid' and amount >= 10")
    where = parse_where(match.group("where"), schema)
    if match.group("plain"):
        return Query(match.group("plain").lower(), where)  # type: ignore[arg-type]  # the regex's two words
    column = match.group("col").strip()
    numeric = numeric_columns(schema)
    if column not in numeric:
        raise ValueError(f"query: {match.group('fn')}({column}) needs a numeric column of the schema "
                         f"({', '.join(numeric) or 'it has none'}), got {column!r}")
    return Query(match.group("fn").lower(), where, column)  # type: ignore[arg-type]


def numeric_columns(schema: TableSchema) -> dict[str, tuple[float, float]]:
    """The columns a mean or sum can read, with the range their values lie in: the modelled numeric columns (their
    bounds) and a rule's later numeric column (held by its offset part: unbounded here), as the output names them."""
    parts = {p for column in schema.lowered for p in column.parts}
    out = {s.name: s.bounds for s in schema.columns
           if s.bounds is not None and s.categories is None and s.name not in parts}
    out.update({c.name: (-math.inf, math.inf) for c in schema.lowered
                if c.kind in ("integer", "continuous") and c.parts})
    return out


@dataclass(frozen=True)
class Answer:
    """An estimate and its 95% interval; ``interval`` names the kind (``exact`` or ``bootstrap``, module doc)."""

    query: str
    estimate: float
    lower: float
    upper: float
    interval: Literal["exact", "bootstrap"]
    #: The rows the answer is about: the measured rows (the noisy n under add-remove).
    rows: int
    #: A bootstrap answer: the share of its rows in measured cells the query cuts (a range inside a bin, a column
    #: no table of the query holds), where the model's law inside the cells decides and no measurement checks it:
    #: the bench's coverage falls as it grows (docs/decisions/0072). None for an exact answer.
    cut_share: float | None = None
    level: float = 0.95

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def describe(self) -> str:
        kind = ("exact Gaussian interval of the measured cells" if self.interval == "exact"
                else "parametric bootstrap of the measurement, with the model's misfit")
        cut = "" if self.cut_share is None else f"; {self.cut_share:.0%} of it in cells the query cuts"
        return (f"{self.query}: {self.estimate:,.6g}  95% interval [{self.lower:,.6g}, {self.upper:,.6g}]  "
                f"({kind}; of {self.rows:,} measured rows{cut})")


def renoised(measurement: Measurement, schema: TableSchema, rng: np.random.Generator) -> Measurement:
    """The measurement with fresh noise of its own sigma added to every noisy statistic (the bootstrap's draw)."""
    m = measurement
    fine = m.noisy_fine
    if m.fine_sizes:
        stds = np.concatenate([np.full(c.size, m.fine_noise_std(c.per_value))
                               for c in fine_cells(schema, m.fine_bins, m.numeric_bins)])
        fine = fine + rng.normal(size=fine.shape) * stds
    return dataclasses.replace(
        m,
        noisy_moments=m.noisy_moments + rng.normal(size=m.noisy_moments.shape) * m.moment_noise_std()[:, None],
        noisy_marginals=m.noisy_marginals + rng.normal(size=m.noisy_marginals.shape) * m.marginal_cell_noise_stds(),
        noisy_pairs=m.noisy_pairs + rng.normal(size=m.noisy_pairs.shape) * m.pair_noise_std(),
        noisy_triples=m.noisy_triples + rng.normal(size=m.noisy_triples.shape) * m.triple_cell_noise_stds(),
        noisy_fine=fine,
    )


@dataclass
class QueryBasis:
    """What the bootstrap answers read: the model's sample and one smaller sample per re-noised refit, all drawn
    with public seeds (``seed``). Public, so it is cached beside a release (``save``/``load``)."""

    sample: pd.DataFrame
    replicates: list[pd.DataFrame]
    seed: int

    @classmethod
    def build(cls, synth: Synthesizer, replicates: int = DEFAULT_REPLICATES, rows: int = DEFAULT_ROWS,
              replicate_rows: int = REPLICATE_ROWS, seed: int | None = None) -> QueryBasis:
        """Sample the fitted ``synth`` and refit ``replicates`` re-noised copies of its measurement (each a fit)."""
        from splice_assets import progress
        from splice_assets.api import NotFitted, Synthesizer

        if synth.model is None or synth.measurement is None:
            raise NotFitted("fit (or load) a synthesizer before asking it questions")
        if replicates < 2:
            raise ValueError(f"replicates must be at least 2 for a bootstrap spread, got {replicates!r}")
        seed = synth.settings.seed if seed is None else int(seed)
        streams = np.random.SeedSequence([seed, 68]).spawn(replicates)
        samples = []
        with progress.stage(f"query basis: {replicates} re-noised refits"):
            for stream in streams:
                child = Synthesizer.from_settings(synth.schema, synth.settings)
                child.bounds = synth.bounds
                child.measurement = renoised(synth.measurement, synth.schema, np.random.default_rng(stream))
                child.fit_model()
                samples.append(child.sample(replicate_rows, seed=int(stream.generate_state(1)[0])))
        return cls(synth.sample(rows, seed=seed), samples, seed)

    def save(self, folder: Path) -> Path:
        import pandas as pd

        folder.mkdir(parents=True, exist_ok=True)
        self.sample.to_parquet(folder / "sample.parquet", index=False)
        pd.concat([r.assign(_replicate=i) for i, r in enumerate(self.replicates)]).to_parquet(
            folder / "replicates.parquet", index=False)
        (folder / "basis.json").write_text(json.dumps({"seed": self.seed, "replicates": len(self.replicates)}))
        return folder

    @classmethod
    def load(cls, folder: Path) -> QueryBasis:
        import pandas as pd

        meta = json.loads((folder / "basis.json").read_text())
        pooled = pd.read_parquet(folder / "replicates.parquet")
        replicates = [g.drop(columns="_replicate").reset_index(drop=True) for _, g in pooled.groupby("_replicate")]
        return cls(pd.read_parquet(folder / "sample.parquet"), replicates, int(meta["seed"]))


class QueryAnswerer:
    """Answers queries of one release from its measurement, schema and ``QueryBasis`` (None: exact answers only,
    ``exact``; no refit is needed for them)."""

    def __init__(self, measurement: Measurement, schema: TableSchema, basis: QueryBasis | None = None) -> None:
        self.measurement, self.schema, self.basis = measurement, schema, basis
        m = measurement
        self.layout = layout_for(schema)
        self.sizes = marginal_sizes(self.layout, m.numeric_bins)
        if m.marginal_sizes and tuple(self.sizes) != tuple(m.marginal_sizes):  # () when no 1-way table was measured
            raise ValueError("the measurement's 1-way tables do not match the schema's layout")
        self._tables = self._measured_tables()
        #: Column -> (its fine cells, their noisy frequencies, noise std per cell), for the numeric columns.
        fine = fine_cells(schema, m.fine_bins, m.numeric_bins) if m.fine_sizes else ()
        self._fine = {cells.column: (cells, table, m.fine_noise_std(cells.per_value))
                      for cells, table in zip(fine, per_column(m.noisy_fine, fine))}

    def _measured_tables(self) -> dict[tuple[int, ...], tuple[np.ndarray, float]]:
        """Coordinates -> (noisy frequencies shaped by their cells, noise std per cell) of every measured table."""
        m = self.measurement
        tables: dict[tuple[int, ...], tuple[np.ndarray, float]] = {
            (i,): (table, float(std)) for i, (table, std) in enumerate(zip(m.marginals(), m.table_noise_stds()))}
        for pair, table in zip(m.pairs, pair_tables(m.noisy_pairs, m.pairs, self.sizes)):
            tables[pair] = (table, m.pair_noise_std())
        cuts = np.cumsum(m.triple_sizes)[:-1]
        for triple, block, std in zip(m.triples, np.split(m.noisy_triples, cuts) if m.triples else (),
                                      m.triple_noise_stds()):
            tables[triple] = (block.reshape([self.sizes[i] for i in triple]), float(std))
        return tables

    @property
    def rows(self) -> float:
        return float(self.measurement.n)

    def _row_count_variance(self) -> float:
        """An upper bound on the noisy n's variance (add-remove; 0 under replace-one, where n is public): the
        inverse of the summed precisions of the 1-way tables' totals (the count itself only lowers it)."""
        m = self.measurement
        if m.relation == Relation.REPLACE_ONE or not m.marginal_sizes:
            return 0.0
        stds = m.table_noise_stds() * m.n  # per cell, in rows
        return 1.0 / float(np.sum(1.0 / (np.asarray(m.marginal_sizes) * stds**2)))

    def answer(self, query: Query | str) -> Answer:
        q = parse_query(query, self.schema)
        exact = self._exact(q)
        return exact if exact is not None else self._bootstrap(q)

    @property
    def _bootstrap_basis(self) -> QueryBasis:
        """The basis the bootstrap reads; an answerer built without one answers exact queries only."""
        if self.basis is None:
            raise ValueError("this answer needs the model's bootstrap: give the answerer a QueryBasis")
        return self.basis

    @functools.cached_property
    def _x(self) -> np.ndarray:
        """The basis sample, encoded (the bootstrap's rows)."""
        return _encoded(self._bootstrap_basis.sample, self.schema)

    @functools.cached_property
    def _cells(self) -> np.ndarray:
        return marginal_cells(self._x, self.layout, self.measurement.numeric_bins)

    def exact(self, query: Query | str) -> Answer | None:
        """The exact answer, or None where the query is not a union of whole measured cells (no bootstrap)."""
        return self._exact(parse_query(query, self.schema))

    # -- exact: a union of whole measured cells ---------------------------------------------------------------

    def _exact(self, q: Query) -> Answer | None:
        if q.statistic not in ("count", "share") or q.where.instants:
            return None
        if len(q.where.columns) == 1 and q.where.columns[0].column in self._fine:
            c = q.where.columns[0]
            cells, table, std = self._fine[c.column]
            inside = self._whole_fine_cells(cells, c)
            if inside is not None:
                return self._finish(q, float(table[inside].sum()), float(inside.sum()) * std**2, exact=True)
        if not all(self._on_edges(c) for c in q.where.columns if c.levels is None):
            return None  # a range that cuts a cell, or one value of a continuous column
        weights = q.where.level_weights(self.schema, histogram_layout(self.layout, self.measurement.numeric_bins))
        binding = {i: w for i, w in weights.items() if not np.all(w == 1.0)}
        key = tuple(sorted(binding))
        if not key:  # every row: the share is 1, the count the noisy n
            return self._finish(q, 1.0, 0.0, exact=True)
        if len(key) == 3:  # a triple's table is target-major: find its order
            key = next((t for t in self._tables if len(t) == 3 and set(t) == set(key)), key)
        if key not in self._tables:
            return None
        table, std = self._tables[key]
        mask = np.ones(table.shape)
        for axis, i in enumerate(key):
            shape = [1] * len(key)
            shape[axis] = -1
            mask = mask * binding[i].reshape(shape)
        share, share_var = float(np.sum(mask * table)), float(np.sum(mask)) * std**2
        return self._finish(q, share, share_var, exact=True)

    def _whole_fine_cells(self, cells: FineCells, c: ColumnCondition) -> np.ndarray | None:
        """The fine cells a range holds whole (a mask), or None where it cuts one: a declared value or grid value is
        a cell of its own; an interval is held when the range covers it and left when they share at most an edge
        (a value on the edge that is a declared one sits in its point's cell)."""
        if c.lo is None or c.hi is None:
            return None
        points = np.asarray(cells.points, dtype=np.float64)
        inside = (points >= c.lo) & (points <= c.hi)
        if cells.per_value:
            return inside
        spec = next(s for s in self.schema.columns if s.name == c.column)
        lo, hi = Conditions.cube_range(c, spec)
        edges = -1.0 + 2.0 * np.arange(cells.intervals + 1) / cells.intervals
        overlap = np.clip(np.minimum(edges[1:], hi) - np.maximum(edges[:-1], lo), 0.0, None) / np.diff(edges)
        if np.any((overlap > 1e-9) & (overlap < 1.0 - 1e-9)):
            return None
        return np.concatenate([inside, overlap > 0.5])

    def _on_edges(self, c: ColumnCondition) -> bool:
        """Whether a numeric range covers whole cells of the column's measured table: both ends on its public bin
        edges (or beyond the bounds) on the encoded scale."""
        spec = next(s for s in self.schema.columns if s.name == c.column)
        lo, hi = Conditions.cube_range(c, spec, rounded=kind_of(spec.kind).integral)
        edges = -1.0 + 2.0 * np.arange(self.measurement.numeric_bins + 1) / self.measurement.numeric_bins
        return lo < hi and all(np.isclose(end, edges, rtol=0.0, atol=1e-9).any() for end in (lo, hi))

    def _finish(self, q: Query, share: float, share_var: float, exact: bool) -> Answer:
        """A count's or share's answer from its share of rows and that share's variance (n's spread added)."""
        n, n_var = self.rows, self._row_count_variance()
        if q.statistic == "count":
            estimate, variance = share * n, share_var * n**2 + share**2 * n_var
            lo, hi = 0.0, math.inf
        else:
            estimate, variance = share, share_var + share**2 * n_var / n**2
            lo, hi = 0.0, 1.0
        half = Z95 * math.sqrt(variance)
        # The unbiased sum of noisy cells can fall outside what a count or share can be: both ends are clipped.
        def clip(value: float) -> float:
            return min(max(lo, value), hi)

        return Answer(q.describe(), clip(estimate), clip(estimate - half), clip(estimate + half),
                      "exact" if exact else "bootstrap", int(n))

    # -- bootstrap: the model's answer ------------------------------------------------------------------------

    def _bootstrap(self, q: Query) -> Answer:
        basis = self._bootstrap_basis
        sample = basis.sample
        hold = q.where.holds(sample, self.schema)
        if q.statistic in ("count", "share"):
            share = float(hold.mean())
            replicate_shares = [q.where.holds(r, self.schema).mean() for r in basis.replicates]
            monte_carlo = share * (1.0 - share) / len(sample)
            misfit, cut = self._projection(q, hold, share)
            answer = self._finish(q, share, _mean_square_error(replicate_shares, share) + monte_carlo + misfit,
                                  exact=False)
            return dataclasses.replace(answer, cut_share=round(cut, 4))
        assert q.column is not None
        value = self._statistic(q, sample, hold)
        replicate_values = [self._statistic(q, r, q.where.holds(r, self.schema)) for r in basis.replicates]
        values = sample[q.column].to_numpy(dtype=np.float64, na_value=np.nan)[hold]
        values = values[np.isfinite(values)]
        if len(values) < 2:
            raise ValueError(f"query: {len(values)} of the model's {len(sample):,} rows meet "
                             f"{q.where.describe()!r} with a value of {q.column!r}: too few to answer {q.statistic}")
        monte_carlo = float(np.var(values)) / len(values)
        if q.statistic == "sum":
            monte_carlo = monte_carlo * (self.rows * len(values) / len(sample)) ** 2
            monte_carlo += (value / len(values)) ** 2 * len(values)  # the count's own sampling spread
        variance = _mean_square_error(replicate_values, value) + monte_carlo
        half = Z95 * math.sqrt(variance) if math.isfinite(variance) else math.inf
        low, high = numeric_columns(self.schema)[q.column]
        lo, hi = (low, high) if q.statistic == "mean" else (min(0.0, low) * self.rows, max(0.0, high) * self.rows)
        cut = self._projection(q, hold, float(hold.mean()))[1]
        return Answer(q.describe(), value, max(lo, value - half), min(hi, value + half), "bootstrap", int(self.rows),
                      cut_share=round(cut, 4))

    def _statistic(self, q: Query, frame: pd.DataFrame, hold: np.ndarray) -> float:
        assert q.column is not None
        values = frame[q.column].to_numpy(dtype=np.float64, na_value=np.nan)[hold]
        values = values[np.isfinite(values)]
        if not len(values):
            return math.nan
        mean = float(values.mean())
        return mean if q.statistic == "mean" else mean * self.rows * len(values) / len(frame)

    def _projection(self, q: Query, hold: np.ndarray, share: float) -> tuple[float, float]:
        """What the query's measured tables say of the model's answer: (its squared misfit beyond noise, the share
        of its rows in cells the query cuts). For each measured table of the query's coordinates, the table's noisy
        cells weighted by the model's share of each cell meeting the query: (model's share - that sum)^2 - the sum's
        noise variance, the largest (at least 0); and the part of the sum from cells met only in part, the smallest
        (on the best-measured table, how much of the answer rests on the model's law inside the cells)."""
        columns = {x.column for x in q.where.columns}
        coords = {i for i, c in enumerate(self.layout.coordinates) if c.column in columns}
        anchors = [(np.ravel_multi_index(tuple(self._cells[:, i] for i in key), table.shape), table.ravel(), std)
                   for key, (table, std) in self._tables.items()
                   if set(key) <= coords and (len(coords) == 1 or len(key) > 1)]
        if len(columns) == 1 and next(iter(columns)) in self._fine:  # and the column's fine table, finer
            cells, table, std = self._fine[next(iter(columns))]
            present = np.ones(len(self._x), dtype=bool) if cells.missing is None else self._x[:, cells.missing] <= 0
            index = np.where(present, cells.cells_of(self._x[:, cells.coordinate]), table.size)  # missing: no cell
            anchors.append((index, np.append(table, 0.0), std))
        worst, cut = 0.0, 1.0
        for index, table, std in anchors:
            total = np.bincount(index, minlength=table.size)
            met = np.bincount(index, weights=hold, minlength=table.size)
            p = np.where(total > 0, met / np.maximum(total, 1), 0.0)
            weighted = p * np.clip(table, 0.0, None)
            worst = max(worst, (share - float(p @ table)) ** 2 - float(np.sum(p**2)) * std**2)
            partial = (p > 1e-9) & (p < 1.0 - 1e-9)
            cut = min(cut, float(weighted[partial].sum() / weighted.sum()) if weighted.sum() > 0 else 1.0)
        return worst, cut


def _mean_square_error(replicates: list[float], estimate: float) -> float:
    """The bootstrap's spread of the replicates plus the square of their shift from the estimate: fitted to a
    measurement with twice the noise, the replicates move from the estimate by about as much as the noise moved the
    estimate from the truth (the parametric bootstrap's estimate of the bias, counted in the error, not corrected)."""
    values = np.asarray(replicates, dtype=np.float64)
    values = values[np.isfinite(values)]
    if len(values) < 2:
        return math.inf
    return float(np.var(values, ddof=1) + (values.mean() - estimate) ** 2)


def _encoded(frame: pd.DataFrame, schema: TableSchema) -> np.ndarray:
    """Synthetic rows in the model's cube (the measurement's cells are read off them)."""
    return encode(lower_input(frame, schema), schema)
