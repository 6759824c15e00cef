"""Fine tables pooled into the coarse 1-way targets, on and off, paired on one measurement (docs/decisions/0035).

Per dataset and seed: one add-remove release at ε = 1 on the bench's train split with the product defaults
("pooled": each numeric column's noisy fine table, summed over each coarse bin, pooled by inverse variance into
the coarse target; bins holding no value of the column's grid are 0), then a refit of the same noisy measurement
with ``pool_fine_tables`` off ("direct"), which costs no privacy. Prints the mean over seeds of the off-grid
metrics (``missing_values``: frequent integer values and categories never drawn), the on-grid 1-/2-way TVD
against the train split and TSTR (the best learner's AUC or R² on the real test split).

    .venv/bin/python -m bench.experiments.fine_pooling --datasets coil2000 churn adult --seeds 0 1
"""

from __future__ import annotations

import argparse

from bench.experiments.field_on_off import release_scores
from bench.experiments.pair_selection import print_means
from bench.run import prepare
from splice_assets import Synthesizer

KEYS = ("qtvd1", "qtvd2", "qtvd3", "range_mae", "missing_values", "tvd1", "tvd2", "tstr")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["coil2000", "churn", "adult"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--epsilon", type=float, default=1.0)
    args = parser.parse_args()
    print(" | ".join(("dataset", "variant", *KEYS)), flush=True)
    for name in args.datasets:
        prepared = prepare(name)
        if prepared is None:
            continue
        results: dict[str, list[dict[str, float]]] = {"pooled": [], "direct": []}
        for seed in args.seeds:
            synth = Synthesizer(prepared.schema, args.epsilon, 1e-9, "add-remove", seed)
            synth.fit(prepared.train, ledger=None)
            results["pooled"].append(release_scores(prepared, synth, seed))
            direct = Synthesizer(synth.schema, args.epsilon, 1e-9, "add-remove", seed,
                                 expert={"pool_fine_tables": False})
            direct.measurement, direct.bounds = synth.measurement, synth.bounds
            direct.fit_model()
            results["direct"].append(release_scores(prepared, direct, seed))
        for variant, rows in results.items():
            print_means(name, variant, rows, KEYS)


if __name__ == "__main__":
    main()
