"""The local passes one partition at a time against their two-stage pipelines (docs/decisions/0036).

On the scale-out bench's generated public data (``bench.scale_out.generate``; nothing private), in this process:

- measure: ``partitions.measure_partition`` on each row group in turn (what a Dask worker runs per task) against
  ``partitions.measure_partitions`` (the local engine: the next batch prepared on a second thread), on the rows of
  ``--rows``; the sums must be equal;
- sample: a model fitted on those rows, then ``--sample-rows`` rows written as Parquet partitions of 10⁶ rows one
  at a time (``sampling._write_partition``, each on every core) against ``sampling.write_partitions`` (the local
  engine: a partition refined, decoded and written while the next is drawn); the files must be equal.

Prints the median seconds of ``--repeats`` runs of each and their ratio.

    .venv/bin/python -m bench.experiments.local_pipelines [--rows 2e6] [--sample-rows 4e6] [--repeats 3]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from bench.scale_out import schema_dict, write_dataset
from splice_assets import MeasurementSettings, Synthesizer
from splice_assets.private import measuring
from splice_assets.private import partitions as streamed
from splice_assets.sampling import _write_partition, partition_sizes, write_partitions
from splice_assets.schema import parse_schema


def median_seconds(run, repeats: int) -> tuple[float, object]:
    seconds, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = run()
        seconds.append(time.perf_counter() - start)
    return float(np.median(seconds)), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=float, default=2e6)
    parser.add_argument("--sample-rows", type=float, default=4e6)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rows, sample_rows = int(args.rows), int(args.sample_rows)
    schema = parse_schema(schema_dict())
    work = Path(tempfile.gettempdir()) / "splice-scale-out"
    source = write_dataset(work / f"n{rows}", rows, 1_000_000)
    parts = streamed.list_partitions(str(source))
    plan, _ = measuring.make_plan(schema, rows, 1.0, 1e-12, 256, 16, relation="add-remove")
    rule = streamed.holdout_rule(parts, schema, rows, 0.0, plan.seed, "add-remove", None, streamed.DEFAULT_BATCH_ROWS)
    rates = streamed.SampleRates(10_000 / rows, 1.0, plan.seed)
    streamed.measure_partition(parts[0], schema, plan, rule, rates)  # compile
    one, by_one = median_seconds(lambda: [streamed.measure_partition(p, schema, plan, rule, rates) for p in parts],
                                 args.repeats)
    two, piped = median_seconds(lambda: streamed.measure_partitions(parts, schema, plan, rule, rates), args.repeats)
    assert all(np.array_equal(a.sums.moments, b.sums.moments) and np.array_equal(a.sums.pairs, b.sums.pairs)
               for a, b in zip(by_one, piped))
    print(f"measure {rows:,} rows: one at a time {one:.2f} s, pipelined {two:.2f} s ({one / two:.2f}x)", flush=True)

    synth = Synthesizer(schema, epsilon=1.0, delta=1e-12, measurement=MeasurementSettings(n_directions=256, k=16))
    synth.measure_source(synth.scan_source(str(source), None), None, report_rows=10_000)
    synth.fit_model()
    model = synth.model
    assert model is not None and model.tilt is not None
    print(f"model: {model.tilt.pool_factor} pool rows per output row, field {model.field is not None}", flush=True)
    out = work / "pipeline-out"
    items = list(enumerate(partition_sizes(sample_rows)))
    _write_partition((0, 50_000), model, synth.schema, 1, str(out / "warm"), True, None)  # compile
    one, by_one = median_seconds(lambda: [_write_partition(item, model, synth.schema, 5, str(out / "one"), True, None)
                                          for item in items], args.repeats)
    two, piped = median_seconds(lambda: write_partitions(model, synth.schema, sample_rows, 5, str(out / "two")),
                                args.repeats)
    assert all(pd.read_parquet(a).equals(pd.read_parquet(b)) for a, b in zip(by_one, piped))
    print(f"sample {sample_rows:,} rows: one at a time {one:.2f} s, pipelined {two:.2f} s ({one / two:.2f}x)")


if __name__ == "__main__":
    main()
