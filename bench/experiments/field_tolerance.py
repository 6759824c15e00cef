"""The field's tolerance by the width of the tables (decision 0065) against the flat 5% of 0029, paired.

Per dataset and seed: one add-remove release on the bench's train split with the product defaults, whose fit record
says whether the pairwise field was fitted and why it was kept or dropped (``FittedMixture.field_choice``: the tilted
mixture's and the tilted field's holdout χ² per cell against the noisy tables, and the tolerance). Where the flat
tolerance of 0029 (``chain.FIELD_CHI2_TOLERANCE``) would have decided otherwise, the same measurement is refitted
under it (post-processing only, no privacy) and both are scored; elsewhere the two rules give the same model.
Prints one line per seed, then per dataset the means of both rules.

    .venv/bin/python -m bench.experiments.field_tolerance --datasets coil2000 california_housing adult --seeds 0 1
"""

from __future__ import annotations

import argparse
from unittest import mock

import numpy as np

from bench.experiments.field_on_off import KEYS, release_scores
from bench.experiments.helpers import print_means
from bench.run import prepared_datasets
from splice_assets import Synthesizer
from splice_assets.postprocess import chain


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["coil2000", "california_housing", "adult"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--epsilon", type=float, default=1.0)
    args = parser.parse_args()
    print(" | ".join(("dataset", "rule", *KEYS)), flush=True)
    for name, prepared in prepared_datasets(args.datasets):
        by_rule: dict[str, list[dict[str, float]]] = {"by width": [], "flat 5%": []}
        for seed in args.seeds:
            synth = Synthesizer(prepared.schema, args.epsilon, 1e-9, "add-remove", seed)
            synth.fit(prepared.train, ledger=None)
            assert synth.model is not None
            choice = synth.model.field_choice
            scored = release_scores(prepared, synth, seed)
            flat = scored
            verdict = "field not fitted"
            if choice is not None:
                ratio = choice.field_chi2 / choice.mixture_chi2
                flat_keeps = ratio <= chain.FIELD_CHI2_TOLERANCE
                verdict = (f"mixture chi2 {choice.mixture_chi2:.4f}, field {choice.field_chi2:.4f} "
                           f"(ratio {ratio:.4f}), tolerance {choice.tolerance:.4f}: kept {choice.kept}, "
                           f"flat 5% keeps {flat_keeps}")
                if flat_keeps != choice.kept:
                    with mock.patch.object(chain, "field_tolerance", lambda cells: chain.FIELD_CHI2_TOLERANCE):
                        flat = release_scores(prepared, synth.refit(), seed)
            by_rule["by width"].append(scored)
            by_rule["flat 5%"].append(flat)
            print(f"{name} | seed {seed} | {verdict} | q 2-way {scored['qtvd2']:.4f} against {flat['qtvd2']:.4f}",
                  flush=True)
        for rule, rows in by_rule.items():
            print_means(name, rule, rows, KEYS)
        changed = [a["qtvd2"] - b["qtvd2"] for a, b in zip(by_rule["by width"], by_rule["flat 5%"]) if a is not b]
        print(f"{name} | seeds where the rules differ: {len(changed)}"
              + (f", mean q 2-way change {np.mean(changed):+.4f}" if changed else ""), flush=True)


if __name__ == "__main__":
    main()
