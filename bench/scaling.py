"""Scaling grid: SPLICE time and peak memory per stage on generated tables, n x d.

    .venv/bin/python -m bench.scaling                       # n in {12.5k, 50k, 100k, 200k, 400k} x d in {6, 12, 24}
    .venv/bin/python -m bench.scaling --ns 12500 400000 --ds 24
    .venv/bin/python -m bench.scaling --ns 400000 --ds 24 --matched-precision   # the noise of 12,500 rows at eps

The generator is public and seeded: a latent Gaussian copula with a 3-factor correlation structure plus a
2-component mean shift (a mixture), so columns are genuinely dependent. Numeric columns are monotone transforms
of their latent (uniform-like, cubic-skewed, clipped Gaussian integers) with bounds known from the transform;
categorical columns threshold their latent at unequal quantiles (2, 4 or 7 levels). The schema (public bounds)
is written for each cell via ``splice_assets.schema.parse_schema``. Each cell runs ``bench.splice_runner`` in
its own process under ``/usr/bin/time -v``; rows go to the git-ignored bench/results/raw/scaling/.
``--matched-precision`` runs each n at the epsilon that gives its statistics the noise of 12,500 rows at epsilon
(``equivalent_epsilon``: 0.0272 for 400,000 rows at 1), so the time ratio shows what n itself costs (at one
epsilon, more rows are more precise statistics, and the fit goes further: more Adam steps and tilt iterations).
Results: bench/results/scaling.csv (a rerun of a cell (n, d, method, epsilon) replaces its row) and scaling.md.
"""

from __future__ import annotations

import argparse
import math
import os
import sys

import numpy as np
import pandas as pd
import yaml
from dp_accounting.gaussian_mechanism import get_epsilon_gaussian, get_sigma_gaussian
from scipy.special import ndtr

from bench.common import (
    DELTA,
    RAW_DIR,
    RESULTS_DIR,
    code_version,
    ensure_time_binary,
    log_tail,
    read_json,
    run_timed,
    thread_env,
)
from bench.report import _fmt, machine_header
from bench.run import SPLICE_ARGS
from splice_assets.model.fit import FitConfig
from splice_assets.private.mechanism import (
    DEFAULT_K,
    DEFAULT_MARGINAL_SHARE,
    DEFAULT_N_DIRECTIONS,
    DEFAULT_PAIR_SHARE,
)

NS = [12_500, 50_000, 100_000, 200_000, 400_000]
DS = [6, 12, 24]
SCALING_CSV = RESULTS_DIR / "scaling.csv"
SCALING_MD = RESULTS_DIR / "scaling.md"
STAGES = ["import", "validate", "encode", "measure", "fit", "sample"]
KINDS = ["uniform", "cat2", "skew", "cat4", "gauss_int", "cat7"]


def schema_dict(d: int) -> dict:
    cols = []
    for j in range(d):
        kind = KINDS[j % len(KINDS)]
        name = f"x{j:02d}_{kind}"
        if kind == "uniform":
            cols.append({"name": name, "kind": "continuous", "bounds": [0, 100]})
        elif kind == "skew":
            cols.append({"name": name, "kind": "continuous", "bounds": [0, 1000]})
        elif kind == "gauss_int":
            cols.append({"name": name, "kind": "integer", "bounds": [0, 100]})
        else:
            k = int(kind[3:])
            cols.append({"name": name, "kind": "categorical", "categories": [f"c{i}" for i in range(k)]})
    target = next(c["name"] for c in reversed(cols) if c["kind"] == "categorical")
    return {"name": f"scaling_d{d}", "version": 1, "n_min": 1000, "target": target, "task": "classification",
            "description": "generated latent Gaussian copula / mixture table (bench/scaling.py)", "columns": cols}


def generate(n: int, d: int, seed: int = 0) -> pd.DataFrame:
    """Seeded mixed table with real dependence (3 latent factors + a 2-component mixture shift)."""
    rng = np.random.default_rng([seed, d])
    loadings = rng.normal(0, 1, size=(d, 3)) * 0.8
    shift = rng.normal(0, 1.2, size=d)
    rng_rows = np.random.default_rng([seed, d, n])
    z = rng_rows.standard_normal((n, 3)) @ loadings.T + rng_rows.standard_normal((n, d))
    comp = rng_rows.random(n) < 0.35
    z[comp] += shift
    z = (z - z.mean(0)) / z.std(0)
    spec = schema_dict(d)["columns"]
    out = {}
    for j, c in enumerate(spec):
        kind = KINDS[j % len(KINDS)]
        u = ndtr(z[:, j])
        if kind == "uniform":
            out[c["name"]] = np.round(100 * u, 3)
        elif kind == "skew":
            out[c["name"]] = np.round(1000 * u**3, 2)
        elif kind == "gauss_int":
            out[c["name"]] = np.clip(np.round(50 + 15 * z[:, j]), 0, 100).astype(np.int64)
        else:
            k = len(c["categories"])
            probs = np.linspace(1.0, 0.3, k)
            cuts = np.cumsum(probs / probs.sum())[:-1]
            out[c["name"]] = np.asarray(c["categories"])[np.searchsorted(cuts, u)]
    return pd.DataFrame(out)


