"""Schema variants of one dataset, compared as a release would see them: for each schema file and seed, the DP
estimate of its auto bounds and values (replace-one, ε = 1, the default share; a fresh draw per seed), then an
add-remove release at ε = 1 on the train split. Every variant gets the same train rows (the dataset's repository
schema cleans them and the bench's split takes them) and is scored against them, so a variant's own clipping is
counted as error. Prints the mean over seeds of the off-grid metrics, the on-grid 1-/2-way TVD and ``unseen``: the
share of an integer column's synthetic values that no real row holds (an even-only sensor's odd values), averaged
over the integer columns.

    git show b23593f:schemas/churn.yaml > churn-before.yaml
    .venv/bin/python -m bench.experiments.schema_variants churn churn-before.yaml schemas/churn.yaml --seeds 0 1 2
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from bench.common import DATASETS_DIR, split_train_test
from bench.experiments.pair_selection import fitted_sample, print_means, scores
from bench.run import dp_estimate
from splice_assets import load_schema
from splice_assets.datasets import schema_path
from splice_assets.private.bounds import needs_estimate
from splice_assets.private.validation import read_table, validate

KEYS = ("qtvd1", "qtvd2", "qtvd3", "range_mae", "missing_values", "tvd1", "tvd2", "unseen")


def unseen_share(train: pd.DataFrame, synthetic: pd.DataFrame, schema) -> float:
    """Mean over the integer columns of the share of synthetic values that no real row holds."""
    shares = [float((~synthetic[c.name].dropna().isin(set(train[c.name].dropna()))).mean())
              for c in schema.columns if c.kind == "integer"]
    return float(np.mean(shares)) if shares else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset")
    parser.add_argument("schemas", nargs="+", help="Schema files, one per variant.")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--show", nargs="*", default=[], help="Columns to describe: distinct values, unseen share.")
    args = parser.parse_args()
    raw = read_table(DATASETS_DIR / args.dataset / "data.csv.gz")
    reference = load_schema(schema_path(args.dataset))
    if needs_estimate(reference):  # the reference rows: cleaned with the repository schema's bounds, once
        reference = dp_estimate(raw, reference)[0]
    train, _ = split_train_test(validate(raw, reference).table)
    print(" | ".join(("dataset", "schema", *KEYS)), flush=True)
    for path in args.schemas:
        rows, shown = [], []
        for seed in args.seeds:
            schema = load_schema(path)
            if needs_estimate(schema):
                schema = dp_estimate(train, schema)[0]
            synthetic = fitted_sample(schema, train, seed)[1]
            rows.append({**scores(train, synthetic, reference), "unseen": unseen_share(train, synthetic, reference)})
            shown.append([(synthetic[c].nunique(), (~synthetic[c].isin(set(train[c]))).mean()) for c in args.show])
        print_means(args.dataset, path, rows, KEYS)
        for i, column in enumerate(args.show):
            print(f"  {column}: {train[column].nunique()} distinct real values; synthetic "
                  f"{np.mean([s[i][0] for s in shown]):.0f} distinct, {np.mean([s[i][1] for s in shown]):.1%} unseen",
                  flush=True)


if __name__ == "__main__":
    main()
