"""Issue 69's speed table from one run: SPLICE and MST side by side, interleaved, under add-remove.

    export SPLICE_BENCH_DATASETS=/path/to/datasets
    .venv/bin/python -m bench.speed                                   # the issue's five rows, seed 0
    .venv/bin/python -m bench.speed --rows adult:1,adult:10 --seeds 0 1
    .venv/bin/python -m bench.speed --report-only                    # rebuild speed.md from speed.csv

Each (table, epsilon, seed) runs ``splice_add_remove`` and ``mst`` (smartnoise at its own add-remove epsilon) one
after the other through ``bench.run``'s own machinery (``prepare``, ``run_method``, ``score_file``): each in its own
process under ``/usr/bin/time -v`` with one BLAS/torch thread, scored by the same metrics and SDMetrics. The order
alternates from one cell to the next (SPLICE first, then MST first, ...), so a busy neighbour weighs on both.
CPU is user + system seconds of the whole process (imports included); SPLICE's fit stage comes from
``bench/splice_runner.py``'s stats JSON (CPU and wall of the stage, Adam steps, tilt iterations).

Writes bench/results/speed.csv (one row per run, written after every run, so an interrupted run keeps what finished)
and bench/results/speed.md (per (table, epsilon): medians over seeds; then the fit's epsilon = 10 / epsilon = 1 CPU
ratio per table). ``--save-results`` also merges the rows into bench/results/results.csv (``bench.run.save_rows``,
which regenerates results.md and the summary in docs/benchmarks.md); by default results.csv is left alone.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pandas as pd

from bench.common import RESULTS_DIR, read_json

SPLICE = "splice_add_remove"
PEER = "mst"
DEFAULT_ROWS = "adult:1,adult:10,adult:0.1,california_housing:1,fars:1"
SPEED_CSV = RESULTS_DIR / "speed.csv"
SPEED_MD = RESULTS_DIR / "speed.md"
#: The issue's targets: MST / SPLICE CPU at least this, and the fit's CPU at epsilon 10 at most this times epsilon 1's.
TARGET_RATIO = 5.0
TARGET_FIT_RATIO = 1.3
#: Quality columns shown per method (those bench.run computes; sdm_quality only where SDMetrics ran).
QUALITY = [("tvd2", "2-way"), ("tvd3", "3-way"), ("tstr", "TSTR"), ("qtvd2", "q 2-way"), ("sdm_quality", "SDM")]
SPEED_COLUMNS = [
    "dataset", "epsilon", "seed", "method", "order", "status", "cpu_s", "user_s", "sys_s", "wall_s", "peak_rss_mb",
    "fit_cpu_s", "fit_wall_s", "measure_cpu_s", "sample_cpu_s", "fit_steps", "tilt_iterations",
    "target_tilt_iterations",
    "tvd1", "tvd2", "tvd3", "tstr", "tstr_metric", "det_auc_xgb", "qtvd1", "qtvd2", "range_mae",
    "sdm_quality", "sdm_shapes", "sdm_pairs", "load1_start", "code_version",
]  # fmt: skip


def parse_rows(text: str) -> list[tuple[str, float]]:
    """``"adult:1,adult:10"`` -> ``[("adult", 1.0), ("adult", 10.0)]``."""
    rows = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, eps = item.rpartition(":")
        if not sep or not name:
            raise ValueError(f"a row is table:epsilon, got {item!r}")
        rows.append((name, float(eps)))
    return rows


def stage_fields(stats: dict) -> dict:
    """SPLICE's fit (and neighbouring stages) from bench/splice_runner.py's stats JSON; empty for a peer."""
    cpu, wall = stats.get("cpu_seconds", {}), stats.get("seconds", {})
    return {
        "fit_cpu_s": cpu.get("fit"), "fit_wall_s": wall.get("fit"), "measure_cpu_s": cpu.get("measure"),
        "sample_cpu_s": cpu.get("sample"), "fit_steps": stats.get("fit_steps"),
        "tilt_iterations": stats.get("tilt_iterations"), "target_tilt_iterations": stats.get("target_tilt_iterations"),
    }  # fmt: skip


# ----------------------------------------------------------------------------------------------------------------
# The table (pure: from speed.csv's rows)
# ----------------------------------------------------------------------------------------------------------------


def _num(v) -> float:
    try:
        v = float(v)
    except (TypeError, ValueError):
        return math.nan
    return v


def _f(v, digits: int = 1) -> str:
    v = _num(v)
    return "" if math.isnan(v) else f"{v:,.{digits}f}"


def _q(v) -> str:
    v = _num(v)
    return "" if math.isnan(v) else f"{v:.3f}"


def _pair(a, b, fmt=_q) -> str:
    return f"{fmt(a) or '–'} / {fmt(b) or '–'}"


def _median(df: pd.DataFrame, column: str) -> float:
    if column not in df:
        return math.nan
    values = pd.to_numeric(df[column], errors="coerce").dropna()
    return float(values.median()) if len(values) else math.nan


def cells(df: pd.DataFrame) -> list[dict]:
    """Per (dataset, epsilon) in first-seen order: medians over the ok seeds of each method's numbers."""
    df = df[df["status"] == "ok"] if "status" in df else df
    out = []
    for (name, eps), cell in df.groupby(["dataset", "epsilon"], sort=False):
        ours, peer = cell[cell["method"] == SPLICE], cell[cell["method"] == PEER]
        row = {"dataset": name, "epsilon": float(eps), "seeds": int(ours["seed"].nunique()),
               "peer_seeds": int(peer["seed"].nunique())}  # fmt: skip
        for col in ["cpu_s", "wall_s", "peak_rss_mb", *(c for c, _ in QUALITY)]:
            row[f"{col}_splice"], row[f"{col}_peer"] = _median(ours, col), _median(peer, col)
        for col in ["fit_cpu_s", "fit_wall_s", "fit_steps", "tilt_iterations"]:
            row[col] = _median(ours, col)
        row["ratio"] = row["cpu_s_peer"] / row["cpu_s_splice"] if row["cpu_s_splice"] > 0 else math.nan
        out.append(row)
    return out


