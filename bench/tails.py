"""Tails (issue 71): per numeric column, the share of real rows beyond the synthetic range, beside what the noise
explains.

For one side of a column (above the synthetic maximum; below the minimum alike), let p be the share of the real rows
(all rows, missing ones included: the scale of the 1-way tables) beyond the synthetic extreme. The release's own
public statistics test that tail by summing the noisy cells that hold it: the m fine cells that hold the real rows
beyond the extreme (each with noise std t_f: ``Measurement.fine_noise_std``), or, where the tail reaches coarse bins
that lie wholly beyond the extreme, those bins' noisy cells (noise std t_c each, the numeric coarse tables' one
unit) plus the fine cells in the bin that holds the extreme. Such a sum is p + N(0, v), with v the smaller of
m t_f^2 and m_edge t_f^2 + k t_c^2. **Rule: p <= 2 sqrt(v)**, the 2-noise-std floor below which the release calls a
value or cell indistinguishable from empty (``postprocess.fine_tables.below_noise``, quality.json's
``cells_below_noise``). A larger tail is visible in the noisy tables and was dropped by the model. The cells are the
public fine cells (``fine_cells``); which of them hold real rows is read from the real rows, which the bench may do.
Peers (MST, AIM) get the shares without an allowance.

    .venv/bin/python -m bench.tails                      # every cached run at eps 1 -> bench/results/tails.md
    .venv/bin/python -m bench.tails --datasets fars --methods splice_add_remove,mst --show 0

It reads the cached runs (bench/results/raw/<dataset>/<method>_eps<e>_seed<s>/synthetic.csv and stats.json) against
bench/results/raw/<dataset>/train.csv, with the schema beside them (the resolved one ``bench.run`` wrote) or else
schemas/<dataset>.yaml; nothing is fitted. ``bench.run`` scores every run with the same functions (``tail_metrics``).
"""

from __future__ import annotations

import argparse
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from bench.common import DELTA, RAW_DIR, RESULTS_DIR, read_json

#: The noise floor, in noise std, as ``below_noise`` and quality.json's ``cells_below_noise`` draw it.
SIGMAS = 2.0
TAILS_MD = RESULTS_DIR / "tails.md"
DEFAULT_METHODS = ("splice_add_remove", "splice", "mst")


@dataclass(frozen=True)
class TailNoise:
    """The public noise of a measurement's 1-way tables: ``marginal_noise_std`` is the std of a cell (a frequency)
    of a table at one unit (every numeric column's coarse table), and a fine table's cells carry it over
    sqrt(``grid_weight``) (one cell per grid value) or sqrt(``interval_weight``) (intervals)."""

    marginal_noise_std: float
    grid_weight: int
    interval_weight: int
    fine_bins: int
    numeric_bins: int

    @classmethod
    def of(cls, measurement) -> TailNoise:
        """From a ``Measurement`` (or a ``MeasurementPlan`` with the measurement's ``sigma``: see ``run_noise``)."""
        return cls(float(measurement.marginal_noise_std()), int(measurement.grid_weight),
                   int(measurement.interval_weight), int(measurement.fine_bins), int(measurement.numeric_bins))

    def to_dict(self) -> dict:
        return asdict(self)

    def fine_std(self, cells) -> float:
        """Noise std of one cell of a column's fine table (``Measurement.fine_noise_std``)."""
        return self.marginal_noise_std / math.sqrt(cells.weight_units(self.grid_weight, self.interval_weight))


def run_noise(schema, stats: dict, epsilon: float, delta: float = DELTA) -> TailNoise | None:
    """A SPLICE run's ``TailNoise``: the runner's ``tail_noise`` entry, or, for runs stored before it, the public plan
    of the run's settings (its weights) with the stats' ``sigma`` (the measurement's, on the frequency scale).
    None for a run without it (a peer's)."""
    if "tail_noise" in stats:
        return TailNoise(**stats["tail_noise"])
    if "sigma" not in stats or "relation" not in stats:
        return None
    from splice_assets.api import Synthesizer

    plan, _ = Synthesizer(schema, epsilon, delta, stats["relation"]).plan(int(stats.get("n_measured", stats["n"])))
    if plan.marginal_weight <= 0:
        return None
    return TailNoise(float(stats["sigma"]) / plan.marginal_weight, plan.grid_weight, plan.interval_weight,
                     plan.fine_bins, plan.numeric_bins)


