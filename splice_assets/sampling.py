"""Sampling rows from a post-processed model (``SyntheticModel``), decoding them to a table, and writing them in
partitions. The rows are drawn by ``postprocess.draws``; a model is stored and loaded by ``synthetic``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from splice_assets.conditions import (
    MIN_PROBABILITY,
    ConditionProbabilityError,
    Conditions,
    parse_where,
)
from splice_assets.engine import Engine, LocalEngine
from splice_assets.fine_cells import FineCells, fine_cells
from splice_assets.kinds import kind_of
from splice_assets.layout import DEFAULT_NUMERIC_BINS, data_layout, decode, layout_for
from splice_assets.lowering import with_keys
from splice_assets.postprocess.draws import (
    MATCHED_SPREAD,
    SAMPLING_THREADS,
    TILT_CHUNK_ROWS,
    condition_model,
    discrete_levels,
    fewest_moves,
    integer_coordinates,
    match_to_marginals,
    matched_rows,
    mixture_draws,
    place_in_cells,
    proposal_rows,
    target_counts,
    unmatched_draws,
)
from splice_assets.postprocess.synthetic_model import SyntheticModel
from splice_assets.schema import TableSchema
from splice_assets.synthetic import FORMAT_VERSION, READABLE_VERSIONS, from_parameters, load_model, save_model

# Stream of the public seed that draws values inside their coarse bins (distinct from the rows' stream).
_TAG_FINE = 0xF1E5_B001


def sample_cube(
    model: SyntheticModel,
    n_rows: int,
    seed: int,
    match_marginals: bool = True,
    integer_bounds: Mapping[int, tuple[float, float]] | None = None,
    spread: float = MATCHED_SPREAD,
    threads: int | None = None,
) -> np.ndarray:
    """``n_rows`` rows (n, d) in [-1, 1] from the fitted mixture; deterministic given ``seed``, whatever the
    ``threads`` (default ``SAMPLING_THREADS``).

    When the rows are matched, continuous deviations from each component's mean are scaled by ``spread``
    (see ``MATCHED_SPREAD``); unmatched samples are draws from the fitted model itself.

    With ``match_marginals`` (default) and noisy 1-way marginals in the model, each coordinate is then re-mapped
    onto them keeping row ranks (``match_to_marginals``): post-processing of mechanism outputs, no privacy cost.
    The mixture then supplies the dependence (the rank order), the noisy marginals the 1-way distributions.
    Without marginals at all (the paper's method) every TVD was several times higher (docs/decisions/0004).

    A model with a cell tilt (``tilt``) is sampled, when matched, by ``matched_rows``: from its pairwise field
    tilted, if it has one, else by resampling matched mixture draws by their tilt weights.
    """
    if n_rows < 0:
        raise ValueError(f"n_rows must be >= 0, got {n_rows}")
    if not spread >= 1.0:
        raise ValueError(f"spread must be >= 1, got {spread!r}")
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x5A3B1E]))
    matched = match_marginals and model.marginal_targets is not None and n_rows > 0
    if not matched or model.tilt is None:
        return mixture_draws(model, n_rows, rng, matched, integer_bounds, spread)
    return matched_rows(model, n_rows, rng, integer_bounds, spread, threads)


def sample_table(
    model: SyntheticModel, schema: TableSchema, n_rows: int, seed: int, match_marginals: bool = True,
    threads: int | None = None, where: Conditions | Mapping[str, Any] | str | None = None,
) -> pd.DataFrame:
    """Sample and decode into the schema's columns, order and dtypes. A model with fine tables then draws every
    numeric value inside its coarse bin from them (``fine_tables.FineTables.refine``, its own stream of ``seed``).

    ``where`` (``conditions.parse_where``): draw from the model's conditional law given it instead
    (``conditional_table``); the frame's ``attrs["condition"]`` then reports the condition's probability under the
    model and the share of drawn rows the final check rejected."""
    _check_layout(model, schema)
    conditions = parse_where(where, schema)
    if conditions:
        return conditional_table(model, schema, n_rows, seed, conditions, match_marginals, threads)
    x = sample_cube(model, n_rows, seed, match_marginals, integer_coordinates(schema), threads=threads)
    return _refined_table(model, schema, x, seed)


def _check_layout(model: SyntheticModel, schema: TableSchema) -> None:
    if layout_for(schema) != data_layout(model.layout):
        raise ValueError(f"the model's layout does not match schema {schema.name!r}")


def _refined_table(model: SyntheticModel, schema: TableSchema, x: np.ndarray, seed: int, first_row: int = 0,
                   conditions: Conditions | None = None) -> pd.DataFrame:
    """``sample_table``'s rows ``x`` (cube, overwritten) refined inside their bins and decoded (rows ``first_row`` on
    of the whole synthetic table: their keys). With ``conditions``, each range-conditioned column's values are drawn
    from its fine table restricted to the range (``_fine_cell_weights``)."""
    if model.fine is not None:
        rng = np.random.default_rng(np.random.SeedSequence([int(seed), _TAG_FINE]))
        cells = fine_cells(schema, model.fine.fine_bins)
        coarse = None
        if model.marginal_targets is not None:  # the bins' masses the fine tables are made consistent with
            targets = model.marginal_targets.per_coordinate(model.layout)
            coarse = [np.clip(targets[column.coordinate], 0.0, None) for column in cells]
        weights = _fine_cell_weights(cells, conditions) if conditions else None
        x = model.fine.refine(x, cells, rng, coarse, in_place=True, cell_weights=weights)
    if conditions and conditions.ranges():
        intervals = model.fine.fine_bins if model.fine is not None and model.fine.fine_bins else None
        bins = model.marginal_targets.numeric_bins if model.marginal_targets is not None else DEFAULT_NUMERIC_BINS
        _into_ranges(x, schema, conditions, intervals or bins, np.random.default_rng(
            np.random.SeedSequence([int(seed), _TAG_CONDITION])))
    return decode(x, schema, seed, first_row)


def _into_ranges(x: np.ndarray, schema: TableSchema, conditions: Conditions, intervals: int,
                 rng: np.random.Generator) -> None:
    """A range-conditioned continuous column's values (cube ``x``, in place) that lie outside the range but in an
    equal-width interval (of ``intervals``) the range covers in part: redrawn uniform in the covered part. A value
    inside an interval is uniform in it (the fine tables' and the bins' draws), so this is that law restricted to
    the range; exact values and integer columns are drawn inside it already (``_fine_cell_weights``)."""
    layout = layout_for(schema)
    specs = {spec.name: spec for spec in schema.columns}
    for c in conditions.columns:
        spec = specs[c.column]
        if c.levels is not None or kind_of(spec.kind).integral:
            continue
        z_lo, z_hi = conditions.cube_range(c, spec)
        roles = {coord.role: i for i, coord in enumerate(layout.coordinates) if coord.column == c.column}
        z = x[:, roles["value"]]
        rows = (z < z_lo) | (z > z_hi)
        if "missing" in roles:
            rows &= x[:, roles["missing"]] <= 0.0
        if "exact" in roles:
            rows &= x[:, roles["exact"]] <= -1.0 + 1.0 / len(spec.sentinels)  # level 0: not at a sentinel
        j = np.minimum(np.floor((np.clip(z[rows], -1.0, 1.0) + 1.0) * intervals / 2.0), intervals - 1)
        start = np.maximum(-1.0 + 2.0 * j / intervals, z_lo)
        stop = np.minimum(-1.0 + 2.0 * (j + 1) / intervals, z_hi)
        covered = stop > start
        index = np.flatnonzero(rows)[covered]
        x[index, roles["value"]] = start[covered] + rng.random(int(covered.sum())) * (stop - start)[covered]


def _fine_cell_weights(cells: tuple[FineCells, ...], conditions: Conditions) -> dict[int, np.ndarray]:
    """Index into ``cells`` -> the share of each fine cell inside the column's range condition: a point 0 or 1, an
    integer interval the share of its integers inside, another interval the share of its encoded width inside."""
    ranges = conditions.ranges()
    out: dict[int, np.ndarray] = {}
    for c, column in enumerate(cells):
        if column.column not in ranges:
            continue
        lo, hi = ranges[column.column]
        points = np.asarray(column.points, dtype=np.float64)
        w_points = ((points >= lo) & (points <= hi)).astype(np.float64)
        j = np.arange(column.intervals)
        if column.integer:
            first, last = column._integers(j)
            total = np.maximum(last - first + 1.0, 1.0)
            inside = np.minimum(last, math.floor(hi)) - np.maximum(first, math.ceil(lo)) + 1.0
            w_intervals = np.clip(inside, 0.0, None) / total
        else:
            z_lo, z_hi = column.cube(np.array([lo, hi]))
            start = -1.0 + 2.0 * j / max(column.intervals, 1)
            stop = -1.0 + 2.0 * (j + 1) / max(column.intervals, 1)
            w_intervals = np.clip((np.minimum(stop, z_hi) - np.maximum(start, z_lo)) / (stop - start), 0.0, 1.0)
            w_intervals[(start <= z_lo) & (z_lo < stop) & (z_hi <= z_lo)] = 1.0  # one value: its interval
        out[c] = np.concatenate([w_points, w_intervals])
    return out


def _with_fine_shares(model: SyntheticModel, schema: TableSchema, conditions: Conditions,
                      level_weights: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
    """``level_weights`` with each range-conditioned column's model levels weighted by the share of their coarse
    bin's fine mass inside the range instead of the share of their width: the fine tables redraw every value inside
    its coarse bin, whichever model level it came from. A bin whose fine cells hold no mass keeps the width shares."""
    if model.fine is None or model.marginal_targets is None or not conditions.ranges():
        return level_weights
    cells = fine_cells(schema, model.fine.fine_bins)
    tables = model.fine.per_column(cells)
    targets = model.marginal_targets.per_coordinate(model.layout)
    inside = _fine_cell_weights(cells, conditions)
    out = dict(level_weights)
    for c, share in inside.items():
        column = cells[c]
        if column.coordinate not in out:
            continue
        levels = model.layout.coordinates[column.coordinate].levels
        coarse = np.clip(targets[column.coordinate], 0.0, None)
        mass = model.fine.consistent(column, tables[c], coarse, model.marginal_targets.numeric_bins)
        bins = model.marginal_targets.numeric_bins
        if column.exact is not None:  # a sentinel's cell is drawn through its own coordinate
            mass[: len(column.points)][np.isin(np.asarray(column.points), column.declared)] = 0.0
        parents = np.asarray(column.parents, dtype=np.int64)
        total = np.bincount(parents, weights=mass, minlength=bins)
        held = np.bincount(parents, weights=mass * share, minlength=bins)
        per_level = np.repeat(np.arange(bins), levels // bins)
        out[column.coordinate] = np.where(total[per_level] > 0, (held / np.where(total > 0, total, 1.0))[per_level],
                                          out[column.coordinate])
    return out


#: Stream of the public seed of conditional sampling's later rounds (round r: [seed, _TAG_CONDITION, r]).
_TAG_CONDITION = 0xC0DD_0001
#: Rounds of conditional draws at most (the first draws n rows, each later one what is missing, scaled up by the
#: acceptance so far): the loop never runs longer.
MAX_CONDITION_ROUNDS = 4
#: A condition whose drawn rows meet the final check at a lower rate than this is refused as (near) zero
#: probability: the model's draws under it do not meet it.
MIN_ACCEPTANCE = 0.05


@dataclass(frozen=True)
class ConditionReport:
    """What a conditional sample reports (its frame's ``attrs["condition"]``, as ``as_dict``)."""

    condition: str
    #: P(condition) under the mixture, and the least share of a conditioned coordinate's 1-way target inside it.
    probability: float
    target_probability: float
    drawn: int
    rejected: int
    rounds: int

    @property
    def rejected_share(self) -> float:
        return self.rejected / self.drawn if self.drawn else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"where": self.condition, "probability": self.probability,
                "target_probability": self.target_probability, "drawn": self.drawn, "rejected": self.rejected,
                "rejected_share": self.rejected_share, "rounds": self.rounds}


