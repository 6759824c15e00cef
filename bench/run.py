"""Benchmark entry point: SPLICE (product defaults and the paper's configuration) vs AIM and MST, same data, same
metrics (docs/benchmarks.md).

    export SPLICE_BENCH_DATASETS=/path/to/datasets              # one <name>/data.csv.gz per table; no default
    .venv/bin/python -m bench.run --quick                       # every table, eps 1, seed 0, all methods
    .venv/bin/python -m bench.run --datasets adult --epsilons 0.5 1 3 10 --seeds 0 1 2 --methods splice,mst
    make bench BENCH_ARGS="--quick"

The tables are not in the repo: SPLICE_BENCH_DATASETS names their folder. For every table there that has a schema
in schemas/ (absent ones are skipped): validate with our schema, split 80/20 (seed 0), write the train split
(git-ignored bench/results/raw/), and run each (method, epsilon, seed) in its own subprocess under
``/usr/bin/time -v`` (wall time, peak RSS of the whole process). Every synthetic table is read back through
``validation.validate`` and scored by the same ``splice_assets.evaluation.metrics.fidelity_metrics`` call against
the same real test split. Results accumulate in bench/results/results.csv (a rerun of a (dataset, method, epsilon,
seed) replaces its row); bench/results/results.md and the block of docs/benchmarks.md between its bench-results
markers are regenerated from the CSV each time (``python -m bench.report`` does only that).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import yaml

from bench.common import (
    BENCH_DIR,
    BUNDLED,
    DATASETS_DIR,
    DATASETS_ENV,
    DELTA,
    RAW_DIR,
    REPO_DIR,
    RESULTS_DIR,
    code_version,
    dataset_file,
    datasets_dir,
    ensure_time_binary,
    estimate_seed,
    log_tail,
    read_json,
    run_timed,
    seeded_noise,
    split_train_test,
    thread_env,
)  # fmt: skip
from bench.offgrid import bootstrap, dp_marginals, offgrid_metrics
from bench.tails import TailNoise, run_noise, tail_metrics

METHODS = ("splice", "splice_add_remove", "splice_paper", "aim", "mst")
#: The peers again at the epsilon that makes them (epsilon, delta)-DP under replace-one neighbours, SPLICE's relation
#: (smartnoise's own is add/remove; see bench/peer_runner.py). Opt-in: ``--methods splice,aim_replace,mst_replace``.
MATCHED_PEERS = ("aim_replace", "mst_replace")
# Our methods: the product defaults (replace-one, and add-remove: the peers' relation, so comparable with aim / mst
# at the same epsilon), and the paper's configuration (moments only, L = 1024, K = 5, R = 2).
SPLICE_ARGS = {
    "splice": [],
    "splice_add_remove": ["--relation", "add-remove"],
    "splice_paper": ["--marginal-share", "0", "--pair-share", "0", "--n-directions", "1024", "--K", "5", "--R", "2",
                     "--numeric-model", "gaussian"],
    # Opt-in A/B: the product at add-remove without the fine tables (values uniform inside the 16 coarse bins).
    "splice_coarse": ["--relation", "add-remove", "--fine-bins", "0"],
}
VARIANTS = ("splice_coarse",)
PEERS_VENV = BENCH_DIR / ".venv-peers"
PEERS_PY = PEERS_VENV / "bin" / "python"
#: SDMetrics, which users judge synthetic tables with, scores every run beside our metrics (``sdmetrics_scores``). It
#: needs pandas < 3, so it lives in the peers' venv; pinned, since its report's rules change between releases.
SDMETRICS = "sdmetrics==0.32.0"
SDM_COLUMNS = ["sdm_quality", "sdm_shapes", "sdm_pairs"]
RESULTS_CSV = RESULTS_DIR / "results.csv"
RESULTS_MD = RESULTS_DIR / "results.md"
EVAL_SEED = 0  # metric randomness (subsamples, evaluation directions): the same for every run
COLUMNS = [
    "dataset", "method", "epsilon", "delta", "seed", "status", "wall_s", "peak_rss_mb", "user_s", "sys_s",
    "t_import", "t_validate", "t_encode", "t_measure", "t_fit", "t_sample",
    "tvd1", "tvd2", "tvd3", "sw1", "mmd", "assoc_err", "tstr", "tstr_metric", "tstr_acc",
    "det_auc_lr", "det_auc_xgb", "dcr_closer_train", "dup_rows",
    "qtvd1", "qtvd2", "qtvd3", "range_mae", "missing_values", "det_auc_max", "det_auc_col",
    "tail_beyond_max", "tail_beyond_col", "tail_cols_over_rule", "pair_r_strong", "pair_r_err", "pair_r_flips",
    *SDM_COLUMNS, "sdm_s",
    "n_train", "n_test", "clipped_max", "threads", "concurrent",
    "preprocess_eps", "peer_epsilon_add_remove", "timeout_s", "score_s", "load1_start", "code_version", "notes",
]  # fmt: skip


# ----------------------------------------------------------------------------------------------------------------
# Peers' virtualenv
# ----------------------------------------------------------------------------------------------------------------


def ensure_peers_venv() -> str:
    """Create bench/.venv-peers with smartnoise-synth and SDMetrics if needed (torch pinned to the local CPU wheel);
    a venv made before SDMetrics joined gets it added."""
    check = [str(PEERS_PY), "-c", "import snsynth, mbi, sdmetrics; from importlib.metadata import version as v; "
             "print(v('smartnoise-synth'), v('mbi'), v('torch'), v('pandas'), v('sdmetrics'))"]  # fmt: skip
    install = [str(PEERS_PY), "-m", "pip", "install", "--quiet", "-c", str(REPO_DIR / "constraints.txt")]
    if PEERS_PY.exists():
        out = subprocess.run(check, capture_output=True, text=True)
        if out.returncode == 0 and out.stdout.split()[-1] == SDMETRICS.split("==")[1]:
            return out.stdout.strip()
        if subprocess.run([str(PEERS_PY), "-c", "import snsynth, mbi"], capture_output=True).returncode == 0:
            print(f"[bench] adding {SDMETRICS} to bench/.venv-peers", flush=True)
            subprocess.run([*install, SDMETRICS], check=True)
            return subprocess.run(check, capture_output=True, text=True, check=True).stdout.strip()
    print("[bench] creating the peers' virtualenv bench/.venv-peers (smartnoise-synth, sdmetrics)", flush=True)
    subprocess.run(["python3", "-m", "venv", str(PEERS_VENV)], check=True)
    subprocess.run([*install, "smartnoise-synth", SDMETRICS], check=True)
    return subprocess.run(check, capture_output=True, text=True, check=True).stdout.strip()


# ----------------------------------------------------------------------------------------------------------------
# Data
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class Prepared:
    name: str
    schema: object
    schema_path: Path
    train: pd.DataFrame
    test: pd.DataFrame
    train_csv: Path
    domain_json: Path
    #: Per column, the share of the rows the schema's (DP-estimated) bounds clipped onto them: the scores compare
    #: with the clipped rows, so this is what they cannot see (bench data are public).
    clipped: dict[str, float] = field(default_factory=dict)

    @property
    def clipped_max(self) -> float:
        return max(self.clipped.values(), default=0.0)


def public_domain(schema) -> dict:
    """The schema's public domain for the peer runner: bounds, category lists, nullable, level counts."""
    cols = []
    for c in schema.columns:
        entry = {
            "name": c.name,
            "numeric": bool(c.is_numeric),
            "nullable": bool(c.nullable),
            "integer": c.kind == "integer",
        }
        if c.is_numeric:
            entry["bounds"] = [float(b) for b in c.bounds]
            levels = 16
        elif c.kind == "boolean":
            entry["categories"] = [False, True]
            levels = 2
        else:
            entry["categories"] = [str(x) for x in c.categories]
            levels = len(c.categories)
        entry["levels"] = levels + (1 if c.nullable else 0)
        cols.append(entry)
    return {"name": schema.name, "columns": cols}


