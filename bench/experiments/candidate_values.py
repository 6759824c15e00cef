"""Candidate values in the main measurement (decision 0051), paired: per dataset one DP estimate of the schema (as
the bench resolves it, so the same values are found for every variant), then per seed one measurement per variant
with the same seeded normal draws (``bench.common.seeded_noise``; not releases). Variants: the resolved
schema as it is (``candidates``: the point candidates the selection did not find, measured as fine cells; and
``float32`` where declared), without the float32 rounding, without either (before 0051), or with only the
candidates of denominator at most 6 (``--variants``; the first three by default). Prints the mean over seeds of
``refit_variants``' scores against the train split (TSTR on the real test split), then, with ``--show``, the
per-column qtvd1 of the named columns. ε = 1, add-remove.

    .venv/bin/python -m bench.experiments.candidate_values --datasets house_16h --seeds 0 1 2 3 --show h40p4 p5p1
    .venv/bin/python -m bench.experiments.candidate_values --seeds 4 5 6 7 --variants before "denominators <= 6" \
        "candidates + float32"
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from fractions import Fraction

import numpy as np

from bench.common import seeded_noise
from bench.experiments.field_on_off import release_scores
from bench.experiments.helpers import print_means
from bench.experiments.refit_variants import KEYS
from bench.offgrid import column_tvd
from bench.run import prepared_datasets
from splice_assets import Synthesizer
from splice_assets.sampling import sample_table
from splice_assets.schema import TableSchema

VARIANTS = ("candidates + float32", "no float32", "before", "denominators <= 6")


def variant_schema(schema: TableSchema, variant: str) -> TableSchema:
    """The resolved schema as it is, without its float32 rounding (``no float32``), without that and its
    candidates (``before``), or with only the candidates that are 0, 1 or fractions of denominator at most 6."""
    columns = schema.columns
    if variant in ("no float32", "before"):
        columns = tuple(replace(c, float32=False) for c in columns)
    if variant == "before":
        columns = tuple(replace(c, candidates=()) for c in columns)
    if variant == "denominators <= 6":
        columns = tuple(replace(c, candidates=tuple(v for v in c.candidates
                                                    if abs(Fraction(v).limit_denominator(6) - Fraction(v)) < 1e-12))
                        for c in columns)
    return replace(schema, columns=columns)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["house_16h"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3])
    parser.add_argument("--show", nargs="*", default=[], help="Columns whose qtvd1 is printed per variant.")
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS[:3]))
    args = parser.parse_args()
    print(" | ".join(("dataset", "variant", *KEYS)), flush=True)
    for name, prepared in prepared_datasets(args.datasets):
        for variant in args.variants:
            schema = variant_schema(prepared.schema, variant)
            rows, shown = [], []
            for seed in args.seeds:
                synth = Synthesizer(schema, 1.0, 1e-9, "add-remove", seed)
                with seeded_noise(seed):
                    synth.fit(prepared.train, ledger=None)
                rows.append(release_scores(replace(prepared, schema=schema), synth, seed))
                synthetic = sample_table(synth.model, synth.schema, len(prepared.train), seed)
                shown.append([column_tvd(prepared.train[c], synthetic[c], schema.column(c)) for c in args.show])
            print_means(name, variant, rows, KEYS)
            if args.show:
                means = np.mean(shown, axis=0)
                print("  qtvd1 " + ", ".join(f"{c} {m:.4f}" for c, m in zip(args.show, means)), flush=True)


if __name__ == "__main__":
    main()
