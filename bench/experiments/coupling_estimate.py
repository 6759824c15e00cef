"""The within-bin couplings chosen before and after decision 0044, paired on one model.

Per dataset and seed: one add-remove release at ε = 1 on the bench's train split with the product defaults (its
couplings from ``fine_tables.choose_couplings``: the copula correlation of a noisy coarse 2-way table read as
frequencies, columns with a continuous part only), then the same model with the couplings chosen as before 0044
(the table read as a share of its clipped sum, which also counts the positive noise of its empty cells; every
numeric column a candidate). Both sample the same rows of coarse bins (the same public seed), so only the draws
inside the bins differ. Prints the mean over seeds of the off-grid metrics, ``strong`` (the mean |Spearman error|
over the numeric pairs with real |Spearman| >= 0.8), ``zeros`` (the mean |error| of P(b = 0 | a = 0) over the
numeric pairs where the real one is at least 0.95) and the number of couplings; and per pair with real |Spearman|
>= 0.8, the correlation of its exact coarse table beside the two estimates.

    .venv/bin/python -m bench.experiments.coupling_estimate --datasets house_16h california_housing --seeds 0 1
"""

from __future__ import annotations

import argparse
import math
from dataclasses import replace
from unittest import mock

import numpy as np
import pandas as pd

from bench.experiments.helpers import print_means, scores
from bench.experiments.within_bin_copula import spearman_errors
from bench.run import prepared_datasets
from splice_assets import Synthesizer
from splice_assets.layout import layout_for, marginal_cells, marginal_sizes, pair_tables
from splice_assets.model.fit import FitConfig
from splice_assets.postprocess import fine_tables
from splice_assets.postprocess.targets import fit_targets
from splice_assets.sampling import sample_table

KEYS = ("qtvd1", "qtvd2", "range_mae", "strong", "zeros", "couplings")


def clipped_sum_correlation(table: np.ndarray, noise_std: float, margins: object = None) -> tuple[float, float]:
    """``fine_tables.latent_correlation`` as it was before 0044 (kept here to reproduce the comparison): the table
    read as a share of its clipped sum, the cuts at its own clipped margins (``margins`` is ignored)."""
    from scipy.optimize import minimize_scalar

    total = np.clip(table, 0.0, None).sum()
    if not total > 0:
        return 0.0, math.inf
    target = table / total
    cuts = [fine_tables._normal_cuts(table.sum(axis=1)), fine_tables._normal_cuts(table.sum(axis=0))]
    if min(np.count_nonzero(np.diff(c) > 0) for c in cuts) < 2:
        return 0.0, math.inf

    def cells(r: float) -> np.ndarray:
        return fine_tables._copula_cells(cuts[0], cuts[1], r)

    def misfit(r: float) -> float:
        return float(np.sum((cells(r) - target) ** 2))

    grid = np.linspace(-0.99, 0.99, 67)
    best = grid[int(np.argmin([misfit(r) for r in grid]))]
    bounds = (max(best - 0.03, -fine_tables.MAX_COUPLING), min(best + 0.03, fine_tables.MAX_COUPLING))
    r = float(minimize_scalar(misfit, bounds=bounds, method="bounded", options={"xatol": 1e-4}).x)
    step = 1e-3
    slope = (cells(min(r + step, 1.0 - 1e-6)) - cells(max(r - step, -1.0 + 1e-6))) / (2 * step)
    return r, float(noise_std / max(np.sqrt(np.sum(slope**2)), 1e-300))


def zero_rule_error(real: pd.DataFrame, synthetic: pd.DataFrame, numeric: list[str]) -> float:
    """Mean |error| of P(b = 0 | a = 0) over the ordered numeric pairs where the real one is at least 0.95 (NaN:
    none): zeros that go together in the real rows."""
    errors = []
    for a in numeric:
        for b in numeric:
            real_zero = real[a] == 0
            if a == b or real_zero.mean() < 0.01:
                continue
            truth = float((real_zero & (real[b] == 0)).sum() / real_zero.sum())
            fake_zero = synthetic[a] == 0
            if truth >= 0.95 and fake_zero.any():
                errors.append(abs(truth - float((fake_zero & (synthetic[b] == 0)).sum() / fake_zero.sum())))
    return float(np.mean(errors)) if errors else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["house_16h", "california_housing", "magic"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    args = parser.parse_args()
    print(" | ".join(("dataset", "couplings", *KEYS)), flush=True)
    for name, prepared in prepared_datasets(args.datasets):
        schema, train = prepared.schema, prepared.train
        numeric = [spec.name for spec in schema.columns if spec.is_numeric]
        results: dict[str, list[dict[str, float]]] = {"before": [], "0044": []}
        for seed in args.seeds:
            synth = Synthesizer(schema, 1.0, 1e-9, "add-remove", seed)
            synth.fit(train, ledger=None)
            model, measurement = synth.model, synth.measurement
            assert model is not None and measurement is not None
            if model.fine is None:
                print(f"  {name}: no fine tables, nothing to couple", flush=True)
                break
            layout = layout_for(synth.schema)
            sizes = marginal_sizes(layout, measurement.numeric_bins)
            columns = fine_tables.fine_cells(synth.schema, measurement.fine_bins, measurement.numeric_bins)
            every_column = tuple(replace(column, intervals=max(column.intervals, 1)) for column in columns)
            with mock.patch.object(fine_tables, "latent_correlation", clipped_sum_correlation):
                before = fine_tables.choose_couplings(measurement.noisy_pairs, measurement.pairs, sizes, every_column,
                                                     0.5, measurement.pair_noise_std())
            for label, couplings in (("before", before), ("0044", model.fine.couplings)):
                rows = sample_table(replace(model, fine=replace(model.fine, couplings=couplings)), synth.schema,
                                    len(train), seed)
                results[label].append({**scores(train, rows, schema),
                                       "strong": spearman_errors(train, rows, numeric)[1] if len(numeric) > 1
                                       else float("nan"),
                                       "zeros": zero_rule_error(train, rows, numeric),
                                       "couplings": len(couplings)})
            targets = fit_targets(measurement, layout, FitConfig(), columns)  # the margins chain.fit hands the rule
            assert targets is not None
            margins = targets.per_coordinate(layout)
            exact = marginal_cells(synth.encode(train.reindex(columns=[c.name for c in synth.schema.columns])),
                                   layout, measurement.numeric_bins)
            std = measurement.pair_noise_std()
            for (a, b), table in zip(measurement.pairs, pair_tables(measurement.noisy_pairs, measurement.pairs,
                                                                      measurement.marginal_sizes)):
                names = layout.coordinates[a].column, layout.coordinates[b].column
                if a not in {c.coordinate for c in columns} or b not in {c.coordinate for c in columns}:
                    continue
                real = train[list(names)].apply(pd.to_numeric, errors="coerce").corr("spearman").iloc[0, 1]
                if abs(real) < 0.8:
                    continue
                truth = np.zeros((sizes[a], sizes[b]))
                np.add.at(truth, (exact[:, a], exact[:, b]), 1.0)
                print(f"  seed {seed} {names[0]} ~ {names[1]}: Spearman {real:.3f}, exact table r "
                      f"{fine_tables.latent_correlation(truth / truth.sum(), 1e-6)[0]:.3f}, before "
                      f"{clipped_sum_correlation(table, std)[0]:.3f}, 0044 "
                      f"{fine_tables.latent_correlation(table, std, (margins[a], margins[b]))[0]:.3f}", flush=True)
        for label, rows in results.items():
            if rows:
                print_means(name, label, rows, KEYS)


if __name__ == "__main__":
    main()