def dp_estimate(raw: pd.DataFrame, schema):
    """The schema's ``auto`` bounds, values and decimals as a release at epsilon 1 would draw them (replace-one, the
    default share, on the whole table, no ledger): (resolved schema, public record)."""
    from splice_assets.private.bounds import DEFAULT_BOUNDS_SHARE, estimate_bounds
    from splice_assets.private.mechanism import split_privacy

    _, multiplier = split_privacy(1.0, DELTA, DEFAULT_BOUNDS_SHARE)
    return estimate_bounds(raw, schema, multiplier, DELTA, None, "bench", "replace-one")


def resolve_auto_bounds(raw: pd.DataFrame, schema, out: Path):
    """A schema with ``auto`` entries gets its DP estimate once per bench run (``dp_estimate``), and every method then
    sees the same public bounds. Returns the resolved schema and its file (written beside the bench's prepared
    data)."""
    from splice_assets.private.bounds import needs_estimate
    from splice_assets.schema import schema_to_dict

    if not needs_estimate(schema):
        return schema, None
    seed = estimate_seed()
    with seeded_noise(seed) if seed is not None else nullcontext():
        resolved, estimate = dp_estimate(raw, schema)
    path = out / "schema.yaml"
    path.write_text(yaml.safe_dump(schema_to_dict(resolved), sort_keys=False))
    print(f"[bench] {schema.name}: DP bounds for {len(estimate.columns)} auto columns -> {path}", flush=True)
    return resolved, path


