"""Per-value fine cells for integer columns with more grid values than ``fine_bins`` (``resolution.GRID_LIMIT``):
the off-grid metrics at the current limit (256) and a larger one, every variant its own measurement.

Add-remove, eps = 1, delta = 1e-9; mean over seeds against the train split.

    .venv/bin/python -m bench.experiments.grid_limit --datasets churn pol fars --limits 256 1024 --seeds 0 1
"""

from __future__ import annotations

import argparse

import numpy as np

from bench.experiments.pair_selection import scores
from bench.run import prepare
from splice_assets import Synthesizer, resolution
from splice_assets.sampling import sample_table

KEYS = ("qtvd1", "qtvd2", "qtvd3", "range_mae", "tvd1", "tvd2", "missing_values")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["churn", "pol", "fars"])
    parser.add_argument("--limits", nargs="+", type=int, default=[256, 1024])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    args = parser.parse_args()
    from bench.offgrid import offgrid_metrics

    print(" | ".join(("dataset", "grid limit", *KEYS)), flush=True)
    for name in args.datasets:
        prepared = prepare(name)
        if prepared is None:
            continue
        schema, train = prepared.schema, prepared.train
        for limit in args.limits:
            resolution.GRID_LIMIT = limit  # a public constant of the encoding; set per variant for the experiment
            rows = []
            for seed in args.seeds:
                synth = Synthesizer(schema, 1.0, 1e-9, "add-remove", seed)
                synth.fit(train, ledger=None)
                assert synth.model is not None
                synthetic = sample_table(synth.model, synth.schema, len(train), seed)
                missing = float(offgrid_metrics(train, synthetic, schema, 0)["missing_values"])
                rows.append({**scores(train, synthetic, schema), "missing_values": missing})
            mean = {k: float(np.mean([r[k] for r in rows])) for k in KEYS}
            print(" | ".join((name, str(limit), *(f"{mean[k]:.4f}" for k in KEYS))), flush=True)


if __name__ == "__main__":
    main()
