"""Calibration of the answers' 95% intervals (``Synthesizer.answer``, ``splice_assets.queries``) on real tables.

    SPLICE_BENCH_DATASETS=/path/to/datasets PYTHONPATH=. .venv/bin/python -m bench.query_calibration \\
        --datasets fair_affairs churn adult --epsilons 0.3 1 3 --queries 2000 --replicates 10

For each table and epsilon: fit SPLICE on the bench's train split (add-remove, the bench's delta, no ledger, inside
``seeded_noise``; tables above ``--max-rows`` rows are subsampled with a fixed seed), build the query basis
(``--replicates`` re-noised refits), then ask ``--queries`` random conjunctive queries over 1-3 columns: counts
(85%) and means of a numeric column (15%, where the table has one). A query is drawn around a random real row
(each chosen column's condition holds for it: its category, or a range of 5-50% of the column's rows around its
value), so it is never empty; a query drawn twice counts once. The real answer is computed on the measured rows
(``prepare``: cleaned, clipped).

Reported per table, epsilon, interval kind (exact; bootstrap; "bootstrap, cut": a bootstrap answer with more than
25% of its rows in cells the query cuts, ``Answer.cut_share``) and number of columns: the coverage (share of
intervals holding the real answer), the median half-width and the median absolute error (both in rows for counts,
relative to the real mean's absolute value for means), and their ratio. A mean the model cannot answer (fewer than
two of its rows meet the condition) is refused, as it is to a user, and counted apart (``refused``). Writes
bench/results/query_calibration.csv.gz (one row per query) and query_calibration.md (the summary), and the headline
table into docs/benchmarks.md. ``fair_affairs`` is the bundled demo table.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd

from bench.common import DELTA, RESULTS_DIR, dataset_file, seeded_noise, split_train_test
from bench.report import sync_readme

CSV_OUT = RESULTS_DIR / "query_calibration.csv.gz"
DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
DOC_MARKERS = ("<!-- query-intervals:start -->", "<!-- query-intervals:end -->")
MD_OUT = RESULTS_DIR / "query_calibration.md"
SCHEMAS = Path(__file__).resolve().parent.parent / "schemas"
QUERY_SEED = 68
#: A bootstrap answer with more than this share of its rows in cells the query cuts is reported apart.
CUT = 0.25


def load_table(name: str, max_rows: int) -> tuple[pd.DataFrame, Path]:
    from splice_assets.datasets import DEMO_DATASET, demo_data_path, schema_path
    from splice_assets.private.validation import read_table

    if name == DEMO_DATASET:
        table, schema = read_table(demo_data_path()), schema_path(name)
    else:
        table, schema = split_train_test(read_table(dataset_file(name)))[0], SCHEMAS / f"{name}.yaml"
    if len(table) > max_rows:
        table = table.sample(max_rows, random_state=0).reset_index(drop=True)
    return table, schema


def random_queries(real: pd.DataFrame, schema, count: int, rng: np.random.Generator) -> list[str]:  # noqa: ANN001
    """``count`` query texts around random real rows (module doc)."""
    from splice_assets.conditions import parse_where

    columns = [c for c in schema.columns if c.categories is not None or c.bounds is not None]
    numeric = [c.name for c in columns if c.categories is None]
    out: list[str] = []
    while len(out) < count:
        row = real.iloc[int(rng.integers(len(real)))]
        chosen = rng.choice(len(columns), size=min(int(rng.integers(1, 4)), len(columns)), replace=False)
        clauses = []
        for spec in (columns[i] for i in chosen):
            value = row[spec.name]
            if pd.isna(value):
                continue
            if spec.categories is not None:
                clauses.append(f"`{spec.name}` == {value!r}" if isinstance(value, str) else
                               f"`{spec.name}` == {float(value)!r}")
            else:
                values = real[spec.name].dropna().to_numpy(dtype=np.float64)
                at, width = float(np.mean(values < float(value))), float(rng.uniform(0.05, 0.5))
                lo, hi = np.quantile(values, [max(0.0, at - width / 2), min(1.0, at + width / 2)])
                clauses.append(f"`{spec.name}` between {float(lo)!r} and {float(hi)!r}")
        if not clauses:
            continue
        where = " and ".join(clauses)
        try:
            parse_where(where, schema)
        except ValueError:
            continue  # e.g. a value outside the public bounds
        mean_of = [n for n in numeric if n not in where]
        if mean_of and rng.random() < 0.15:
            out.append(f"mean({mean_of[int(rng.integers(len(mean_of)))]}) where {where}")
        else:
            out.append(f"count where {where}")
    return out


def real_answer(query, real: pd.DataFrame, schema) -> float:  # noqa: ANN001
    hold = query.where.holds(real, schema)
    if query.statistic == "count":
        return float(hold.sum())
    values = real[query.column].to_numpy(dtype=np.float64, na_value=np.nan)[hold]
    values = values[np.isfinite(values)]
    return float(values.mean()) if len(values) else float("nan")


def calibrate(name: str, epsilon: float, queries: int, replicates: int, max_rows: int, seed: int) -> pd.DataFrame:
    from splice_assets.api import Synthesizer
    from splice_assets.queries import QueryAnswerer, parse_query
    from splice_assets.schema import load_schema

    table, schema_file = load_table(name, max_rows)
    started = time.perf_counter()
    with seeded_noise(seed):
        synth = Synthesizer(load_schema(schema_file), epsilon, DELTA, relation="add-remove", seed=seed)
        real = synth.prepare(table, ledger=None).table
        synth.measure(synth.encode(real), ledger=None)
        synth.fit_model()
    fitted = time.perf_counter()
    assert synth.measurement is not None
    answerer = QueryAnswerer(synth.measurement, synth.schema, synth.query_basis(replicates))
    based = time.perf_counter()
    rows = []
    for text in random_queries(real, synth.schema, queries, np.random.default_rng([QUERY_SEED, seed])):
        query = parse_query(text, synth.schema)
        row = {"table": name, "epsilon": epsilon, "seed": seed, "query": text, "statistic": query.statistic,
               "columns": len(query.where.columns) + len(query.where.instants),
               "truth": real_answer(query, real, synth.schema), "n": len(real)}
        try:
            answer = answerer.answer(query)
        except ValueError:  # a mean over (almost) no rows of the model: refused, with the reason, to the user
            rows.append({**row, "interval": "refused"})
            continue
        rows.append({**row, "interval": answer.interval, "estimate": answer.estimate, "lower": answer.lower,
                     "upper": answer.upper, "cut_share": answer.cut_share})
    print(f"{name} eps={epsilon}: fit {fitted - started:.0f}s, basis {based - fitted:.0f}s, "
          f"{len(rows)} queries {time.perf_counter() - based:.0f}s", flush=True)
    return pd.DataFrame(rows)


def summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Coverage, median half-width and median |error| per table, epsilon, statistic, interval kind and columns."""
    frame = frame.drop_duplicates(["table", "epsilon", "seed", "query"], keep="last")  # a query drawn twice counts once
    refused = frame[frame.interval == "refused"].groupby(["table", "epsilon"]).size().rename("refused")
    frame = frame.dropna(subset=["truth", "estimate"]).copy()
    if "cut_share" in frame:  # a bootstrap answer with more than CUT of its rows in cells the query cuts
        cut = (frame.interval == "bootstrap") & (frame.cut_share > CUT)
        frame["interval"] = frame.interval.where(~cut, "bootstrap, cut")
    frame["covered"] = (frame.truth >= frame.lower) & (frame.truth <= frame.upper)
    scale = np.where(frame.statistic == "count", 1.0, np.abs(frame.truth).clip(lower=1e-12))
    frame["half_width"] = (frame.upper - frame.lower) / 2 / scale
    frame["abs_error"] = (frame.estimate - frame.truth).abs() / scale
    keys = ["table", "epsilon", "statistic", "interval", "columns"]
    out = frame.groupby(keys).agg(queries=("covered", "size"), coverage=("covered", "mean"),
                                  median_half_width=("half_width", "median"),
                                  median_abs_error=("abs_error", "median")).reset_index()
    overall = frame.groupby(["table", "epsilon"]).agg(queries=("covered", "size"), coverage=("covered", "mean"),
                                                      median_half_width=("half_width", "median"),
                                                      median_abs_error=("abs_error", "median")).reset_index()
    overall[["statistic", "interval", "columns"]] = ["all", "all", 0]
    overall = overall.join(refused, on=["table", "epsilon"]).fillna({"refused": 0})
    out = pd.concat([overall, out]).sort_values(keys, kind="stable")
    out["width_over_error"] = out.median_half_width / out.median_abs_error.clip(lower=1e-12)
    out["refused"] = out.refused.fillna(0).astype(int)
    return out[[*keys, "queries", "refused", "coverage", "median_half_width", "median_abs_error", "width_over_error"]]


