"""The platform kinds on a real table: NYC taxi trips (datetimes, a rule between them, open-domain zones).

    SPLICE_BENCH_DATASETS=/path/to/datasets PYTHONPATH=. .venv/bin/python -m bench.platform_kinds --seeds 0 1 2

Reads ``<datasets>/taxis/data.csv.gz`` with ``schemas/taxis.yaml`` (written from ``splice schema init``), splits it
80/20 (``bench.common.split_train_test``), fits SPLICE at epsilon 1 (add-remove, the bench's delta, no ledger) inside
``seeded_noise(seed)`` and samples as many rows as the train split has. Every method's rows are scored in the user's
form (datetime64 columns, zone strings) against the real train split:

- ``<col>_hour_tvd`` / ``_weekday_tvd`` / ``_day_tvd`` / ``_decile_tvd``: the TVD of pickup / dropoff at hour of day
  (24 cells), weekday (7), calendar day (March's 31 days, plus any day at the edges) and the real train deciles;
- ``duration_decile_tvd``, ``duration_median_s`` / ``duration_p95_s`` (dropoff - pickup in seconds; the real
  train's values are in the ``real_train`` column);
- ``<zone>_top20_tvd``: the TVD over the real train's 20 most frequent zones plus one cell for every other value
  (``Other``, other zones and missing); ``<zone>_other_share``: the share of rows labelled ``Other``;
  ``<zone>_n_kept``: how many zones the DP selection kept (SPLICE);
- ``viol_dropoff_before_pickup`` / ``viol_tip_over_fare``: rows breaking the schema's rules (must be 0 for SPLICE);
- ``tstr_auc``: TSTR ROC AUC for ``payment`` (best learner; ``splice_assets.evaluation.metrics.tstr`` on the
  modelled view of the rows, tested on the real test split), and the standard bench score (``bench.run.score``:
  tvd1/2/3, qtvd1/2, detection AUC, ...) on the same view.

``splice_listed_zones`` is SPLICE with the zones declared as a public list (``public_zone_schema``) instead of
``categories: auto``. The references, in the same run and with the same metrics (non-DP, seeded by the same seed):
``independent`` (each raw column resampled independently from the train rows), ``bootstrap`` (the train rows
resampled) and ``gaussian_copula`` (an SDV-style Gaussian copula on empirical marginals, categories ordered by
frequency). Writes
bench/results/platform_kinds.csv (one row per method, seed and metric) and platform_kinds.md (median over seeds).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd

from bench.common import DELTA, RESULTS_DIR, dataset_file, seeded_noise, split_train_test

SCHEMA_FILE = Path(__file__).resolve().parent.parent / "schemas" / "taxis.yaml"
CSV_OUT = RESULTS_DIR / "platform_kinds.csv"
MD_OUT = RESULTS_DIR / "platform_kinds.md"
TIMES = ("pickup", "dropoff")
ZONES = ("pickup_zone", "dropoff_zone")
OTHER = "Other"
TOP_ZONES = 20
DECILES = np.linspace(0.1, 0.9, 9)
METHODS = ("splice", "splice_listed_zones", "independent", "bootstrap", "gaussian_copula")


# ----------------------------------------------------------------------------------------------------------------
# Metrics on rows in the user's form
# ----------------------------------------------------------------------------------------------------------------


def tvd(real: pd.Series, synthetic: pd.Series) -> float:
    """Total variation distance of two columns of cell labels (missing is a cell of its own)."""
    r = real.astype(object).where(real.notna(), "<NA>").value_counts(normalize=True)
    s = synthetic.astype(object).where(synthetic.notna(), "<NA>").value_counts(normalize=True)
    return 0.5 * float(r.sub(s, fill_value=0.0).abs().sum())


def stamps(series: pd.Series) -> pd.Series:
    """A datetime column (text or datetime64, naive or zoned) as naive wall-clock datetime64[ns]."""
    out = pd.to_datetime(series, errors="coerce", format="mixed") if not pd.api.types.is_datetime64_any_dtype(
        series.dtype) else series
    if isinstance(out.dtype, pd.DatetimeTZDtype):
        out = out.dt.tz_localize(None)
    return out.astype("datetime64[ns]").reset_index(drop=True)


def seconds(series: pd.Series) -> np.ndarray:
    """Seconds since 1970 (NaN where missing)."""
    ns = stamps(series).to_numpy(dtype="datetime64[ns]").astype(np.int64)
    return np.where(ns == np.iinfo(np.int64).min, np.nan, ns / 1e9)


def decile_tvd(real: np.ndarray, synthetic: np.ndarray) -> float:
    """TVD on the real values' deciles (ties merged; missing a cell of its own)."""
    edges = np.unique(np.nanquantile(real, DECILES))

    def binned(v: np.ndarray) -> pd.Series:
        return pd.Series(np.where(np.isnan(v), -1, np.searchsorted(edges, v, side="right")))

    return tvd(binned(real), binned(synthetic))