def conditional_table(
    model: SyntheticModel, schema: TableSchema, n_rows: int, seed: int, conditions: Conditions,
    match_marginals: bool = True, threads: int | None = None, first_row: int = 0,
) -> pd.DataFrame:
    """``n_rows`` rows from the model's conditional law given ``conditions``, decoded (``sample_table``).

    The model is conditioned stage by stage (``postprocess.draws.condition_model``: the mixture through its
    component weights pi_k P_k(C) and each component's restricted law, the tilts by resampling, the field by
    clamped Gibbs sweeps, the matching onto the conditional 1-way targets) and sampled by the unchanged sampler;
    the fine tables draw each range-conditioned value from their cells inside the range. Every row is then checked
    on the decoded frame. What the stages leave outside the condition (a value drawn in the part of an interval
    outside the range, a row the matching moved out of a partly covered cell, rounding at decode) is rejected and
    counted, and the missing rows are drawn again, at most ``MAX_CONDITION_ROUNDS`` rounds in all.

    Raises ``ConditionProbabilityError`` when the model gives the condition (near) zero probability: below
    ``MIN_PROBABILITY`` under the mixture or in a conditioned coordinate's 1-way target, or fewer than
    ``MIN_ACCEPTANCE`` of the drawn rows meeting it."""
    if n_rows < 0:
        raise ValueError(f"n_rows must be >= 0, got {n_rows}")
    weights = _with_fine_shares(model, schema, conditions, conditions.level_weights(schema, model.layout))
    conditioned = condition_model(model, weights,
                                  np.random.default_rng(np.random.SeedSequence([int(seed), _TAG_CONDITION, 0])),
                                  matched=match_marginals)
    probability = min(conditioned.probability, conditioned.target_probability)
    if not probability >= MIN_PROBABILITY:
        raise ConditionProbabilityError(
            f"the model gives the condition {conditions.describe()!r} (near) zero probability "
            f"({conditioned.probability:.3g} under the mixture, {conditioned.target_probability:.3g} in the 1-way "
            f"tables; the least it samples from is {MIN_PROBABILITY:g}): no rows can be drawn under it")
    integer_bounds = integer_coordinates(schema)
    kept: list[pd.DataFrame] = []
    need, drawn, accepted, rounds = int(n_rows), 0, 0, 0
    while need > 0 and rounds < MAX_CONDITION_ROUNDS:
        acceptance = accepted / drawn if drawn else 1.0
        size = need if rounds == 0 else math.ceil(need / max(acceptance, MIN_ACCEPTANCE) * 1.1) + 16
        stream = int(seed) if rounds == 0 else _condition_stream(seed, rounds)
        x = sample_cube(conditioned.model, size, stream, match_marginals, integer_bounds, threads=threads)
        table = _refined_table(model, schema, x, stream, first_row + drawn, conditions)
        ok = conditions.holds(table, schema)
        drawn, accepted, rounds = drawn + size, accepted + int(ok.sum()), rounds + 1
        kept.append(table[ok])
        need -= int(ok.sum())
        if accepted < MIN_ACCEPTANCE * drawn:
            raise ConditionProbabilityError(
                f"the model gives the condition {conditions.describe()!r} (near) zero probability: only "
                f"{accepted:,} of {drawn:,} rows drawn under it meet it (probability {probability:.3g} under the "
                "model's tables)")
    if need > 0:  # the acceptance stayed above MIN_ACCEPTANCE, so the rounds fell short only by chance
        raise ConditionProbabilityError(
            f"{n_rows - need:,} of {n_rows:,} rows meet the condition {conditions.describe()!r} after "
            f"{rounds} rounds ({accepted:,} of {drawn:,} drawn rows met it)")
    out = (pd.concat(kept, ignore_index=True).iloc[:n_rows].reset_index(drop=True) if kept
           else _refined_table(model, schema, np.zeros((0, model.layout.d)), seed))
    out = with_keys(out, schema, seed, first_row)  # the kept rows' keys, in sequence from first_row
    report = ConditionReport(conditions.describe(), conditioned.probability, conditioned.target_probability, drawn,
                             drawn - accepted, rounds)
    out.attrs["condition"] = report.as_dict()
    return out