def allowance(cells: np.ndarray, parents: np.ndarray, edge_bin: int, fine_std: float, coarse_std: float,
              sigmas: float = SIGMAS) -> float:
    """The rule's allowance for one side's tail: ``cells`` are the fine cells that hold its real rows (each once),
    ``parents`` their coarse bins, ``edge_bin`` the coarse bin of the synthetic extreme; 2 sqrt(v) with v the
    smaller variance of the two public tests (module docstring)."""
    cells = np.unique(cells)
    if not len(cells):
        return 0.0
    bins = np.unique(parents)
    fine_only = len(cells) * fine_std**2
    mixed = int((parents == edge_bin).sum()) * fine_std**2 + int((bins != edge_bin).sum()) * coarse_std**2
    return sigmas * math.sqrt(min(fine_only, mixed))


def _numbers(values: pd.Series) -> np.ndarray:
    return pd.to_numeric(values, errors="coerce").to_numpy(dtype=np.float64)


def column_tails(real: pd.DataFrame, synthetic: pd.DataFrame, schema, noise: TailNoise | None) -> list[dict]:
    """Per numeric (measured) column: the real and synthetic ranges, the shares of real rows below the synthetic
    minimum and above its maximum, the fine cells holding them, the rule's allowance per side (None without
    ``noise``) and whether both sides are within it."""
    from splice_assets.fine_cells import DEFAULT_FINE_BINS, fine_cells
    from splice_assets.layout import DEFAULT_NUMERIC_BINS

    bins = noise.numeric_bins if noise else DEFAULT_NUMERIC_BINS
    # The cells are public; without fine tables (or noise) they only name where the tail lies.
    layout = fine_cells(schema, noise.fine_bins if noise and noise.fine_bins else DEFAULT_FINE_BINS, bins)
    n = max(len(real), 1)
    rows = []
    for cells in layout:
        if cells.column not in real.columns or cells.column not in synthetic.columns:
            continue
        x, y = _numbers(real[cells.column]), _numbers(synthetic[cells.column])
        x, y = x[~np.isnan(x)], y[~np.isnan(y)]
        if not len(x):
            continue
        # No synthetic value: every real row counts as below the (absent) minimum.
        lo, hi = (float(y.min()), float(y.max())) if len(y) else (math.inf, math.inf)
        row = {"column": cells.column, "real_min": float(x.min()), "real_max": float(x.max()), "synth_min": lo,
               "synth_max": hi}
        cell_of = cells.cells_of(cells.cube(x))
        parents = np.asarray(cells.parents)
        use = noise is not None and noise.fine_bins > 0 and math.isfinite(noise.marginal_noise_std)
        within = True
        for side, beyond, edge in (("below", x < lo, lo), ("above", x > hi, hi)):
            found = np.unique(cell_of[beyond])
            row[side] = float(beyond.sum()) / n
            row[f"cells_{side}"] = len(found)
            if not use:
                row[f"allow_{side}"] = None
                continue
            edge_bin = int(parents[cells.cells_of(cells.cube(np.array([edge])))[0]]) if math.isfinite(edge) else -1
            allowed = allowance(found, parents[found], edge_bin, noise.fine_std(cells), noise.marginal_noise_std)
            row[f"allow_{side}"] = allowed
            within = within and row[side] <= allowed
        row["within"] = within if use else None
        rows.append(row)
    return rows


def summary(rows: list[dict]) -> dict:
    """A run's tail columns in results.csv: ``tail_beyond_max`` the largest share of real rows beyond one end of a
    column's synthetic range, ``tail_beyond_col`` where (``column<`` below the minimum, ``column>`` above the
    maximum), ``tail_cols_over_rule`` how many columns break the rule (blank without an allowance)."""
    sides = [(r[side], f"{r['column']}{mark}") for r in rows for side, mark in (("below", "<"), ("above", ">"))]
    share, where = max(sides, default=(0.0, ""))
    judged = [r["within"] for r in rows if r["within"] is not None]
    return {"tail_beyond_max": share, "tail_beyond_col": where if share > 0 else "",
            "tail_cols_over_rule": sum(not w for w in judged) if judged else None}


def tail_metrics(real: pd.DataFrame, synthetic: pd.DataFrame, schema, noise: TailNoise | None = None) -> dict:
    """``summary`` of ``column_tails``: what ``bench.run``'s ``score`` adds per run."""
    return summary(column_tails(real, synthetic, schema, noise))


# ----------------------------------------------------------------------------------------------------------------
# The table from the cached runs
# ----------------------------------------------------------------------------------------------------------------


def dataset_schema(folder: Path):
    """The schema a cached run was fitted with: the resolved one ``bench.run`` wrote beside the train split, else
    schemas/<dataset>.yaml."""
    from splice_assets.datasets import schema_path
    from splice_assets.schema import load_schema

    path = folder / "schema.yaml"
    return load_schema(path if path.is_file() else schema_path(folder.name))


