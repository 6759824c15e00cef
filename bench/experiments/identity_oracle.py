"""What declaring shuttle's near-identities would buy: an upper bound from the real residuals.

shuttle's sensors obey a7 = a3 - a1, a8 = a3 - a5 and a9 = a1 - a5 within 2 units in 99.5-100% of the rows
(docs/decisions/0041). One add-remove release at ε = 1 per seed, then the same rows with each of the three columns
recomputed from its inputs plus a residual drawn from the real residuals (clipped to ±2; an oracle no release
could use) and clipped to the column's bounds. Prints the share of rows that keep each identity within 2 units and
the off-grid metrics, release → derived. Internal: it reads the real residuals (bench data only).

    .venv/bin/python -m bench.experiments.identity_oracle --seeds 0 1
"""

from __future__ import annotations

import argparse

import numpy as np

from bench.experiments.helpers import fitted_sample
from bench.offgrid import offgrid_metrics
from bench.run import prepare

IDENTITIES = {"a7": ("a3", "a1"), "a8": ("a3", "a5"), "a9": ("a1", "a5")}


def held(table) -> str:
    """The share of rows within 2 units of each identity."""
    return ", ".join(f"{c} {np.mean(np.abs(table[c] - (table[a] - table[b])) <= 2):.3f}"
                     for c, (a, b) in IDENTITIES.items())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    args = parser.parse_args()
    prepared = prepare("shuttle")
    if prepared is None:
        return
    schema, train = prepared.schema, prepared.train
    bounds = {spec.name: spec.bounds for spec in schema.columns}
    print(f"real: {held(train)}")
    for seed in args.seeds:
        _, synthetic = fitted_sample(schema, train, seed)
        rng = np.random.default_rng(seed)
        derived = synthetic.copy()
        for c, (a, b) in IDENTITIES.items():
            residual = (train[c] - (train[a] - train[b])).clip(-2, 2).to_numpy()
            lo, hi = bounds[c]
            derived[c] = np.clip(derived[a] - derived[b] + rng.choice(residual, len(derived)), lo, hi)
        before, after = offgrid_metrics(train, synthetic, schema, 0), offgrid_metrics(train, derived, schema, 0)
        print(f"seed {seed} release: {held(synthetic)}; derived: {held(derived)}")
        print("  " + ", ".join(f"{k} {before[k]:.4f} -> {after[k]:.4f}" for k in ("qtvd1", "qtvd2", "qtvd3",
                                                                                  "range_mae")))


if __name__ == "__main__":
    main()