def prepare(name: str) -> Prepared | None:
    from splice_assets.datasets import schema_path
    from splice_assets.evaluation.verdict import CLIPPED_SHARE
    from splice_assets.private.validation import read_table, validate
    from splice_assets.schema import load_schema

    data = dataset_file(name, DATASETS_DIR)
    if not data.is_file():
        print(f"[bench] dataset {name!r}: {data} not found, skipped", flush=True)
        return None
    try:
        spath = schema_path(name)
    except FileNotFoundError as exc:
        print(f"[bench] dataset {name!r}: {exc}; skipped", flush=True)
        return None
    schema = load_schema(spath)
    out = RAW_DIR / name
    out.mkdir(parents=True, exist_ok=True)
    raw = read_table(data)
    schema, resolved_path = resolve_auto_bounds(raw, schema, out)
    spath = resolved_path or spath
    validated = validate(raw, schema)
    clipped = validated.report.shares("out_of_bounds_clipped")
    train, test = split_train_test(validated.table)
    train_csv = out / "train.csv"
    train.to_csv(train_csv, index=False)
    domain_json = out / "domain.json"
    domain_json.write_text(json.dumps(public_domain(schema), indent=1))
    print(f"[bench] {name}: {len(train)} train / {len(test)} test rows, {len(schema.columns)} columns", flush=True)
    if wide := {c: round(v, 3) for c, v in clipped.items() if v >= CLIPPED_SHARE}:
        print(f"[bench] {name}: the bounds clip {CLIPPED_SHARE:.0%} or more of these columns' rows (unseen by the "
              f"scores): {wide}", flush=True)
    return Prepared(name, schema, spath, train, test, train_csv, domain_json, clipped)


# ----------------------------------------------------------------------------------------------------------------
# One run
# ----------------------------------------------------------------------------------------------------------------



def prepared_datasets(names: Iterable[str]) -> Iterator[tuple[str, Prepared]]:
    """Each named dataset with its ``prepare``d split, in order and as it is reached; those ``prepare`` can not
    find (it says why) are skipped."""
    for name in names:
        prepared = prepare(name)
        if prepared is not None:
            yield name, prepared


