"""How often the DP bounds of ``bounds: auto`` columns clip real rows, and how much wider than the data they are
(docs/decisions/0033, rejected). For each shared dataset whose schema has auto columns, ``--draws`` fresh estimates at
ε = 1 (the default share, ``--relation``) on the bench's train split; per column and draw, the share of rows
outside the resolved bounds and the resolved range over the real one. Prints the share of column-draws that clip
more than 2% and 5% of the rows, and the median and 90th percentile of the width ratio. Internal: it reads real
rows (bench data only). Run it from two checkouts to compare estimators.

    .venv/bin/python -m bench.experiments.dp_bounds_clipping --datasets pol churn house_16h shuttle --draws 20
"""

from __future__ import annotations

import argparse

import numpy as np

from bench.common import DATASETS_DIR, split_train_test
from bench.run import DELTA
from splice_assets import load_schema
from splice_assets.datasets import schema_path
from splice_assets.private.bounds import DEFAULT_BOUNDS_SHARE, auto_columns, estimate_bounds
from splice_assets.private.mechanism import split_privacy
from splice_assets.private.validation import parse_numbers, read_table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["pol", "churn", "house_16h", "shuttle"])
    parser.add_argument("--draws", type=int, default=20)
    parser.add_argument("--relation", default="add-remove")
    args = parser.parse_args()
    _, multiplier = split_privacy(1.0, DELTA, DEFAULT_BOUNDS_SHARE)
    print("dataset | auto columns | clip > 2% | clip > 5% | width ratio median | width ratio p90")
    for name in args.datasets:
        schema = load_schema(schema_path(name))
        columns = [c.name for c in auto_columns(schema)]
        if not columns:
            continue
        train, _ = split_train_test(read_table(DATASETS_DIR / name / "data.csv.gz"))
        real = {c: parse_numbers(train[c].reset_index(drop=True)) for c in columns}
        clipped, ratios = [], []
        for _ in range(args.draws):
            resolved = estimate_bounds(train, schema, multiplier, DELTA, None, "bench", args.relation)[0]
            for column in columns:
                x = real[column][np.isfinite(real[column])]
                lo, hi = resolved.column(column).bounds
                clipped.append(float(((x < lo) | (x > hi)).mean()))
                ratios.append((hi - lo) / max(float(x.max() - x.min()), 1e-9))
        clipped_arr, ratio_arr = np.array(clipped), np.array(ratios)
        print(f"{name} | {len(columns)} | {np.mean(clipped_arr > 0.02):.1%} | {np.mean(clipped_arr > 0.05):.1%} | "
              f"{np.median(ratio_arr):.2f} | {np.quantile(ratio_arr, 0.9):.2f}", flush=True)


if __name__ == "__main__":
    main()