def run_cell(n: int, d: int, eps: float, method: str, threads: int) -> dict:
    from splice_assets.schema import parse_schema

    cell_dir = RAW_DIR / "scaling" / f"n{n}_d{d}"
    cell_dir.mkdir(parents=True, exist_ok=True)
    raw = schema_dict(d)
    parse_schema(raw)  # fail here, not in the child, if the generated schema is malformed
    schema_file = cell_dir / "schema.yaml"
    schema_file.write_text(yaml.safe_dump(raw, sort_keys=False))
    data_csv = cell_dir / "data.csv"
    if not data_csv.is_file():
        generate(n, d).to_csv(data_csv, index=False)
    stats_json = cell_dir / f"{method}_stats.json"
    stats_json.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "bench.splice_runner", "--train", str(data_csv), "--schema", str(schema_file),
           "--epsilon", str(eps), "--delta", str(DELTA), "--seed", "0", "--stats", str(stats_json),
           *SPLICE_ARGS[method]]  # fmt: skip
    print(f"[scaling] n={n} d={d} {method}: running", flush=True)
    load1 = os.getloadavg()[0]
    info = run_timed(cmd, cell_dir / f"{method}.log", None, thread_env(threads))
    stats = read_json(stats_json)
    row = {"n": n, "d": d, "method": method, "epsilon": eps, "status": info["status"], "wall_s": info.get("wall_s"),
           "peak_rss_mb": info.get("peak_rss_mb"), "user_s": info.get("user_s"), "threads": threads,
           "load1_start": round(load1, 2), "code_version": code_version()}  # fmt: skip
    for s in STAGES:
        row[f"t_{s}"] = stats.get("seconds", {}).get(s)
        row[f"rss_{s}_mb"] = stats.get("stage_peak_rss_mb", {}).get(s)
    row["fit_steps"] = stats.get("fit_steps")
    row["notes"] = "" if info["status"] == "ok" else log_tail(cell_dir / f"{method}.log")
    print(
        f"[scaling] n={n} d={d} {method}: {row['status']} wall={row['wall_s']:.1f}s rss={row['peak_rss_mb']}MB",
        flush=True,
    )
    return row


def equivalent_epsilon(epsilon: float, n: int, to_n: int) -> float:
    """The epsilon at which ``to_n`` rows get the noise per frequency of ``n`` rows at ``epsilon``: the statistics are
    sums / n, so the Gaussian noise multiplier (the pipeline's analytic calibration) must scale by to_n / n. (Not
    epsilon * n / to_n: at delta = 1e-9 the multiplier grows more slowly than 1 / epsilon.)"""
    return float(get_epsilon_gaussian(get_sigma_gaussian(epsilon, DELTA) * to_n / n, DELTA))


def with_cell(cells: pd.DataFrame, row: dict) -> pd.DataFrame:
    """The grid with ``row`` added; a rerun of a cell (n, d, method, epsilon) replaces its row."""
    if len(cells):
        same = ((cells["n"] == row["n"]) & (cells["d"] == row["d"]) & (cells["method"] == row["method"])
                & np.isclose(cells["epsilon"], row["epsilon"]))
        cells = cells[~same]
    out = pd.concat([cells, pd.DataFrame([row])], ignore_index=True) if len(cells) else pd.DataFrame([row])
    return out.sort_values(["method", "d", "n", "epsilon"])


def _ratios(lo: pd.Series, hi: pd.Series) -> str:
    parts = [f"wall {hi['wall_s'] / lo['wall_s']:.2f}×"]
    for s in ("validate", "measure", "fit", "sample"):
        a, b = lo.get(f"t_{s}"), hi.get(f"t_{s}")
        if a and b and not (math.isnan(a) or math.isnan(b)):
            parts.append(f"{s} {b / a:.2f}×")
    parts.append(f"peak RSS {hi['peak_rss_mb'] / lo['peak_rss_mb']:.2f}×")
    return (f"time(n={int(hi['n']):,}, ε = {hi['epsilon']:g}) / time(n={int(lo['n']):,}, ε = {lo['epsilon']:g}) "
            f"({hi['n'] / lo['n']:.0f}× rows): " + ", ".join(parts))