def fit_ratios(df: pd.DataFrame, high: float = 10.0, low: float = 1.0) -> dict[str, tuple[float, float, float]]:
    """Per dataset with SPLICE rows at both epsilons: (fit CPU at ``low``, at ``high``, high / low), medians over
    seeds."""
    out = {}
    for row_low in cells(df):
        if row_low["epsilon"] != low:
            continue
        for row_high in cells(df):
            if row_high["dataset"] == row_low["dataset"] and row_high["epsilon"] == high:
                a, b = row_low["fit_cpu_s"], row_high["fit_cpu_s"]
                out[row_low["dataset"]] = (a, b, b / a if a > 0 else math.nan)
    return out


def speed_table(df: pd.DataFrame) -> list[str]:
    """The markdown table of issue 69 (CPU, wall, peak RSS, MST / SPLICE, the fit, the metrics), then the fit's
    epsilon = 10 / epsilon = 1 ratio per table."""
    quality = [(c, label) for c, label in QUALITY if c in df and pd.to_numeric(df[c], errors="coerce").notna().any()]
    head = ["table, ε (add-remove)", "seeds", "SPLICE CPU s", "MST CPU s", "MST / SPLICE", "wall s SPLICE / MST",
            "peak RSS MB SPLICE / MST", "fit CPU s", "Adam steps", "tilt iterations",
            *(f"{label} SPLICE / MST" for _, label in quality)]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in cells(df):
        seeds = str(r["seeds"]) if r["seeds"] == r["peer_seeds"] else f"{r['seeds']} / {r['peer_seeds']}"
        ratio = "" if math.isnan(r["ratio"]) else f"{r['ratio']:.1f}×"
        cols = [f"{r['dataset']}, {r['epsilon']:g}", seeds, _f(r["cpu_s_splice"]), _f(r["cpu_s_peer"]), ratio,
                _pair(r["wall_s_splice"], r["wall_s_peer"], _f), _pair(r["peak_rss_mb_splice"], r["peak_rss_mb_peer"],
                lambda v: _f(v, 0)), _f(r["fit_cpu_s"]), _f(r["fit_steps"], 0), _f(r["tilt_iterations"], 0),
                *(_pair(r[f"{c}_splice"], r[f"{c}_peer"]) for c, _ in quality)]  # fmt: skip
        lines.append("| " + " | ".join(cols) + " |")
    ratios = fit_ratios(df)
    if ratios:
        lines += ["", "SPLICE's fit stage, CPU s at ε = 1 → ε = 10 (target ≤ "
                  f"{TARGET_FIT_RATIO:g}×):"]  # fmt: skip
        for name, (a, b, q) in ratios.items():
            lines.append(f"- {name}: {_f(a)} → {_f(b)} = {q:.2f}×")
    shown = [r for r in cells(df) if not math.isnan(r["ratio"])]
    if shown:
        short = [f"{r['dataset']} ε={r['epsilon']:g}" for r in shown if r["ratio"] < TARGET_RATIO]
        lines += ["", f"MST / SPLICE CPU ≥ {TARGET_RATIO:g}× (the issue's target): "
                  + ("every row" if not short else "missed at " + ", ".join(short)) + "."]  # fmt: skip
    return lines


