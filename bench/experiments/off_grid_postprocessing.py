"""Trimmed coarse tails and shrunk fine tables (docs/decisions/0021): the off-grid metrics of the product at
add-remove, eps = 1, with either post-processing step on or off.

Both steps are post-processing of the same noisy measurement, so one measurement serves every variant of a
(dataset, seed): the tails are trimmed in the fit's targets (``FitConfig.marginal_tail_z``), the fine tables are
shrunk when values are drawn inside their bins (``FineTables.shrink``). Prints per dataset and variant the mean
over seeds of qtvd1, qtvd2, qtvd3, range_mae and the count of frequent integer values never drawn, then the non-DP
independent-marginals reference.

    .venv/bin/python -m bench.experiments.off_grid_postprocessing --datasets churn pol house_16h --seeds 0 1
"""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np

from bench.offgrid import offgrid_metrics
from bench.run import prepared_datasets
from splice_assets.evaluation.metrics import independent_marginals_baseline
from splice_assets.experimental import ExperimentalSynthesizer
from splice_assets.model.fit import DEFAULT_TAIL_Z
from splice_assets.sampling import sample_table

KEYS = ("qtvd1", "qtvd2", "qtvd3", "range_mae", "missing_values")


def scores(train, synthetic, schema) -> list[float]:
    metrics = offgrid_metrics(train, synthetic, schema, 0)
    return [float(metrics[k]) for k in KEYS]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["churn", "pol", "house_16h", "california_housing"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--epsilon", type=float, default=1.0)
    args = parser.parse_args()
    print(" | ".join(("dataset", "tails", "shrink", *KEYS)), flush=True)
    for name, prepared in prepared_datasets(args.datasets):
        schema, train = prepared.schema, prepared.train
        results: dict[tuple[float, bool], list[list[float]]] = {}
        for seed in args.seeds:
            measured = None
            for tail_z in (0.0, DEFAULT_TAIL_Z):
                synth = ExperimentalSynthesizer(schema, args.epsilon, 1e-9, "add-remove", seed,
                                                fit_overrides={"marginal_tail_z": tail_z})
                if measured is None:
                    synth.fit(train, ledger=None)
                    measured = synth.measurement
                else:  # the same noisy measurement, fitted again with the other targets
                    synth.measurement = measured
                    synth.fit_model()
                assert synth.model is not None
                if synth.model.fine is None:  # no numeric column: neither step applies
                    break
                for shrink in (False, True):
                    model = dataclasses.replace(synth.model, fine=dataclasses.replace(synth.model.fine, shrink=shrink))
                    synthetic = sample_table(model, synth.schema, len(train), seed)
                    results.setdefault((tail_z, shrink), []).append(scores(train, synthetic, schema))
        if not results:
            print(f"{name} | no numeric columns", flush=True)
            continue
        for (tail_z, shrink), values in results.items():
            mean = np.mean(values, axis=0)
            print(" | ".join((name, f"{tail_z:g}", str(shrink), *(f"{v:.4f}" for v in mean))), flush=True)
        reference = independent_marginals_baseline(train, schema, len(train), 0)
        print(" | ".join((name, "ref_independent", "", *(f"{v:.4f}" for v in scores(train, reference, schema)))),
              flush=True)


if __name__ == "__main__":
    main()
