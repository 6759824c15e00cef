"""The streamed path (``private.partitions``) against the whole-table path: the same counts and exact sums, bit for
bit, over uneven partitions (empty ones included), in batches, locally and on a 2-worker Dask LocalCluster."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from splice_assets.api import Synthesizer
from splice_assets.engine import LocalEngine, engine_from_env, make_engine
from splice_assets.layout import layout_for
from splice_assets.measurement import RELATION_ADD_REMOVE, RELATION_REPLACE_ONE
from splice_assets.private import measuring, partitions
from splice_assets.private.bounds import auto_columns, exact_histograms
from splice_assets.private.encoding import encode
from splice_assets.private.holdout_split import split_holdout
from splice_assets.private.ledger import BudgetLedger
from splice_assets.private.validation import StructuralError, column_tallies, validate

NUMBA_THREADS_AT_START = os.environ.get("NUMBA_NUM_THREADS")
BATCH = 700  # smaller than every partition but the empty ones, so batches cross partitions' row groups


def messy(table: pd.DataFrame) -> pd.DataFrame:
    """The demo table as text with a few bad cells: unparseable numbers, an unseen category, empty cells."""
    out = table.astype(str).copy()
    out.loc[3::401, "affairs"] = "n/a"
    out.loc[5::503, "occupation"] = "9"
    out.loc[7::307, "religious"] = None
    return out


def write_parquet_parts(table: pd.DataFrame, folder: Path) -> Path:
    """Three files: uneven row groups, an empty file, the rest in 2,000-row groups."""
    folder.mkdir()
    table.iloc[:1000].to_parquet(folder / "part-0.parquet", index=False, row_group_size=130)
    table.iloc[:0].to_parquet(folder / "part-1.parquet", index=False)
    table.iloc[1000:].to_parquet(folder / "part-2.parquet", index=False, row_group_size=2000)
    return folder


def write_csv_parts(table: pd.DataFrame, folder: Path) -> Path:
    folder.mkdir()
    table.iloc[:2500].to_csv(folder / "a.csv", index=False)
    table.iloc[:0].to_csv(folder / "b.csv", index=False)
    table.iloc[2500:].to_csv(folder / "c.csv.gz", index=False)
    return folder


@pytest.fixture
def raw(demo_table):
    return messy(demo_table)


@pytest.fixture(params=["parquet", "csv"])
def source(request, raw, tmp_path) -> str:
    write = write_parquet_parts if request.param == "parquet" else write_csv_parts
    return str(write(raw, tmp_path / request.param))


def auto_schema(schema):
    columns = tuple(dataclasses.replace(c, bounds=None, bounds_auto=True) if c.name == "affairs" else c
                    for c in schema.columns)
    return dataclasses.replace(schema, columns=columns)


def plan_of(schema, n_measured: int, relation: str) -> measuring.MeasurementPlan:
    return measuring.make_plan(schema, n_measured, 1.0, 1e-9, 64, 8, relation=relation)[0]


def whole_table(raw: pd.DataFrame, schema, plan, fraction: float, relation: str):
    checked = validate(raw, schema)
    train, holdout = split_holdout(checked.table, fraction, plan.seed, relation)
    return measuring.exact_sums(encode(train, schema), plan, layout_for(schema)), checked.report, train, holdout


def assert_same_sums(a: measuring.ExactSums, b: measuring.ExactSums) -> None:
    assert (a.rows, a.d) == (b.rows, b.d)
    for name in ("moments", "marginals", "pairs", "fine"):
        got, want = getattr(a, name), getattr(b, name)
        assert got.dtype == want.dtype == np.int64, name
        np.testing.assert_array_equal(got, want, err_msg=name)


def test_the_partitions_cover_every_row_group_and_the_empty_file(raw, tmp_path):
    parts = partitions.list_partitions(str(write_parquet_parts(raw, tmp_path / "p")))
    assert [(Path(p.url).name, p.row_groups) for p in parts][:3] == [
        ("part-0.parquet", (0,)), ("part-0.parquet", (1,)), ("part-0.parquet", (2,))]
    assert "part-1.parquet" in [Path(p.url).name for p in parts]  # the empty file is a partition of 0 rows
    assert [p.index for p in parts] == list(range(len(parts)))
    assert sum(len(b) for p in parts for b in partitions.read_batches(p, BATCH)) == len(raw)


def test_the_first_pass_counts_what_the_whole_table_counts(raw, source, demo_schema):
    schema = auto_schema(demo_schema)
    scan = partitions.scan_source(partitions.list_partitions(source), schema, batch_rows=BATCH)
    assert scan.rows == len(raw)
    assert scan.tallies == column_tallies(raw, schema)
    assert scan.tallies["affairs"][1] > 0 and scan.tallies["occupation"][1] > 0  # the bad cells were seen
    np.testing.assert_array_equal(scan.bounds_counts, exact_histograms(raw, auto_columns(schema)))


@pytest.mark.parametrize("relation", [RELATION_REPLACE_ONE, RELATION_ADD_REMOVE])
@pytest.mark.parametrize("fraction", [0.0, 0.2])
def test_the_streamed_sums_are_the_whole_tables_bit_for_bit(raw, source, demo_schema, relation, fraction):
    n_measured = len(raw) - int(round(fraction * len(raw)))
    plan = plan_of(demo_schema, n_measured, relation)
    sums, report, train, holdout = whole_table(raw, demo_schema, plan, fraction, relation)
    streamed = partitions.measure_source(partitions.list_partitions(source), demo_schema, plan, len(raw), fraction,
                                         relation, LocalEngine(), batch_rows=BATCH)
    assert_same_sums(streamed.sums, sums)
    assert streamed.report.counts == report.counts and streamed.report.n_rows == report.n_rows
    assert streamed.report.total("unseen_imputed_to_first_category") > 0
    pd.testing.assert_frame_equal(streamed.train_sample, train)
    pd.testing.assert_frame_equal(streamed.holdout_sample, holdout)
    measuring.statistics_of(streamed.sums, plan)  # the plan's n is the streamed measured count


def test_identical_rows_at_the_holdout_cut_are_split_as_in_the_whole_table(demo_table, demo_schema, tmp_path):
    """Ten distinct rows, 600 copies each: the replace-one cut falls among identical rows, and the per-partition
    quota measures the same number of copies as the whole table's stable sort."""
    table = pd.concat([demo_table.iloc[:10]] * 600, ignore_index=True).astype(str)
    source = str(write_parquet_parts(table, tmp_path / "dup"))
    fraction = 0.23
    plan = plan_of(demo_schema, len(table) - int(round(fraction * len(table))), RELATION_REPLACE_ONE)
    rule = partitions.holdout_rule(partitions.list_partitions(source), demo_schema, len(table), fraction, plan.seed,
                                   RELATION_REPLACE_ONE, batch_rows=BATCH)
    assert sum(rule.quota) > 0  # the cut is inside a group of identical rows
    sums, _, train, _ = whole_table(table, demo_schema, plan, fraction, RELATION_REPLACE_ONE)
    streamed = partitions.measure_source(partitions.list_partitions(source), demo_schema, plan, len(table),
                                         fraction, RELATION_REPLACE_ONE, batch_rows=BATCH)
    assert_same_sums(streamed.sums, sums)
    assert len(streamed.train_sample) == len(train) == plan.n