def write_md(df: pd.DataFrame) -> None:
    lines = machine_header("SPLICE scaling grid")
    lines += [
        "Generated tables (latent Gaussian copula + mixture, half numeric / half categorical; `bench/scaling.py`),",
        "ε = 1 unless the ε column says otherwise (`--matched-precision`: the ε at which n rows get the noise per "
        "frequency of 12,500 rows at ε = 1), δ = 1e-9, seed 0; "
        f"`splice` = product defaults (L = {DEFAULT_N_DIRECTIONS}, k = {DEFAULT_K}, K = "
        f"{FitConfig.K} with {FitConfig.numeric_model} numerics, marginal share {DEFAULT_MARGINAL_SHARE}, pair share "
        f"{DEFAULT_PAIR_SHARE}), `splice_paper` = "
        f"{' '.join(SPLICE_ARGS['splice_paper'])}. One process per cell under `/usr/bin/time -v`:",
        "`wall`/`peak` are the whole process; stage columns are in-process seconds and the peak RSS sampled during",
        "the stage (20 ms). `validate` includes reading the CSV.",
        "",
    ]
    for method, g in df.groupby("method", sort=False):
        lines += [f"## {method}", "",
                  "| n | d | ε | wall s | peak MB | validate s | encode s | measure s | fit s | sample s "
                  "| peak MB validate / measure / fit / sample | fit steps |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for r in g.sort_values(["d", "n", "epsilon"], ascending=[True, True, False]).to_dict("records"):
            mem = " / ".join(_fmt(r.get(f"rss_{s}_mb")) for s in ("validate", "measure", "fit", "sample"))
            wall = _fmt(r["wall_s"]) if r["status"] == "ok" else r["status"]
            steps = "" if pd.isna(r.get("fit_steps")) else str(int(r["fit_steps"]))
            lines.append(f"| {int(r['n']):,} | {int(r['d'])} | {r['epsilon']:g} | {wall} | {_fmt(r['peak_rss_mb'])} | "
                         + " | ".join(_fmt(r.get(f"t_{s}"), 2)
                                      for s in ("validate", "encode", "measure", "fit", "sample"))
                         + f" | {mem} | {steps} |")  # fmt: skip
        lines.append("")
        ok = g[g["status"] == "ok"]
        # Each cell's epsilon at NS[0] rows with the same noise: cells that share it were run at matched noise.
        ok = ok.assign(precision=[round(equivalent_epsilon(e, n, NS[0]), 4) for e, n in zip(ok["epsilon"], ok["n"])])
        for d, gd in ok.groupby("d"):
            # Fixed eps: more rows are more precise statistics. Matched: the same noise per frequency from more rows.
            matched = f"at the noise of {NS[0]:,} rows at ε = {{:g}}"
            for column, label in (("epsilon", "at ε = {:g}"), ("precision", matched)):
                for value, cells in gd.groupby(column):
                    if cells["n"].nunique() < 2 or (column == "precision" and cells["epsilon"].nunique() < 2):
                        continue
                    lo, hi = cells.loc[cells["n"].idxmin()], cells.loc[cells["n"].idxmax()]
                    lines.append(f"- d = {int(d)}, {label.format(value)}: " + _ratios(lo, hi))
        lines.append("")
    if "code_version" in df:
        versions = df["code_version"].fillna("(not recorded)").astype(str).value_counts()
        lines += [
            "Code measured (git HEAD at each cell; `code_version` and the start load average `load1_start` are in "
            "scaling.csv): " + ", ".join(f"`{v}` × {c}" for v, c in versions.items()) + ".",
            "",
        ]
    SCALING_MD.write_text("\n".join(lines))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ns", nargs="+", type=int, default=NS)
    ap.add_argument("--ds", nargs="+", type=int, default=DS)
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--matched-precision", action="store_true",
                    help=f"run each n at the epsilon that gives its statistics the noise of n = {NS[0]:,} at --epsilon")
    ap.add_argument("--methods", default="splice", help="comma list: splice, splice_paper")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    ensure_time_binary()
    for method in [m.strip() for m in args.methods.split(",") if m.strip()]:
        for d in args.ds:
            for n in args.ns:
                eps = equivalent_epsilon(args.epsilon, NS[0], n) if args.matched_precision else args.epsilon
                old = pd.read_csv(SCALING_CSV) if SCALING_CSV.is_file() else pd.DataFrame()
                df = with_cell(old, run_cell(n, d, eps, method, args.threads))
                df.to_csv(SCALING_CSV, index=False, float_format="%.6g")
                write_md(df)
    print(f"[scaling] wrote {SCALING_CSV} and {SCALING_MD}", flush=True)


if __name__ == "__main__":
    main()