def run_dir(p: Prepared, method: str, eps: float, seed: int) -> Path:
    """The git-ignored folder of one run's synthetic CSV, stats JSON (``stats.json``) and log."""
    return RAW_DIR / p.name / f"{method}_eps{eps:g}_seed{seed}"


def run_method(
    p: Prepared, method: str, eps: float, seed: int, threads: int, aim_timeout: float
) -> tuple[dict, Path | None]:
    out_dir = run_dir(p, method, eps, seed)
    tag = out_dir.name
    out_dir.mkdir(parents=True, exist_ok=True)
    synth_csv, stats_json, log = out_dir / "synthetic.csv", out_dir / "stats.json", out_dir / "run.log"
    for f in (synth_csv, stats_json):
        f.unlink(missing_ok=True)
    if method in SPLICE_ARGS:
        cmd = [
            sys.executable, "-m", "bench.splice_runner", "--train", str(p.train_csv), "--schema", str(p.schema_path),
            "--epsilon", str(eps), "--delta", str(DELTA), "--seed", str(seed),
            "--out", str(synth_csv), "--stats", str(stats_json), *SPLICE_ARGS[method],
        ]  # fmt: skip
        timeout = None
    else:
        peer = method.removesuffix("_replace")
        cmd = [
            str(PEERS_PY), str(BENCH_DIR / "peer_runner.py"), "--method", peer, "--train", str(p.train_csv),
            "--domain", str(p.domain_json), "--epsilon", str(eps), "--delta", str(DELTA), "--seed", str(seed),
            "--out", str(synth_csv), "--stats", str(stats_json),
            "--relation", "replace_one" if method in MATCHED_PEERS else "add_remove",
        ]  # fmt: skip
        timeout = aim_timeout if peer == "aim" else None
    print(f"[bench] {p.name} {tag}: running", flush=True)
    load1 = os.getloadavg()[0]  # the machine may be shared: record how busy it was when the run started
    info = run_timed(cmd, log, timeout, thread_env(threads))
    stats = read_json(stats_json)
    secs = stats.get("seconds", {})
    row: dict = {
        "dataset": p.name, "method": method, "epsilon": eps, "delta": DELTA, "seed": seed,
        "status": info["status"], "wall_s": info.get("wall_s"), "peak_rss_mb": info.get("peak_rss_mb"),
        "user_s": info.get("user_s"), "sys_s": info.get("sys_s"),
        "t_import": secs.get("import"), "t_validate": secs.get("validate", secs.get("discretise")),
        "t_encode": secs.get("encode"), "t_measure": secs.get("measure"), "t_fit": secs.get("fit"),
        "t_sample": secs.get("sample"), "threads": threads, "timeout_s": timeout,
        "n_train": len(p.train), "n_test": len(p.test), "clipped_max": p.clipped_max, "load1_start": round(load1, 2),
        "code_version": code_version(),
    }  # fmt: skip
    notes = []
    if method in SPLICE_ARGS:
        notes.append(" ".join(SPLICE_ARGS[method]) or "product defaults")
    else:
        row["preprocess_eps"] = 0.0
        row["peer_epsilon_add_remove"] = stats.get("epsilon_add_remove", eps if method not in MATCHED_PEERS else None)
        notes.append("16 equal-width bins over public bounds; iid sampler; measure inside fit")
        if method in MATCHED_PEERS:
            notes.append(f"replace-one: smartnoise given eps {stats.get('epsilon_add_remove', float('nan')):.4g} "
                         f"(rho / {stats.get('replace_one_factor', float('nan')):.3g})")
    if info["status"] == "timeout":
        notes.append(f"timeout after {timeout:g}s (peak RSS up to the kill)")
    elif info["status"] == "error":
        notes.append("error: " + log_tail(log))
    row["notes"] = "; ".join(notes)
    ok = info["status"] == "ok" and synth_csv.is_file()
    return row, (synth_csv if ok else None)


