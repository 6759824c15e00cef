"""Scale-out bench: the streamed measurement and a whole release on generated public data, locally and on Dask.

The data are generated, so nothing private is involved: 24 columns (12 numeric, 12 categorical) from a Gaussian
copula with correlation 0.5^|i-j| between latent columns i and j, mapped to public marginals: normal, log-normal,
uniform and Poisson counts for the numeric ones, 2 to 12 levels for the categorical ones (``generate``). They are
written as Parquet files of ``--file-rows`` rows in row groups of 250,000, one file per partition.

Each figure comes from a fresh subprocess with one BLAS thread (peak RSS is the child's ``ru_maxrss``; on Dask the
driver's and every worker's peak, summed): the measurement alone (scan + measure, every row, L = 256, k = 16,
1-/2-way tables) on the local engine and on 1 and 2 Dask workers, and the measure pass's throughput n·L/s per
worker against two single-core figures on rows already encoded in memory, measured in the same run: the moment
kernel (``statistics.moment_sums``) and all the exact statistics (``measuring.exact_sums``: moments, 1-/2-way
tables). With ``--release``, also a whole release (scan, measure, fit, n synthetic rows written as partitions),
with the peak RSS reached by the end of the measure pass and of the fit.

    python -m bench.scale_out --rows 1e5 1e6 1e7 5e7 [--data-dir DIR] [--engines local dask1 dask2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from splice_assets.schema import parse_schema

ROOT = Path(__file__).resolve().parents[1]
NUMERIC, CATEGORICAL = 12, 12
LEVELS = [2, 3, 4, 5, 6, 8, 10, 12, 3, 4, 6, 7]
ROW_GROUP = 250_000


def schema_dict() -> dict:
    """The generator's public schema: bounds from the marginals' definitions (not from data)."""
    columns = []
    for i in range(NUMERIC):
        kind = i % 4
        if kind == 0:
            columns.append({"name": f"x{i}", "kind": "continuous", "bounds": [-5, 5]})
        elif kind == 1:
            columns.append({"name": f"x{i}", "kind": "continuous", "bounds": [0, 150], "scale": "log"})
        elif kind == 2:
            columns.append({"name": f"x{i}", "kind": "continuous", "bounds": [0, 1]})
        else:
            columns.append({"name": f"x{i}", "kind": "integer", "bounds": [0, 30]})
    for j, levels in enumerate(LEVELS):
        columns.append({"name": f"c{j}", "kind": "categorical", "categories": [f"l{v}" for v in range(levels)]})
    return {"name": "scale_out", "version": 1, "n_min": 1000, "columns": columns}


def generate(rows: int, seed: int) -> pd.DataFrame:
    from scipy import stats

    rng = np.random.default_rng(seed)
    d = NUMERIC + CATEGORICAL
    corr = 0.5 ** np.abs(np.subtract.outer(np.arange(d), np.arange(d)))
    z = rng.standard_normal((rows, d)) @ np.linalg.cholesky(corr).T
    u = stats.norm.cdf(z)
    out: dict[str, np.ndarray] = {}
    for i in range(NUMERIC):
        kind = i % 4
        if kind == 0:
            out[f"x{i}"] = np.clip(z[:, i], -5, 5)
        elif kind == 1:
            out[f"x{i}"] = np.clip(np.exp(1.0 + z[:, i]), 0, 150)
        elif kind == 2:
            out[f"x{i}"] = u[:, i]
        else:
            out[f"x{i}"] = np.clip(stats.poisson.ppf(u[:, i], 4.0), 0, 30).astype(np.int64)
    for j, levels in enumerate(LEVELS):
        codes = np.minimum((u[:, NUMERIC + j] ** 1.5 * levels).astype(np.int64), levels - 1)
        out[f"c{j}"] = np.array([f"l{v}" for v in range(levels)])[codes]
    return pd.DataFrame(out)


def write_dataset(folder: Path, rows: int, file_rows: int) -> Path:
    """Parquet files of ``file_rows`` rows (the last one shorter), generated file by file (bounded memory)."""
    done = folder / "_complete"
    if done.exists() and json.loads(done.read_text())["rows"] == rows:
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.parquet"):
        old.unlink()
    for index, start in enumerate(range(0, rows, file_rows)):
        part = generate(min(file_rows, rows - start), seed=index)
        part.to_parquet(folder / f"part-{index:05d}.parquet", index=False, row_group_size=ROW_GROUP)
    done.write_text(json.dumps({"rows": rows}))
    return folder


CHILD = r"""
import json, resource, sys, time
import numpy as np
from splice_assets import MeasurementSettings, Synthesizer
from splice_assets.engine import LocalEngine, make_engine
from splice_assets.schema import parse_schema
from splice_assets.layout import draw_directions
from splice_assets.private.statistics import moment_sums

args = json.loads(sys.argv[1])
schema = parse_schema(args["schema"])
out = {}
if args["task"] == "kernel":
    from splice_assets.layout import layout_for
    from splice_assets.private.encoding import encode
    from splice_assets.private.measuring import exact_sums
    from splice_assets.private.validation import validate
    import pandas as pd
    rows = validate(pd.read_parquet(args["sample"]).iloc[:200_000], schema).table
    x = encode(rows, schema)
    directions = draw_directions(0, 256, x.shape[1])
    moment_sums(x[:1000], directions, 16)
    start = time.perf_counter()
    moment_sums(x, directions, 16)
    out["n_L_per_s"] = len(x) * 256 / (time.perf_counter() - start)
    synth = Synthesizer(schema, epsilon=1.0, delta=1e-12, measurement=MeasurementSettings(n_directions=256, k=16))
    plan = synth.plan(len(x))[0]
    start = time.perf_counter()
    exact_sums(x, plan, layout_for(schema), directions)
    out["exact_n_L_per_s"] = len(x) * 256 / (time.perf_counter() - start)
