"""Look at synthetic rows the way a user would, column by column, against the rows the generator was given.

One add-remove release at the given ε on a shared dataset's train split (the bench's split and schema), then per
column: its off-grid 1-way TVD (bench/offgrid.py's cells), the distinct values, the most frequent value and its
share, the share of values with more decimals than the real column ever has, the 1/50/99% quantiles, real
beside synthetic, and spikes (synthetic values holding >= 0.2% of the rows and 3x their real share). Rows are
sorted worst first. Then the numeric pairs with real |Spearman| >= 0.8, real beside synthetic (near-identical
columns should stay so). Internal: it prints statistics of real rows (bench data only).

    .venv/bin/python -m bench.look churn pol --epsilon 1 --seed 0
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from bench.experiments.helpers import fitted_sample
from bench.offgrid import column_tvd, offgrid_metrics, spike_values
from bench.run import prepare
from splice_assets.private.bounds import decimals_needed


def describe(values: pd.Series, places: int | None) -> tuple[str, int]:
    """A short text of one column's values, and the most decimals any of them needs."""
    x = pd.to_numeric(values, errors="coerce").dropna().to_numpy(dtype=float)
    if not len(x):
        return "all missing", 0
    top = pd.Series(x).value_counts(normalize=True)
    q = np.quantile(x, [0.01, 0.5, 0.99])
    dec = decimals_needed(x)
    finer = f" finer {np.mean(dec > places):.0%}" if places is not None else ""
    text = (f"{len(top):>6} distinct, top {top.index[0]:g} {top.iloc[0]:.1%}, q01/50/99 {q[0]:.4g} / {q[1]:.4g} / "
            f"{q[2]:.4g}{finer}")
    return text, int(dec.max())


def look(name: str, epsilon: float, seed: int, top: int) -> None:
    prepared = prepare(name)
    if prepared is None:
        return
    schema, train = prepared.schema, prepared.train
    _, synthetic = fitted_sample(schema, train, seed, epsilon=epsilon)
    metrics = offgrid_metrics(train, synthetic, schema, 0)
    print(f"\n## {name}: qtvd1 {metrics['qtvd1']:.4f}, qtvd2 {metrics['qtvd2']:.4f}, range {metrics['range_mae']:.4f}, "
          f"missing {metrics['missing_values']}")
    rows = []
    for spec in schema.columns:
        tvd = column_tvd(train[spec.name], synthetic[spec.name], spec)
        if spec.is_numeric:
            real_text, places = describe(train[spec.name], None)
            synth_text, _ = describe(synthetic[spec.name], places)
            spikes = spike_values(train[spec.name], synthetic[spec.name]).head(3)
            if len(spikes):
                synth_text += ", spikes " + ", ".join(f"{v:g} ({row.synthetic:.2%} vs {row.real:.2%})"
                                                      for v, row in spikes.iterrows())
            if spec.kind == "integer":
                shares = train[spec.name].value_counts(normalize=True)
                lost = shares[(shares >= 0.01) & ~shares.index.isin(synthetic[spec.name].unique())]
                if len(lost):
                    synth_text += ", lost " + ", ".join(f"{v:g} ({s:.1%})" for v, s in lost.items())
        else:
            shares = train[spec.name].value_counts(normalize=True, dropna=False)
            shares = shares[shares > 0]
            synth_shares = synthetic[spec.name].value_counts(normalize=True, dropna=False)
            synth_shares = synth_shares[synth_shares > 0]  # a categorical dtype counts its absent categories as 0
            lost = [k for k in shares.index if k not in synth_shares.index]
            real_text = f"{len(shares):>6} categories, top {shares.index[0]} {shares.iloc[0]:.1%}"
            synth_text = f"{len(synth_shares):>6} categories, top {synth_shares.index[0]} {synth_shares.iloc[0]:.1%}"
            if lost:
                synth_text += f", lost {len(lost)} ({shares[shares.index.isin(lost)].sum():.1%} of rows)"
        rows.append((tvd, spec.name, spec.kind, real_text, synth_text))
    for tvd, column, kind, real_text, synth_text in sorted(rows, reverse=True)[:top]:
        print(f"{column} ({kind}) TVD {tvd:.3f}\n    real  {real_text}\n    synth {synth_text}")
    for a, b, real_rho, synth_rho in strong_pairs(train, synthetic, [s.name for s in schema.columns if s.is_numeric]):
        print(f"pair {a} ~ {b}: Spearman real {real_rho:.3f}, synth {synth_rho:.3f}")


def strong_pairs(real: pd.DataFrame, synthetic: pd.DataFrame, numeric: list[str], least: float = 0.8):
    """(a, b, real Spearman, synthetic Spearman) of the numeric pairs whose real |Spearman| is at least ``least``."""
    if len(numeric) < 2:
        return []
    rho = [t[numeric].apply(pd.to_numeric, errors="coerce").corr("spearman") for t in (real, synthetic)]
    return [(a, b, rho[0].loc[a, b], rho[1].loc[a, b]) for i, a in enumerate(numeric) for b in numeric[i + 1:]
            if abs(rho[0].loc[a, b]) >= least]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("datasets", nargs="+")
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--top", type=int, default=12, help="Columns shown per dataset, worst first.")
    args = parser.parse_args()
    for name in args.datasets:
        look(name, args.epsilon, args.seed, args.top)


if __name__ == "__main__":
    main()
