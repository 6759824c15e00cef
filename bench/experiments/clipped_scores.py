"""What the bench's scores cannot see: a release's 1-way error against the rows as the bench cleans them (clipped
to the run's DP bounds) and against the same rows before the clipping.

Per dataset and seed: the DP estimate of the schema's ``auto`` entries (as ``bench.run.prepare`` draws it, its own
draw per seed), the cleaned table's 80/20 split, an add-remove release at ε = 1 on the train split, then qtvd1 (the
bench's off-grid 1-way TVD, ``bench/offgrid.column_tvd``) against the cleaned train rows and against the same rows
as read, before cleaning (validation keeps every row in its order, so the split takes the same rows). Prints the
means over seeds, the largest share of a column's rows the bounds clipped, and the column whose error the clipping
hides most.

    .venv/bin/python -m bench.experiments.clipped_scores --datasets pol churn house_16h shuttle --seeds 0 1
"""

from __future__ import annotations

import argparse

import numpy as np

from bench.common import DATASETS_DIR, split_train_test
from bench.experiments.pair_selection import fitted_sample
from bench.offgrid import column_tvd
from bench.run import dp_estimate
from splice_assets import load_schema
from splice_assets.datasets import schema_path
from splice_assets.private.bounds import needs_estimate
from splice_assets.private.validation import read_table, validate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["pol", "churn", "house_16h", "shuttle"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    args = parser.parse_args()
    print("dataset | qtvd1 vs cleaned rows | qtvd1 vs rows as read | largest clipped share | most hidden column",
          flush=True)
    for name in args.datasets:
        raw = read_table(DATASETS_DIR / name / "data.csv.gz")
        repository = load_schema(schema_path(name))
        cleaned_scores, read_scores, clipped, hidden = [], [], [], []
        for seed in args.seeds:
            schema = dp_estimate(raw, repository)[0] if needs_estimate(repository) else repository
            validated = validate(raw, schema)
            assert len(validated.table) == len(raw)
            train, _ = split_train_test(validated.table)
            as_read, _ = split_train_test(raw)
            _, synthetic = fitted_sample(schema, train, seed)
            against_cleaned = {c.name: column_tvd(train[c.name], synthetic[c.name], c) for c in schema.columns}
            against_read = {c.name: column_tvd(as_read[c.name], synthetic[c.name], c) for c in schema.columns}
            cleaned_scores.append(np.mean(list(against_cleaned.values())))
            read_scores.append(np.mean(list(against_read.values())))
            clipped.append(max(validated.report.shares("out_of_bounds_clipped").values(), default=0.0))
            worst = max(against_read, key=lambda c: against_read[c] - against_cleaned[c])
            hidden.append(f"{worst} {against_cleaned[worst]:.3f} → {against_read[worst]:.3f}")
        print(f"{name} | {np.mean(cleaned_scores):.4f} | {np.mean(read_scores):.4f} | {np.mean(clipped):.3f} | "
              f"{'; '.join(hidden)}", flush=True)


if __name__ == "__main__":
    main()
