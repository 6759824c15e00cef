"""Widening DP bounds over a run of decades beyond them (docs/decisions/0048, addendum): the clipping it saves
against the range it adds, on the same noisy histograms.

Per dataset whose repository schema has ``bounds: auto`` columns: the exact log-grid histograms of the whole table
(``bounds.exact_histograms``), then ``--draws`` draws of Gaussian noise at the sigma a release's estimate has
there (replace-one, the default share of epsilon = 1 at delta = 1e-9, all the schema's auto entries; seeded here,
a simulation). Each draw is read by the product's rule (``bounds.bounds_from_noisy``) and by the run rule at each
``--z``: beyond the outermost decade clearing ``COARSE_Z`` noise sd, the run of the next k decades on each side
(an integer column skipping the buckets that hold no integer) with the largest noisy count / (sigma sqrt(k)) widens
that end when the ratio exceeds z; the fine walk inward then runs as before. Prints per rule the mean share of a
column's rows outside its bounds, the share of (column, draw) clipping 2% or more, and the median and 90th
percentile of the bounds' width over the column's real range.

    .venv/bin/python -m bench.experiments.bounds_runs --datasets pol churn house_16h shuttle --z 2.5 3 3.5
"""

from __future__ import annotations

import argparse
import math

import numpy as np
import pandas as pd

from bench.common import DATASETS_DIR
from splice_assets import load_schema
from splice_assets.datasets import schema_path
from splice_assets.private import bounds
from splice_assets.private.mechanism import split_privacy
from splice_assets.private.validation import parse_numbers, read_table

DELTA = 1e-9


def widened_end(coarse: np.ndarray, start: int, step: int, sigma: float, integer: bool, z: float) -> int:
    """The coarse bucket an end moves to from ``start`` (``step`` +1 upward, -1 downward): the last of the run of
    decades beyond it with the largest noisy count / (sigma sqrt(k)), if that exceeds ``z``; else ``start``."""
    grid = bounds.COARSE
    run = []
    for bucket in range(start + step, grid.size if step > 0 else -1, step):
        magnitude = max(abs(grid.lower[bucket]), abs(grid.upper[bucket]))
        if bucket != grid.zero and not (integer and magnitude < 1.0):
            run.append(bucket)
    if not run:
        return start
    ratio = np.cumsum(coarse[run]) / (sigma * np.sqrt(np.arange(1, len(run) + 1)))
    best = int(np.argmax(ratio))
    return run[best] if ratio[best] > z else start


def run_rule(noisy: np.ndarray, sigma: float, integer: bool, z: float) -> tuple[float, float]:
    """``bounds_from_noisy`` with each end first widened over its most significant run (``widened_end``)."""
    coarse = noisy[: bounds.COARSE.size]
    above = np.flatnonzero(coarse > bounds.COARSE_Z * sigma)
    above = above if above.size else np.array([int(np.argmax(coarse))])
    widened = noisy.copy()
    for start, step in ((int(above[0]), -1), (int(above[-1]), 1)):
        end = widened_end(coarse, start, step, sigma, integer, z)
        widened[end] = max(widened[end], 1.0001 * bounds.COARSE_Z * sigma)  # the end now clears the coarse test
    return bounds.bounds_from_noisy(widened, sigma, integer)


def estimate_sigma(schema) -> float:
    """The noise sd per bucket of a release's estimate for ``schema`` (replace-one, default share, epsilon = 1)."""
    _, multiplier = split_privacy(1.0, DELTA, bounds.DEFAULT_BOUNDS_SHARE)
    return multiplier * bounds.schema_sensitivity(schema, "replace-one")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["pol", "churn", "house_16h", "shuttle"])
    parser.add_argument("--z", nargs="+", type=float, default=[2.5, 3.0, 3.5])
    parser.add_argument("--draws", type=int, default=200)
    args = parser.parse_args()
    rules = ["product", *(f"run z={z:g}" for z in args.z)]
    print("dataset | sigma | rule | mean clipped | clipping >= 2% | median width | 90% width")
    for name in args.datasets:
        schema = load_schema(schema_path(name))
        columns = [c for c in bounds.auto_columns(schema) if c.known_end == (None, None)]
        if not columns:
            continue
        raw = read_table(DATASETS_DIR / name / "data.csv.gz")
        exact = bounds.exact_histograms(raw, columns)
        sigma = estimate_sigma(schema)
        values = [pd.Series(parse_numbers(raw[c.name].reset_index(drop=True))).dropna().to_numpy() for c in columns]
        rng = np.random.default_rng(0)
        scores: dict[str, list[tuple[float, float]]] = {rule: [] for rule in rules}
        for _ in range(args.draws):
            noisy = exact + rng.normal(0.0, sigma, exact.shape)
            for i, spec in enumerate(columns):
                integer, x = spec.kind == "integer", values[i]
                span = max(float(x.max() - x.min()), 1e-9)
                for rule, z in zip(rules, [math.nan, *args.z]):
                    lo, hi = (bounds.bounds_from_noisy(noisy[i], sigma, integer) if rule == "product"
                              else run_rule(noisy[i], sigma, integer, z))
                    scores[rule].append((float(np.mean((x < lo) | (x > hi))), (hi - lo) / span))
        for rule in rules:
            clipped, width = np.array(scores[rule]).T
            print(f"{name} | {sigma:.0f} | {rule} | {clipped.mean():.4f} | {np.mean(clipped >= 0.02):.3f} | "
                  f"{np.median(width):.2f} | {np.quantile(width, 0.9):.1f}", flush=True)


if __name__ == "__main__":
    main()
