"""Markdown tables for bench/results/: medians over seeds, and our wall time relative to AIM's and MST's."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from bench.common import machine_info

QUALITY = ["tvd1", "tvd2", "tvd3", "sw1", "mmd", "tstr", "det_auc_lr", "det_auc_xgb", "dup_rows",
           "qtvd1", "qtvd2", "qtvd3", "range_mae", "missing_values", "det_auc_max"]
METHOD_ORDER = [
    "splice",
    "splice_add_remove",
    "splice_paper",
    "mst",
    "aim",
    "mst_replace",
    "aim_replace",
    "ref_independent",
    "ref_bootstrap",
    "ref_real_train",
    "ref_dp_marginals",
]
PEERS = ["aim", "mst", "aim_replace", "mst_replace"]


def _fmt(v, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if isinstance(v, str):
        return v
    if abs(v) >= 100:
        return f"{v:.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.{digits}f}"


def machine_header(title: str) -> list[str]:
    m = machine_info()
    return [
        f"# {title}",
        "",
        f"Generated {m['date']} on {m['nproc']} cores ({m['cpu']}), {m['memory']} RAM, Python {m['python']}.",
        "",
    ]


def summarise(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (dataset, method, epsilon): medians over seeds; timeouts make wall a lower bound."""
    rows = []
    df = df.copy()
    df["epsilon"] = pd.to_numeric(df["epsilon"], errors="coerce")
    for (ds, method, eps), g in df.groupby(["dataset", "method", "epsilon"], dropna=False, sort=False):
        ok = g[g["status"] == "ok"]
        r = {"dataset": ds, "method": method, "epsilon": eps, "runs": len(g), "ok": len(ok),
             "timeouts": int((g["status"] == "timeout").sum()),
             "errors": int((g["status"] == "error").sum())}  # fmt: skip
        for c in ["wall_s", "peak_rss_mb", "t_validate", "t_measure", "t_fit", "t_sample", *QUALITY]:
            vals = pd.to_numeric(ok[c], errors="coerce").dropna() if c in ok else pd.Series(dtype=float)
            r[c] = float(vals.median()) if len(vals) else float("nan")
        if r["timeouts"]:
            r["wall_lb"] = float(pd.to_numeric(g["wall_s"], errors="coerce").min())
            r["peak_rss_mb"] = float(pd.to_numeric(g["peak_rss_mb"], errors="coerce").max())
        r["tstr_metric"] = next((m for m in g["tstr_metric"].dropna()), "")
        r["concurrent"] = bool(g.get("concurrent", pd.Series(dtype=bool)).fillna(False).astype(bool).any())
        rows.append(r)
    out = pd.DataFrame(rows)
    if len(out):
        out["_o"] = out["method"].map({m: i for i, m in enumerate(METHOD_ORDER)}).fillna(99)
        out = out.sort_values(["dataset", "epsilon", "_o"], na_position="last").drop(columns="_o")
    return out


def _wall_cell(r) -> str:
    if r.get("timeouts", 0) and r.get("ok", 0) == 0:
        return f"> {_fmt(r['wall_lb'])} (timeout)"
    cell = _fmt(r["wall_s"])
    return cell + (f" ({r['timeouts']} timeout)" if r.get("timeouts") else "")


def _ratio(ours: dict, peer: dict | None) -> str:
    if peer is None:
        return ""
    ow = ours.get("wall_s")
    if ow is None or (isinstance(ow, float) and math.isnan(ow)):
        return ""
    if peer.get("ok", 0) == 0 and peer.get("timeouts", 0):
        return f"< {ow / peer['wall_lb']:.2f}"
    pw = peer.get("wall_s")
    return "" if pw is None or math.isnan(pw) else f"{ow / pw:.2f}"