else:
    engine = LocalEngine() if args["engine"] == "local" else make_engine("dask", workers=args["workers"])
    synth = Synthesizer(schema, epsilon=1.0, delta=1e-12, measurement=MeasurementSettings(n_directions=256, k=16))
    start = time.perf_counter()
    scan = synth.scan_source(args["source"], None, engine=engine)
    out["scan_s"] = time.perf_counter() - start
    synth.measure_source(scan, None, engine=engine, report_rows=10_000)
    out["measure_s"] = time.perf_counter() - start - out["scan_s"]
    out["rss_measured_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if args["task"] == "release":
        from splice_assets.sampling import write_partitions
        fit_start = time.perf_counter()
        synth.fit_model(threads=1)
        out["fit_s"] = time.perf_counter() - fit_start
        out["rss_fitted_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        write_partitions(synth.model, synth.schema, scan.n_rows, 0, args["out"], engine=engine)
        out["sample_s"] = time.perf_counter() - fit_start - out["fit_s"]
    out["total_s"] = time.perf_counter() - start
    out["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if args["engine"] != "local":
        worker_rss = engine.client.run(lambda: __import__("resource").getrusage(0).ru_maxrss / 1024)
        out["rss_mb"] += sum(worker_rss.values())
        engine.close()
print("RESULT " + json.dumps(out))
"""


#: One BLAS thread per process, so figures are per core (Dask's nanny sets the same for its workers).
ONE_THREAD = {name: "1" for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")}


def run_child(task: dict) -> dict:
    # A whole release keeps numba's threads: the sampler's Gibbs sweep runs on every core (its output is the same
    # on any number of threads); the measure figures stay per core (the measure pass is single-threaded).
    threads = {k: v for k, v in ONE_THREAD.items() if task["task"] != "release" or k != "NUMBA_NUM_THREADS"}
    env = {**os.environ, "PYTHONPATH": str(ROOT), **threads}
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(task)], capture_output=True, text=True, env=env)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"bench child failed ({task['task']}): {proc.stderr[-2000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=float, nargs="+", default=[1e5, 1e6, 1e7])
    parser.add_argument("--engines", nargs="+", default=["local", "dask1", "dask2"],
                        choices=["local", "dask1", "dask2"])
    parser.add_argument("--release", action="store_true", help="Also time a whole release per size (local).")
    parser.add_argument("--data-dir", default=None, help="Where the generated Parquet files go (kept for reruns).")
    parser.add_argument("--file-rows", type=int, default=1_000_000)
    args = parser.parse_args()
    schema = schema_dict()
    parse_schema(schema)
    data_dir = Path(args.data_dir or Path(tempfile.gettempdir()) / "splice-scale-out")
    sample = write_dataset(data_dir / "n200000", 200_000, 200_000) / "part-00000.parquet"
    kernels = run_child({"task": "kernel", "schema": schema, "sample": str(sample)})
    kernel, exact = kernels["n_L_per_s"], kernels["exact_n_L_per_s"]
    print(f"one core, rows in memory: moment kernel {kernel / 1e6:.1f} M n·L/s (L = 256, k = 16); "
          f"all exact statistics (moments, 1-/2-way tables) {exact / 1e6:.1f} M n·L/s\n")
    print("| rows | engine | scan s | measure s | measure n·L/s per worker / moment kernel / exact statistics "
          "| peak RSS MB | release s (fit, sample) |")
    print("|---|---|---|---|---|---|---|")
    for rows in (int(r) for r in args.rows):
        started = time.perf_counter()
        source = str(write_dataset(data_dir / f"n{rows}", rows, min(args.file_rows, rows)))
        print(f"<!-- generated {rows:,} rows in {time.perf_counter() - started:.0f} s -->", flush=True)
        for engine in args.engines:
            workers = {"local": 0, "dask1": 1, "dask2": 2}[engine]
            task = {"task": "release" if args.release and engine == "local" else "measure", "schema": schema,
                    "source": source, "engine": "local" if engine == "local" else "dask", "workers": workers}
            with tempfile.TemporaryDirectory() as out:
                result = run_child({**task, "out": out})
            per_worker = rows * 256 / result["measure_s"] / max(workers, 1)
            release = (f"{result['total_s']:.1f} (fit {result['fit_s']:.1f}, sample {result['sample_s']:.1f}; peak MB "
                       f"after measure {result['rss_measured_mb']:.0f}, fit {result['rss_fitted_mb']:.0f})"
                       if task["task"] == "release" else "")
            print(f"| {rows:,} | {engine} | {result['scan_s']:.1f} | {result['measure_s']:.1f} | "
                  f"{per_worker / kernel:.2f} / {per_worker / exact:.2f} | {result['rss_mb']:.0f} | {release} |",
                  flush=True)


if __name__ == "__main__":
    main()
