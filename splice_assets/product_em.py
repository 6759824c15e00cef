"""Composite-likelihood EM for a mixture of product distributions on noisy 1-way and 2-way histograms.

The fit's starting point when every model coordinate is discrete (numeric columns as histograms). Post-processing
only: the inputs are mechanism outputs (noisy frequencies) and public sizes, never rows.

Each noisy histogram is first projected onto the probability simplex, which zeroes the cells that are mostly
noise. EM then maximises the composite log-likelihood sum over tables and cells of t * log q, where q is the
mixture's 1-way or 2-way table. One iteration maximises the sum of the per-table EM bounds in closed form, so the
composite likelihood never decreases. An iteration costs O(K * cells), independent of n.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

# Floor added to the expected counts before normalising, so no probability becomes exactly 0 (the fit's
# softmax parameters take logs of them).
_FLOOR = 1e-12


@dataclass(frozen=True)
class ProductMixture:
    """weights (K,) and, per coordinate, a (K, levels) table of probabilities."""

    weights: np.ndarray
    probs: tuple[np.ndarray, ...]


def simplex_projection(values: np.ndarray) -> np.ndarray:
    """Euclidean projection onto the probability simplex (post-processing of a noisy histogram).

    Better than clip-and-renormalise for sparse histograms: it subtracts one common threshold, so the many
    near-empty cells of a 40-category column go to 0 instead of each keeping its positive noise.
    """
    y = np.nan_to_num(np.asarray(values, dtype=np.float64))
    if y.size == 0:
        return y
    u = np.sort(y)[::-1]
    excess = np.cumsum(u) - 1.0
    rho = np.nonzero(u - excess / np.arange(1, y.size + 1) > 0)[0][-1]
    return np.maximum(y - excess[rho] / (rho + 1), 0.0)


def composite_log_likelihood(
    mixture: ProductMixture,
    one_way: Sequence[np.ndarray],
    two_way: Sequence[np.ndarray],
    pairs: Sequence[tuple[int, int]],
) -> float:
    """sum_tables sum_cells t log q: ``one_way[a]`` (r_a,) per coordinate (or none), ``two_way[i]`` (r_a, r_b)."""
    total = 0.0
    for a, table in enumerate(one_way):
        total += float(np.sum(table * np.log(mixture.weights @ mixture.probs[a] + 1e-300)))
    for (a, b), table in zip(pairs, two_way):
        joint = (mixture.probs[a] * mixture.weights[:, None]).T @ mixture.probs[b]
        total += float(np.sum(table * np.log(joint + 1e-300)))
    return total


def composite_em(
    start: ProductMixture,
    one_way: Sequence[np.ndarray],
    two_way: Sequence[np.ndarray],
    pairs: Sequence[tuple[int, int]],
    iterations: int,
) -> ProductMixture:
    """``iterations`` EM steps from ``start`` on non-negative tables (``one_way`` may be empty)."""
    weights, probs = start.weights, start.probs
    for _ in range(iterations):
        counts = [np.zeros_like(p) for p in probs]
        weight_counts = np.zeros_like(weights)
        for (a, b), table in zip(pairs, two_way):
            weighted_a = probs[a] * weights[:, None]
            ratio = table / (weighted_a.T @ probs[b] + 1e-300)  # t / q per cell
            share_a = weighted_a * (probs[b] @ ratio.T)  # expected mass of (component, level of a)
            counts[a] += share_a
            counts[b] += probs[b] * (weighted_a @ ratio)
            weight_counts += share_a.sum(axis=1)
        for a, table in enumerate(one_way):
            weighted_a = probs[a] * weights[:, None]
            share_a = weighted_a * (table / (weighted_a.sum(axis=0) + 1e-300))
            counts[a] += share_a
            weight_counts += share_a.sum(axis=1)
        weights = weight_counts / weight_counts.sum()
        probs = tuple((c + _FLOOR) / (c + _FLOOR).sum(axis=1, keepdims=True) for c in counts)
    return ProductMixture(weights, probs)


__all__ = ["ProductMixture", "composite_em", "composite_log_likelihood", "simplex_projection"]
