"""Dependence inside the bins (docs/decisions/0030): how coupled numeric columns draw their values inside their
coarse bins.

Paired on one measurement and one fitted model per (dataset, seed): only the couplings differ, so the rows differ
only inside the bins. Variants:

- ``none``: every column draws inside its bins independently;
- ``rank 0.9``: the rule before 0030, pairs whose clipped noisy coarse table has |Spearman| >= 0.9 follow their
  leader's draw (a star forest);
- ``copula m``: the maximum spanning forest of the pairs whose noisy coarse table shows a Gaussian-copula
  correlation >= m (``fine_tables.choose_couplings``), each follower drawn given its leader through the copula.

Reported per dataset and variant, means over seeds, against the train split: the off-grid metrics, the mean
absolute error of the Spearman correlation over every numeric pair and over the pairs with real |Spearman| >= 0.8,
and the number of couplings. Add-remove, eps = 1, delta = 1e-9, as in the bench.

    .venv/bin/python -m bench.experiments.within_bin_copula --datasets california_housing house_16h magic --seeds 0 1
"""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np
import pandas as pd

from bench.experiments.helpers import fitted_sample, print_means, scores
from bench.run import prepared_datasets
from splice_assets.fine_cells import fine_cells
from splice_assets.layout import layout_for, marginal_sizes
from splice_assets.postprocess.fine_tables import choose_couplings
from splice_assets.sampling import sample_table

KEYS = ("qtvd1", "qtvd2", "qtvd3", "range_mae", "spearman_mae", "strong_mae", "couplings")


def spearman_errors(train: pd.DataFrame, synthetic: pd.DataFrame, numeric: list[str]) -> tuple[float, float]:
    """Mean |Spearman error| over every numeric pair, and over the pairs whose real |Spearman| is >= 0.8."""
    real = train[numeric].apply(pd.to_numeric, errors="coerce").corr("spearman").to_numpy()
    fake = synthetic[numeric].apply(pd.to_numeric, errors="coerce").corr("spearman").to_numpy()
    upper = np.triu_indices(len(numeric), 1)
    error, strong = np.abs(real - fake)[upper], np.abs(real[upper]) >= 0.8
    return float(np.nanmean(error)), float(np.nanmean(error[strong])) if strong.any() else float("nan")


def rank_couplings(measurement, schema, cells) -> tuple[tuple[int, int, float], ...]:
    """The rule before 0030: |Spearman| >= 0.9 of the clipped noisy coarse table, a star forest, follow the leader."""
    sizes = marginal_sizes(layout_for(schema), measurement.numeric_bins)
    position = {column.coordinate: i for i, column in enumerate(cells)}
    starts = np.concatenate([[0], np.cumsum([sizes[a] * sizes[b] for a, b in measurement.pairs])])
    candidates = []
    for (a, b), start in zip(measurement.pairs, starts[:-1]):
        if a in position and b in position:
            table = np.clip(measurement.noisy_pairs[start : start + sizes[a] * sizes[b]].reshape(sizes[a], sizes[b]),
                            0.0, None)
            r = _rank_correlation(table)
            if abs(r) >= 0.9:
                candidates.append((abs(r), position[a], position[b], 1.0 if r > 0 else -1.0))
    leaders: set[int] = set()
    followers: dict[int, tuple[int, float]] = {}
    for _, a, b, sign in sorted(candidates, reverse=True):
        for leader, follower in ((a, b), (b, a)):
            if follower not in followers and follower not in leaders and leader not in followers:
                followers[follower] = (leader, sign)
                leaders.add(leader)
                break
    return tuple((f, leader, sign) for f, (leader, sign) in sorted(followers.items()))


def _rank_correlation(table: np.ndarray) -> float:
    total = table.sum()
    if not total > 0:
        return 0.0
    p = table / total
    pa, pb = p.sum(axis=1), p.sum(axis=0)
    ra, rb = np.cumsum(pa) - pa / 2.0, np.cumsum(pb) - pb / 2.0
    cov = (ra - ra @ pa) @ p @ (rb - rb @ pb)
    var = ((ra - ra @ pa) ** 2 @ pa) * ((rb - rb @ pb) ** 2 @ pb)
    return float(cov / np.sqrt(var)) if var > 0 else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["california_housing", "house_16h", "magic", "fars"])
    parser.add_argument("--minimums", nargs="+", type=float, default=[0.9, 0.7, 0.5, 0.3])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    args = parser.parse_args()
    print(" | ".join(("dataset", "variant", *KEYS)), flush=True)
    for name, prepared in prepared_datasets(args.datasets):
        schema, train = prepared.schema, prepared.train
        numeric = [c.name for c in schema.columns if c.is_numeric]
        results: dict[str, list[dict[str, float]]] = {}
        for seed in args.seeds:
            synth, _ = fitted_sample(schema, train, seed)
            model, measurement = synth.model, synth.measurement
            assert model is not None and model.fine is not None and measurement is not None
            cells = fine_cells(synth.schema, model.fine.fine_bins, measurement.numeric_bins)
            sizes = marginal_sizes(layout_for(synth.schema), measurement.numeric_bins)
            variants = {"none": (), "rank 0.9": rank_couplings(measurement, synth.schema, cells)}
            for minimum in args.minimums:
                variants[f"copula {minimum:g}"] = choose_couplings(
                    measurement.noisy_pairs, measurement.pairs, sizes, cells, minimum, measurement.pair_noise_std())
            for variant, couplings in variants.items():
                fine = dataclasses.replace(model.fine, couplings=couplings)
                rows = sample_table(dataclasses.replace(model, fine=fine), synth.schema, len(train), seed)
                every, strong = spearman_errors(train, rows, numeric)
                results.setdefault(variant, []).append(
                    {**scores(train, rows, schema), "spearman_mae": every, "strong_mae": strong,
                     "couplings": float(len(couplings))})
        for variant, rows_ in results.items():
            print_means(name, variant, rows_, KEYS)


if __name__ == "__main__":
    main()
