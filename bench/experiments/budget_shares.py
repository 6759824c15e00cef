"""The 1-way tables' share of the measurement (docs/decisions/0002; 0022 in docs/decisions/alternatives.md):
off-grid and on-grid metrics and TSTR of the product at add-remove, eps = 1, with ``marginal_share`` raised at the
moments' expense (pairs fixed at 0.5).

Each variant is its own measurement (fresh noise), so compare means over several seeds. Prints per dataset the
TVD a median pair table's noise alone amounts to at the default shares (``pair_table_noise``), then per variant the
mean over seeds of qtvd1, qtvd2, range_mae, missing values, the on-grid 2-way TVD against the test split and TSTR
(the best learner's AUC or R^2), then the non-DP independent-marginals reference.

    .venv/bin/python -m bench.experiments.budget_shares --datasets churn california_housing --seeds 0 1
    .venv/bin/python -m bench.experiments.budget_shares --variants 0.15:0.5 0.3:0.35 --datasets adult
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from bench.run import prepared_datasets, score
from splice_assets import MeasurementSettings, Synthesizer
from splice_assets.evaluation.metrics import independent_marginals_baseline
from splice_assets.private.measuring import make_plan

KEYS = ("qtvd1", "qtvd2", "range_mae", "missing_values", "tvd2", "tstr")
#: (marginal_share, pair_share): the default first.
VARIANTS = ((0.15, 0.5), (0.3, 0.5), (0.45, 0.5))


def row(metrics: dict) -> list[float]:
    return [float("nan") if metrics.get(k) is None else float(metrics[k]) for k in KEYS]


def pair_table_noise(schema, epsilon: float) -> float:
    """The TVD a median 2-way table's noise alone amounts to at the default shares (add-remove, delta = 1e-9,
    over the schema's public n_min): 0.5 x cells x the cells' noise std x sqrt(2/pi)."""
    plan, calibration = make_plan(schema, None, epsilon, 1e-9, relation="add-remove")
    cell_std = calibration.sigma / plan.pair_weight / schema.n_min
    return 0.5 * float(np.median(plan.pair_sizes)) * cell_std * math.sqrt(2 / math.pi)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["churn", "california_housing"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--variants", nargs="+", default=[f"{m}:{p}" for m, p in VARIANTS],
                        help="marginal_share:pair_share pairs (default: %(default)s)")
    args = parser.parse_args()
    variants = [tuple(float(x) for x in v.split(":")) for v in args.variants]
    print(" | ".join(("dataset", "marginal_share", "pair_share", *KEYS)), flush=True)
    for name, prepared in prepared_datasets(args.datasets):
        print(f"{name}: a median pair table's noise at the default shares is a TVD of "
              f"{pair_table_noise(prepared.schema, args.epsilon):.2f}", flush=True)
        for marginal, pair in variants:
            values = []
            for seed in args.seeds:
                settings = MeasurementSettings(marginal_share=marginal, pair_share=pair)
                synth = Synthesizer(prepared.schema, args.epsilon, 1e-9, "add-remove", seed, settings)
                synth.fit(prepared.train, ledger=None)
                values.append(row(score(prepared, synth.sample(len(prepared.train)))))
            mean = np.nanmean(values, axis=0)
            print(" | ".join((name, f"{marginal:g}", f"{pair:g}", *(f"{v:.4f}" for v in mean))), flush=True)
        reference = independent_marginals_baseline(prepared.train, prepared.schema, len(prepared.train), 0)
        print(" | ".join((name, "ref_independent", "", *(f"{v:.4f}" for v in row(score(prepared, reference))))),
              flush=True)


if __name__ == "__main__":
    main()
