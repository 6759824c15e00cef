"""A proportion's simple fractions as ``values: auto`` candidates, on and off (decision 0046).

For each seed and variant: the DP estimate of the dataset's auto bounds and values (replace-one, ε = 1, as the bench
resolves schemas; its own draw), then an add-remove release at ε = 1 on the train split, scored against it. "off"
sets ``bounds.MAX_DENOMINATOR`` to 1, so a proportion's candidates are its bounds and 0 as before; "on" keeps the
default. Prints the mean scores per variant, the values found in the shown columns, and each shown column's five
most frequent real values with their real and synthetic shares (exact values, the way a user would look).

    .venv/bin/python -m bench.experiments.fraction_values house_16h --seeds 0 1 --show h40p4 h18pa
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from bench.common import dataset_file, split_train_test
from bench.experiments.helpers import best_tstr, fitted_sample, print_means, scores
from bench.run import dp_estimate
from splice_assets import load_schema
from splice_assets.datasets import schema_path
from splice_assets.layout import FLOAT32_TOLERANCE
from splice_assets.private import bounds
from splice_assets.private.validation import read_table, validate

KEYS = ("qtvd1", "qtvd2", "qtvd3", "range_mae", "tvd1", "tvd2", "tstr")


def shares_at(values: pd.Series, points: np.ndarray) -> np.ndarray:
    """Share of ``values`` at each point, at float32 precision (the data's own; ``layout.FLOAT32_TOLERANCE``)."""
    x = pd.to_numeric(values, errors="coerce").to_numpy(dtype=float)
    return np.array([np.mean(np.abs(x - p) <= FLOAT32_TOLERANCE * abs(p)) for p in points])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--show", nargs="*", default=[])
    args = parser.parse_args()
    raw = read_table(dataset_file(args.dataset))
    repository = load_schema(schema_path(args.dataset))
    train, test = split_train_test(validate(raw, dp_estimate(raw, repository)[0]).table)
    reference = dp_estimate(train, repository)[0]
    print(" | ".join(("dataset", "variant", *KEYS)), flush=True)
    default = bounds.MAX_DENOMINATOR
    for label, denominator in (("off", 1), ("on", default)):
        bounds.MAX_DENOMINATOR = denominator
        rows: list[dict[str, float]] = []
        looks: dict[str, list[tuple]] = {c: [] for c in args.show}
        for seed in args.seeds:
            schema = dp_estimate(train, repository)[0]
            _, synthetic = fitted_sample(schema, train, seed)
            rows.append({**scores(train, synthetic, reference), "tstr": best_tstr(train, test, synthetic, reference)})
            for column in args.show:
                points = train[column].value_counts().index[:5].to_numpy(dtype=float)
                looks[column].append((schema.column(column).values, points, shares_at(train[column], points),
                                      shares_at(synthetic[column], points)))
        print_means(args.dataset, label, rows, KEYS)
        for column, seen in looks.items():
            for found, points, real, drawn in seen:
                shown = ", ".join(f"{p:.4g}: {r:.1%} / {s:.1%}" for p, r, s in zip(points, real, drawn))
                print(f"  {column} found {[round(v, 4) for v in found]}; real / synthetic share at {shown}", flush=True)
    bounds.MAX_DENOMINATOR = default


if __name__ == "__main__":
    main()