def write_report(df: pd.DataFrame, path: Path, command: str) -> list[str]:
    from bench.report import machine_header

    loads = pd.to_numeric(df.get("load1_start", pd.Series(dtype=float)), errors="coerce").dropna()
    versions = sorted(set(df.get("code_version", pd.Series(dtype=str)).dropna().astype(str)))
    table = speed_table(df)
    text = [
        *machine_header("Speed: SPLICE against MST (issue 69)"),
        f"`{command}`: `{SPLICE}` and `{PEER}` (smartnoise at its own add-remove ε) interleaved, one thread each, "
        "CPU = user + system s of the whole process (imports included), medians over seeds; quality columns as "
        "in results.md (2-way / 3-way TVD lower, TSTR and SDMetrics' quality higher). The fit: SPLICE's fit stage "
        "(CPU s, Adam steps, tilt iterations) from bench/splice_runner.py. One row per run: speed.csv.",
        "",
        *table,
        "",
        f"1-minute load at the runs' start: {loads.min():.2f}–{loads.max():.2f}; code: {', '.join(versions)}."
        if len(loads)
        else "",
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(text).rstrip() + "\n")
    return table


# ----------------------------------------------------------------------------------------------------------------
# Running
# ----------------------------------------------------------------------------------------------------------------


def run(rows: list[tuple[str, float]], seeds: list[int], threads: int, sdmetrics: bool, save_results: bool,
        csv_path: Path) -> pd.DataFrame:  # fmt: skip
    from bench.common import ensure_time_binary
    from bench.run import ensure_peers_venv, prepare, run_dir, run_method, save_rows, score_file
    from bench.tails import run_noise

    ensure_time_binary()
    print(f"[speed] peers venv: {ensure_peers_venv()}", flush=True)
    prepared: dict[str, object] = {}
    done: list[dict] = []
    jobs = [(name, eps, seed) for name, eps in rows for seed in seeds]
    for i, (name, eps, seed) in enumerate(jobs):
        if name not in prepared:
            prepared[name] = prepare(name)
        p = prepared[name]
        if p is None:
            continue
        for order, method in enumerate((SPLICE, PEER) if i % 2 == 0 else (PEER, SPLICE)):
            row, synth = run_method(p, method, eps, seed, threads, aim_timeout=math.inf)
            row["concurrent"] = False
            if synth is not None:
                noise = run_noise(p.schema, read_json(synth.parent / "stats.json"), eps) if method == SPLICE else None
                row.update(score_file(p, synth, sdmetrics, noise))
            if save_results:
                save_rows([row])
            stats = read_json(run_dir(p, method, eps, seed) / "stats.json")
            user, sys_ = _num(row.get("user_s")), _num(row.get("sys_s"))
            done.append({**row, **(stage_fields(stats) if method == SPLICE else {}), "order": order,
                         "cpu_s": user + sys_})  # fmt: skip
            pd.DataFrame(done).reindex(columns=SPEED_COLUMNS).to_csv(csv_path, index=False, float_format="%.6g")
            print(f"[speed] {name} eps={eps:g} seed={seed} {method}: {row['status']} cpu={user + sys_:.1f}s "
                  f"wall={_num(row.get('wall_s')):.1f}s rss={_num(row.get('peak_rss_mb')):.0f}MB "
                  f"tvd2={_num(row.get('tvd2')):.4f}", flush=True)  # fmt: skip
    return pd.DataFrame(done).reindex(columns=SPEED_COLUMNS)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default=DEFAULT_ROWS, help=f"comma list of table:epsilon (default {DEFAULT_ROWS})")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--threads", type=int, default=1, help="BLAS/torch threads of every method process")
    ap.add_argument("--no-sdmetrics", dest="sdmetrics", action="store_false", help="skip SDMetrics' QualityReport")
    ap.add_argument("--save-results", action="store_true", help="also merge the rows into bench/results/results.csv")
    ap.add_argument("--report-only", action="store_true", help="rebuild speed.md from speed.csv, running nothing")
    ap.add_argument("--csv", type=Path, default=SPEED_CSV)
    ap.add_argument("--md", type=Path, default=SPEED_MD)
    args = ap.parse_args(argv)
    if args.report_only:
        df = pd.read_csv(args.csv)
        rows = ",".join(dict.fromkeys(f"{d}:{e:g}" for d, e in zip(df["dataset"], df["epsilon"], strict=True)))
        seeds = sorted(set(df["seed"].astype(int)))
    else:
        df = run(parse_rows(args.rows), args.seeds, args.threads, args.sdmetrics, args.save_results, args.csv)
        rows, seeds = args.rows, args.seeds
    table = write_report(df, args.md, f"python -m bench.speed --rows {rows} --seeds {' '.join(map(str, seeds))}")
    print("\n".join(table), flush=True)
    print(f"[speed] wrote {args.md}" if args.report_only else f"[speed] wrote {args.csv} and {args.md}", flush=True)


if __name__ == "__main__":
    main()
