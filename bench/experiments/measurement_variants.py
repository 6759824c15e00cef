"""Measurement variants, paired: per seed, every variant measures the train split with the same standard normal
draws (common random numbers: the product's Gaussian sampler and the entropy of the frequent-value selection are
replaced by generators seeded with the seed, so these are not releases), and the variants differ only by their
queries and weights. A variant is a set of ``MeasurementSettings``
overrides (``key=value``, comma-separated; ``defaults`` for none). Prints per dataset and variant the mean over
seeds of ``refit_variants``' scores against the train split (TSTR on the real test split). ε = 1, add-remove
unless ``--relation replace-one``.

    .venv/bin/python -m bench.experiments.measurement_variants --datasets shuttle california_housing \\
        --variants defaults grid_weight=1 --seeds 0 1 2 3
"""

from __future__ import annotations

import argparse
from dataclasses import replace

from bench.common import seeded_noise
from bench.experiments.field_on_off import release_scores
from bench.experiments.helpers import print_means
from bench.experiments.refit_variants import KEYS, overrides
from bench.run import prepared_datasets
from splice_assets import MeasurementSettings, Synthesizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["shuttle", "california_housing", "adult"])
    parser.add_argument("--variants", nargs="+", default=["defaults", "grid_weight=1"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3])
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--relation", choices=["add-remove", "replace-one"], default="add-remove")
    args = parser.parse_args()
    print(" | ".join(("dataset", "variant", *KEYS)), flush=True)
    for name, prepared in prepared_datasets(args.datasets):
        for variant in args.variants:
            settings = replace(MeasurementSettings(), **overrides(variant))
            rows = []
            for seed in args.seeds:
                synth = Synthesizer(prepared.schema, args.epsilon, 1e-9, args.relation, seed, settings)
                with seeded_noise(seed):
                    synth.fit(prepared.train, ledger=None)
                rows.append(release_scores(prepared, synth, seed))
            print_means(name, variant, rows, KEYS)


if __name__ == "__main__":
    main()
