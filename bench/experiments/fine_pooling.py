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

from bench.experiments.refit_variants import compare


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["coil2000", "churn", "adult"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--epsilon", type=float, default=1.0)
    args = parser.parse_args()
    compare(args.datasets, args.seeds, args.epsilon, {"pooled": {}, "direct": {"pool_fine_tables": False}})


if __name__ == "__main__":
    main()
