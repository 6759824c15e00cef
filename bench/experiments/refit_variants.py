"""Post-processing variants paired on one measurement: every variant refits the same noisy measurement, so the
differences are the post-processing's alone and cost no privacy.

Per dataset and seed: one add-remove release at ε = 1 on the bench's train split with the product defaults, then
a refit of its measurement per variant, each a set of ``FitConfig`` overrides (``key=value``, comma-separated;
``defaults`` for none). Prints the mean over seeds of the off-grid metrics (``missing_values``: frequent integer
values and categories never drawn), the on-grid 1-/2-way TVD against the train split, ``tails`` (the share of
synthetic values beyond the real 0.1%/99.9% quantiles, ``schema_variants.tail_share``), ``gaps`` (the share of an
integer column's values held by 0.1% of the real rows that are never drawn, ``schema_variants.gap_share``),
``spikes`` (the share of rows on synthetic point masses the data do not have, ``schema_variants.spike_share``),
``tail_error`` (the error of the shares beyond the real 1% and 99% quantiles, ``schema_variants.tail_error``),
``rules`` (the share of synthetic rows that keep the real rows' functions between discrete columns,
``schema_variants.rule_share``),
``strong`` (the mean |Spearman error| over the numeric pairs with real |Spearman| >= 0.8), ``pair_r_err`` and
``pair_r_flips`` (``bench.offgrid.pair_trends``: the largest r error of the pairs with real |r| >= .5, and the sign
flips) and TSTR
(the best learner's AUC or R² on the real test split).

    .venv/bin/python -m bench.experiments.refit_variants --datasets churn nursery \\
        --variants defaults shrink_categories=false --seeds 0 1

``--schema FILE`` measures with that schema instead of the dataset's resolved one (one dataset; its train rows are
still the bench's), e.g. to pin DP bounds a variant depends on.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from bench.experiments.field_on_off import release_scores
from bench.experiments.helpers import print_means
from bench.run import prepared_datasets
from splice_assets import Synthesizer, load_schema
from splice_assets.experimental import fit_variant
from splice_assets.schema import TableSchema

KEYS = ("qtvd1", "qtvd2", "qtvd3", "range_mae", "missing_values", "qtvd1_max", "det_auc_max", "tvd1", "tvd2", "tails",
        "gaps", "spikes", "tail_error", "rules", "strong", "pair_r_err", "pair_r_flips", "tstr")


def overrides(variant: str) -> dict[str, Any]:
    """``key=value,key=value`` as FitConfig overrides (values read as YAML scalars); ``defaults``: none."""
    if variant == "defaults":
        return {}
    pairs = [item.split("=", 1) for item in variant.split(",")]
    if any(len(pair) != 2 for pair in pairs):
        raise SystemExit(f"a variant is 'defaults' or key=value[,key=value], got {variant!r}")
    return {key.strip(): yaml.safe_load(value) for key, value in pairs}


def compare(datasets: list[str], seeds: list[int], epsilon: float, variants: Mapping[str, dict[str, Any]],
            schema: TableSchema | None = None) -> None:
    """Print, per dataset, each variant's mean scores over ``seeds`` (one measurement per seed), measured with
    ``schema`` if given, else the dataset's own."""
    print(" | ".join(("dataset", "variant", *KEYS)), flush=True)
    for name, prepared in prepared_datasets(datasets):
        results: dict[str, list[dict[str, float]]] = {variant: [] for variant in variants}
        for seed in seeds:
            measured = Synthesizer(prepared.schema if schema is None else schema, epsilon, 1e-9, "add-remove", seed)
            cleaned = measured.prepare(prepared.train, None).table
            measured.measure(measured.encode(cleaned), None)
            for variant, overrides in variants.items():
                refit = fit_variant(measured, 1, **overrides)  # the same measurement: no privacy spent
                results[variant].append(release_scores(prepared, refit, seed))
        for variant, rows in results.items():
            print_means(name, variant, rows, KEYS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["churn", "nursery", "adult"])
    parser.add_argument("--variants", nargs="+", default=["defaults", "shrink_categories=false"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--schema", type=Path, default=None, help="A schema file to measure with (one dataset).")
    args = parser.parse_args()
    if args.schema is not None and len(args.datasets) != 1:
        parser.error(f"--schema takes one dataset, got {args.datasets}")
    schema = None if args.schema is None else load_schema(args.schema)
    compare(args.datasets, args.seeds, args.epsilon, {variant: overrides(variant) for variant in args.variants},
            schema)


if __name__ == "__main__":
    main()