def sdmetrics_scores(p: Prepared, synthetic: pd.DataFrame, work: Path) -> dict:
    """SDMetrics' QualityReport of ``synthetic`` against the real test split (``sdm_quality``, ``sdm_shapes``,
    ``sdm_pairs``; ``sdm_s`` its seconds, subprocess start included), through bench/sdmetrics_score.py in the peers'
    venv: both tables go there as CSV files in ``work`` with the metadata built from the schema. Empty, with a
    message, when the venv or the report fails (the run's other scores stand)."""
    from bench.sdmetrics_score import metadata_for

    t = time.perf_counter()
    work.mkdir(parents=True, exist_ok=True)
    metadata = metadata_for(p.schema, [c for c in p.test.columns if c in synthetic.columns])
    names = list(metadata["columns"])
    real_csv, synth_csv = work / "sdm_real.csv", work / "sdm_synthetic.csv"
    meta_json, out_json = work / "sdm_metadata.json", work / "sdm_scores.json"
    p.test[names].to_csv(real_csv, index=False)
    synthetic[names].to_csv(synth_csv, index=False)
    meta_json.write_text(json.dumps(metadata, indent=1))
    out_json.unlink(missing_ok=True)
    cmd = [str(PEERS_PY), str(BENCH_DIR / "sdmetrics_score.py"), "--real", str(real_csv), "--synthetic",
           str(synth_csv), "--metadata", str(meta_json), "--out", str(out_json), "--seed", str(EVAL_SEED)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True)
    scores = read_json(out_json)
    for f in (real_csv, synth_csv):
        f.unlink(missing_ok=True)
    if done.returncode != 0 or not scores:
        print(f"[bench] {p.name}: SDMetrics failed: {(done.stderr or done.stdout).strip()[-400:]}", flush=True)
        return {}
    return {**{c: scores.get(c) for c in SDM_COLUMNS}, "sdm_s": round(time.perf_counter() - t, 1)}


def score(p: Prepared, synthetic: pd.DataFrame, sdm_dir: Path | None = None, noise: TailNoise | None = None) -> dict:
    """Our metrics of ``synthetic``; with ``sdm_dir`` (a scratch folder) SDMetrics' too (``sdmetrics_scores``). The
    tail columns (bench/tails.py) judge the real rows beyond the synthetic range by the rule where ``noise`` (a SPLICE
    run's, ``run_noise``) is given."""
    from splice_assets.evaluation.metrics import fidelity_metrics

    t = time.perf_counter()
    m = fidelity_metrics(p.train, p.test, synthetic, p.schema, EVAL_SEED, with_trtr=False)
    h = m.headline()
    primary = m.tstr.primary if m.tstr else None
    dup = float(synthetic.astype(str).duplicated().mean()) if len(synthetic) else float("nan")
    return {
        "tvd1": h["tvd_1way"], "tvd2": h["tvd_2way"], "tvd3": h["tvd_3way"], "sw1": h["sliced_w1"], "mmd": h["mmd"],
        "assoc_err": h["association_error"], "tstr": h.get(f"tstr_{primary}") if primary else None,
        "tstr_metric": primary, "tstr_acc": h.get("tstr_accuracy"),
        "det_auc_lr": h.get("detection_auc_logistic"), "det_auc_xgb": h.get("detection_auc_xgboost"),
        "dcr_closer_train": h.get("dcr_share_closer_to_train"), "dup_rows": dup,
        # Off-grid: against the rows the generator was given (bench/offgrid.py).
        **offgrid_metrics(p.train, synthetic, p.schema, EVAL_SEED),
        **tail_metrics(p.train, synthetic, p.schema, noise),
        "score_s": round(time.perf_counter() - t, 1),
        **(sdmetrics_scores(p, synthetic, sdm_dir) if sdm_dir is not None else {}),
    }  # fmt: skip


