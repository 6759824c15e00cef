"""Workload (issue 68): the error on a workload's 3-way marginals with and without ``workload:`` in the settings, and
on random other 3-way marginals (what the workload costs the rest).

Per table a public rule picks the workload: ``--tables`` 3-way marginals drawn (seed 0) from the triples of modelled
columns other than the target (the target's own 3-way tables are measured already) whose table has at most
``--max-cells`` coarse cells; 20 other such triples, drawn after them, stand for the rest. Each (table, seed) fits
``splice_add_remove`` on the train split twice in this process, without a workload and with it, with the noise drawn
from the seed (``seeded_noise``): the mechanism noises the workload's cells last, so the two arms share every other
draw and the difference is the workload's. The score is the TVD of each marginal (numeric columns on the bench's 16
bins) against the train split, the rows measured.

    SPLICE_BENCH_ESTIMATE_SEED=0 SPLICE_BENCH_DATASETS=... .venv/bin/python -m bench.workload \
        --datasets adult churn nursery --seeds 0 1 2 3 4 5 6 7

(the estimate seed fixes churn's DP-estimated bounds across processes) writes bench/results/workload.csv (a row per
run) and bench/results/workload.md.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from bench.common import DELTA, RESULTS_DIR, code_version, seeded_noise

WORKLOAD_CSV = RESULTS_DIR / "workload.csv"
WORKLOAD_MD = RESULTS_DIR / "workload.md"
OTHERS = 20


def pick_workload(schema, tables: int, max_cells: int) -> tuple[list[tuple[str, ...]], list[tuple[str, ...]]]:
    """(the workload, the other marginals): a public function of the schema (seed 0)."""
    from splice_assets.layout import column_cells, layout_for

    sizes = column_cells(layout_for(schema))
    names = [n for n in schema.column_names if n != schema.target]
    triples = [t for t in itertools.combinations(names, 3) if np.prod([sizes[c] for c in t]) <= max_cells]
    order = np.random.default_rng(0).permutation(len(triples))
    chosen = [triples[i] for i in order[: tables + OTHERS]]
    return chosen[:tables], chosen[tables:]


def fit_and_sample(p, workload: list[tuple[str, ...]], eps: float, seed: int) -> tuple[pd.DataFrame, dict]:
    """``splice_add_remove`` on the train split with the noise drawn from ``seed`` (``seeded_noise``): the two arms
    share every draw but the workload's cells, which the mechanism noises last."""
    from splice_assets import MeasurementSettings, Synthesizer

    synth = Synthesizer(p.schema, eps, DELTA, "add-remove", seed=seed,
                        measurement=MeasurementSettings(workload=tuple(workload)))
    started = time.process_time()
    with seeded_noise(seed):
        synth.fit(p.train, ledger=None)
    fit_s = time.process_time() - started
    return synth.sample(seed=seed), {"fit_cpu_s": fit_s}


def score(p, synthetic: pd.DataFrame, marginals: list[tuple[str, ...]]) -> float:
    from splice_assets.evaluation.metrics import joint_tvd

    return float(np.mean([joint_tvd(p.train, synthetic, p.schema, m) for m in marginals]))


def run(datasets: list[str], epsilon: float, seeds: list[int], tables: int, max_cells: int,
        arms: tuple[str, ...] = ("without", "with")) -> pd.DataFrame:
    from bench.run import prepare

    rows = []
    for name in datasets:
        p = prepare(name)
        if p is None:
            continue
        workload, others = pick_workload(p.schema, tables, max_cells)
        print(f"[workload] {name}: {workload}", flush=True)
        for seed in seeds:
            for arm, given in (("without", []), ("with", workload)):
                if arm not in arms:
                    continue
                synthetic, stats = fit_and_sample(p, given, epsilon, seed)
                row = {"dataset": name, "epsilon": epsilon, "seed": seed, "arm": arm,
                       "workload_tvd3": score(p, synthetic, workload), "others_tvd3": score(p, synthetic, others),
                       "workload": ";".join(",".join(t) for t in workload), "code_version": code_version(), **stats}
                rows.append(row)
                print(f"[workload] {name} seed {seed} {arm}: workload {row['workload_tvd3']:.4f}, others "
                      f"{row['others_tvd3']:.4f}", flush=True)
    return pd.DataFrame(rows)


def report(df: pd.DataFrame, command: str) -> list[str]:
    """Per table: each set's median TVD without and with the workload, the median of the per-seed (paired)
    change, and in how many seeds the workload lowered it."""
    lines = ["# Workload: 3-way marginals named in the settings (issue 68)", "",
             f"`{command}`: `splice_add_remove`, the noise seeded per seed (the two arms share every draw but the "
             "workload's cells); the mean TVD (against the train split) of the workload's five 3-way marginals and of "
             "20 other 3-way marginals; medians over seeds, the change paired by seed.", "",
             "| table | ε | seeds | workload: without → with | change (paired) | lower in | others: without → with "
             "| change (paired) | lower in |", "|---|---|---|---|---|---|---|---|---|"]
    for (name, eps), cell in df.groupby(["dataset", "epsilon"], sort=True):
        wide = cell.pivot_table(index="seed", columns="arm", values=["workload_tvd3", "others_tvd3"]).dropna()
        parts = []
        for metric in ("workload_tvd3", "others_tvd3"):
            before, after = wide[(metric, "without")], wide[(metric, "with")]
            change = after / before - 1
            parts.append(f"{before.median():.4f} → {after.median():.4f} | {change.median():+.0%} | "
                         f"{int((change < 0).sum())} of {len(change)}")
        lines.append(f"| {name} | {eps:g} | {len(wide)} | " + " | ".join(parts) + " |")
    return lines


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", nargs="+", default=["adult", "churn", "nursery"])
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    ap.add_argument("--tables", type=int, default=5, help="3-way marginals in the workload")
    ap.add_argument("--max-cells", type=int, default=256, help="most coarse cells of a workload marginal")
    ap.add_argument("--arms", nargs="+", choices=["without", "with"], default=["without", "with"],
                    help="rerun one arm (the other kept from the CSV)")
    ap.add_argument("--csv", type=Path, default=WORKLOAD_CSV)
    args = ap.parse_args(argv)
    df = run(args.datasets, args.epsilon, args.seeds, args.tables, args.max_cells, tuple(args.arms))
    if args.csv.exists():
        old = pd.read_csv(args.csv)
        keys = set(zip(df["dataset"], df["epsilon"], df["seed"], df["arm"]))
        old = old[[k not in keys for k in zip(old["dataset"], old["epsilon"], old["seed"], old["arm"])]]
        df = pd.concat([old, df], ignore_index=True)
    df.to_csv(args.csv, index=False)
    fixed = os.environ.get("SPLICE_BENCH_ESTIMATE_SEED")
    command = (f"SPLICE_BENCH_ESTIMATE_SEED={fixed} " if fixed else "") + "python -m bench.workload " + " ".join(
        sys.argv[1:] if argv is None else argv)
    lines = report(df, command.strip())
    WORKLOAD_MD.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
