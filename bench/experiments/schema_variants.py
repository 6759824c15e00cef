"""Schema variants of one dataset, compared as a release would see them: for each schema file and seed, the DP
estimate of its auto bounds and values (replace-one, ε = 1, the default share; a fresh draw per seed), then an
add-remove release at ε = 1 on the train split. Every variant gets the same train rows (the dataset's repository
schema cleans them and the bench's split takes them) and is scored against them, so a variant's own clipping is
counted as error. Prints the mean over seeds of the off-grid metrics, the on-grid 1-/2-way TVD and ``unseen``: the
share of an integer column's synthetic values that no real row holds (an even-only sensor's odd values), averaged
over the integer columns; ``tails``: the share of synthetic values below the real 0.1% quantile or above the 99.9%
one (0.002 for a faithful tail), averaged over the numeric columns; and TSTR (the best learner's AUC or R^2 on the
test split).

``--charged`` runs each variant as the product does instead: the release draws its own DP estimate (at its relation
and ε) and pays for it, the estimate's share (``bounds_share``) coming out of the measurement's privacy, so a variant
that adds the first ``auto`` entry to a schema is charged for it. ``--epsilon`` sets the release's ε.

    git show b23593f:schemas/churn.yaml > churn-before.yaml
    .venv/bin/python -m bench.experiments.schema_variants churn churn-before.yaml schemas/churn.yaml --seeds 0 1 2
    .venv/bin/python -m bench.experiments.schema_variants california_housing before.yaml \
        schemas/california_housing.yaml --seeds 0 1 2 3 --charged --epsilon 0.5
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from bench.common import dataset_file, split_train_test
from bench.experiments.helpers import best_tstr, fitted_sample, print_means, scores
from bench.offgrid import column_tvd, spike_values
from bench.run import dp_estimate
from splice_assets import load_schema
from splice_assets.datasets import schema_path
from splice_assets.private.bounds import needs_estimate
from splice_assets.private.validation import read_table, validate
from splice_assets.schema import TableSchema

KEYS = ("qtvd1", "qtvd2", "qtvd3", "range_mae", "missing_values", "tvd1", "tvd2", "unseen", "tails", "tstr")


def unseen_share(train: pd.DataFrame, synthetic: pd.DataFrame, schema) -> float:
    """Mean over the integer columns of the share of synthetic values that no real row holds."""
    shares = [float((~synthetic[c.name].dropna().isin(set(train[c.name].dropna()))).mean())
              for c in schema.columns if c.kind == "integer"]
    return float(np.mean(shares)) if shares else float("nan")


def gap_share(train: pd.DataFrame, synthetic: pd.DataFrame, schema) -> float:
    """Mean over the integer columns of the share of their values held by at least 0.1% of the real rows that no
    synthetic row holds: holes inside a smooth count column."""
    shares = []
    for c in schema.columns:
        if c.kind == "integer":
            held = train[c.name].value_counts(normalize=True)
            common = held.index[held >= 0.001]
            if len(common):
                shares.append(float((~common.isin(set(synthetic[c.name].dropna()))).mean()))
    return float(np.mean(shares)) if shares else float("nan")


def _numeric_values(train: pd.DataFrame, synthetic: pd.DataFrame, schema):
    """(real, synthetic) values of each numeric column as floats, missing values left out."""
    for c in schema.columns:
        if c.is_numeric:
            yield tuple(pd.to_numeric(t[c.name], errors="coerce").dropna().to_numpy(dtype=float)
                        for t in (train, synthetic))


def _mean(values: list[float]) -> float:
    return float(np.mean(values)) if values else float("nan")


def tail_share(train: pd.DataFrame, synthetic: pd.DataFrame, schema) -> float:
    """Mean over the numeric columns of the share of synthetic values beyond the real 0.1% and 99.9% quantiles."""
    shares = []
    for real, drawn in _numeric_values(train, synthetic, schema):
        low, high = np.quantile(real, [0.001, 0.999])
        shares.append(float(np.mean((drawn < low) | (drawn > high))))
    return _mean(shares)


def spike_share(train: pd.DataFrame, synthetic: pd.DataFrame, schema, ratio: float = 3.0) -> float:
    """Mean over the numeric columns of the share of synthetic rows on spikes (``offgrid.spike_values``), counted
    beyond ``ratio`` times the real share of their values."""
    spikes = [spike_values(train[c.name], synthetic[c.name], ratio=ratio) for c in schema.columns if c.is_numeric]
    return _mean([float((s.synthetic - ratio * s.real).sum()) for s in spikes])


#: ``rule_share``: integer columns with at most this many distinct real values can hold or make a rule.
MAX_RULE_VALUES = 100


def rule_share(train: pd.DataFrame, synthetic: pd.DataFrame, schema, holds: float = 0.99) -> float:
    """Mean over the rules of the share of synthetic rows that keep them, where a rule is a discrete column b that is
    a function of another, a, in the real rows: b equals its most frequent value given a in at least ``holds`` of
    them, and b's own most frequent value holds fewer (coil2000's customer subtype fixes its main type). A row
    whose a the real rows do not hold breaks the rule. Integer columns of at most ``MAX_RULE_VALUES`` real values
    count as discrete (adult's education fixes its `education_num`). NaN: no rule."""
    integer = {c.name for c in schema.columns if c.kind == "integer" and train[c.name].nunique() <= MAX_RULE_VALUES}
    names = [c.name for c in schema.columns if c.is_discrete or c.name in integer]

    def keys(column: pd.Series, name: str) -> pd.Series:  # 3 and 3.0 are one integer value
        if name in integer:
            return pd.to_numeric(column, errors="coerce").astype(float).astype(str)
        return column.astype(str)

    codes, synthetic_codes, levels = {}, {}, {}
    for name in names:
        values = pd.Index(pd.unique(keys(train[name], name)))
        codes[name] = values.get_indexer(keys(train[name], name))
        synthetic_codes[name] = values.get_indexer(keys(synthetic[name], name))  # -1: a value no real row holds
        levels[name] = len(values)
    shares = []
    for a in names:
        for b in names:
            if a == b or np.bincount(codes[b]).max() >= holds * len(train):
                continue
            counts = np.bincount(codes[a] * levels[b] + codes[b], minlength=levels[a] * levels[b])
            counts = counts.reshape(levels[a], levels[b])
            if counts.max(axis=1).sum() >= holds * len(train):
                rule = np.append(counts.argmax(axis=1), -2)  # index -1 (unseen a) maps to no b
                shares.append(float(np.mean(synthetic_codes[b] == rule[synthetic_codes[a]])))
    return _mean(shares)


def tail_error(train: pd.DataFrame, synthetic: pd.DataFrame, schema, q: float = 0.01) -> float:
    """Mean over the numeric columns of the error of the share of synthetic values below the real ``q`` quantile and
    above the real 1 - ``q`` quantile (each against the real share there), halved: a tail lost or grown."""
    errors = []
    for real, drawn in _numeric_values(train, synthetic, schema):
        low, high = np.quantile(real, [q, 1 - q])
        errors.append((abs(np.mean(drawn < low) - np.mean(real < low))
                       + abs(np.mean(drawn > high) - np.mean(real > high))) / 2)
    return _mean(errors)


def described(train: pd.DataFrame, synthetic: pd.DataFrame, schema, column: str) -> tuple[float, ...]:
    """One column of one release: its synthetic distinct values, the share no real row holds, its own off-grid
    1-way TVD, and the share of its nonzero synthetic values below the smallest nonzero real value or above the
    largest (house prices between 0 and the bottom code)."""
    real, drawn = train[column], synthetic[column]
    tvd = column_tvd(real, drawn, schema.column(column))
    outside = float("nan")
    if schema.column(column).is_numeric:
        nonzero, drawn_nonzero = real[real != 0].dropna(), drawn[drawn != 0].dropna()
        outside = float(((drawn_nonzero < nonzero.min()) | (drawn_nonzero > nonzero.max())).mean())
    return float(drawn.nunique()), float((~drawn.isin(set(real))).mean()), tvd, outside


def compare(dataset: str, variants: dict[str, TableSchema], seeds: list[int], show: list[str] = (),
            charged: bool = False, epsilon: float = 1.0) -> None:
    """Print one row of mean scores per schema variant (each seed: its own DP estimate and release; ``charged``: the
    release's own estimate, paid from its ε)."""
    raw = read_table(dataset_file(dataset))
    reference = load_schema(schema_path(dataset))
    if needs_estimate(reference):  # the reference rows: cleaned with the repository schema's bounds, once
        reference = dp_estimate(raw, reference)[0]
    train, test = split_train_test(validate(raw, reference).table)
    print(" | ".join(("dataset", "schema", *KEYS)), flush=True)
    for label, variant in variants.items():
        rows, shown, steps = [], [], []
        for seed in seeds:
            schema = variant
            if needs_estimate(variant) and not charged:
                schema, estimate = dp_estimate(train, variant)
                steps.append(estimate.found_steps)
            synth, synthetic = fitted_sample(schema, train, seed, epsilon=epsilon)
            if charged and synth.bounds is not None:
                steps.append(synth.bounds.found_steps)
            rows.append({**scores(train, synthetic, reference), "unseen": unseen_share(train, synthetic, reference),
                         "tails": tail_share(train, synthetic, reference),
                         "tstr": best_tstr(train, test, synthetic, reference)})
            shown.append([described(train, synthetic, reference, c) for c in show])
        print_means(dataset, label, rows, KEYS)
        if any(steps):
            print(f"  found steps, per seed: {steps}", flush=True)
        for i, column in enumerate(show):
            distinct, unseen, tvd, outside = np.mean([s[i] for s in shown], axis=0)
            print(f"  {column}: {train[column].nunique()} distinct real values; synthetic {distinct:.0f} distinct, "
                  f"{unseen:.1%} unseen, qtvd1 {tvd:.4f}, {outside:.2%} of the nonzero values beyond the real "
                  "nonzero ones' range", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset")
    parser.add_argument("schemas", nargs="+", help="Schema files, one per variant.")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--show", nargs="*", default=[],
                        help="Columns to describe: distinct and unseen values, qtvd1, values beyond the real range.")
    parser.add_argument("--charged", action="store_true",
                        help="Each release draws its own DP estimate and pays for it from its epsilon.")
    parser.add_argument("--epsilon", type=float, default=1.0, help="The release's epsilon.")
    args = parser.parse_args()
    compare(args.dataset, {path: load_schema(path) for path in args.schemas}, args.seeds, args.show, args.charged,
            args.epsilon)


if __name__ == "__main__":
    main()
