"""One SPLICE run in its own process (the bench wraps it in /usr/bin/time -v).

Reads the train CSV, validates it with the public schema, then runs the stages of
``splice_assets.pipeline.synthesize`` one by one (same calls, same order) so each stage's time and peak RSS
can be reported; writes the synthetic CSV and a JSON of stage timings.

    python -m bench.splice_runner --train T.csv --schema S.yaml --epsilon 1 --delta 1e-9 --seed 0 \
        --out synth.csv --stats stats.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path


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
    ap.add_argument("--out", default=None, help="synthetic CSV (omit to skip writing)")
    ap.add_argument("--stats", required=True)
    args = ap.parse_args()

    t_import = time.perf_counter()
    from bench.stage_timer import StageTimer

    timer = StageTimer()
    with timer.stage("import"):
        from splice_assets.model.fit import FitConfig
        from splice_assets.postprocess.chain import fit
        from splice_assets.postprocess.links import describe
        from splice_assets.private.encoding import encode
        from splice_assets.private.measuring import make_plan, measure
        from splice_assets.private.validation import read_table, validate
        from splice_assets.sampling import sample_table
        from splice_assets.schema import load_schema

    threads = int(os.environ.get("SPLICE_BENCH_THREADS", "1"))
    schema = load_schema(args.schema)
    with timer.stage("validate"):
        table = validate(read_table(args.train), schema).table
    # The stages of pipeline.synthesize, called one by one.
    with timer.stage("encode"):
        x = encode(table, schema)
    with timer.stage("measure"):
        chosen = {"n_directions": args.n_directions, "k": args.k, "marginal_share": args.marginal_share,
                  "pair_share": args.pair_share}
        plan, calibration = make_plan(
            schema, len(table), args.epsilon, args.delta, seed=args.seed, relation=args.relation,
            **{k: v for k, v in chosen.items() if v is not None},
        )
        measurement = measure(x, schema, plan, calibration)
    del x
    with timer.stage("fit"):
        shape = {"K": args.K, "R": args.R, "numeric_model": args.numeric_model,
                 "pair_loss_weight": args.pair_loss_weight, "em_iterations": args.em_iterations,
                 "tilt_chi2": args.tilt_chi2, "tilt_max_iterations": args.tilt_max_iterations,
                 "link_lambda": args.link_lambda}
        config = FitConfig(seed=args.seed, threads=threads, **{k: v for k, v in shape.items() if v is not None})
        model = fit(measurement, schema, config)
    with timer.stage("sample"):
        synthetic = sample_table(model, schema, measurement.n, args.seed)  # the noisy n under add-remove
    if args.out:
        with timer.stage("write"):
            synthetic.to_csv(args.out, index=False)
    stats = timer.close()
    stats.update(
        {
            "n": len(table),
            "n_measured": int(measurement.n),
            "relation": args.relation,
            "d": int(measurement.d),
            "sigma": float(measurement.sigma),
            "fit_final_loss": float(model.final_loss),
            "fit_steps": int(len(model.loss_curve)),
            "tilt_iterations": None if model.tilt is None else model.tilt.iterations,
            "tilt_chi2": None if model.tilt is None else [model.tilt.chi2_start, model.tilt.chi2_end],
            "links": [[l["source"], l["target"], l["lambda"]] for l in describe(model.links, model.layout)],
            "total_in_process_s": round(time.perf_counter() - t_import, 3),
            "threads": threads,
        }
    )
    Path(args.stats).write_text(json.dumps(stats, indent=1))


if __name__ == "__main__":
    main()
