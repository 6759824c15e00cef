"""Declared identities against modelled columns (docs/decisions/0041): churn with its four charge columns, each a
per-minute tariff times the matching minutes column, rounded to cents.

Three schemas, each an add-remove release at ε = 1 on the same train split (its own DP estimate of the auto bounds
per seed, replace-one at the default share, as ``schema_variants`` does):

- ``dropped``: the repository schema, which leaves the charges out;
- ``modelled``: the charges as ordinary continuous columns (``bounds: [0, auto]``, ``decimals: 2``);
- ``derived``: the charges declared as ``derived: total_<part>_minutes * <tariff>`` (``decimals: 2``).

Prints the mean over seeds of the repository columns' off-grid metrics, on-grid 2-way TVD and TSTR (so the three are
compared on the same columns), then for the charges: ``identity``, the share of synthetic rows whose charge is
within a cent of minutes times the tariff (every real row is), and ``charge_qtvd``, the 1-way TVD of the charges at
the real charges' deciles. The tariffs stand for an operator's public price list; here they are the ratios the
dataset's own rows show (its documentation only says the charges are fixed multiples).

    .venv/bin/python -m bench.experiments.derived_columns --seeds 0 1
"""

from __future__ import annotations

import argparse
import copy

import numpy as np
import pandas as pd

from bench.common import dataset_file, split_train_test
from bench.experiments.helpers import best_tstr, fitted_sample, print_means, scores
from bench.offgrid import column_tvd
from bench.run import dp_estimate
from splice_assets import load_schema
from splice_assets.datasets import schema_path
from splice_assets.private.bounds import needs_estimate
from splice_assets.private.validation import read_table, validate
from splice_assets.schema import ColumnSpec, TableSchema, parse_schema, schema_to_dict

TARIFFS = {"day": 0.17, "eve": 0.085, "night": 0.045, "intl": 0.27}
KEYS = ("qtvd1", "qtvd2", "range_mae", "tvd2", "tstr", "identity", "charge_qtvd")


def variants() -> dict[str, TableSchema]:
    """The three churn schemas, charges (if any) right after their minutes."""
    base = schema_to_dict(load_schema(schema_path("churn")))
    out = {"dropped": parse_schema(base)}
    for label in ("modelled", "derived"):
        raw = copy.deepcopy(base)
        for part, tariff in TARIFFS.items():
            minutes = f"total_{part}_minutes"
            at = next(i for i, c in enumerate(raw["columns"]) if c["name"] == minutes) + 1
            charge = {"name": f"total_{part}_charge", "kind": "continuous", "decimals": 2}
            if label == "modelled":
                charge["bounds"] = [0, "auto"]
            else:
                charge["derived"] = f"{minutes} * {tariff}"
            raw["columns"].insert(at, charge)
        out[label] = parse_schema(raw)
    return out


def charge_scores(train: pd.DataFrame, synthetic: pd.DataFrame) -> dict[str, float]:
    """The identity share and the charges' decile TVD (NaN for a schema without charges)."""
    if "total_day_charge" not in synthetic:
        return {"identity": float("nan"), "charge_qtvd": float("nan")}
    identity, tvd = [], []
    for part, tariff in TARIFFS.items():
        charge, minutes = f"total_{part}_charge", f"total_{part}_minutes"
        identity.append(float(np.mean(np.abs(synthetic[charge] - synthetic[minutes] * tariff) <= 0.0100001)))
        tvd.append(column_tvd(train[charge], synthetic[charge], ColumnSpec(charge, "continuous", bounds=(0.0, 1e9))))
    return {"identity": float(np.mean(identity)), "charge_qtvd": float(np.mean(tvd))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    args = parser.parse_args()
    raw = read_table(dataset_file("churn"))
    reference = load_schema(schema_path("churn"))
    if needs_estimate(reference):  # the reference rows: cleaned with the repository schema's bounds, once
        reference = dp_estimate(raw, reference)[0]
    table = validate(raw, reference).table
    charges = [f"total_{part}_charge" for part in TARIFFS]
    assert len(table) == len(raw)
    train, test = split_train_test(pd.concat([table, raw[charges].astype(float)], axis=1))
    common = list(reference.column_names)
    print(" | ".join(("dataset", "schema", *KEYS)), flush=True)
    for label, variant in variants().items():
        rows = []
        for seed in args.seeds:
            schema = dp_estimate(train, variant)[0] if needs_estimate(variant) else variant
            synthetic = fitted_sample(schema, train, seed)[1]
            rows.append({**scores(train[common], synthetic[common], reference),
                         "tstr": best_tstr(train[common], test[common], synthetic[common], reference),
                         **charge_scores(train, synthetic)})
        print_means("churn", label, rows, KEYS)


if __name__ == "__main__":
    main()
