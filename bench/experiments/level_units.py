"""Level units, paired (decisions 0064, 0066): per seed, the product's measurement with ``level_units`` on and off
from the same standard normal draws (``bench.common.seeded_noise``; not releases). Prints per dataset and
variant the means over seeds of ``refit_variants``' scores, then the off-grid 1-way TVD of each column whose coarse
table counts as more than one unit (``measurement.level_units``) and the mean over the other columns, and per seed
the q 2-way TVD, the tilt's final χ² per cell and TSTR. ``--blind`` adds a diagnostic variant: the statistics
measured with the option on, post-processed as if every table had one unit. ε = 1, add-remove. (0064 and 0065
measured the units paid from the moments' share, and through a patched ``measuring.one_way_share`` from the 1-way
share, as the product now does: their commits reproduce them.)

    .venv/bin/python -m bench.experiments.level_units --datasets coil2000 churn adult fars --seeds 0 1 2 3
"""

from __future__ import annotations

import argparse
from dataclasses import replace

import numpy as np

from bench.common import seeded_noise
from bench.experiments.field_on_off import release_scores
from bench.experiments.helpers import print_means
from bench.experiments.refit_variants import KEYS
from bench.offgrid import column_tvd
from bench.run import prepared_datasets
from splice_assets import MeasurementSettings, Synthesizer
from splice_assets.layout import DEFAULT_NUMERIC_BINS, layout_for, marginal_sizes
from splice_assets.measurement import level_units
from splice_assets.sampling import sample_table


def many_level_columns(schema) -> list[str]:
    """The columns whose coarse table counts as more than one unit."""
    layout = layout_for(schema)
    sizes = marginal_sizes(layout, DEFAULT_NUMERIC_BINS)
    return [c.column for c, units in zip(layout.coordinates, level_units(sizes, DEFAULT_NUMERIC_BINS)) if units > 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["coil2000", "churn", "adult", "fars"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3])
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--blind", action="store_true", help="also post-process the units' statistics at one unit")
    compare(parser.parse_args())


def compare(args: argparse.Namespace) -> None:
    print(" | ".join(("dataset", "variant", *KEYS)), flush=True)
    for name, prepared in prepared_datasets(args.datasets):
        wide = many_level_columns(prepared.schema)
        columns: dict[str, list[dict[str, float]]] = {}
        for variant in ("level_units=true", "level_units=false") + (("blind",) if args.blind else ()):
            rows, tvds = [], []
            for seed in args.seeds:
                settings = replace(MeasurementSettings(), level_units=variant != "level_units=false")
                synth = Synthesizer(prepared.schema, args.epsilon, 1e-9, "add-remove", seed, settings)
                with seeded_noise(seed):
                    synth.fit(prepared.train, ledger=None)
                if variant == "blind":
                    assert synth.measurement is not None
                    synth.measurement = replace(synth.measurement, marginal_units=())
                    synth.fit_model()
                synthetic = sample_table(synth.model, synth.schema, len(prepared.train), seed)
                rows.append(release_scores(prepared, synth, seed, synthetic))
                tvds.append({spec.name: column_tvd(prepared.train[spec.name], synthetic[spec.name], spec)
                             for spec in prepared.schema.columns})
            print_means(name, variant, rows, KEYS)
            print(f"{name} | {variant} | per seed: q 2-way, tilt chi2, TSTR "
                  + "; ".join(f"{row['qtvd2']:.4f} {row['chi2']:.3f} {row['tstr']:.3f}" for row in rows), flush=True)
            columns[variant] = tvds
        for variant, tvds in columns.items():
            others = [np.mean([t[c] for c in t if c not in wide]) for t in tvds]
            print(f"{name} | {variant} | 1-way TVD "
                  + ", ".join(f"{c} {np.mean([t[c] for t in tvds]):.4f}" for c in wide)
                  + f", the other columns {np.mean(others):.4f}", flush=True)


if __name__ == "__main__":
    main()
