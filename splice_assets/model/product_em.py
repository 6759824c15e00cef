"""Composite-likelihood EM for a mixture of product distributions on noisy 1-way and 2-way histograms.

The fit's starting point when every model coordinate is discrete (numeric columns as histograms). Post-processing
only: the inputs are mechanism outputs (noisy frequencies) and public sizes, never rows.

Each noisy histogram is first projected onto the probability simplex, which zeroes the cells that are mostly
noise. EM then maximises the composite log-likelihood sum over tables and cells of t * log q, where q is the
mixture's 1-way or 2-way table. One iteration maximises the sum of the per-table EM bounds in closed form, so the
composite likelihood never decreases. An iteration costs O(K * cells), independent of n.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# Floor added to the expected counts before normalising, so no probability becomes exactly 0 (the fit's
# softmax parameters take logs of them).
_FLOOR = 1e-12


@dataclass(frozen=True)
class ProductMixture:
    """weights (K,) and, per coordinate, a (K, levels) table of probabilities; ``joint[u]`` (K, r_a, r_b) is the
    table of the joint part ``joint_pairs[u] = (a, b)``, whose margins are ``probs[a]`` and ``probs[b]``."""

    weights: np.ndarray
    probs: tuple[np.ndarray, ...]
    joint_pairs: tuple[tuple[int, int], ...] = ()
    joint: tuple[np.ndarray, ...] = ()

    def pair_table(self, a: int, b: int) -> np.ndarray:
        """The mixture's (r_a, r_b) table of coordinates a and b."""
        for (ja, jb), table in zip(self.joint_pairs, self.joint):
            if (ja, jb) in ((a, b), (b, a)):
                out = np.einsum("c,cij->ij", self.weights, table)
                return out if (ja, jb) == (a, b) else out.T
        return (self.probs[a] * self.weights[:, None]).T @ self.probs[b]


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
        total += float(np.sum(table * np.log(mixture.pair_table(a, b) + 1e-300)))
    return total


def composite_em(
    start: ProductMixture,
    one_way: Sequence[np.ndarray],
    two_way: Sequence[np.ndarray],
    pairs: Sequence[tuple[int, int]],
    iterations: int,
) -> ProductMixture:
    """``iterations`` EM steps from ``start`` on non-negative tables (``one_way`` may be empty).

    A joint part (a, b) of ``start`` takes its own table's expected counts per (component, cell) directly; a table
    that sees only a (or b) spreads its counts over b by the component's conditional P(b | a), which is the EM
    step with b unobserved there.
    """
    weights, probs, joint = start.weights, start.probs, start.joint
    # Which joint part (if any) each table is, and whether it is stored transposed: fixed over the iterations.
    own_part = [
        next(((u, (a, b) != pair) for u, pair in enumerate(start.joint_pairs) if set(pair) == {a, b}), None)
        for a, b in pairs
    ]
    for _ in range(iterations):
        counts = [np.zeros_like(p) for p in probs]
        joint_counts = [np.zeros_like(j) for j in joint]
        weight_counts = np.zeros_like(weights)
        for (a, b), table, part in zip(pairs, two_way, own_part):
            if part is not None:
                u, transposed = part
                own = table.T if transposed else table
                ratio = own / (np.einsum("c,cij->ij", weights, joint[u]) + 1e-300)
                share = weights[:, None, None] * joint[u] * ratio
                joint_counts[u] += share
                weight_counts += share.sum(axis=(1, 2))
                continue
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
        new_joint = []
        for u, (a, b) in enumerate(start.joint_pairs):
            table = joint[u]
            joint_counts[u] += counts[a][:, :, None] * table / (probs[a][:, :, None] + 1e-300)
            joint_counts[u] += counts[b][:, None, :] * table / (probs[b][:, None, :] + 1e-300)
            total = joint_counts[u] + _FLOOR
            new_joint.append(total / total.sum(axis=(1, 2), keepdims=True))
        probs = tuple((c + _FLOOR) / (c + _FLOOR).sum(axis=1, keepdims=True) for c in counts)
        if new_joint:
            marginals = list(probs)
            for (a, b), table in zip(start.joint_pairs, new_joint):
                marginals[a], marginals[b] = table.sum(axis=2), table.sum(axis=1)
            probs, joint = tuple(marginals), tuple(new_joint)
    return ProductMixture(weights, probs, start.joint_pairs, joint)


def pair_misfit(mixture: ProductMixture, noisy: Sequence[np.ndarray], pairs: Sequence[tuple[int, int]],
                noise_std: float) -> np.ndarray:
    """Per pair, the mean squared standardised residual of the mixture's table against the raw noisy table: about 1
    where the mixture fits as well as the truth would (post-processing of noisy tables)."""
    return np.array([
        float(np.mean(((table - mixture.pair_table(a, b)) / noise_std) ** 2)) for (a, b), table in zip(pairs, noisy)
    ])


__all__ = ["ProductMixture", "composite_em", "composite_log_likelihood", "pair_misfit", "simplex_projection"]
