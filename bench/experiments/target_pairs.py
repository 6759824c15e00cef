"""Would the target's 2-way tables, measured with less noise, lift TSTR? A diagnostic, not a release (decision 0047).

Per dataset and seed: one add-remove measurement at ε = 1 on the bench's train split, then refits of the same
model on altered 2-way tables. The alteration rescales each table's noise, which needs the exact tables, so no
variant is differentially private; they bound what a different split of the pair budget could buy:

- ``measured``: the tables as measured;
- ``target share s``: the pair budget (in w², as Δ² counts it) split so that the tables with the target get the
  share s of it and the other tables the rest, with the same total: a target table's noise times
  sqrt(T / (s P)), another's times sqrt((P - T) / ((1 - s) P)), for T target tables of P;
- ``target exact``: the target's tables exact, the others as measured;
- ``all exact``: every 2-way table exact.

The fit reads the measured noise level for every table, so the rescaled variants are fitted as if their noise
were unchanged. Prints TSTR (the best learner's AUC or R² on the real test split) and the off-grid scores.

    .venv/bin/python -m bench.experiments.target_pairs --datasets pol nursery shuttle --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np

from bench.experiments.pair_selection import best_tstr, measured_seed, print_means, scores
from bench.run import prepared_datasets
from splice_assets import MeasurementSettings
from splice_assets.layout import layout_for
from splice_assets.private.measuring import exact_statistics
from splice_assets.sampling import sample_table

#: The measurement this record compared: without the target's 3-way tables (0049 came later).
PAIRS_ONLY = MeasurementSettings(target_triples=0)
KEYS = ("tstr", "qtvd1", "qtvd2", "range_mae", "tvd2")
VARIANTS = ("measured", "target share 0.3", "target share 0.5", "target exact", "all exact")


def altered_pairs(noisy: np.ndarray, exact: np.ndarray, sizes: np.ndarray, with_target: np.ndarray,
                  variant: str) -> np.ndarray:
    """The 2-way cells of one variant (see the module docstring); ``exact`` on the noisy cells' scale."""
    if variant == "measured":
        return noisy
    if variant == "all exact":
        return exact.copy()
    scale = np.ones(len(sizes))
    if variant == "target exact":
        scale[with_target] = 0.0
    else:
        share, tables, targets = float(variant.split()[-1]), len(sizes), int(with_target.sum())
        scale[with_target] = np.sqrt(targets / (share * tables))
        scale[~with_target] = np.sqrt((tables - targets) / ((1.0 - share) * tables))
    return exact + (noisy - exact) * np.repeat(scale, sizes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["pol", "nursery", "shuttle"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    args = parser.parse_args()
    print(" | ".join(("dataset", "variant", *KEYS)), flush=True)
    for name, prepared in prepared_datasets(args.datasets):
        train, test = prepared.train, prepared.test
        rows: dict[str, list[dict[str, float]]] = {v: [] for v in VARIANTS}
        for seed in args.seeds:
            synth, x, measured, plan = measured_seed(prepared.schema, train, seed, PAIRS_ONLY)
            layout = layout_for(synth.schema)
            # Under add-remove the noisy cells are sums divided by the pooled noisy n: the exact ones the same way.
            exact = exact_statistics(x, plan, layout).pairs / measured.n
            columns = [c.column for c in layout.coordinates]
            target = synth.schema.target
            with_target = np.array([target in (columns[a], columns[b]) for a, b in measured.pairs])
            sizes = np.asarray(measured.pair_sizes)
            for variant in VARIANTS:
                pairs = altered_pairs(measured.noisy_pairs, exact, sizes, with_target, variant)
                synth.measurement = dataclasses.replace(measured, noisy_pairs=pairs)
                synth.fit_model()
                assert synth.model is not None
                synthetic = sample_table(synth.model, synth.schema, len(train), seed)
                rows[variant].append({**scores(train, synthetic, synth.schema),
                                      "tstr": best_tstr(train, test, synthetic, synth.schema)})
        for variant in VARIANTS:
            print_means(name, variant, rows[variant], KEYS)


if __name__ == "__main__":
    main()