def time_metrics(real: pd.Series, synthetic: pd.Series, prefix: str) -> dict[str, float]:
    """A datetime column at hour-of-day, weekday, calendar-day and decile resolution."""
    r, s = stamps(real), stamps(synthetic)
    return {
        f"{prefix}_hour_tvd": tvd(r.dt.hour, s.dt.hour),
        f"{prefix}_weekday_tvd": tvd(r.dt.day_of_week, s.dt.day_of_week),
        f"{prefix}_day_tvd": tvd(r.dt.strftime("%Y-%m-%d"), s.dt.strftime("%Y-%m-%d")),
        f"{prefix}_decile_tvd": decile_tvd(seconds(real), seconds(synthetic)),
        f"{prefix}_off_grid_share": float((s.dt.microsecond + s.dt.nanosecond != 0).mean()),
    }


def durations(table: pd.DataFrame) -> np.ndarray:
    return seconds(table["dropoff"]) - seconds(table["pickup"])


def duration_metrics(real: pd.DataFrame, synthetic: pd.DataFrame) -> dict[str, float]:
    """Trip duration (dropoff - pickup, seconds): decile TVD against the real one, and the synthetic median / p95."""
    r, s = durations(real), durations(synthetic)
    return {
        "duration_decile_tvd": decile_tvd(r, s),
        "duration_median_s": float(np.nanmedian(s)),
        "duration_p95_s": float(np.nanquantile(s, 0.95)),
    }


def zone_metrics(real: pd.Series, synthetic: pd.Series, prefix: str, top: int = TOP_ZONES) -> dict[str, float]:
    """TVD over the real top zones plus one cell for everything else, and the share of rows labelled ``Other``."""
    top_zones = set(real.dropna().astype(str).value_counts().index[:top])

    def folded(v: pd.Series) -> pd.Series:
        text = v.astype(object).where(v.notna(), None)
        return text.map(lambda z: z if z in top_zones else "<rest>")

    return {
        f"{prefix}_top{top}_tvd": tvd(folded(real), folded(synthetic)),
        f"{prefix}_other_share": float((synthetic.astype(object) == OTHER).mean()),
    }


def rule_violations(table: pd.DataFrame) -> dict[str, float]:
    """Rows breaking the schema's rules ``dropoff >= pickup`` and ``tip <= fare`` (counts), and the documented
    identity the schema does not declare (``total >= fare + tip + tolls``, the fees being >= 0)."""
    tip, fare, tolls, total = (pd.to_numeric(table[c], errors="coerce").to_numpy(dtype=float)
                               for c in ("tip", "fare", "tolls", "total"))
    return {
        "viol_dropoff_before_pickup": float(np.sum(durations(table) < 0)),
        "viol_tip_over_fare": float(np.sum(tip > fare + 1e-9)),
        "total_below_parts_share": float(np.mean(total < fare + tip + tolls - 0.005)),
    }


def platform_metrics(real: pd.DataFrame, synthetic: pd.DataFrame) -> dict[str, float]:
    """Every metric of the new kinds for ``synthetic`` against ``real`` (both in the user's form)."""
    out: dict[str, float] = {}
    for col in TIMES:
        out.update(time_metrics(real[col], synthetic[col], col))
    out.update(duration_metrics(real, synthetic))
    for col in ZONES:
        out.update(zone_metrics(real[col], synthetic[col], col))
    out.update(rule_violations(synthetic))
    return out


def real_reference(real: pd.DataFrame) -> dict[str, float]:
    """The real train split's own values of the metrics that are levels, not distances."""
    d = durations(real)
    return {"duration_median_s": float(np.nanmedian(d)), "duration_p95_s": float(np.nanquantile(d, 0.95)),
            **rule_violations(real), **{f"{z}_other_share": float((real[z].astype(object) == OTHER).mean())
                                        for z in ZONES}}


# ----------------------------------------------------------------------------------------------------------------
# Non-DP references
# ----------------------------------------------------------------------------------------------------------------


def independent_columns(train: pd.DataFrame, n: int, seed: int) -> pd.DataFrame:
    """Each raw column resampled independently from the train rows."""
    rng = np.random.default_rng([seed, 1])
    return pd.DataFrame({c: train[c].iloc[rng.integers(0, len(train), n)].to_numpy() for c in train.columns})


