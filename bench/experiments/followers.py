"""Couplings over whole columns (``chain.choose_followers``), paired on one model.

Per dataset and seed: one add-remove release at ε = 1 on the bench's train split with the product defaults, then
the same model sampled with its followers (the default) and without (every follower back to a within-bin
coupling), under the same public seed. Prints each coupling with its correlation and whether it follows; then,
per numeric pair with real |Spearman| >= 0.8, the real and both synthetic Spearman correlations and ``far``: the
share of rows whose two values sit two or more deciles apart (deciles of the real columns; counted along the
anti-diagonal for a negative pair), the cloud off a near-identical pair's diagonal that a scatter plot shows.
Means over seeds follow.

    .venv/bin/python -m bench.experiments.followers --datasets california_housing magic house_16h --seeds 0 1
"""

from __future__ import annotations

import argparse
import itertools
from dataclasses import replace

import numpy as np
import pandas as pd

from bench.run import prepared_datasets
from splice_assets import Synthesizer
from splice_assets.fine_cells import fine_cells
from splice_assets.sampling import sample_table


def far_share(train: pd.DataFrame, rows: pd.DataFrame, a: str, b: str, sign: float) -> float:
    """Share of ``rows`` (both present) whose values of a and b sit two or more real deciles apart (b's deciles
    counted from the top when ``sign`` < 0: a negative pair's diagonal runs the other way)."""
    present = rows[[a, b]].apply(pd.to_numeric, errors="coerce").dropna()
    deciles = {c: np.quantile(pd.to_numeric(train[c], errors="coerce").dropna(), np.linspace(0.1, 0.9, 9))
               for c in (a, b)}
    rank_a, rank_b = (np.searchsorted(deciles[c], present[c].to_numpy(), side="right") for c in (a, b))
    if sign < 0:
        rank_b = 9 - rank_b
    return float(np.mean(np.abs(rank_a - rank_b) >= 2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["california_housing", "magic", "house_16h"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    args = parser.parse_args()
    for name, prepared in prepared_datasets(args.datasets):
        numeric = [spec.name for spec in prepared.schema.columns if spec.is_numeric]
        real = prepared.train[numeric].apply(pd.to_numeric, errors="coerce")
        real_rho = real.corr("spearman")
        strong = [(a, b) for a, b in itertools.combinations(numeric, 2) if abs(real_rho.loc[a, b]) >= 0.8]
        lines: dict[tuple[str, str], list[tuple[float, ...]]] = {pair: [] for pair in strong}
        for seed in args.seeds:
            synth = Synthesizer(prepared.schema, 1.0, 1e-9, "add-remove", seed).fit(prepared.train, ledger=None)
            model = synth.model
            assert model is not None
            if model.fine is None:
                continue
            cells = fine_cells(synth.schema, model.fine.fine_bins)
            names = [model.layout.coordinates[c.coordinate].column for c in cells]
            for follower, leader, r in model.fine.couplings:
                state = "follows" if follower in model.fine.followers else "inside bins only"
                print(f"{name} seed {seed}: {names[follower]} ~ {names[leader]} r {r:+.3f}: {state}", flush=True)
            variants = {"followers": model, "none": replace(model, fine=replace(model.fine, followers=()))}
            rows = {key: sample_table(m, synth.schema, len(prepared.train), seed) for key, m in variants.items()}
            for a, b in strong:
                sign = float(np.sign(real_rho.loc[a, b]))
                values = [real_rho.loc[a, b], far_share(prepared.train, prepared.train, a, b, sign)]
                for key in ("none", "followers"):
                    fake = rows[key][[a, b]].apply(pd.to_numeric, errors="coerce")
                    values += [fake.corr("spearman").iloc[0, 1], far_share(prepared.train, rows[key], a, b, sign)]
                lines[(a, b)].append(tuple(values))
        print(f"\n{name}: means over seeds | real Spearman, far | without followers | with followers")
        for (a, b), values in lines.items():
            if values:
                m = np.mean(values, axis=0)
                print(f"  {a} ~ {b}: {m[0]:.3f} {m[1]:.3f} | {m[2]:.3f} {m[3]:.3f} | {m[4]:.3f} {m[5]:.3f}")


if __name__ == "__main__":
    main()
