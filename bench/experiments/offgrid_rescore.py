"""Score the synthetic tables a bench run left in bench/results/raw/ with the off-grid metrics, without rerunning
any generator; prints one row per (dataset, method, seed) plus the non-DP references, and the worst columns.

    .venv/bin/python -m bench.experiments.offgrid_rescore --datasets adult california_housing --epsilon 1
"""

from __future__ import annotations

import argparse

from bench.common import RAW_DIR
from bench.offgrid import bootstrap, column_tvd, offgrid_metrics
from splice_assets import load_schema
from splice_assets.datasets import schema_path
from splice_assets.evaluation.metrics import independent_marginals_baseline
from splice_assets.private.validation import read_table, validate

KEYS = ("qtvd1", "qtvd2", "qtvd3", "range_mae", "missing_values", "det_auc_max", "det_auc_col")


def worst_columns(train, synthetic, schema, top: int = 3) -> str:
    scores = []
    for spec in schema.columns:
        scores.append((column_tvd(train[spec.name], synthetic[spec.name], spec), spec.name))
    return ", ".join(f"{name} {tvd:.3f}" for tvd, name in sorted(scores, reverse=True)[:top])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["adult", "california_housing"])
    parser.add_argument("--epsilon", type=float, default=1.0)
    args = parser.parse_args()
    print(" | ".join(("dataset", "method", *KEYS, "worst 1-way columns")))
    for name in args.datasets:
        schema = load_schema(schema_path(name))
        train = validate(read_table(RAW_DIR / name / "train.csv"), schema).table
        tables = {"ref_bootstrap": bootstrap(train), "ref_independent": independent_marginals_baseline(
            train, schema, len(train), 0)}
        for folder in sorted((RAW_DIR / name).glob(f"*_eps{args.epsilon:g}_seed*")):
            if (folder / "synthetic.csv").is_file():
                tables[folder.name] = validate(read_table(folder / "synthetic.csv"), schema).table
        for label, table in tables.items():
            m = offgrid_metrics(train, table, schema)
            values = [f"{m[k]:.4f}" if isinstance(m[k], float) else str(m[k]) for k in KEYS]
            print(" | ".join((name, label, *values, worst_columns(train, table, schema))), flush=True)


if __name__ == "__main__":
    main()
