"""Local sampling one partition at a time against the two-stage pipeline (docs/decisions/0036).

A model is fitted on ``--rows`` of the scale-out bench's generated public data (``bench.scale_out.generate``;
nothing private), then ``--sample-rows`` rows are written as Parquet partitions one at a time
(``sampling._write_partition``, each on every core) and by ``sampling.write_partitions`` (the local engine: a
partition refined, decoded and written while the next is drawn); the files must be equal. Prints the median
seconds of ``--repeats`` runs of each and their ratio.

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
