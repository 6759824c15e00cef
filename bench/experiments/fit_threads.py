"""The fit of one noisy measurement on 1 and on more numba threads: wall and CPU seconds, and the tilt's diagnostics.

Per dataset: one add-remove measurement at ``--epsilon`` of the bench's train split with the noise seeded
(``bench.common.seeded_noise``, experiments only), then ``Synthesizer.refit`` of that measurement once per thread
count (``numba.set_num_threads``), in the order given, each timed. The thread count reaches the post-processing's
parallel loops (the field's sweeps; the tilt's incidence kernels at ``1ca0c70``, 0069 in
docs/decisions/alternatives.md). The fitted model must not depend on it: the tilt's chi^2 and iterations are printed
to show that. Run at two commits with the same seeds, it times a change of the fit on one measurement.

    .venv/bin/python -m bench.experiments.fit_threads --datasets pol --epsilon 0.1 --threads 1 2
"""

from __future__ import annotations

import argparse
import time

import numba

from bench.common import seeded_noise
from bench.run import prepared_datasets
from splice_assets import Synthesizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["pol"])
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--threads", nargs="+", type=int, default=[1, numba.config.NUMBA_NUM_THREADS])
    parser.add_argument("--noise-seed", type=int, default=11)
    args = parser.parse_args()
    print("dataset | epsilon | numba threads | fit wall s | fit CPU s | tilt chi2 start / end | tilt iterations",
          flush=True)
    for name, prepared in prepared_datasets(args.datasets):
        with seeded_noise(args.noise_seed):
            measured = Synthesizer(prepared.schema, args.epsilon, 1e-9, "add-remove", 0)
            measured.measure(measured.encode(measured.prepare(prepared.train, None).table), None)
        for threads in args.threads:
            numba.set_num_threads(threads)
            wall, cpu = time.perf_counter(), time.process_time()
            refit = measured.refit()  # the same measurement and settings, fitted again: no privacy spent
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            assert refit.model is not None
            tilt = refit.model.tilt.summary() if refit.model.tilt is not None else {}
            print(f"{name} | {args.epsilon:g} | {threads} | {wall:.1f} | {cpu:.1f} | "
                  f"{tilt.get('chi2_start', float('nan')):.4f} / {tilt.get('chi2_end', float('nan')):.4f} | "
                  f"{tilt.get('iterations', '')}", flush=True)


if __name__ == "__main__":
    main()
