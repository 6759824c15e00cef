"""One SPLICE run in its own process (the bench wraps it in /usr/bin/time -v).

Reads the train CSV, then runs the stages of ``Synthesizer.fit`` one by one (the same methods in the same
order) so each stage's time and peak RSS can be reported; writes the synthetic CSV and a JSON of stage timings.
The bench data are public, so the measurement is not accounted in a ledger (``ledger=None``).

    python -m bench.splice_runner --train T.csv --schema S.yaml --epsilon 1 --delta 1e-9 --seed 0 \
        --out synth.csv --stats stats.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path


def given(**values: object) -> dict[str, object]:
    """The options set on the command line (the rest keep the product's defaults)."""
    return {k: v for k, v in values.items() if v is not None}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", required=True)
    ap.add_argument("--schema", required=True)
    ap.add_argument("--epsilon", type=float, required=True)
    ap.add_argument("--delta", type=float, default=1e-9)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--relation", default="replace-one", choices=["replace-one", "add-remove"],
                    help="neighbouring relation of the guarantee (add-remove: n private, as AIM / MST)")
    ap.add_argument("--marginal-share", type=float, default=None, help="default: the product's")
    ap.add_argument("--pair-share", type=float, default=None, help="default: the product's")
    ap.add_argument("--n-directions", type=int, default=None, help="default: the product's")
    ap.add_argument("--k", type=int, default=None, help="default: the product's")
    ap.add_argument("--K", type=int, default=None, help="mixture components; default: the product's")
    ap.add_argument("--R", type=int, default=None, help="covariance rank; default: the product's")
    ap.add_argument("--numeric-model", default=None, help="'histogram' or 'gaussian'; default: the product's")
    ap.add_argument("--pair-loss-weight", type=float, default=None, help="default: the product's")
    ap.add_argument("--em-iterations", type=int, default=None, help="composite-EM start; default: the product's")
    ap.add_argument("--tilt-chi2", type=float, default=None, help="cell tilt target (0 = none); default: the product's")
    ap.add_argument("--tilt-max-iterations", type=int, default=None, help="default: the product's")
    ap.add_argument("--link-lambda", type=float, default=None,
                    help="linked-coordinate threshold (0 = none); default: the product's")
    ap.add_argument("--fine-bins", type=int, default=None, help="fine cells per numeric column (0 = none)")
    ap.add_argument("--fine-threshold", type=float, default=None, help="default: the product's")
    ap.add_argument("--workload", action="append", default=None, metavar="A,B,C",
                    help="a 3-way marginal of the workload (repeat for more); default: none")
    ap.add_argument("--out", default=None, help="synthetic CSV (omit to skip writing)")
    ap.add_argument("--stats", required=True)
    args = ap.parse_args()

    t_import = time.perf_counter()
    from bench.stage_timer import StageTimer

    timer = StageTimer()
    with timer.stage("import"):
        from splice_assets import (
            MeasurementSettings,
            ModelSettings,
            PostProcessingSettings,
        )
        from splice_assets.experimental import ExperimentalSynthesizer
        from splice_assets.postprocess.links import describe
        from splice_assets.private.validation import read_table
        from splice_assets.schema import load_schema

    threads = int(os.environ.get("SPLICE_BENCH_THREADS", "1"))
    schema = load_schema(args.schema)
    measurement_settings = MeasurementSettings(**given(
        n_directions=args.n_directions, k=args.k, marginal_share=args.marginal_share, pair_share=args.pair_share,
        fine_bins=args.fine_bins,
        workload=None if args.workload is None else tuple(tuple(w.split(",")) for w in args.workload),
    ))
    model_settings = ModelSettings(**given(components=args.K))
    post = PostProcessingSettings(**given(tilt_chi2=args.tilt_chi2, link_lambda=args.link_lambda,
                                         fine_threshold=args.fine_threshold))
    overrides = given(R=args.R, numeric_model=args.numeric_model, pair_loss_weight=args.pair_loss_weight,
                   em_iterations=args.em_iterations, tilt_max_iterations=args.tilt_max_iterations)
    synth = ExperimentalSynthesizer(schema, args.epsilon, args.delta, args.relation, args.seed, measurement_settings,
                                    model_settings, post, fit_overrides=overrides)
    with timer.stage("validate"):
        table = synth.prepare(read_table(args.train), ledger=None).table
    with timer.stage("encode"):
        x = synth.encode(table)
    with timer.stage("measure"):
        measurement = synth.measure(x, ledger=None)
    del x
    with timer.stage("fit"):
        model = synth.fit_model(threads)
    with timer.stage("sample"):
        synthetic = synth.sample()  # the noisy n under add-remove
    if args.out:
        with timer.stage("write"):
            synthetic.to_csv(args.out, index=False)
    stats = timer.close()
    from bench.tails import TailNoise

    stats.update(
        {
            "n": len(table),
            "n_measured": int(measurement.n),
            "relation": args.relation,
            "d": int(measurement.d),
            "sigma": float(measurement.sigma),
            # The 1-way tables' public cell noise (frequencies), which the bench's tail rule reads (bench/tails.py).
            "tail_noise": TailNoise.of(measurement).to_dict(),
            "fit_final_loss": float(model.final_loss),
            "fit_steps": int(len(model.loss_curve)),
            "tilt_iterations": None if model.tilt is None else model.tilt.iterations,
            "tilt_chi2": None if model.tilt is None else [model.tilt.chi2_start, model.tilt.chi2_end],
            "target_tilt_iterations": None if model.target_tilt is None else model.target_tilt.iterations,
            "links": [[l["source"], l["target"], l["lambda"]] for l in describe(model.links, model.layout)],
            "fine_couplings": [] if model.fine is None else [list(c) for c in model.fine.couplings],
            "total_in_process_s": round(time.perf_counter() - t_import, 3),
            "threads": threads,
        }
    )
    Path(args.stats).write_text(json.dumps(stats, indent=1))


if __name__ == "__main__":
    main()
