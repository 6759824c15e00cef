"""DP bounds for ``bounds: auto`` columns (docs/decisions/0018): how much of each column the product's estimator
clips and how wide its bounds are, against a single fine histogram cut at a per-bucket threshold.

Every shared dataset whose schema has auto columns, plus adult and california_housing with every numeric column
treated as auto (their bounds are public; here they are a check on known columns). Replace-one, the bounds share
of epsilon = 1 at delta = 1e-9, several independent noise draws. Prints per dataset the mean and worst share of
rows outside the bounds and the median and worst width relative to the real 0.5%-99.5% range.

    .venv/bin/python -m bench.experiments.dp_bounds --shares 0.05 0.1 --draws 3
"""

from __future__ import annotations

import argparse
import dataclasses
import math

import numpy as np
import pandas as pd

from bench.common import dataset_file
from splice_assets import load_schema
from splice_assets.datasets import schema_path
from splice_assets.private import bounds
from splice_assets.private.mechanism import gaussian_noise, split_privacy
from splice_assets.private.validation import parse_numbers, read_table

DATASETS = ("shuttle", "pol", "house_16h", "churn", "adult", "california_housing")
DELTA = 1e-9


def single_fine_histogram(raw: pd.DataFrame, columns: list, multiplier: float) -> dict[str, tuple[float, float]]:
    """The first design: one 20-per-decade histogram per column; the outermost buckets above 5 sigma."""
    grid = bounds.LogGrid(20)
    sigma = multiplier * math.sqrt(2 * len(columns))
    out = {}
    for spec in columns:
        values = parse_numbers(raw[spec.name].reset_index(drop=True))
        index = grid.bucket_of(values)
        noisy = gaussian_noise(np.bincount(index[index >= 0], minlength=grid.size).astype(float), sigma)
        above = np.flatnonzero(noisy > 5 * sigma)
        above = above if above.size else np.array([int(np.argmax(noisy))])
        out[spec.name] = (float(grid.lower[above[0]]), float(grid.upper[above[-1]]))
    return out


def score(raw: pd.DataFrame, estimates: dict[str, tuple[float, float]]) -> tuple[float, float, float, float]:
    clipped, widths = [], []
    for name, (lo, hi) in estimates.items():
        values = pd.Series(parse_numbers(raw[name].reset_index(drop=True))).dropna()
        q_lo, q_hi = values.quantile([0.005, 0.995])
        clipped.append(float(((values < lo) | (values > hi)).mean()))
        widths.append((hi - lo) / max(q_hi - q_lo, 1e-9))
    return float(np.mean(clipped)), float(np.max(clipped)), float(np.median(widths)), float(np.max(widths))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="*", default=list(DATASETS))
    ap.add_argument("--shares", nargs="*", type=float, default=[0.05])
    ap.add_argument("--draws", type=int, default=3)
    args = ap.parse_args()
    print("dataset     cols share  estimator  clip mean/max   width median/max")
    for name in args.datasets:
        data = dataset_file(name)
        if not data.is_file():
            print(f"{name}: not found, skipped")
            continue
        schema = load_schema(schema_path(name))
        if not bounds.auto_columns(schema):
            schema = dataclasses.replace(schema, columns=tuple(
                dataclasses.replace(c, bounds=None, bounds_auto=True) if c.is_numeric else c for c in schema.columns
            ))
        raw = read_table(data)
        columns = bounds.auto_columns(schema)
        for share in args.shares:
            _, multiplier = split_privacy(1.0, DELTA, share)
            runs = {"product": [], "fine only": []}
            for _ in range(args.draws):
                _, estimate = bounds.estimate_bounds(raw, schema, multiplier, DELTA, None, "bench", "replace-one")
                runs["product"].append(score(raw, estimate.columns))
                runs["fine only"].append(score(raw, single_fine_histogram(raw, columns, multiplier)))
            for estimator, scores in runs.items():
                m = np.mean(scores, axis=0)
                print(f"{name:11s} {len(columns):4d} {share:5.2f}  {estimator:9s}  {m[0]:.3f} / {m[1]:.3f}   "
                      f"{m[2]:5.1f} / {m[3]:5.1f}")


if __name__ == "__main__":
    main()