def _condition_stream(seed: int, round_: int) -> int:
    return int(np.random.SeedSequence([int(seed), _TAG_CONDITION, round_]).generate_state(1)[0])


#: Streams of the public seed: partition i of a partitioned sample draws from [seed, _TAG_PARTITION, i].
_TAG_PARTITION = 0x9A27_0001
#: Rows per Parquet file of a partitioned sample. Locally two files' rows are in memory at once (``write_partitions``):
#: at 500,000 rows that is what one file of 10^6 rows held before the files were pipelined (docs/decisions/0036).
DEFAULT_PARTITION_ROWS = 500_000


def partition_sizes(n_rows: int, rows_per_partition: int = DEFAULT_PARTITION_ROWS) -> list[int]:
    if not (isinstance(rows_per_partition, int) and rows_per_partition >= 1):
        raise ValueError(f"rows_per_partition must be an integer >= 1, got {rows_per_partition!r}")
    full, rest = divmod(int(n_rows), rows_per_partition)
    return [rows_per_partition] * full + ([rest] if rest else [])


def write_partitions(model: SyntheticModel, schema: TableSchema, n_rows: int, seed: int, folder: str,
                     rows_per_partition: int = DEFAULT_PARTITION_ROWS, engine: Engine | None = None,
                     match_marginals: bool = True, where: Conditions | Mapping[str, Any] | str | None = None,
                     ) -> list[str]:
    """``n_rows`` synthetic rows as Parquet files ``part-00000.parquet``, ... in ``folder`` (any fsspec URL), written
    in parallel on the ``engine``. Partition i samples from its own stream of the public seed, so each file is the
    same whatever the engine, the number of workers and the order they run in. Returns the files' URLs. On Dask
    each partition samples on one thread (its worker's). Locally a partition's draws run on every core while the
    previous partition is refined, decoded and written on one (those steps are mostly single-threaded: they were
    a third of a partition's time), so at most two partitions are in memory. ``where``: each partition is drawn
    from the model's conditional law given it (``conditional_table``), one partition at a time locally."""
    sizes = partition_sizes(n_rows, rows_per_partition)
    engine = engine or LocalEngine()
    conditions = parse_where(where, schema)
    if engine.name == "dask" or conditions:
        return engine.map(_write_partition, list(enumerate(sizes)), model=model, schema=schema, seed=seed,
                          folder=folder, match_marginals=match_marginals, threads=1 if engine.name == "dask" else None,
                          rows_per_partition=rows_per_partition, where=conditions)
    _check_layout(model, schema)
    integer_bounds = integer_coordinates(schema)
    urls: list[str] = []
    with ThreadPoolExecutor(1) as finisher:
        writing = None
        for index, rows in enumerate(sizes):
            stream = _partition_stream(seed, index)
            x = sample_cube(model, rows, stream, match_marginals, integer_bounds)
            if writing is not None:
                urls.append(writing.result())
            writing = finisher.submit(_finish_partition, model, schema, x, stream, folder, index,
                                      index * rows_per_partition)
        if writing is not None:
            urls.append(writing.result())
    return urls


