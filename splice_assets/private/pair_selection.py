"""Private choice of the 2-way tables a wide table measures.

Every pair of coordinates at one weight leaves each 2-way table of a wide table below its noise (d columns give
d (d - 1) / 2 pairs; docs/decisions/0023). When the candidate pairs outnumber the public cap ``selected_count`` (a
number of pairs per coordinate times d; off by default, see ``DEFAULT_PAIRS_PER_COORDINATE``), the measurement draws
its noise in three steps under its one reservation (``measuring.measure_exact``):

1. the moments, the 1-way and fine tables and (add-remove) the count;
2. one dependence score per candidate pair (``dependence_scores``): the l1 distance of its exact 2-way table from
   the product of step 1's noisy 1-way tables (times step 1's noisy n under add-remove);
3. the 2-way tables of the K pairs whose noisy scores, less the l1 error their own noise will add, are highest
   (``chosen_pairs``).

Sensitivity: the reference of step 2 is post-processing of step 1's output, so for any value of it one row moves a
score by at most the l1 change of the exact table, 1 under add-remove (one cell by one row) and 2/n under
replace-one (two cells by 1/n each). The choice is post-processing of the noisy scores, so step 3 has the
sensitivity of K tables whichever are chosen. Adaptively composed Gaussian mechanisms are one Gaussian mechanism
with the sum of the squared sensitivities (Dong, Roth & Su 2022, Cor. 3.3): that sum is the Delta the plan
calibrates (``mechanism.sensitivity``), so the three steps are one (epsilon, delta) spend.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from splice_assets.layout import pair_tables

#: Pairs measured per coordinate before the candidates are chosen from (0 = every pair). Off by default: on the
#: wide tables measuring every pair was as good or better (docs/decisions/0023); it saves fit time.
DEFAULT_PAIRS_PER_COORDINATE = 0.0
#: Share of Delta^2 the dependence scores take out of the pair share when pairs are chosen.
DEFAULT_SELECTION_SHARE = 0.1


def selected_count(candidates: int, d: int, pairs_per_coordinate: float) -> int:
    """K, the number of 2-way tables measured: every candidate while they number at most ceil(per coordinate x d)
    (0 = no cap), else that cap. A public function of the schema."""
    if not (math.isfinite(pairs_per_coordinate) and pairs_per_coordinate >= 0):
        raise ValueError(f"pairs_per_coordinate must be a finite number >= 0, got {pairs_per_coordinate!r}")
    cap = math.ceil(pairs_per_coordinate * d)
    return candidates if pairs_per_coordinate == 0 or candidates <= cap else max(1, cap)


def reference_marginals(noisy_marginals: np.ndarray, sizes: Sequence[int]) -> list[np.ndarray]:
    """Each coordinate's noisy 1-way table clipped at 0 and normalised (uniform where nothing is left):
    post-processing of step 1."""
    blocks = np.split(np.asarray(noisy_marginals, dtype=np.float64), np.cumsum(sizes)[:-1])
    out = []
    for block in blocks:
        kept = np.clip(block, 0.0, None)
        total = kept.sum()
        out.append(kept / total if total > 0 else np.full(block.size, 1.0 / block.size))
    return out


def dependence_scores(
    exact_pairs: np.ndarray,
    pairs: Sequence[tuple[int, int]],
    sizes: Sequence[int],
    noisy_marginals: np.ndarray,
    total: float,
) -> np.ndarray:
    """PRIVATE: per candidate pair, sum |exact cell - total p_a p_b| over its 2-way table, with p the
    ``reference_marginals`` of step 1 and ``total`` the public scale (1 for frequencies, step 1's noisy n for counts).

    Sensitivity (see the module docstring): with the reference fixed, 1 (add-remove) or 2/n (replace-one) per score.
    """
    reference = reference_marginals(noisy_marginals, sizes)
    tables = pair_tables(exact_pairs, pairs, sizes)
    return np.array([
        float(np.abs(table - total * np.outer(reference[a], reference[b])).sum())
        for (a, b), table in zip(pairs, tables)
    ])


def chosen_pairs(noisy_scores: np.ndarray, pair_sizes: Sequence[int], table_noise_std: float, k: int) -> np.ndarray:
    """Indices (ascending) of the ``k`` candidates with the highest noisy score less sqrt(2/pi) x cells x the
    table's noise std, the expected l1 error of measuring that table (AIM's penalty): large tables must show more
    dependence to be worth their noise. Post-processing of the noisy scores; ties go to the earlier pair."""
    key = np.asarray(noisy_scores, dtype=np.float64) - math.sqrt(2.0 / math.pi) * table_noise_std * np.asarray(
        pair_sizes, dtype=np.float64
    )
    order = np.argsort(-key, kind="stable")[:k]
    return np.sort(order)
