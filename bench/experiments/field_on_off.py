"""The pairwise field on and off, paired on one measurement (docs/decisions/0029).

Per dataset and seed: one add-remove release at ε = 1 on the bench's train split with the product defaults ("field"),
then a refit of the same noisy measurement without the pairwise field ("no field": the tilted mixture), which costs
no privacy. Prints the mean over seeds of the off-grid metrics and the on-grid 2-/3-way TVD against the train split,
and TSTR (the best learner's AUC or R², trained on synthetic rows, tested on the real test split), and ``chi2``: the
holdout χ² per cell of the model's tilt against the noisy tables ("no field": the tilted mixture's, which decides
whether the field is tried at all, docs/decisions/0034). Since 0034, "field" is the product's choice; run it from a
checkout before 0034 for the 0029 rule's.

    .venv/bin/python -m bench.experiments.field_on_off --datasets pol house_16h adult --seeds 0 1
"""

from __future__ import annotations

import argparse

from bench.experiments.helpers import scores
from bench.experiments.schema_variants import gap_share, rule_share, spike_share, tail_error, tail_share
from bench.experiments.within_bin_copula import spearman_errors
from bench.offgrid import pair_trends
from bench.run import prepared_datasets
from splice_assets import PostProcessingSettings, Synthesizer
from splice_assets.evaluation.metrics import tstr
from splice_assets.sampling import sample_table

KEYS = ("qtvd1", "qtvd2", "qtvd3", "range_mae", "tvd2", "tvd3", "tstr", "chi2")


def release_scores(prepared, synth: Synthesizer, seed: int, rows=None) -> dict[str, float]:
    """``helpers.scores`` of the release's rows, ``schema_variants.tail_share``, ``gap_share``, ``spike_share``,
    ``tail_error`` and ``rule_share``, ``offgrid.pair_trends``, ``strong``
    (the mean |Spearman error| over the numeric pairs with real |Spearman| >= 0.8; NaN: none) and TSTR (the best
    learner's primary metric). ``rows``: the release's rows if the caller sampled them (as this would)."""
    rows = sample_table(synth.model, synth.schema, len(prepared.train), seed) if rows is None else rows
    utility = tstr(prepared.train, prepared.test, rows, prepared.schema, 0, trtr=False)
    best = float("nan") if utility is None else float(utility.best_tstr[utility.primary])
    chi2 = float("nan") if synth.model is None or synth.model.tilt is None else synth.model.tilt.chi2_end
    numeric = [spec.name for spec in prepared.schema.columns if spec.is_numeric]
    strong = spearman_errors(prepared.train, rows, numeric)[1] if len(numeric) > 1 else float("nan")
    return {**scores(prepared.train, rows, prepared.schema), "tails": tail_share(prepared.train, rows, prepared.schema),
            "spikes": spike_share(prepared.train, rows, prepared.schema),
            "tail_error": tail_error(prepared.train, rows, prepared.schema),
            "gaps": gap_share(prepared.train, rows, prepared.schema),
            "rules": rule_share(prepared.train, rows, prepared.schema), "strong": strong, "tstr": best, "chi2": chi2,
            **pair_trends(prepared.train, rows, prepared.schema)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["pol", "house_16h", "adult"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--epsilon", type=float, default=1.0)
    args = parser.parse_args()
    print(" | ".join(("dataset", "variant", *KEYS)), flush=True)
    for name, prepared in prepared_datasets(args.datasets):
        results: dict[str, list[dict[str, float]]] = {"field": [], "no field": []}
        for seed in args.seeds:
            synth = Synthesizer(prepared.schema, args.epsilon, 1e-9, "add-remove", seed)
            synth.fit(prepared.train, ledger=None)
            results["field"].append(release_scores(prepared, synth, seed))
            plain = synth.refit(postprocessing=PostProcessingSettings(field_iterations=0))
            results["no field"].append(release_scores(prepared, plain, seed))
        for variant, rows in results.items():
            means = {k: sum(r[k] for r in rows) / len(rows) for k in KEYS}
            print(" | ".join((name, variant, *(f"{means[k]:.4f}" for k in KEYS))), flush=True)


if __name__ == "__main__":
    main()
