"""The DP estimate's share of a release's privacy (``bounds_share``), measured on the release path: a larger share
means less noise on the bounds, values and decimals the estimate resolves, and more on the main measurement.

Per dataset, share and seed: one add-remove release at ε = 1 on the bench's train split as read, from the
repository schema with its ``auto`` entries (``Synthesizer.fit`` draws the estimate at the share, the measurement
takes the rest of the privacy), then the off-grid metrics against the train rows as read (the clipping a share
leaves is part of its error; ``clipped_scores`` and decision 0048), the largest share of a column's rows the
bounds clip, the median ratio of a column's bounds width to its real range, and TSTR on the test split. Prints
the means over seeds.

    .venv/bin/python -m bench.experiments.bounds_share --datasets churn pol shuttle house_16h \\
        --shares 0.05 0.1 0.2 --seeds 0 1 2 3
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from bench.common import DATASETS_DIR, split_train_test
from bench.experiments.pair_selection import best_tstr, print_means
from bench.offgrid import offgrid_metrics
from splice_assets import Synthesizer, load_schema
from splice_assets.datasets import schema_path
from splice_assets.private.validation import read_table, validate
from splice_assets.sampling import sample_table

KEYS = ("qtvd1", "qtvd2", "qtvd3", "range_mae", "missing_values", "clipped", "width", "tstr")


def release_scores(name: str, share: float, seed: int) -> dict[str, float]:
    """Scores of one release of ``name`` at ``bounds_share`` = ``share`` (see the module docstring)."""
    repository = load_schema(schema_path(name))
    raw = read_table(DATASETS_DIR / name / "data.csv.gz")
    as_read, _ = split_train_test(raw)
    for spec in repository.columns:
        if spec.is_numeric:
            as_read[spec.name] = pd.to_numeric(as_read[spec.name], errors="coerce")
    synth = Synthesizer(repository, 1.0, 1e-9, "add-remove", seed, bounds_share=share)
    synth.fit(as_read, ledger=None)
    assert synth.model is not None
    schema = synth.schema
    synthetic = sample_table(synth.model, schema, len(as_read), seed)
    scores = offgrid_metrics(as_read, synthetic, schema, 0)
    validated = validate(raw, schema)  # every row kept in its order, so the split takes the same rows
    train, test = split_train_test(validated.table)
    clipped = validated.report.shares("out_of_bounds_clipped")
    widths = []
    for spec in schema.columns:
        if spec.is_numeric and spec.bounds is not None:
            values = as_read[spec.name].dropna()
            span = float(values.max() - values.min())
            if span > 0:
                widths.append((spec.bounds[1] - spec.bounds[0]) / span)
    return {**{k: scores[k] for k in ("qtvd1", "qtvd2", "qtvd3", "range_mae", "missing_values")},
            "clipped": max(clipped.values(), default=0.0), "width": float(np.median(widths)) if widths else 1.0,
            "tstr": best_tstr(train, test, synthetic, schema)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["churn", "pol", "shuttle", "house_16h"])
    parser.add_argument("--shares", nargs="+", type=float, default=[0.05, 0.1, 0.2])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3])
    args = parser.parse_args()
    print(" | ".join(("dataset", "share", *KEYS)), flush=True)
    for name in args.datasets:
        for share in args.shares:
            rows = [release_scores(name, share, seed) for seed in args.seeds]
            print_means(name, f"{share:g}", rows, KEYS)


if __name__ == "__main__":
    main()
