"""``scale: logit`` for census proportions (docs/decisions/0024): house_16h's 15 ratio columns on the linear or the
logit encoding, the same DP bounds for both.

Every variant is its own measurement (the encoding shapes the measured tables), so variants are compared over
seeds: per variant the mean over seeds of the off-grid metrics against the train split, the on-grid TVD against it
and TSTR against the test split, then the non-DP independent-marginals reference. Add-remove, eps = 1,
delta = 1e-9, as in the bench.

    .venv/bin/python -m bench.experiments.proportion_scale --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import dataclasses

from bench.experiments.helpers import fitted_sample, print_means, scores
from bench.run import prepare
from splice_assets import load_schema
from splice_assets.datasets import schema_path
from splice_assets.evaluation.metrics import independent_marginals_baseline, tstr

KEYS = ("qtvd1", "qtvd2", "qtvd3", "range_mae", "tvd1", "tvd2", "tstr")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="house_16h")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    args = parser.parse_args()
    prepared = prepare(args.dataset)
    if prepared is None:
        return
    train, test = prepared.train, prepared.test
    # The columns the committed schema leaves to DP bounds: house_16h's census ratios.
    ratios = {c.name for c in load_schema(schema_path(args.dataset)).columns if c.is_numeric and c.bounds_auto}
    print(" | ".join(("dataset", "ratio scale", *KEYS)), flush=True)
    for scale in ("linear", "logit"):
        schema = dataclasses.replace(prepared.schema, columns=tuple(
            dataclasses.replace(c, scale=scale) if c.name in ratios else c for c in prepared.schema.columns
        ))
        rows = []
        for seed in args.seeds:
            synthetic = fitted_sample(schema, train, seed)[1]
            learned = tstr(train, test, synthetic, schema, 0, trtr=False)
            rows.append({**scores(train, synthetic, schema),
                         "tstr": learned.best_tstr[learned.primary] if learned else float("nan")})
        print_means(args.dataset, scale, rows, KEYS)
    reference = scores(train, independent_marginals_baseline(train, prepared.schema, len(train), 0), prepared.schema)
    print(" | ".join((args.dataset, "ref_independent", *(f"{reference.get(k, float('nan')):.4f}" for k in KEYS))),
          flush=True)


if __name__ == "__main__":
    main()
