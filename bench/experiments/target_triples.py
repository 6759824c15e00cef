"""Would 3-way tables of the target with each pair of other columns lift TSTR? A diagnostic, not a release.

Per dataset and seed: one add-remove measurement at ε = 1 on the bench's train split, then variants of the fitted
model. A variant with triples tilts the model once more, toward 3-way tables (target, a, b) on the coarse cells for
every pair (a, b) of other columns while holding the noisy 1-way tables: the potentials are fitted by the product's
``fit_tilt`` on a pool of ``POOL_FACTOR`` × n draws from the model (stopped on a second pool), and the rows are
resampled from the first pool by the weights. The tables' noise is drawn here from the exact tables, so no variant
with triples is differentially private; they bound what measuring the triples could buy:

- ``measured``: the release as the product fits it;
- ``triples, equal weight``: the triples measured beside the pairs at the pairs' weight, with the same total budget
  (every 2-way table's and every triple's noise is the measured pair noise times sqrt((P + T) / P), for P pairs and
  T triples; the model is refitted on the noisier pairs);
- ``triples exact``: exact triples on top of the measured model, tilted to a tenth of the pair noise (the ceiling).

Prints TSTR (the best learner's AUC or R² on the real test split) and the off-grid scores against the train split.

    .venv/bin/python -m bench.experiments.target_triples --datasets nursery shuttle --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools

import numpy as np

from bench.experiments.pair_selection import best_tstr, print_means, scores
from bench.run import prepare
from splice_assets import Synthesizer
from splice_assets.layout import layout_for, marginal_cells, marginal_sizes
from splice_assets.postprocess.tilt import fit_tilt, systematic_resample
from splice_assets.private.measuring import exact_statistics
from splice_assets.sampling import _refined_table, integer_coordinates, sample_cube, sample_table

KEYS = ("tstr", "qtvd1", "qtvd2", "qtvd3", "range_mae", "tvd2")
VARIANTS = ("measured", "triples, equal weight", "triples exact")
POOL_FACTOR = 8


def triple_cells(cells: np.ndarray, sizes: np.ndarray, target: int, others: list[tuple[int, int]]) -> np.ndarray:
    """(rows, triples) each row's cell in each (target, a, b) table, as that table's own index."""
    out = np.empty((len(cells), len(others)), dtype=np.int64)
    for column, (a, b) in enumerate(others):
        out[:, column] = (cells[:, target] * sizes[a] + cells[:, a]) * sizes[b] + cells[:, b]
    return out


def triple_tables(cells: np.ndarray, sizes: np.ndarray, target: int, others: list[tuple[int, int]]) -> np.ndarray:
    """The (target, a, b) tables' frequencies, concatenated."""
    local = triple_cells(cells, sizes, target, others)
    return np.concatenate([
        np.bincount(local[:, t], minlength=int(sizes[target] * sizes[a] * sizes[b])) / len(cells)
        for t, (a, b) in enumerate(others)
    ])


def tilted_to_triples(synth: Synthesizer, targets: np.ndarray, std: float, target: int,
                      others: list[tuple[int, int]], n_rows: int, seed: int):
    """Rows of the fitted model resampled by a tilt toward the triples ``targets`` (frequencies, noise ``std``)."""
    model, layout = synth.model, layout_for(synth.schema)
    bins = synth.measurement.numeric_bins
    sizes = np.asarray(marginal_sizes(layout, bins))
    widths = [int(sizes[target] * sizes[a] * sizes[b]) for a, b in others]
    # The 1-way tables first (their noisy values held), then the triples.
    starts = np.concatenate([[0], np.cumsum(np.concatenate([sizes, widths]))[:-1]])
    integer_bounds = integer_coordinates(synth.schema)
    pools = [sample_cube(model, POOL_FACTOR * n_rows, seed + 1000 * k, True, integer_bounds) for k in (1, 2)]
    cells = []
    for pool in pools:
        one_way = marginal_cells(pool, layout, bins)
        cells.append(np.hstack([one_way, triple_cells(one_way, sizes, target, others)]))
    potentials, *_ = fit_tilt(cells[0], cells[1], synth.measurement.noisy_marginals,
                              synth.measurement.marginal_noise_std(), targets, std, starts=starts)
    log_w = -sum(potentials[starts[t] + cells[0][:, t]] for t in range(cells[0].shape[1]))
    picks = systematic_resample(log_w, n_rows, np.random.default_rng(seed))
    return _refined_table(model, synth.schema, pools[0][picks], seed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["nursery", "shuttle"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    args = parser.parse_args()
    print(" | ".join(("dataset", "variant", *KEYS)), flush=True)
    for name in args.datasets:
        prepared = prepare(name)
        if prepared is None:
            continue
        train, test = prepared.train, prepared.test
        rows: dict[str, list[dict[str, float]]] = {v: [] for v in VARIANTS}
        for seed in args.seeds:
            synth = Synthesizer(prepared.schema, 1.0, 1e-9, "add-remove", seed)
            x = synth.encode(synth.prepare(train, None).table)
            measured = synth.measure(x, None)
            plan, _ = synth.plan(x.shape[0])
            layout = layout_for(synth.schema)
            columns = [c.column for c in layout.coordinates]
            target = columns.index(synth.schema.target)
            others = list(itertools.combinations([i for i in range(len(columns)) if i != target], 2))
            sizes = np.asarray(marginal_sizes(layout, measured.numeric_bins))
            exact_cells = marginal_cells(x, layout, measured.numeric_bins)
            exact = triple_tables(exact_cells, sizes, target, others)
            # Under add-remove the noisy cells are sums divided by the pooled noisy n: the exact ones the same way.
            exact_pairs = exact_statistics(x, plan, layout).pairs / measured.n
            scale = np.sqrt((len(measured.pairs) + len(others)) / len(measured.pairs))
            noise = np.random.default_rng()  # OS entropy, as the mechanism's noise
            for variant in VARIANTS:
                if variant == "triples, equal weight":
                    pairs = exact_pairs + (measured.noisy_pairs - exact_pairs) * scale
                    synth.measurement = dataclasses.replace(measured, noisy_pairs=pairs)
                else:
                    synth.measurement = measured
                synth.fit_model()
                if variant == "measured":
                    synthetic = sample_table(synth.model, synth.schema, len(train), seed)
                else:
                    if variant == "triples exact":  # a tenth of the pair noise: where the tilt stops, not noise
                        std, targets = measured.pair_noise_std() / 10, exact
                    else:
                        std = measured.pair_noise_std() * scale
                        targets = exact + noise.normal(0.0, std, exact.shape)
                    synthetic = tilted_to_triples(synth, targets, std, target, others, len(train), seed)
                rows[variant].append({**scores(train, synthetic, synth.schema),
                                      "tstr": best_tstr(train, test, synthetic, synth.schema)})
                print(f"  {name} seed {seed} {variant}: tstr {rows[variant][-1]['tstr']:.4f}", flush=True)
        for variant in VARIANTS:
            print_means(name, variant, rows[variant], KEYS)


if __name__ == "__main__":
    main()
