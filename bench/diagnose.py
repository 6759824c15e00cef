"""Where the distance goes: diagnostics behind the issue-9 method notes (internal: they compare against real rows).

    .venv/bin/python -m bench.diagnose stages adult --epsilon 1 --seed 0
    .venv/bin/python -m bench.diagnose compare adult --epsilon 1 --peer aim

``stages`` measures one release's statistics (fresh noise, no ledger) and fits the default model, then reports
the mean 2-way TVD over the measured pairs, on the measurement's cells, of every post-processing stage against the
train split (what the mechanism saw) and the test split (what the bench scores): the simplex-projected noisy
tables, the mixture's own draws, the draws matched and linked, the tilt-weighted pool, and the final sample; then
the same for the links' pairs alone.

``compare`` reads the seed-0 synthetic tables the bench left in bench/results/raw/<dataset>/ for splice and a peer
and lists the pairs and triples where splice is furthest behind (TVD against the test split on the bench's
discrete view), with the per-column means.
"""

from __future__ import annotations

import argparse
import itertools

import numpy as np
import pandas as pd

from bench.common import RAW_DIR
from bench.run import prepare


def stages(dataset: str, epsilon: float, seed: int) -> None:
    from splice_assets.layout import (
        data_layout,
        layout_for,
        marginal_cells,
        marginal_sizes,
        pair_tables,
    )
    from splice_assets.model.fit import FitConfig
    from splice_assets.model.product_em import simplex_projection
    from splice_assets.postprocess.chain import fit
    from splice_assets.postprocess.tilt import log_weights, table_cells
    from splice_assets.private.encoding import encode
    from splice_assets.private.measuring import make_plan, measure
    from splice_assets.sampling import integer_coordinates, mixture_draws, sample_cube

    prepared = prepare(dataset)
    if prepared is None:
        return
    schema, n = prepared.schema, len(prepared.train)
    layout = layout_for(schema)
    plan, calibration = make_plan(schema, n, epsilon, 1e-9, seed=seed)
    measurement = measure(encode(prepared.train, schema), schema, plan, calibration)
    model = fit(measurement, schema, FitConfig(seed=seed))
    bins, pairs = measurement.numeric_bins, measurement.pairs
    sizes = marginal_sizes(layout, bins)

    def tables(cube: np.ndarray, weights: np.ndarray | None = None) -> list[np.ndarray]:
        cells = marginal_cells(cube, layout, bins)
        out = []
        for a, b in pairs:
            table = np.bincount(cells[:, a] * sizes[b] + cells[:, b], weights, sizes[a] * sizes[b])
            out.append(table.reshape(sizes[a], sizes[b]) / table.sum())
        return out

    truths = {
        split: tables(encode(rows, schema)) for split, rows in (("train", prepared.train), ("test", prepared.test))
    }
    rng = np.random.default_rng(seed)
    integers, cells_layout = integer_coordinates(schema), data_layout(model.layout)
    matched = mixture_draws(model, 4 * n, rng, True, integers)
    stages_ = {
        "noisy tables, projected": [
            simplex_projection(t.ravel()).reshape(t.shape) for t in pair_tables(measurement.noisy_pairs, pairs, sizes)
        ],
        "mixture draws": tables(mixture_draws(model, 4 * n, rng, False, integers)),
        "matched and linked": tables(matched),
    }
    if model.tilt is not None:
        log_w = log_weights(model.tilt.potentials, table_cells(matched, cells_layout, bins, model.tilt.pairs))
        stages_["tilt-weighted pool"] = tables(matched, np.exp(log_w - log_w.max()))
    stages_["final sample (n rows)"] = tables(sample_cube(model, n, seed, True, integers))
    linked = [pairs.index((min(l.source, l.target), max(l.source, l.target))) for l in model.links]
    linked_names = ", ".join(
        f"{layout.coordinates[pairs[i][0]].column} x {layout.coordinates[pairs[i][1]].column}" for i in linked
    )
    print(
        f"{dataset} eps = {epsilon} seed = {seed}: mean 2-way TVD over {len(pairs)} pairs (linked pairs: "
        f"{linked_names or 'none'})"
    )
    print(f"{'stage':>26} | vs train | vs test | linked vs train")
    print(f"{'train split itself':>26} | {0:8.4f} | {_mean_tvd(truths['train'], truths['test']):7.4f} |")
    for name, stage in stages_.items():
        print(f"{name:>26} | {_mean_tvd(stage, truths['train']):8.4f} | {_mean_tvd(stage, truths['test']):7.4f} | "
              + " ".join(f"{_tvd(stage[i], truths['train'][i]):.3f}" for i in linked))


def _tvd(a: np.ndarray, b: np.ndarray) -> float:
    return float(0.5 * np.abs(a - b).sum())


def _mean_tvd(tables: list[np.ndarray], truths: list[np.ndarray]) -> float:
    return float(np.mean([_tvd(a, b) for a, b in zip(tables, truths)]))


def compare(dataset: str, epsilon: float, peer: str, top: int, ours: str = "splice") -> None:
    from splice_assets.evaluation.metrics import _tvd_codes, codes_matrix

    prepared = prepare(dataset)
    if prepared is None:
        return
    dtypes = prepared.train.dtypes.to_dict()
    eps = f"{epsilon:g}"
    codes = {}
    for method in (ours, peer):
        path = RAW_DIR / dataset / f"{method}_eps{eps}_seed0" / "synthetic.csv"
        if not path.is_file():
            print(f"[diagnose] {path} not found: run the bench for {method} at eps = {eps} first")
            return
        codes[method] = codes_matrix(pd.read_csv(path).astype(dtypes, errors="ignore"), prepared.schema)[0]
    real, levels = codes_matrix(prepared.test, prepared.schema)
    train = codes_matrix(prepared.train, prepared.schema)[0]
    names = prepared.schema.column_names
    for way in (2, 3):
        marginals = list(itertools.combinations(range(len(names)), way))
        table = pd.DataFrame(
            [[_tvd_codes(real, c, levels, m) for c in (codes[ours], codes[peer], train)] for m in marginals],
            columns=[ours, peer, "train"],
        )
        table.insert(0, "marginal", [" x ".join(names[i] for i in m) for m in marginals])
        table["gap"] = table[ours] - table[peer]
        print(
            f"\n{way}-way TVD against the test split, means: {table[[ours, peer, 'train']].mean().round(4).to_dict()}"
        )
        print(table.sort_values("gap", ascending=False).head(top).round(3).to_string(index=False))
        gaps = table["gap"].to_numpy()
        per_column = {name: gaps[[j in m for m in marginals]].mean() for j, name in enumerate(names)}
        print("mean gap per column: " + ", ".join(f"{k} {v:+.4f}" for k, v in per_column.items()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    for name in ("stages", "compare"):
        p = sub.add_parser(name)
        p.add_argument("dataset")
        p.add_argument("--epsilon", type=float, default=1.0)
        if name == "stages":
            p.add_argument("--seed", type=int, default=0)
        else:
            p.add_argument("--peer", default="aim")
            p.add_argument("--ours", default="splice", help="our bench method to compare, e.g. splice_add_remove")
            p.add_argument("--top", type=int, default=12)
    args = ap.parse_args()
    if args.command == "stages":
        stages(args.dataset, args.epsilon, args.seed)
    else:
        compare(args.dataset, args.epsilon, args.peer, args.top, args.ours)


if __name__ == "__main__":
    main()
