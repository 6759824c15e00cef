"""Two sampler versions on the same noisy measurement (docs/decisions/0031): run from two checkouts, compare.

For a paired comparison the mechanism's noise is drawn here from a generator seeded per (dataset, seed): an
experiment only (the product's noise comes from OS entropy). The DP bounds, the measurement and therefore the fit's
inputs are then the same bits in both checkouts, and what differs is what the checkouts do after the measurement.
Reported per dataset: the off-grid and on-grid scores against the train split, means over seeds (add-remove,
eps = 1, delta = 1e-9, the bench's splits).

    .venv/bin/python -m bench.experiments.sampler_paired --datasets shuttle california_housing --seeds 0 1
"""

from __future__ import annotations

import argparse

import numpy as np

KEYS = ("qtvd1", "qtvd2", "qtvd3", "range_mae", "tvd1", "tvd2", "tvd3")


def seeded_noise(seed: int):
    rng = np.random.default_rng(seed)
    return lambda values, sigma: np.asarray(values, dtype=np.float64) + rng.normal(0.0, sigma, np.shape(values))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["shuttle", "california_housing"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    args = parser.parse_args()
    from bench.experiments.helpers import fitted_sample, print_means, scores
    from bench.run import prepare
    from splice_assets.private import mechanism

    print(" | ".join(("dataset", "variant", *KEYS)), flush=True)
    for name in args.datasets:
        rows = []
        for seed in args.seeds:
            mechanism.gaussian_noise = seeded_noise(1000 + seed)  # before prepare: the DP bounds are noisy too
            prepared = prepare(name)
            if prepared is None:
                break
            _, synthetic = fitted_sample(prepared.schema, prepared.train, seed)
            rows.append(scores(prepared.train, synthetic, prepared.schema))
        if rows:
            print_means(name, "this checkout", rows, KEYS)


if __name__ == "__main__":
    main()
