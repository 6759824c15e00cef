"""What the experiments share: one add-remove release on a prepared train split, its scores against that split and
the means over seeds (used to live in the pair selection experiment, removed with the option in issue 66)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from bench.offgrid import offgrid_metrics
from splice_assets import MeasurementSettings, Synthesizer
from splice_assets.evaluation.metrics import marginal_tvd, tstr
from splice_assets.sampling import sample_table

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
