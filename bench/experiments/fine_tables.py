"""Fine tables below the coarse bins (docs/decisions/0017): the off-grid metrics of the product at add-remove,
eps = 1, with the fine tables off and on (the finer second level, 0017, left the code in issue 66), and over the
post-processing threshold.

One measurement per (dataset, seed, measured variant); the thresholds are post-processing of the same model.
Prints the mean over seeds of qtvd1, qtvd2, qtvd3, range_mae and the mean absolute error of the declared exact
values' shares, per variant, and the non-DP references.

    .venv/bin/python -m bench.experiments.fine_tables --datasets adult california_housing magic --seeds 0 1
"""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np

from bench.common import dataset_file, split_train_test
from bench.offgrid import bootstrap, offgrid_metrics
from splice_assets import MeasurementSettings, Synthesizer, load_schema
from splice_assets.datasets import schema_path
from splice_assets.evaluation.metrics import independent_marginals_baseline
from splice_assets.private.validation import read_table, validate
from splice_assets.sampling import sample_table

KEYS = ("qtvd1", "qtvd2", "qtvd3", "range_mae")
#: (name, fine_bins, thresholds); the "fine + finer" variant of docs/decisions/0017 (fine_split = 16) left the code
#: in issue 66 (git history, commit aa41b9f).
VARIANTS = (("coarse only", 0, (0.0,)), ("fine", 256, (0.0, 1.0, 2.0)))


def point_error(train, synthetic, schema) -> float:
    errors = [abs(float((synthetic[c.name] == v).mean()) - float((train[c.name] == v).mean()))
              for c in schema.columns if c.is_numeric for v in c.exact_values]
    return float(np.mean(errors)) if errors else float("nan")


def scores(train, synthetic, schema) -> list[float]:
    metrics = offgrid_metrics(train, synthetic, schema, 0)
    return [float(metrics[k]) for k in KEYS] + [point_error(train, synthetic, schema)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["adult", "california_housing", "magic"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--epsilon", type=float, default=1.0)
    args = parser.parse_args()
    print(" | ".join(("dataset", "variant", "threshold", *KEYS, "point_err")))
    for name in args.datasets:
        schema = load_schema(schema_path(name))
        train, _ = split_train_test(validate(read_table(dataset_file(name)), schema).table)
        results: dict[tuple[str, float], list[list[float]]] = {}
        for seed in args.seeds:
            for variant, bins, thresholds in VARIANTS:
                settings = MeasurementSettings(fine_bins=bins)
                synth = Synthesizer(schema, args.epsilon, 1e-9, "add-remove", seed, settings)
                synth.fit(train, ledger=None)
                assert synth.model is not None
                for threshold in thresholds:
                    model = synth.model
                    if model.fine is not None:
                        model = dataclasses.replace(model, fine=dataclasses.replace(model.fine, threshold=threshold))
                    synthetic = sample_table(model, synth.schema, len(train), seed)
                    results.setdefault((variant, threshold), []).append(scores(train, synthetic, schema))
        for (variant, threshold), values in results.items():
            mean = np.mean(values, axis=0)
            print(" | ".join((name, variant, f"{threshold:g}", *(f"{v:.4f}" for v in mean))))
        for reference, table in (("ref_independent", independent_marginals_baseline(train, schema, len(train), 0)),
                                 ("ref_bootstrap", bootstrap(train, 0))):
            print(" | ".join((name, reference, "", *(f"{v:.4f}" for v in scores(train, table, schema)))))


if __name__ == "__main__":
    main()