def _partition_stream(seed: int, index: int) -> int:
    return int(np.random.SeedSequence([int(seed), _TAG_PARTITION, index]).generate_state(1)[0])


def _write_partition(item: tuple[int, int], model: SyntheticModel, schema: TableSchema, seed: int, folder: str,
                     match_marginals: bool, threads: int | None, rows_per_partition: int,
                     where: Conditions | None = None) -> str:
    index, rows = item
    stream = _partition_stream(seed, index)
    _check_layout(model, schema)
    if where:
        table = conditional_table(model, schema, rows, stream, where, match_marginals, threads,
                                  index * rows_per_partition)
        return _write_parquet(table, folder, index)
    x = sample_cube(model, rows, stream, match_marginals, integer_coordinates(schema), threads=threads)
    return _write_parquet(_refined_table(model, schema, x, stream, index * rows_per_partition), folder, index)


def _finish_partition(model: SyntheticModel, schema: TableSchema, x: np.ndarray, stream: int, folder: str,
                      index: int, first_row: int) -> str:
    return _write_parquet(_refined_table(model, schema, x, stream, first_row), folder, index)


def _write_parquet(table: pd.DataFrame, folder: str, index: int) -> str:
    import fsspec

    url = f"{folder.rstrip('/')}/part-{index:05d}.parquet"
    fs, path = fsspec.core.url_to_fs(url)
    fs.makedirs(fs._parent(path), exist_ok=True)
    with fs.open(path, "wb") as handle:
        table.to_parquet(handle, index=False)
    return url


__all__ = (
    "DEFAULT_PARTITION_ROWS", "FORMAT_VERSION", "MATCHED_SPREAD", "READABLE_VERSIONS", "SAMPLING_THREADS",
    "TILT_CHUNK_ROWS", "discrete_levels", "fewest_moves", "from_parameters", "integer_coordinates", "load_model",
    "match_to_marginals", "matched_rows", "mixture_draws", "partition_sizes", "place_in_cells", "proposal_rows",
    "sample_cube", "sample_table", "save_model", "target_counts", "unmatched_draws", "write_partitions",
)