def write_results_md(df: pd.DataFrame, path: Path) -> None:
    s = summarise(df)
    lines = machine_header("Benchmark: SPLICE vs AIM / MST")
    lines += [
        "Generated from `results.csv` by `bench/run.py` (medians over seeds; `runs` = seeds run). "
        "δ = 1e-9, 80/20 split",
        "with seed 0 after validation with our schema; every synthetic table is scored by",
        "`splice_assets.metrics.fidelity_metrics` against the same real test split (metric seed 0).",
        "Wall time and peak RSS are of the whole method process (`/usr/bin/time -v`, imports included); stage columns",
        "are in-process seconds (for AIM/MST `validate` = discretisation, and the measurements happen inside `fit`).",
        "AIM/MST: smartnoise-synth in its own venv, numeric columns in 16 equal-width bins over the public bounds,",
        'preprocessing ε = 0, i.i.d. sampling from the fitted model (mbi `method="sample"`), bin midpoints decoded.',
        "TVD on 16 bins; SW1/MMD on the [-1, 1] encoding (flatters SPLICE, see docs/benchmarks.md); "
        "TSTR = best learner's",
        "AUC (classification) or R² (regression); detection AUC = real-vs-synthetic classifier (0.5 is ideal);",
        "`dup` = share of duplicate synthetic rows. `ref_real_train` / `ref_independent` are non-DP references.",
        "`q 1-/2-/3-way`, `range MAE`, `missing`, `det max`: off-grid metrics against the train split (deciles, every",
        "integer, range queries; bench/offgrid.py), with `ref_bootstrap` (the train split resampled) as their floor.",
        "`ref_dp_marginals`: the noise floor of `q 1-way` at that ε (all of ε on the scored 1-way tables; real cells).",
        "Neighbouring relations: smartnoise calibrates AIM/MST for add/remove neighbours. "
        "`splice_add_remove` is SPLICE",
        "under that relation (n private, a noisy n released): compare it with `aim` / `mst`. `splice` is the product",
        "default, replace-one (n public): compare it with `aim_replace` / `mst_replace`, the peers at the ε that makes",
        "them (ε, δ)-DP under replace-one too (docs/benchmarks.md).",
        "",
    ]
    if not len(s):
        path.write_text("\n".join(lines + ["(no results yet)", ""]))
        return
    for ds, g in s.groupby("dataset", sort=False):
        metric = next((m for m in g["tstr_metric"] if m), "tstr")
        lines += [f"## {ds}", ""]
        lines += [
            f"| method | ε | runs | wall s | peak MB | validate | measure | fit | sample | 1-way | 2-way | 3-way "
            "| SW1 | MMD "
            f"| TSTR {metric} | det LR | det XGB | dup | q 1-way | q 2-way | q 3-way | range MAE | missing | det max |",
            "|---" * 24 + "|",
        ]
        for r in g.to_dict("records"):
            eps = "–" if math.isnan(r["epsilon"]) else f"{r['epsilon']:g}"
            ref = str(r["method"]).startswith("ref_")
            cells = [
                r["method"] + (" *" if r.get("concurrent") else ""), eps, str(r["runs"]),
                "" if ref else _wall_cell(r), "" if ref else _fmt(r["peak_rss_mb"]),
                *[_fmt(r[c], 2) for c in ("t_validate", "t_measure", "t_fit", "t_sample")],
                *[_fmt(r[c]) for c in QUALITY],
            ]  # fmt: skip
            if r.get("errors") and not r.get("ok"):
                cells[3] = "error"
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
        # wall-time ratios, ours / peer, same dataset and epsilon, same invocation history
        ratio_rows = []
        for eps, ge in g[g["epsilon"].notna()].groupby("epsilon"):
            by = {r["method"]: r for r in ge.to_dict("records")}
            for ours in ("splice", "splice_add_remove", "splice_paper"):
                if ours in by:
                    cells = [_ratio(by[ours], by.get(peer)) for peer in PEERS]
                    ratio_rows.append(f"| {ours} | {eps:g} | " + " | ".join(cells) + " |")
        if ratio_rows:
            lines += ["Wall-time ratio (ours / peer; < 1 means we are faster; `< x` when the peer timed out; "
                      "`_replace` =",
                      "the peer at the replace-one-equivalent ε, see the bench notes):", "",
                      "| ours | ε | " + " | ".join(f"÷ {p}" for p in PEERS) + " |", "|---" * (len(PEERS) + 2) + "|",
                      *ratio_rows, ""]  # fmt: skip
    if "code_version" in df:
        runs = df[~df["method"].astype(str).str.startswith("ref_")]
        versions = runs["code_version"].fillna("(not recorded)").astype(str).value_counts()
        lines += ["Code measured (git HEAD of the repo at each run; column `code_version` in results.csv): "
                  + ", ".join(f"`{v}` × {c}" for v, c in versions.items()) + ".", ""]
    if s["concurrent"].any():
        lines += ["`*` = run while the AIM lane ran in parallel (2 processes on the machine's cores at once).", ""]
    path.write_text("\n".join(lines))


README_START, README_END = "<!-- bench-results:start -->", "<!-- bench-results:end -->"


def sync_readme(results_md: Path, readme: Path) -> bool:
    """Copy results.md between the README's bench markers (headings three levels down, under its "###"
    subsection); False if the README has no markers."""
    text = readme.read_text() if readme.is_file() else ""
    if README_START not in text or README_END not in text:
        return False
    table = "\n".join("###" + line if line.startswith("#") else line for line in results_md.read_text().splitlines())
    head, rest = text.split(README_START, 1)
    tail = rest.split(README_END, 1)[1]
    readme.write_text(f"{head}{README_START}\n{table.strip()}\n{README_END}{tail}")
    return True