def test_report_samples_are_bounded_and_drawn_by_row_key(raw, source, demo_schema):
    plan = plan_of(demo_schema, len(raw), RELATION_REPLACE_ONE)
    streamed = partitions.measure_source(partitions.list_partitions(source), demo_schema, plan, len(raw), 0.0,
                                         RELATION_REPLACE_ONE, report_rows=1000, batch_rows=BATCH)
    assert 800 < len(streamed.train_sample) < 1200  # binomial(6366, 1000/6366): sd 29
    assert streamed.sums.rows == len(raw)  # the sample thins the report only, never the measurement


def test_a_header_that_does_not_fit_is_refused_naming_the_column(raw, demo_schema, tmp_path):
    folder = tmp_path / "bad"
    folder.mkdir()
    raw.to_parquet(folder / "a.parquet", index=False)
    raw.drop(columns=["educ"]).to_parquet(folder / "b.parquet", index=False)
    with pytest.raises(StructuralError, match="column 'educ'"):
        partitions.scan_source(partitions.list_partitions(str(folder)), demo_schema)
    with pytest.raises(StructuralError, match="matches no Parquet or CSV file"):
        partitions.list_partitions(str(tmp_path / "nothing-*.parquet"))


def test_engine_settings_are_validated_where_they_enter():
    with pytest.raises(ValueError, match="'spark'"):
        make_engine("spark")
    with pytest.raises(ValueError, match="'two'"):
        engine_from_env({"SPLICE_ENGINE": "dask", "SPLICE_DASK_WORKERS": "two"})
    assert engine_from_env({}).name == "local"


@pytest.fixture(scope="module")
def dask_engine():
    pytest.importorskip("distributed")
    engine = make_engine("dask", workers=2)
    yield engine
    engine.close()


