"""What the bench's scores cannot see: a release's error against the rows as the bench cleans them (clipped to the
run's DP bounds) and against the same rows before the clipping (decision 0018; 0048 in docs/decisions/alternatives.md).

Per dataset, variant and seed: the DP estimate of the schema's ``auto`` entries (as ``bench.run.prepare`` draws it,
its own draw per seed), the cleaned table's 80/20 split, an add-remove release at ε = 1 on the train split, then the
off-grid metrics (``bench/offgrid.py``) against the cleaned train rows and against the same rows as read, before
cleaning (validation keeps every row in its order, so the split takes the same rows). Prints the means over seeds,
the largest share of a column's rows the bounds clipped, TSTR against the cleaned test rows, and the column whose
error the clipping hides most.

    .venv/bin/python -m bench.experiments.clipped_scores --datasets pol churn house_16h shuttle --seeds 0 1
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from bench.common import dataset_file, split_train_test
from bench.experiments.helpers import best_tstr, fitted_sample
from bench.offgrid import column_tvd, offgrid_metrics
from bench.run import dp_estimate
from splice_assets import load_schema
from splice_assets.datasets import schema_path
from splice_assets.private.bounds import needs_estimate
from splice_assets.private.validation import read_table, validate

KEYS = ("qtvd1", "qtvd2", "range_mae")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["pol", "churn", "house_16h", "shuttle"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    args = parser.parse_args()
    print("dataset | " + " | ".join(f"{k} cleaned / as read" for k in KEYS)
          + " | largest clipped share | TSTR | most hidden column", flush=True)
    for name in args.datasets:
        raw = read_table(dataset_file(name))
        repository = load_schema(schema_path(name))
        rows, hidden = [], []
        for seed in args.seeds:
            schema = dp_estimate(raw, repository)[0] if needs_estimate(repository) else repository
            validated = validate(raw, schema)
            assert len(validated.table) == len(raw)
            train, test = split_train_test(validated.table)
            as_read, _ = split_train_test(raw)
            for spec in schema.columns:
                if spec.is_numeric:
                    as_read[spec.name] = pd.to_numeric(as_read[spec.name], errors="coerce")
            _, synthetic = fitted_sample(schema, train, seed)
            cleaned = offgrid_metrics(train, synthetic, schema, 0)
            read = offgrid_metrics(as_read, synthetic, schema, 0)
            rows.append({**{f"{k} cleaned": cleaned[k] for k in KEYS}, **{f"{k} read": read[k] for k in KEYS},
                         "clipped": max(validated.report.shares("out_of_bounds_clipped").values(), default=0.0),
                         "tstr": best_tstr(train, test, synthetic, schema)})
            gap = {c.name: column_tvd(as_read[c.name], synthetic[c.name], c)
                   - column_tvd(train[c.name], synthetic[c.name], c) for c in schema.columns}
            worst = max(gap, key=lambda c: gap[c])
            hidden.append(f"{worst} +{gap[worst]:.3f}")
        mean = {k: float(np.mean([r[k] for r in rows])) for k in rows[0]}
        scores = " | ".join(f"{mean[f'{k} cleaned']:.4f} / {mean[f'{k} read']:.4f}" for k in KEYS)
        print(f"{name} | {scores} | {mean['clipped']:.3f} | {mean['tstr']:.3f} | {'; '.join(hidden)}", flush=True)


if __name__ == "__main__":
    main()
