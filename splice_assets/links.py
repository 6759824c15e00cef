"""Linked coordinates: near-functional pairs read from the noisy 2-way tables, redrawn from them when sampling.

A K-component product mixture cannot hold a near-functional dependence such as adult's education -> education_num
(a 16-value bijection) or relationship -> marital_status, and a tilt that reweights draws from the mixture cannot
create it where the draws have no support. So for a few pairs (source u, target v) whose noisy table shows that u's
cell predicts v's cell, the draws that sampling and the tilt start from redraw v's cell from the table's
conditional P(v | u). The tilt is then fitted on such draws and corrects what the redraw lost (v's dependence on
the other coordinates, as far as the 2-way tables show it).

Choice: Goodman-Kruskal lambda of the simplex-projected noisy table, lambda(v | u) = (sum_u max_v p(u, v) - max_v
p(v)) / (1 - max_v p(v)), the share of the errors in guessing v's cell that knowing u's cell removes. Pairs at or
above ``min_lambda`` are taken strongest first, every coordinate in at most one link; a target whose commonest
cell already holds more than ``1 - min_spread`` of the mass is skipped (lambda is unstable there).

Privacy: post-processing. Only the mechanism's noisy tables are read; the redraws use the sampling generator.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .encoding import EncodingLayout
from .moments import marginal_cells, marginal_sizes, pair_tables
from .product_em import simplex_projection


@dataclass(frozen=True)
class Link:
    """Redraw coordinate ``target``'s cell from ``conditional[cell of source]`` (rows sum to 1)."""

    source: int
    target: int
    conditional: np.ndarray
    #: Goodman-Kruskal lambda of the projected noisy table (diagnostic, public).
    strength: float


def choose_links(
    noisy_pairs: np.ndarray,
    pairs: Sequence[tuple[int, int]],
    sizes: Sequence[int],
    min_lambda: float,
    min_spread: float = 0.2,
) -> tuple[Link, ...]:
    """Links from the noisy 2-way tables of ``pairs`` (``sizes`` = the coordinates' 1-way cell counts)."""
    candidates = []
    for (a, b), noisy in zip(pairs, pair_tables(noisy_pairs, pairs, sizes)):
        table = simplex_projection(noisy.ravel()).reshape(noisy.shape)
        for source, target, joint in ((a, b, table), (b, a, table.T)):  # joint: rows = source cells
            commonest = float(joint.sum(axis=0).max())
            if 1.0 - commonest < min_spread:
                continue
            strength = (float(joint.max(axis=1).sum()) - commonest) / (1.0 - commonest)
            if strength >= min_lambda:
                candidates.append((strength, source, target, joint))
    links, used = [], set()
    for strength, source, target, joint in sorted(candidates, key=lambda c: (-c[0], c[1], c[2])):
        if source in used or target in used:
            continue
        used |= {source, target}
        links.append(Link(source, target, _conditional(joint), strength))
    return tuple(links)


def _conditional(joint: np.ndarray) -> np.ndarray:
    """Rows of ``joint`` normalised; a source cell with no mass gets the target's marginal."""
    rows = joint.sum(axis=1, keepdims=True)
    marginal = joint.sum(axis=0) / joint.sum()
    return np.where(rows > 0, joint / np.where(rows > 0, rows, 1.0), marginal)


def redraw_linked(
    cube: np.ndarray, layout: EncodingLayout, numeric_bins: int, links: Sequence[Link], rng: np.random.Generator
) -> np.ndarray:
    """``cube`` (n, d) with every link's target redrawn given its source's cell: a discrete target takes the cell's
    grid level, a numeric one a uniform value inside the cell's public bin (matching then places integers)."""
    out = np.array(cube, dtype=np.float64)
    sizes = marginal_sizes(layout, numeric_bins)
    source_cells = marginal_cells(out, layout, numeric_bins)  # links share no coordinate: no redraw moves a source
    for link in links:
        cdf = np.cumsum(link.conditional, axis=1)[source_cells[:, link.source]]
        u = rng.random((len(out), 1)) * cdf[:, -1:]
        cells = np.minimum((cdf <= u).sum(axis=1), sizes[link.target] - 1)
        coord = layout.coordinates[link.target]
        if coord.is_discrete:
            out[:, link.target] = coord.grid()[cells]
        else:
            out[:, link.target] = -1.0 + (cells + rng.random(len(out))) * (2.0 / numeric_bins)
    return out


def describe(links: Sequence[Link], layout: EncodingLayout) -> list[dict[str, object]]:
    """Public summary for release records: the columns of every link and its lambda."""
    columns = [c.column for c in layout.coordinates]
    return [
        {"source": columns[link.source], "target": columns[link.target], "lambda": round(link.strength, 4)}
        for link in links
    ]
