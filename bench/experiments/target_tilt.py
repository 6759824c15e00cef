"""The target's 3-way tables in the product (decision 0049): measured or not, and the target tilt's stopping χ².

Per dataset and seed: two add-remove releases at ε = 1 on the bench's train split, one without the target's 3-way
tables (``target_triples=0``) and one with the default family, then refits of the second measurement per target
tilt χ² (post-processing, paired on that measurement). A variant is ``triples/tilt_chi2/target_tilt_chi2``.
Prints each variant's scores per seed and their means: TSTR (the best learner's AUC or R² on the real test split),
the off-grid scores against the train split and the on-grid 2-way TVD.

    .venv/bin/python -m bench.experiments.target_tilt --datasets nursery churn adult --seeds 0 1
"""

from __future__ import annotations

import argparse

from bench.experiments.helpers import best_tstr, print_means, scores
from bench.run import prepared_datasets
from splice_assets import MeasurementSettings, Synthesizer
from splice_assets.experimental import fit_variant
from splice_assets.layout import DEFAULT_TARGET_TRIPLES
from splice_assets.sampling import sample_table

KEYS = ("tstr", "qtvd1", "qtvd2", "qtvd3", "range_mae", "tvd2")
#: (target_triples, tilt_chi2, target_tilt_chi2)
VARIANTS = ((0, 1.0, 0.5), (DEFAULT_TARGET_TRIPLES, 1.0, 1.0), (DEFAULT_TARGET_TRIPLES, 1.0, 0.5))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["nursery", "churn", "adult"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    args = parser.parse_args()
    print(" | ".join(("dataset", "variant", *KEYS)), flush=True)
    for name, prepared in prepared_datasets(args.datasets):
        rows: dict[tuple[int, float, float], list[dict[str, float]]] = {v: [] for v in VARIANTS}
        for seed in args.seeds:
            measured: dict[int, Synthesizer] = {}
            for cap, chi2, target_chi2 in VARIANTS:
                settings = MeasurementSettings(target_triples=cap)
                if cap not in measured:
                    measured[cap] = Synthesizer(prepared.schema, 1.0, 1e-9, "add-remove", seed, measurement=settings)
                    measured[cap].fit(prepared.train, ledger=None)
                synth = fit_variant(measured[cap], 1, tilt_chi2=chi2, target_tilt_chi2=target_chi2)
                model = synth.model
                assert model is not None
                synthetic = sample_table(model, synth.schema, len(prepared.train), seed)
                row = {**scores(prepared.train, synthetic, synth.schema),
                       "tstr": best_tstr(prepared.train, prepared.test, synthetic, synth.schema)}
                rows[(cap, chi2, target_chi2)].append(row)
                print(f"  {name} seed {seed} {cap}/{chi2}/{target_chi2}: "
                      + " ".join(f"{k} {row[k]:.4f}" for k in KEYS), flush=True)
        for variant, values in rows.items():
            print_means(name, "/".join(map(str, variant)), values, KEYS)


if __name__ == "__main__":
    main()
