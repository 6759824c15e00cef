"""Rows off a column's sentinels in a bin only the sentinels hold (docs/decisions/0038): the same fitted model
sampled with and without ``fine_tables._rehome_off_sentinel_rows`` (sampling is post-processing, so both read one
measurement).

Per seed: one add-remove release at ε = 1 on the bench's train split, sampled twice with the same seed. Prints, per
variant, the off-grid and on-grid scores against the train split and, for every column with sentinels, the share
of synthetic rows strictly between its largest sentinel below the column's smallest other real value and that
value (values the real column never takes).

    .venv/bin/python -m bench.experiments.sentinel_bins --dataset fars --seeds 0 1
"""

from __future__ import annotations

import argparse
from unittest import mock

from bench.experiments.helpers import scores
from bench.run import prepare
from splice_assets import Synthesizer
from splice_assets.postprocess import fine_tables
from splice_assets.sampling import sample_table

KEYS = ("qtvd1", "qtvd2", "range_mae", "tvd1", "tvd2")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="fars")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    args = parser.parse_args()
    prepared = prepare(args.dataset)
    if prepared is None:
        return
    columns = [c for c in prepared.schema.columns if c.is_numeric and c.sentinels]
    for seed in args.seeds:
        synth = Synthesizer(prepared.schema, 1.0, 1e-9, "add-remove", seed)
        synth.fit(prepared.train, ledger=None)
        assert synth.model is not None
        rehomed = sample_table(synth.model, synth.schema, len(prepared.train), seed)
        with mock.patch.object(fine_tables, "_rehome_off_sentinel_rows", lambda *args: None):
            as_drawn = sample_table(synth.model, synth.schema, len(prepared.train), seed)
        for variant, rows in (("rehomed", rehomed), ("as drawn", as_drawn)):
            score = scores(prepared.train, rows, prepared.schema)
            gaps = []
            for column in columns:
                real = prepared.train[column.name].dropna()
                first_other = real[~real.isin(column.sentinels)].min()
                last_sentinel = max((v for v in column.sentinels if v < first_other), default=-float("inf"))
                values = rows[column.name].dropna()
                between = (values > last_sentinel) & (values < first_other)
                gaps.append(f"{column.name} {between.mean():.4f}")
            print(" | ".join((args.dataset, str(seed), variant, *(f"{k} {score[k]:.4f}" for k in KEYS), *gaps)),
                  flush=True)


if __name__ == "__main__":
    main()
