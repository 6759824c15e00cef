"""Per-value fine cells for integer columns with more grid values than ``fine_bins`` (``resolution.GRID_LIMIT``):
the off-grid metrics at the current limit (256) and a larger one, every variant its own measurement.

Add-remove, eps = 1, delta = 1e-9; mean over seeds against the train split.

    .venv/bin/python -m bench.experiments.grid_limit --datasets churn pol fars --limits 256 1024 --seeds 0 1
"""

from __future__ import annotations

import argparse

from bench.experiments.pair_selection import fitted_sample, print_means, scores
from bench.run import prepared_datasets
from splice_assets import resolution

KEYS = ("qtvd1", "qtvd2", "qtvd3", "range_mae", "tvd1", "tvd2", "missing_values")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["churn", "pol", "fars"])
    parser.add_argument("--limits", nargs="+", type=int, default=[256, 1024])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    args = parser.parse_args()
    print(" | ".join(("dataset", "grid limit", *KEYS)), flush=True)
    for name, prepared in prepared_datasets(args.datasets):
        schema, train = prepared.schema, prepared.train
        for limit in args.limits:
            resolution.GRID_LIMIT = limit  # a public constant of the encoding; set per variant for the experiment
            rows = [scores(train, fitted_sample(schema, train, seed)[1], schema) for seed in args.seeds]
            print_means(name, str(limit), rows, KEYS)


if __name__ == "__main__":
    main()