def write_markdown(table: pd.DataFrame, path: Path) -> None:
    lines = ["# Query intervals: coverage of the 95% intervals", "",
             "Written by `python -m bench.query_calibration` (module doc: queries, real answers, widths). Half-width "
             "and |error| are in rows for counts and relative to the real mean for means; columns 0 = all queries.",
             "", "| table | ε | statistic | interval | columns | queries | refused | coverage | median half-width | "
             "median abs error | width / error |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in table.itertuples(index=False):
        lines.append(f"| {r.table} | {r.epsilon:g} | {r.statistic} | {r.interval} | {r.columns} | {r.queries} | "
                     f"{r.refused} | {r.coverage:.3f} | {r.median_half_width:.4g} | {r.median_abs_error:.4g} | "
                     f"{r.width_over_error:.2f} |")
    path.write_text("\n".join(lines) + "\n")


def headline(table: pd.DataFrame) -> str:
    """docs/benchmarks.md's table: coverage and width over error per table and epsilon, all queries and per kind."""
    rows = table[table.statistic == "all"]
    kinds = table[table.statistic != "all"].groupby(["table", "epsilon", "interval"]).apply(
        lambda g: pd.Series({"queries": g.queries.sum(), "coverage": np.average(g.coverage, weights=g.queries)}),
        include_groups=False).reset_index()
    lines = ["| table | ε | queries | refused | coverage | width / error | exact: coverage (queries) | "
             f"bootstrap, ≤ {CUT:.0%} cut | bootstrap, more cut |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows.itertuples(index=False):
        cells = []
        for kind in ("exact", "bootstrap", "bootstrap, cut"):
            k = kinds[(kinds.table == r.table) & (kinds.epsilon == r.epsilon) & (kinds.interval == kind)]
            cells.append(f"{k.coverage.iloc[0]:.3f} ({int(k.queries.iloc[0])})" if len(k) else "–")
        lines.append(f"| {r.table} | {r.epsilon:g} | {r.queries} | {r.refused} | {r.coverage:.3f} | "
                     f"{r.width_over_error:.2f} | {' | '.join(cells)} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", nargs="+", default=["fair_affairs"])
    ap.add_argument("--epsilons", nargs="+", type=float, default=[0.3, 1.0, 3.0])
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--replicates", type=int, default=10)
    ap.add_argument("--max-rows", type=int, default=20_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--append", action="store_true",
                    help="keep the existing results of other tables and epsilons instead of replacing them all")
    ap.add_argument("--csv", type=Path, default=CSV_OUT, help="where the per-query rows go (a second run in parallel "
                    "writes its own file, merged by --merge)")
    ap.add_argument("--merge", type=Path, nargs="*", default=None,
                    help="run nothing: add these per-query files to the results and rewrite the summaries")
    args = ap.parse_args()
    if args.merge is not None:
        results = pd.concat([pd.read_csv(f) for f in [CSV_OUT, *args.merge] if f.exists()], ignore_index=True)
        results = results.drop_duplicates(["table", "epsilon", "seed", "query"], keep="last")  # a rerun replaces
        write_results(results)
        return
    kept = pd.read_csv(args.csv) if args.append and args.csv.exists() else pd.DataFrame(columns=["table", "epsilon"])
    frames = [kept[~(kept.table.isin(args.datasets) & kept.epsilon.isin(args.epsilons))]]  # a rerun replaces them
    for name in args.datasets:
        for epsilon in args.epsilons:
            frames.append(calibrate(name, epsilon, args.queries, args.replicates, args.max_rows, args.seed))
            results = pd.concat(frames, ignore_index=True)
            results.to_csv(args.csv, index=False)
    if args.csv == CSV_OUT:
        write_results(results)


def write_results(results: pd.DataFrame) -> None:
    """The per-query rows, their summary (query_calibration.md) and the headline in docs/benchmarks.md."""
    results.to_csv(CSV_OUT, index=False, float_format="%.6g")
    write_markdown(summary(results), MD_OUT)
    sync_readme(headline(summary(results)), DOC, DOC_MARKERS)
    print(MD_OUT.read_text())


if __name__ == "__main__":
    main()