def bootstrap_rows(train: pd.DataFrame, n: int, seed: int) -> pd.DataFrame:
    """The train rows resampled with replacement."""
    return train.iloc[np.random.default_rng([seed, 2]).integers(0, len(train), n)].reset_index(drop=True)


def gaussian_copula(train: pd.DataFrame, n: int, seed: int) -> pd.DataFrame:
    """SDV-style Gaussian copula on empirical marginals: each column to normal scores by its rank (datetimes and
    numbers by value, categories by frequency, ties broken at random), one correlation matrix, and each sampled
    score back through the column's empirical quantiles (non-DP)."""
    from scipy.stats import norm

    rng = np.random.default_rng([seed, 3])
    keys, ordered = [], {}
    for c in train.columns:
        v = train[c]
        if c in TIMES:
            key = seconds(v)
        else:
            number = pd.to_numeric(v, errors="coerce")
            key = number.to_numpy(dtype=float) if number.notna().sum() >= v.notna().sum() else (
                -v.astype(object).map(v.astype(object).value_counts(dropna=False)).fillna(0).to_numpy(dtype=float))
        order = np.lexsort((rng.uniform(size=len(v)), np.nan_to_num(key, nan=np.inf)))
        ranks = np.empty(len(v))
        ranks[order] = np.arange(len(v))
        keys.append(norm.ppf((ranks + 0.5) / len(v)))
        ordered[c] = v.iloc[order].reset_index(drop=True)
    z = rng.multivariate_normal(np.zeros(len(keys)), np.corrcoef(np.column_stack(keys), rowvar=False), size=n)
    index = np.minimum((norm.cdf(z) * len(train)).astype(np.int64), len(train) - 1)
    return pd.DataFrame({c: ordered[c].iloc[index[:, i]].to_numpy() for i, c in enumerate(train.columns)})


REFERENCES = {"independent": independent_columns, "bootstrap": bootstrap_rows, "gaussian_copula": gaussian_copula}


# ----------------------------------------------------------------------------------------------------------------
# The run
# ----------------------------------------------------------------------------------------------------------------


def standard_score(schema, train_raw: pd.DataFrame, test_raw: pd.DataFrame, synthetic: pd.DataFrame) -> dict:
    """``bench.run.score`` (tvd1/2/3, qtvd, detection, TSTR, ...) on the modelled view, against the real splits
    validated with the fitted (resolved) schema."""
    import dataclasses

    from bench.run import Prepared, score
    from splice_assets.private.validation import modelled_view, validate

    train = validate(train_raw, schema).table
    test = validate(test_raw, dataclasses.replace(schema, n_min=1)).table
    p = Prepared("taxis", schema, SCHEMA_FILE, train, test, Path(), Path())
    s = score(p, modelled_view(synthetic, schema))
    keep = ("tvd1", "tvd2", "tvd3", "qtvd1", "qtvd2", "range_mae", "det_auc_xgb", "dcr_closer_train", "dup_rows",
            "tstr", "tstr_acc")
    return {("tstr_auc" if k == "tstr" else k): s.get(k) for k in keep}


def clipped_shares(train: pd.DataFrame, synth) -> dict[str, float]:
    """Per column with DP-estimated bounds, the share of the train rows outside them (what the bounds clip)."""
    from splice_assets.lowering import lower_input

    if synth.bounds is None:
        return {}
    lowered = lower_input(train, synth.schema)
    out = {}
    for name, (lo, hi) in synth.bounds.columns.items():
        values = pd.to_numeric(lowered[name], errors="coerce").to_numpy(dtype=float)
        out[name] = round(float(np.mean((values < lo) | (values > hi))), 4)
    return out


def public_zone_schema(raw: pd.DataFrame):
    """``schemas/taxis.yaml`` with the zones declared as a public list instead of ``categories: auto``: the TLC zone
    lookup (263 zones) is public, a user would list it; the bench has only the trips, so the zones they name stand in
    for it (every zone of the whole table: a stand-in that a real release would take from the lookup file)."""
    import dataclasses

    from splice_assets import load_schema

    schema = load_schema(SCHEMA_FILE)
    zones = sorted(set(raw["pickup_zone"].dropna()) | set(raw["dropoff_zone"].dropna()))
    columns = tuple(dataclasses.replace(c, categories=(*zones, OTHER), other=OTHER) if c.name in ZONES else c
                    for c in schema.columns)
    return dataclasses.replace(schema, columns=columns)


