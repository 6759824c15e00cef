"""Sampling rows from a post-processed model (``SyntheticModel``), decoding them to a table, and writing them in
partitions. The rows are drawn by ``postprocess.draws``; a model is stored and loaded by ``synthetic``.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd

from splice_assets.engine import Engine, LocalEngine
from splice_assets.fine_cells import fine_cells
from splice_assets.layout import data_layout, decode, layout_for
from splice_assets.postprocess.draws import (
    MATCHED_SPREAD,
    SAMPLING_THREADS,
    TILT_CHUNK_ROWS,
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
    threads: int | None = None,
) -> pd.DataFrame:
    """Sample and decode into the schema's columns, order and dtypes. A model with fine tables then draws every
    numeric value inside its coarse bin from them (``fine_tables.FineTables.refine``, its own stream of ``seed``)."""
    _check_layout(model, schema)
    x = sample_cube(model, n_rows, seed, match_marginals, integer_coordinates(schema), threads=threads)
    return _refined_table(model, schema, x, seed)


def _check_layout(model: SyntheticModel, schema: TableSchema) -> None:
    if layout_for(schema) != data_layout(model.layout):
        raise ValueError(f"the model's layout does not match schema {schema.name!r}")


def _refined_table(model: SyntheticModel, schema: TableSchema, x: np.ndarray, seed: int) -> pd.DataFrame:
    """``sample_table``'s rows ``x`` (cube, overwritten) refined inside their bins and decoded."""
    if model.fine is not None:
        rng = np.random.default_rng(np.random.SeedSequence([int(seed), _TAG_FINE]))
        cells = fine_cells(schema, model.fine.fine_bins)
        coarse = None
        if model.marginal_targets is not None:  # the bins' masses the fine tables are made consistent with
            targets = model.marginal_targets.per_coordinate(model.layout)
            coarse = [np.clip(targets[column.coordinate], 0.0, None) for column in cells]
        x = model.fine.refine(x, cells, rng, coarse, in_place=True)
    return decode(x, schema)


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
                     match_marginals: bool = True) -> list[str]:
    """``n_rows`` synthetic rows as Parquet files ``part-00000.parquet``, ... in ``folder`` (any fsspec URL), written
    in parallel on the ``engine``. Partition i samples from its own stream of the public seed, so each file is the
    same whatever the engine, the number of workers and the order they run in. Returns the files' URLs. On Dask
    each partition samples on one thread (its worker's). Locally a partition's draws run on every core while the
    previous partition is refined, decoded and written on one (those steps are mostly single-threaded: they were
    a third of a partition's time), so at most two partitions are in memory."""
    sizes = partition_sizes(n_rows, rows_per_partition)
    engine = engine or LocalEngine()
    if engine.name == "dask":
        return engine.map(_write_partition, list(enumerate(sizes)), model=model, schema=schema, seed=seed,
                          folder=folder, match_marginals=match_marginals, threads=1)
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
            writing = finisher.submit(_finish_partition, model, schema, x, stream, folder, index)
        if writing is not None:
            urls.append(writing.result())
    return urls


def _partition_stream(seed: int, index: int) -> int:
    return int(np.random.SeedSequence([int(seed), _TAG_PARTITION, index]).generate_state(1)[0])


def _write_partition(item: tuple[int, int], model: SyntheticModel, schema: TableSchema, seed: int, folder: str,
                     match_marginals: bool, threads: int | None) -> str:
    index, rows = item
    stream = _partition_stream(seed, index)
    return _write_parquet(sample_table(model, schema, rows, stream, match_marginals, threads), folder, index)


def _finish_partition(model: SyntheticModel, schema: TableSchema, x: np.ndarray, stream: int, folder: str,
                      index: int) -> str:
    return _write_parquet(_refined_table(model, schema, x, stream), folder, index)


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
