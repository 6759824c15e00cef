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

from bench.experiments.helpers import best_tstr, measured_seed, print_means, scores
from bench.run import prepared_datasets
from splice_assets import MeasurementSettings, Synthesizer
from splice_assets.layout import layout_for, marginal_cells
from splice_assets.postprocess.tilt import cell_log_weights, fit_tilt, systematic_resample, table_cells, table_starts
from splice_assets.private.measuring import exact_statistics
from splice_assets.private.statistics import table_counts
from splice_assets.sampling import _refined_table, integer_coordinates, sample_cube, sample_table

#: The design this diagnostic measured: without the product's 3-way tables (0049 adopted them after it).
PAIRS_ONLY = MeasurementSettings(target_triples=0)
KEYS = ("tstr", "qtvd1", "qtvd2", "qtvd3", "range_mae", "tvd2")
VARIANTS = ("measured", "triples, equal weight", "triples exact")
POOL_FACTOR = 8


def tilted_to_triples(synth: Synthesizer, targets: np.ndarray, std: float, triples: list[tuple[int, int, int]],
                      n_rows: int, seed: int):
    """Rows of the fitted model resampled by a tilt toward the triples ``targets`` (frequencies, noise ``std``)
    that holds the noisy 1-way tables."""
    model, layout = synth.model, layout_for(synth.schema)
    bins = synth.measurement.numeric_bins
    integer_bounds = integer_coordinates(synth.schema)
    pools = [sample_cube(model, POOL_FACTOR * n_rows, seed + 1000 * k, True, integer_bounds) for k in (1, 2)]
    cells = [table_cells(pool, layout, bins, (), "C", True, triples) for pool in pools]
    potentials, *_ = fit_tilt(cells[0], cells[1], synth.measurement.noisy_marginals,
                              synth.measurement.marginal_cell_noise_stds(), targets, std,
                              starts=table_starts(layout, bins, (), triples))
    log_w = cell_log_weights(potentials, marginal_cells(pools[0], layout, bins), layout, bins, (), triples)
    picks = systematic_resample(log_w, n_rows, np.random.default_rng(seed))
    return _refined_table(model, synth.schema, pools[0][picks], seed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["nursery", "shuttle"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    args = parser.parse_args()
    print(" | ".join(("dataset", "variant", *KEYS)), flush=True)
    for name, prepared in prepared_datasets(args.datasets):
        train, test = prepared.train, prepared.test
        rows: dict[str, list[dict[str, float]]] = {v: [] for v in VARIANTS}
        for seed in args.seeds:
            synth, x, measured, plan = measured_seed(prepared.schema, train, seed, PAIRS_ONLY)
            layout = layout_for(synth.schema)
            columns = [c.column for c in layout.coordinates]
            target = columns.index(synth.schema.target)
            others = itertools.combinations([i for i in range(len(columns)) if i != target], 2)
            triples = [(target, a, b) for a, b in others]
            exact = table_counts(x, layout, (), measured.numeric_bins, marginals=False, triples=triples)[2].counts
            exact = exact / len(x)
            # Under add-remove the noisy cells are sums divided by the pooled noisy n: the exact ones the same way.
            exact_pairs = exact_statistics(x, plan, layout).pairs / measured.n
            scale = np.sqrt((len(measured.pairs) + len(triples)) / len(measured.pairs))
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
                    synthetic = tilted_to_triples(synth, targets, std, triples, len(train), seed)
                rows[variant].append({**scores(train, synthetic, synth.schema),
                                      "tstr": best_tstr(train, test, synthetic, synth.schema)})
                print(f"  {name} seed {seed} {variant}: tstr {rows[variant][-1]['tstr']:.4f}", flush=True)
        for variant in VARIANTS:
            print_means(name, variant, rows[variant], KEYS)


if __name__ == "__main__":
    main()