def cached_tails(folder: Path, methods: list[str], epsilon: float, seed: int) -> list[dict]:
    """``column_tails`` of every cached run of ``methods`` in one dataset's folder, each row tagged with its dataset
    and method."""
    from bench.run import read_synthetic

    runs = [(m, folder / f"{m}_eps{epsilon:g}_seed{seed}") for m in methods]
    runs = [(m, d) for m, d in runs if (d / "synthetic.csv").is_file()]
    if not runs or not (folder / "train.csv").is_file():
        return []
    schema = dataset_schema(folder)
    train = read_synthetic(folder / "train.csv", schema)
    out = []
    for method, run in runs:
        noise = run_noise(schema, read_json(run / "stats.json"), epsilon)
        for row in column_tails(train, read_synthetic(run / "synthetic.csv", schema), schema, noise):
            out.append({"dataset": folder.name, "method": method, "n_train": len(train), **row})
    return out


def _pct(v) -> str:
    return "" if v is None or v != v else f"{100 * v:.2f}%"


def _range(lo: float, hi: float) -> str:
    return f"{lo:.4g} .. {hi:.4g}" if math.isfinite(lo) and math.isfinite(hi) else "none"


def tails_md(rows: list[dict], epsilon: float, show: float) -> str:
    df = pd.DataFrame(rows)
    lines = [
        "# Tails: real rows beyond the synthetic range (issue 71)", "",
        f"Generated by `python -m bench.tails` from the cached runs at eps = {epsilon:g} (seed 0) against each "
        "table's train split. Rule (bench/tails.py): a side's share p of real rows beyond the synthetic extreme is "
        "within what the noise explains when p <= 2 sqrt(v), v the noise variance of the release's best public test "
        "of that tail (the sum of the noisy fine cells holding it, or of the coarse bins wholly beyond plus the fine "
        "cells of the edge bin). Peers get no allowance; MST writes every value at its bin's midpoint "
        "(bench/peer_runner.py), so its range stops half a bin inside the bounds and a point mass at a bound (0) "
        "counts as beyond.", "",
        "## Per run", "",
        "| dataset | method | n train | numeric columns | largest share beyond | where | columns over the rule |",
        "|---|---|---:|---:|---:|---|---:|",
    ]
    if not len(df):
        return "\n".join([*lines, "", "No cached runs found.", ""])
    for (ds, method), g in df.groupby(["dataset", "method"], sort=True):
        s = summary(g.to_dict("records"))
        over = "" if s["tail_cols_over_rule"] is None else str(s["tail_cols_over_rule"])
        lines.append(f"| {ds} | {method} | {int(g['n_train'].iloc[0])} | {len(g)} | {_pct(s['tail_beyond_max'])} | "
                     f"{s['tail_beyond_col']} | {over} |")
    worst = df.assign(share=df[["below", "above"]].max(axis=1)).groupby(["dataset", "column"])["share"].max()
    keep = set(worst[worst > show].index)
    lines += [
        "", f"## Per column (columns where any method leaves more than {100 * show:g}% of the real rows beyond)", "",
        "| dataset | column | method | real range | synthetic range | below min | above max | allowed below | "
        "allowed above | within rule |",
        "|---|---|---|---|---|---:|---:|---:|---:|---|",
    ]
    for r in df.to_dict("records"):
        if (r["dataset"], r["column"]) not in keep:
            continue
        verdict = "" if r["within"] is None or r["within"] != r["within"] else ("yes" if r["within"] else "**no**")
        lines.append(
            f"| {r['dataset']} | {r['column']} | {r['method']} | {_range(r['real_min'], r['real_max'])} | "
            f"{_range(r['synth_min'], r['synth_max'])} | {_pct(r['below'])} | {_pct(r['above'])} | "
            f"{_pct(r['allow_below'])} | {_pct(r['allow_above'])} | {verdict} |")
    if not keep:
        lines.append("| (none) | | | | | | | | | |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", nargs="+", default=None, help="default: every folder in bench/results/raw")
    ap.add_argument("--methods", default=",".join(DEFAULT_METHODS), help="comma list (runs not cached are skipped)")
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--show", type=float, default=0.005,
                    help="per-column table: columns where some method's share beyond exceeds this (default 0.5%%)")
    ap.add_argument("--out", type=Path, default=TAILS_MD)
    args = ap.parse_args(argv)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    folders = [RAW_DIR / d for d in args.datasets] if args.datasets else sorted(
        d for d in RAW_DIR.iterdir() if d.is_dir() and (d / "train.csv").is_file()) if RAW_DIR.is_dir() else []
    rows = [r for folder in folders for r in cached_tails(folder, methods, args.epsilon, args.seed)]
    args.out.write_text(tails_md(rows, args.epsilon, args.show))
    print(f"[tails] {len(rows)} column rows from {len({(r['dataset'], r['method']) for r in rows})} runs -> {args.out}")


if __name__ == "__main__":
    main()