def test_two_dask_workers_give_the_local_sums_exactly(raw, demo_schema, tmp_path, dask_engine):
    assert dask_engine.workers == 2
    source = str(write_parquet_parts(raw, tmp_path / "p"))
    parts = partitions.list_partitions(source)
    schema = auto_schema(demo_schema)
    local_scan = partitions.scan_source(parts, schema, batch_rows=BATCH)
    dask_scan = partitions.scan_source(parts, schema, dask_engine, batch_rows=BATCH)
    assert (dask_scan.rows, dask_scan.tallies) == (local_scan.rows, local_scan.tallies)
    np.testing.assert_array_equal(dask_scan.bounds_counts, local_scan.bounds_counts)
    for relation in (RELATION_REPLACE_ONE, RELATION_ADD_REMOVE):
        plan = plan_of(demo_schema, len(raw) - int(round(0.2 * len(raw))), relation)
        local, distributed = (partitions.measure_source(parts, demo_schema, plan, len(raw), 0.2, relation, engine,
                                                        batch_rows=BATCH) for engine in (LocalEngine(), dask_engine))
        assert_same_sums(distributed.sums, local.sums)
        assert distributed.report == local.report
        pd.testing.assert_frame_equal(distributed.holdout_sample, local.holdout_sample)


def test_a_release_through_dask_is_the_local_release(raw, demo_schema, tmp_path, dask_engine):
    """Same plan, same Delta and sigma, one ledger entry each with the same public parameters; the noise is drawn
    on the driver (the workers return int64 sums, checked above)."""
    source = str(write_parquet_parts(raw, tmp_path / "p"))
    ledger = BudgetLedger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    ledger.set_budget("fair_affairs", 10.0, 1e-6, actor="test")
    facts, entries = [], []
    for engine in (LocalEngine(), dask_engine):
        synth = Synthesizer(demo_schema, epsilon=1.0, delta=1e-9)
        scan = synth.scan_source(source, ledger, "r-" + engine.name, holdout_fraction=0.2, engine=engine)
        synth.measure_source(scan, ledger, "r-" + engine.name, engine=engine)
        facts.append(dataclasses.replace(synth.privacy, ledger_entry_id=None))
        entries.append(synth.privacy.ledger_entry_id)
    assert facts[0] == facts[1]
    rows = {e.id: e for e in ledger.entries("fair_affairs")}
    assert rows[entries[0]].params_hash == rows[entries[1]].params_hash
    assert rows[entries[0]].status == rows[entries[1]].status == "committed"


def test_partitioned_samples_are_the_same_files_on_any_engine(raw, demo_schema, tmp_path, dask_engine):
    from splice_assets import MeasurementSettings, ModelSettings, PostProcessingSettings
    from splice_assets.sampling import write_partitions

    synth = Synthesizer(demo_schema, epsilon=1.0, delta=1e-9, measurement=MeasurementSettings(n_directions=64, k=6),
                        model=ModelSettings(components=3, max_steps=20, joint_pairs=0),
                        postprocessing=PostProcessingSettings(field_iterations=0))
    synth.fit_source(str(write_parquet_parts(raw, tmp_path / "p")), ledger=None)  # public test data: no ledger
    tables = []
    for name, engine in (("local", LocalEngine()), ("dask", dask_engine)):
        files = write_partitions(synth.model, synth.schema, 2500, 7, str(tmp_path / name), 1000, engine)
        assert [Path(f).name for f in files] == ["part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]
        tables.append([pd.read_parquet(f) for f in files])
    assert [len(t) for t in tables[0]] == [1000, 1000, 500]
    for local, distributed in zip(*tables):
        pd.testing.assert_frame_equal(local, distributed)
    assert not tables[0][0].equals(tables[0][1].iloc[:1000])  # each partition its own stream


def test_plan_counts_the_rows_of_a_partitioned_folder(raw, tmp_path):
    from splice_assets.private.row_count import input_row_count

    assert input_row_count(write_parquet_parts(raw, tmp_path / "p")) == len(raw)
    assert input_row_count(write_csv_parts(raw, tmp_path / "c")) == len(raw)


def test_a_dask_cluster_leaves_numbas_thread_count_alone(dask_engine):
    """The nanny writes its pre-spawn variables into this process's environment too. Had NUMBA_NUM_THREADS been one
    of them, the next numba compile in a process whose threads had started would fail ("Cannot set
    NUMBA_NUM_THREADS to a different value once the threads have been launched"), as the tilt tests did after a
    Dask test in the same pytest worker."""
    assert dask_engine.workers == 2
    assert os.environ.get("NUMBA_NUM_THREADS") == NUMBA_THREADS_AT_START
