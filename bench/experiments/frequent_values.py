"""Frequent values found by the DP selection (``values: auto``, docs/decisions/0026), on and off, paired.

Per dataset: one DP estimate of the schema's auto bounds and frequent values on the whole table (replace-one, ε = 1,
the default share, as the bench resolves them), then, on the same train split and the same bounds, add-remove
releases at ε = 1 with the found values as exact values ("on") and without them ("off"). Prints the values found
and the mean over seeds of the off-grid metrics against the train split.

    .venv/bin/python -m bench.experiments.frequent_values --datasets house_16h churn pol --seeds 0 1
"""

from __future__ import annotations

import argparse
import dataclasses

from bench.common import dataset_file, split_train_test
from bench.experiments.helpers import fitted_sample, print_means, scores
from bench.run import dp_estimate
from splice_assets import load_schema
from splice_assets.datasets import schema_path
from splice_assets.private.validation import read_table, validate

KEYS = ("qtvd1", "qtvd2", "qtvd3", "range_mae", "missing_values", "tvd1", "tvd2")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["house_16h", "churn", "pol"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    args = parser.parse_args()
    print(" | ".join(("dataset", "variant", *KEYS)), flush=True)
    for name in args.datasets:
        raw = read_table(dataset_file(name))
        found_on, estimate = dp_estimate(raw, load_schema(schema_path(name)))
        print(f"{name}: found {estimate.found_values}", flush=True)
        found_off = dataclasses.replace(found_on, columns=tuple(
            dataclasses.replace(c, values=tuple(v for v in c.values if v not in estimate.found_values.get(c.name, ())))
            for c in found_on.columns))
        train, _ = split_train_test(validate(raw, found_on).table)
        for variant, schema in (("off", found_off), ("on", found_on)):
            rows = [scores(train, fitted_sample(schema, train, seed)[1], schema) for seed in args.seeds]
            print_means(name, variant, rows, KEYS)


if __name__ == "__main__":
    main()
