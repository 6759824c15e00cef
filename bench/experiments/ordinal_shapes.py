"""Targets to shrink an ordinal column's noisy 1-way table toward, simulated on coil2000's real level shares
(decision 0056): the mean cell (0037), the log-quadratic shape (``model.fit.ordinal_shape``, adopted), a piecewise
log-linear shape (exponential on each side of a mode) and a Gaussian kernel smoother chosen by SURE.

Per noise std: every ordinal column's real shares plus Gaussian noise, ``--draws`` times (fixed seed), each shrunk
(``fine_tables.shrunk_toward``; the kernel smoother replaces the table instead) and projected onto the simplex.
Prints the mean TVD to the real shares and the levels of at least 1% zeroed per column.

    .venv/bin/python -m bench.experiments.ordinal_shapes --stds 0.008 0.012 0.019
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import numpy as np

from bench.common import dataset_file
from splice_assets import load_schema
from splice_assets.datasets import schema_path
from splice_assets.model.product_em import simplex_projection
from splice_assets.postprocess.fine_tables import shrunk_toward
from splice_assets.postprocess.targets import ordinal_shape
from splice_assets.private.validation import read_table


def two_sided_shape(table: np.ndarray) -> np.ndarray:
    """The exp of a piecewise linear function with its kink at one level (the best in least squares)."""
    from scipy.optimize import least_squares

    levels = np.arange(len(table), dtype=np.float64)
    floor = max(float(np.clip(table, 0.0, None).sum()), 1e-12) / (10.0 * len(table))
    best, best_cost = table, np.inf
    for mode in range(len(table)):
        design = np.column_stack([np.ones_like(levels), np.minimum(levels - mode, 0), np.maximum(levels - mode, 0)])

        def shape(theta: np.ndarray, design: np.ndarray = design) -> np.ndarray:
            return np.exp(np.clip(design @ theta, -50.0, 50.0))

        start = np.linalg.lstsq(design, np.log(np.maximum(table, floor)), rcond=None)[0]
        fit = least_squares(lambda theta: shape(theta) - table, start)
        if fit.cost < best_cost:
            best, best_cost = shape(fit.x), fit.cost
    return best


def kernel_smoothed(table: np.ndarray, std: float, widths: tuple[float, ...] = (0.5, 0.75, 1.0, 1.5, 2.0),
                    ) -> np.ndarray:
    """The Gaussian kernel smoother (rows normalised) of lowest SURE, or the table when none is below its risk."""
    distance = np.subtract.outer(np.arange(len(table)), np.arange(len(table))).astype(np.float64)
    best, best_risk = table, len(table) * std**2
    for width in widths:
        kernel = np.exp(-0.5 * (distance / width) ** 2)
        kernel /= kernel.sum(axis=1, keepdims=True)
        fitted = kernel @ table
        risk = float(np.sum((table - fitted) ** 2)) + 2.0 * std**2 * float(np.trace(kernel)) - len(table) * std**2
        if risk < best_risk:
            best, best_risk = fitted, risk
    return best


METHODS: dict[str, Callable[[np.ndarray, float], np.ndarray]] = {
    "mean cell": lambda y, std: shrunk_toward(y, np.full(len(y), y.mean()), std),
    "log-quadratic": lambda y, std: shrunk_toward(y, ordinal_shape(y), std),
    "piecewise log-linear": lambda y, std: shrunk_toward(y, two_sided_shape(y), std),
    "SURE kernel": kernel_smoothed,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stds", nargs="+", type=float, default=[0.008, 0.012, 0.019])
    parser.add_argument("--draws", type=int, default=60)
    args = parser.parse_args()
    schema = load_schema(schema_path("coil2000"))
    raw = read_table(dataset_file("coil2000"))
    truths = []
    for spec in schema.columns:
        if spec.kind == "ordinal" and spec.categories is not None:
            shares = raw[spec.name].astype(str).value_counts(normalize=True)
            truths.append(np.array([shares.get(str(c), 0.0) for c in spec.categories]))
    rng = np.random.default_rng(1)
    print("noise std | " + " | ".join(f"{name}: TVD, zeroed" for name in METHODS), flush=True)
    for std in args.stds:
        error, zeroed = dict.fromkeys(METHODS, 0.0), dict.fromkeys(METHODS, 0.0)
        for truth in truths:
            for _ in range(args.draws):
                noisy = truth + rng.normal(0.0, std, len(truth))
                for name, method in METHODS.items():
                    out = simplex_projection(method(noisy, std))
                    error[name] += 0.5 * float(np.abs(out - truth).sum())
                    zeroed[name] += float(np.sum((truth >= 0.01) & (out <= 0.0)))
        runs = len(truths) * args.draws
        print(f"{std:g} | " + " | ".join(f"{error[n] / runs:.4f}, {zeroed[n] / runs:.3f}" for n in METHODS), flush=True)


if __name__ == "__main__":
    main()
