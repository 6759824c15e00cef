"""Pair selection (docs/decisions/0023): how many 2-way tables a wide table should measure.

Each variant is its own measurement (the choice of pairs happens inside the mechanism), so variants are compared over
seeds, not paired: per dataset and cap on pairs per coordinate (0 = every pair, the behaviour before selection),
the mean over seeds of the off-grid metrics against the train split, the on-grid 1-/2-way TVD against it, TSTR
(the best learner's AUC or R^2 on the test split), the number of 2-way tables measured and the seconds to fit and
sample. Add-remove, eps = 1 and delta = 1e-9, as in the bench.

    .venv/bin/python -m bench.experiments.pair_selection --datasets coil2000 pol fars --caps 0 8 4 2 --seeds 0 1
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from bench.offgrid import offgrid_metrics
from bench.run import prepared_datasets
from splice_assets import MeasurementSettings, Synthesizer
from splice_assets.evaluation.metrics import independent_marginals_baseline, marginal_tvd, tstr
from splice_assets.sampling import sample_table

KEYS = ("qtvd1", "qtvd2", "qtvd3", "range_mae", "tvd1", "tvd2", "tstr", "pairs", "fit_s")
OFF_GRID = ("qtvd1", "qtvd2", "qtvd3", "range_mae", "missing_values", "qtvd1_max", "det_auc_max")


def best_tstr(train: pd.DataFrame, test: pd.DataFrame, synthetic: pd.DataFrame, schema) -> float:
    """The best learner's TSTR score (AUC or R^2) on the test split, as the bench reports it."""
    learned = tstr(train, test, synthetic, schema, 0, trtr=False)
    return float(learned.best_tstr[learned.primary]) if learned else float("nan")


def scores(train, synthetic, schema) -> dict[str, float]:
    """The off-grid metrics and the on-grid 1-/2-/3-way TVD of one synthetic table against the train split."""
    metrics = offgrid_metrics(train, synthetic, schema, 0)
    grid = marginal_tvd(train, synthetic, schema, 0)
    return {**{k: float(metrics[k]) for k in OFF_GRID}, "tvd1": grid.one_way, "tvd2": grid.two_way,
            "tvd3": grid.three_way}


def fitted_sample(schema, train, seed: int, measurement: MeasurementSettings | None = None, epsilon: float = 1.0):
    """(synthesizer, synthetic rows) of one add-remove release at ``epsilon``, delta = 1e-9 on the train split."""
    synth = Synthesizer(schema, epsilon, 1e-9, "add-remove", seed, measurement=measurement)
    synth.fit(train, ledger=None)
    assert synth.model is not None
    return synth, sample_table(synth.model, synth.schema, len(train), seed)


def measured_seed(schema, train, seed: int, measurement: MeasurementSettings | None = None):
    """(synthesizer, encoded rows, measurement, plan) of one add-remove measurement at ε = 1, delta = 1e-9 of the
    train split, not fitted (the diagnostics alter the noisy statistics before they fit)."""
    synth = Synthesizer(schema, 1.0, 1e-9, "add-remove", seed, measurement=measurement)
    x = synth.encode(synth.prepare(train, None).table)
    measured = synth.measure(x, None)
    return synth, x, measured, synth.plan(x.shape[0])[0]


def print_means(dataset: str, variant: str, rows: list[dict[str, float]], keys: tuple[str, ...]) -> None:
    mean = {k: float(np.mean([r[k] for r in rows])) for k in keys}
    print(" | ".join((dataset, variant, *(f"{mean[k]:.4f}" for k in keys))), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["coil2000", "pol", "fars"])
    parser.add_argument("--caps", nargs="+", type=float, default=[0.0, 8.0, 4.0, 2.0])
    parser.add_argument("--selection-share", type=float, default=None)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    args = parser.parse_args()
    print(" | ".join(("dataset", "pairs per coordinate", *KEYS)), flush=True)
    for name, prepared in prepared_datasets(args.datasets):
        schema, train, test = prepared.schema, prepared.train, prepared.test
        for cap in args.caps:
            rows = []
            for seed in args.seeds:
                extra = {} if args.selection_share is None else {"selection_share": args.selection_share}
                start = time.perf_counter()
                synth, synthetic = fitted_sample(schema, train, seed, MeasurementSettings(pairs_per_coordinate=cap,
                                                                                         **extra))
                seconds = time.perf_counter() - start  # fit and sample
                assert synth.measurement is not None
                rows.append({**scores(train, synthetic, schema), "tstr": best_tstr(train, test, synthetic, schema),
                             "pairs": len(synth.measurement.pairs), "fit_s": seconds})
            print_means(name, f"{cap:g}", rows, KEYS)
        independent = independent_marginals_baseline(train, schema, len(train), 0)
        reference = {**scores(train, independent, schema), "tstr": best_tstr(train, test, independent, schema)}
        print(" | ".join((name, "ref_independent", *(f"{reference.get(k, float('nan')):.4f}" for k in KEYS))),
              flush=True)


if __name__ == "__main__":
    main()