def fit_splice(train: pd.DataFrame, epsilon: float, seed: int, schema=None):
    from splice_assets import Synthesizer, load_schema

    schema = schema or load_schema(SCHEMA_FILE)
    synth = Synthesizer(schema, epsilon=epsilon, delta=DELTA, relation="add-remove")
    t = time.perf_counter()
    with seeded_noise(seed):
        synth.fit(train, ledger=None)
    fit_s = time.perf_counter() - t
    t = time.perf_counter()
    rows = synth.sample(len(train), seed=seed)
    return synth, rows, {"fit_s": fit_s, "sample_s": time.perf_counter() - t}


def run(seeds: list[int], epsilon: float, with_score: bool = True, show_rows: int = 15) -> pd.DataFrame:
    from splice_assets.private.validation import read_table

    raw = read_table(dataset_file("taxis"))
    train, test = split_train_test(raw)
    records: list[dict] = []
    for name, value in real_reference(train).items():
        records.append({"method": "real_train", "seed": 0, "metric": name, "value": value})
    listed = public_zone_schema(raw)
    for seed in seeds:
        listed_synth, listed_rows, listed_timing = fit_splice(train, epsilon, seed, listed)
        synth, rows, timing = fit_splice(train, epsilon, seed)
        kept = {z: len(synth.schema.column(z).categories or ()) - 1 for z in ZONES}  # without Other
        clipped = clipped_shares(train, synth)
        print(f"[platform_kinds] seed {seed}: fit {timing['fit_s']:.1f}s, sample {timing['sample_s']:.1f}s, "
              f"{len(rows)} rows; zones kept {kept}; DP bounds {synth.bounds.columns if synth.bounds else None} "
              f"clip these shares of the train rows: {clipped}", flush=True)
        if seed == seeds[0] and show_rows:
            with pd.option_context("display.width", 250, "display.max_columns", 20):
                print("[platform_kinds] real train rows:\n", train.head(show_rows).to_string(), flush=True)
                print("[platform_kinds] SPLICE rows:\n", rows.head(show_rows).to_string(), flush=True)
        tables = {"splice": rows, "splice_listed_zones": listed_rows,
                  **{m: f(train, len(train), seed) for m, f in REFERENCES.items()}}
        for method, table in tables.items():
            metrics = platform_metrics(train, table)
            if method == "splice":
                metrics.update(timing)
                metrics.update({f"{z}_n_kept": float(n) for z, n in kept.items()})
                metrics.update({f"clipped_{c}": v for c, v in clipped.items()})
            if method == "splice_listed_zones":
                metrics.update(listed_timing)
            if with_score:
                scored = listed_synth if method == "splice_listed_zones" else synth
                metrics.update(standard_score(scored.schema, train, test, table))
            records += [{"method": method, "seed": seed, "metric": k, "value": v} for k, v in metrics.items()]
    return pd.DataFrame(records)


def summary(results: pd.DataFrame) -> pd.DataFrame:
    """Metric x method, the median over seeds, in the metrics' first-seen order."""
    order = list(dict.fromkeys(results["metric"]))
    methods = [m for m in ("real_train", *METHODS) if m in set(results["method"])]
    table = results.pivot_table(index="metric", columns="method", values="value", aggfunc="median")
    return table.reindex(index=order, columns=methods)


def markdown(table: pd.DataFrame, note: str) -> str:
    def cell(v: float) -> str:
        return "" if pd.isna(v) else (f"{v:.0f}" if abs(v) >= 100 or float(v).is_integer() else f"{v:.4f}")

    lines = [note, "", "| metric | " + " | ".join(table.columns) + " |", "|---" * (len(table.columns) + 1) + "|"]
    lines += [f"| {m} | " + " | ".join(cell(v) for v in row) + " |" for m, row in table.iterrows()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--no-score", action="store_true", help="skip the standard bench score (faster)")
    args = ap.parse_args(argv)
    t = time.perf_counter()
    results = run(args.seeds, args.epsilon, with_score=not args.no_score)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    results.to_csv(CSV_OUT, index=False, float_format="%.6g")
    note = (f"taxis (schemas/taxis.yaml), SPLICE at epsilon {args.epsilon:g}, delta {DELTA:g}, add-remove; "
            f"median over seeds {args.seeds}; every metric against the real train split "
            f"(`python -m bench.platform_kinds`, {time.perf_counter() - t:.0f} s). real_train: the train split's own "
            "levels; tvd1 .. tstr_acc: bench.run.score on the modelled view, the real splits validated with each "
            "seed's fitted schema (zones folded to its kept list + Other); tstr tested on the real test split. "
            "Per seed: bench/results/platform_kinds.csv.")
    text = markdown(summary(results), note)
    MD_OUT.write_text(text)
    print(text, flush=True)
    print(f"[platform_kinds] wrote {CSV_OUT} and {MD_OUT}", flush=True)


if __name__ == "__main__":
    main()