def read_synthetic(path: Path, schema) -> pd.DataFrame:
    """A table written by a run (or the bench's train split) read back through the schema's validation."""
    import dataclasses

    from splice_assets.private.validation import read_table, validate

    # Synthetic rows are checked against the schema's columns; their count (noisy under add-remove) may fall
    # below the schema's n_min, which bounds the private input, not an output.
    return validate(read_table(path), dataclasses.replace(schema, n_min=1)).table


def score_file(p: Prepared, path: Path, sdmetrics: bool = False, noise: TailNoise | None = None) -> dict:
    return score(p, read_synthetic(path, p.schema), path.parent if sdmetrics else None, noise)


def reference_rows(p: Prepared, epsilons: list[float], sdmetrics: bool = False) -> list[dict]:
    """References scored the same way: the real train split itself, independent columns, a bootstrap (non-DP),
    and per epsilon the noise floor of the 1-way tables (bench/offgrid.py ``dp_marginals``)."""
    from splice_assets.evaluation.metrics import independent_marginals_baseline

    references = [
        ("ref_real_train", float("nan"), p.train, "non-DP ceiling: the real train split scored as if synthetic"),
        ("ref_independent", float("nan"), independent_marginals_baseline(p.train, p.schema, len(p.train), EVAL_SEED),
         "non-DP: each column resampled independently from the real train split"),
        ("ref_bootstrap", float("nan"), bootstrap(p.train, EVAL_SEED),
         "non-DP floor of the off-grid metrics: the train split resampled with replacement"),
    ] + [
        ("ref_dp_marginals", eps, dp_marginals(p.train, p.schema, eps, DELTA, EVAL_SEED),
         "noise floor of qtvd1: the whole epsilon on the scored 1-way tables (real cells, seeded noise)")
        for eps in epsilons
    ]  # fmt: skip
    rows = []
    for method, epsilon, table, note in references:
        row = {"dataset": p.name, "method": method, "epsilon": epsilon, "delta": float("nan"), "seed": 0,
               "status": "ok", "n_train": len(p.train), "n_test": len(p.test), "clipped_max": p.clipped_max,
               "notes": note}  # fmt: skip
        tag = method if epsilon != epsilon else f"{method}_eps{epsilon:g}"
        row.update(score(p, table, RAW_DIR / p.name / tag if sdmetrics else None))
        rows.append(row)
    return rows


# ----------------------------------------------------------------------------------------------------------------
# Results
# ----------------------------------------------------------------------------------------------------------------

_LOCK = threading.Lock()


def _key(values) -> str:
    ds, method, eps, seed = values
    eps = float(eps)
    return f"{ds}|{method}|{'nan' if eps != eps else format(eps, 'g')}|{int(float(seed))}"


