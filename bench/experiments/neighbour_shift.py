"""How far neighbouring inputs move the exact statistic the Gaussian mechanism noises, in units of its Delta.

Runs the release path's functions (validate -> holdout split -> encode -> plan -> ``measure``) on a table and on
neighbours of it, with the sampler replaced by a stand-in that records its input and draws nothing. Compares the
row-order-free split (``holdout_split.split_holdout``) with the positional permutation the release job used before
(held out: the last 20% of a permutation of all n rows under the public seed). Generated public data only.

    .venv/bin/python -m bench.experiments.neighbour_shift [--neighbours 20]

Prints, per relation, n and split, the median and largest shift over the neighbours, in Delta (<= 1 is sound).
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from splice_assets.measurement import RELATION_ADD_REMOVE, RELATION_REPLACE_ONE
from splice_assets.private import holdout_split, measuring
from splice_assets.private import mechanism as privacy
from splice_assets.private.encoding import encode
from splice_assets.private.validation import validate
from splice_assets.schema import parse_schema

SCHEMA = parse_schema({
    "name": "neighbour_shift", "version": 1, "n_min": 100,
    "columns": [
        {"name": "amount", "kind": "continuous", "bounds": [0, 1000]},
        {"name": "age", "kind": "integer", "bounds": [18, 90]},
        {"name": "colour", "kind": "categorical", "categories": ["red", "green", "blue", "grey"]},
        {"name": "grade", "kind": "ordinal", "categories": [1, 2, 3]},
    ],
})
HOLDOUT, SEED = 0.2, 0


def positional_split(table: pd.DataFrame, fraction: float, seed: int, relation: str):
    """The split the release job used before: a permutation of all n rows under the public seed."""
    order = np.random.default_rng(np.random.SeedSequence([seed, 0x401D])).permutation(len(table))
    cut = len(table) - int(round(fraction * len(table)))
    return table.iloc[order[:cut]].reset_index(drop=True), table.iloc[order[cut:]].reset_index(drop=True)


SPLITS = {"row hash (now)": holdout_split.split_holdout, "positional (before)": positional_split}


def table_of(rng: np.random.Generator, n: int) -> pd.DataFrame:
    amount = rng.gamma(2.0, 60.0, n).clip(0, 1000).round(2)
    return pd.DataFrame({"amount": amount, "age": rng.integers(18, 91, n),
                         "colour": rng.choice(["red", "green", "blue", "grey"], n), "grade": rng.integers(1, 4, n)})


class _Captured(Exception):
    pass


def sampler_input(table: pd.DataFrame, relation: str, split) -> tuple[np.ndarray, float]:
    """(the vector the mechanism would noise, its calibrated Delta) for ``table`` through the release path."""
    seen: list[np.ndarray] = []

    def stand_in(values: np.ndarray, sigma: float) -> np.ndarray:
        seen.append(np.array(values, dtype=np.float64))
        raise _Captured

    real = privacy.gaussian_noise
    privacy.gaussian_noise = stand_in
    try:
        train, _ = split(validate(table, SCHEMA).table, HOLDOUT, SEED, relation)
        plan, calibration = measuring.make_plan(SCHEMA, len(train), 1.0, 1e-9, relation=relation)
        try:
            measuring.measure(encode(train, SCHEMA), SCHEMA, plan, calibration)
        except _Captured:
            pass
    finally:
        privacy.gaussian_noise = real
    return seen[0], calibration.sensitivity


def neighbour(rng: np.random.Generator, table: pd.DataFrame, relation: str) -> pd.DataFrame:
    """A random neighbour: one row added or removed (add-remove), or one replaced and the file reordered."""
    if relation == RELATION_ADD_REMOVE:
        if rng.uniform() < 0.5:
            return pd.concat([table, table_of(rng, 1)], ignore_index=True)
        return table.drop(index=int(rng.integers(len(table)))).reset_index(drop=True)
    other = table.copy()
    other.iloc[int(rng.integers(len(table)))] = table_of(rng, 1).iloc[0]
    return other.sample(frac=1.0, random_state=int(rng.integers(1 << 30))).reset_index(drop=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--neighbours", type=int, default=20)
    args = parser.parse_args()
    print(f"{'relation':<12} {'n':>6}  {'split':<20} {'median':>8} {'max':>8}  (shift / Delta)")
    for relation in (RELATION_ADD_REMOVE, RELATION_REPLACE_ONE):
        for n in (400, 6000):
            for name, split in SPLITS.items():
                rng = np.random.default_rng(n)
                table = table_of(rng, n)
                base, delta = sampler_input(table, relation, split)
                shifts = []
                for _ in range(args.neighbours):
                    other, _ = sampler_input(neighbour(rng, table, relation), relation, split)
                    shifts.append(float(np.linalg.norm(other - base)) / delta)
                print(f"{relation:<12} {n:>6}  {name:<20} {np.median(shifts):8.3f} {max(shifts):8.3f}")


if __name__ == "__main__":
    main()
