"""Sampler throughput (docs/decisions/0031): rows per second of ``sampling.sample_table`` on the scale-out bench's
public data, with 1 thread and with every core.

A model is fitted once on ``--fit-rows`` generated rows (``bench.scale_out.generate``: 24 columns, public marginals,
nothing private), then ``--rows`` synthetic rows are sampled ``--repeats`` times per thread count (the first draw of
each process also pages memory in: the median is reported). Run it from two checkouts to compare sampler versions
on the same kind of model (each fits its own).

    .venv/bin/python -m bench.experiments.sampler_throughput [--rows 1e6] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.scale_out import schema_dict, write_dataset
from splice_assets import MeasurementSettings, Synthesizer
from splice_assets.schema import parse_schema


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=float, default=1e6)
    parser.add_argument("--fit-rows", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    import splice_assets.sampling as sampling

    schema = parse_schema(schema_dict())
    folder = Path(tempfile.gettempdir()) / "splice-scale-out" / f"n{args.fit_rows}"
    source = write_dataset(folder, args.fit_rows, args.fit_rows)
    synth = Synthesizer(schema, epsilon=1.0, delta=1e-12, measurement=MeasurementSettings(n_directions=256, k=16))
    synth.measure_source(synth.scan_source(str(source), None), None, report_rows=10_000)
    synth.fit_model(threads=1)
    model, rows = synth.model, int(args.rows)
    print(f"model: tilt {model.tilt is not None}, field {model.field is not None}, fine tables "
          f"{model.fine is not None}; {os.cpu_count()} cores")
    sampling.sample_table(model, synth.schema, 50_000, 1)  # compile and warm up
    default_threads = getattr(sampling, "SAMPLING_THREADS", 1)  # (a checkout before 0031 has one thread)
    for threads in sorted({1, default_threads}):
        options = {"threads": threads} if hasattr(sampling, "SAMPLING_THREADS") else {}
        seconds = []
        for repeat in range(args.repeats):
            start = time.perf_counter()
            sampling.sample_table(model, synth.schema, rows, repeat, **options)
            seconds.append(time.perf_counter() - start)
        print(f"{threads} thread(s): {rows / np.median(seconds):,.0f} rows/s (median of {args.repeats}; seconds "
              f"{', '.join(f'{s:.1f}' for s in seconds)})")


if __name__ == "__main__":
    main()