def save_rows(new_rows: list[dict]) -> None:
    """Merge rows into results.csv; locked across threads and across bench processes run side by side."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    with _LOCK, open(RESULTS_DIR / ".results.lock", "w") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        old = pd.read_csv(RESULTS_CSV) if RESULTS_CSV.is_file() else pd.DataFrame(columns=COLUMNS)
        new = pd.DataFrame(new_rows).reindex(columns=COLUMNS)
        key = ["dataset", "method", "epsilon", "seed"]
        if len(old):
            old_keys = pd.Series([_key(r) for r in old[key].itertuples(index=False)], index=old.index)
            new_keys = {_key(r) for r in new[key].itertuples(index=False)}
            old = old[~old_keys.isin(new_keys)]
        both = pd.concat([old.reindex(columns=COLUMNS), new], ignore_index=True) if len(old) else new
        both = both.sort_values(["dataset", "method", "epsilon", "seed"], na_position="first", kind="stable")
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        both.to_csv(RESULTS_CSV, index=False, float_format="%.6g")
        from bench.report import summary_md, sync_readme, write_results_md

        write_results_md(both, RESULTS_MD)
        sync_readme(summary_md(both), REPO_DIR / "docs" / "benchmarks.md")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", nargs="+", default=None,
                    help=f"table names (default: every folder in ${DATASETS_ENV} with a schema in schemas/)")
    ap.add_argument("--epsilons", nargs="+", type=float, default=[0.5, 1, 3, 10])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--methods", default=",".join(METHODS),
                    help="comma list of " + ",".join(METHODS + MATCHED_PEERS + VARIANTS))
    ap.add_argument("--aim-timeout", type=float, default=1200.0, help="seconds; a timeout is recorded, not a crash")
    ap.add_argument("--threads", type=int, default=1, help="BLAS/torch threads of every method process")
    ap.add_argument("--aim-background", action="store_true",
                    help="run the AIM queue in parallel with the other runs (2 processes at once; noted per row)")
    ap.add_argument("--no-references", action="store_true", help="skip the non-DP reference rows")
    ap.add_argument("--no-sdmetrics", dest="sdmetrics", action="store_false",
                    help="skip SDMetrics' QualityReport (sdm_* columns; it runs in the peers' venv, which it creates)")
    ap.add_argument("--quick", action="store_true", help="eps 1, seed 0, AIM timeout 900 s, all methods")
    args = ap.parse_args(argv)
    if args.quick:
        args.epsilons, args.seeds, args.aim_timeout = [1.0], [0], min(args.aim_timeout, 900.0)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = set(methods) - set(METHODS + MATCHED_PEERS + VARIANTS)
    if unknown:
        ap.error(f"unknown methods {sorted(unknown)}")
    bundled_only = bool(args.datasets) and set(args.datasets) <= set(BUNDLED)
    folder = None if bundled_only and DATASETS_DIR is None else datasets_dir(DATASETS_DIR)
    ensure_time_binary()
    if args.sdmetrics or {"aim", "mst", *MATCHED_PEERS} & set(methods):
        print(f"[bench] peers venv: smartnoise-synth, mbi, torch, pandas, sdmetrics = {ensure_peers_venv()}",
              flush=True)  # fmt: skip
    found = sorted({d.name for d in folder.iterdir() if d.is_dir()} | set(BUNDLED)) if folder else []
    prepared = [p for p in (prepare(n) for n in (args.datasets or found)) if p is not None]
    if not prepared:
        print("[bench] no datasets found; nothing to do", flush=True)
        return
    if not args.no_references:
        for p in prepared:
            save_rows(reference_rows(p, args.epsilons, args.sdmetrics))

    jobs = [(p, m, e, s) for p in prepared for e in args.epsilons for s in args.seeds for m in methods]
    main_jobs = [j for j in jobs if not j[1].startswith("aim")]
    aim_jobs = [j for j in jobs if j[1].startswith("aim")]  # AIM is slowest: last, or in its own lane
    concurrent = args.aim_background and bool(aim_jobs) and bool(main_jobs)

    def do(job) -> None:
        p, m, e, s = job
        row, synth = run_method(p, m, e, s, args.threads, args.aim_timeout)
        row["concurrent"] = concurrent
        if synth is not None:
            noise = run_noise(p.schema, read_json(synth.parent / "stats.json"), e) if m in SPLICE_ARGS else None
            row.update(score_file(p, synth, args.sdmetrics, noise))
        save_rows([row])
        wall = row.get("wall_s")
        print(f"[bench] {p.name} {m} eps={e:g} seed={s}: {row['status']} wall={wall:.1f}s "
              f"rss={row.get('peak_rss_mb') or float('nan'):.0f}MB tvd2={row.get('tvd2', float('nan'))}",
              flush=True)  # fmt: skip

    if concurrent:
        lane = threading.Thread(target=lambda: [do(j) for j in aim_jobs], daemon=False)
        lane.start()
        for j in main_jobs:
            do(j)
        lane.join()
    else:
        for j in main_jobs + aim_jobs:
            do(j)
    print(f"[bench] wrote {RESULTS_CSV} and {RESULTS_MD}", flush=True)


if __name__ == "__main__":
    main()
