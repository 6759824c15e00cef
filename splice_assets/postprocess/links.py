"""Linked coordinates: near-functional pairs read from the noisy 2-way tables, redrawn from them when sampling.

A K-component product mixture cannot hold a near-functional dependence such as a code and its label (a bijection)
or one category that nearly fixes another, and a tilt that reweights draws from the mixture cannot
create it where the draws have no support. So for a few pairs (source u, target v) whose noisy table shows that u's
cell predicts v's cell, the draws that sampling and the tilt start from redraw v's cell from the table's
conditional P(v | u). The tilt is then fitted on such draws and corrects what the redraw lost (v's dependence on
the other coordinates, as far as the 2-way tables show it). Matching onto the 1-way targets moves a link's two
coordinates with the fewest moves, guided by the table (``sampling.fewest_moves``), so it keeps the pair. The
conditional keeps only the cells whose noisy counts clear the noise (a rare row keeps all), and is balanced to both
columns' 1-way targets (``balanced``), so the redraw copies less noise and the matching has no rows to move off the
link.

Choice: Goodman-Kruskal lambda of the simplex-projected noisy table, lambda(v | u) = (sum_u max_v p(u, v) - max_v
p(v)) / (1 - max_v p(v)), the share of the errors in guessing v's cell that knowing u's cell removes. Pairs at or
above ``min_lambda`` are taken strongest first, every coordinate in at most one link; a target whose commonest
cell already holds more than ``1 - min_spread`` of the mass is skipped (lambda is unstable there). Targets are
discrete coordinates only: for them the table holds all there is, while a numeric target would lose what the
mixture holds beyond 16 bins (its detail inside a bin and its dependence on other numeric columns). With numeric
targets allowed, a linked numeric pair left the 2-way TVD unchanged and lost TSTR (docs/decisions/0009).

Privacy: post-processing. Only the mechanism's noisy tables are read; the redraws use the sampling generator.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from splice_assets.layout import (
    EncodingLayout,
    coordinate_cells,
    marginal_sizes,
    pair_tables,
)
from splice_assets.model.fit import MarginalTargets
from splice_assets.model.product_em import simplex_projection

#: ``balanced``: rounds of iterative proportional fitting (a link's table has at most a few hundred cells).
BALANCE_ITERATIONS = 100


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
    layout: EncodingLayout,
    numeric_bins: int,
    min_lambda: float,
    min_spread: float = 0.2,
    cell_noise: float = 0.0,
    cell_z: float = 0.0,
) -> tuple[Link, ...]:
    """Links from the noisy 2-way tables of ``pairs`` (in ``layout``'s cells, numeric columns on ``numeric_bins``);
    each conditional keeps the cells whose noisy count is above ``cell_z`` times ``cell_noise`` (``_conditional``)."""
    sizes = marginal_sizes(layout, numeric_bins)
    candidates = []
    for (a, b), noisy in zip(pairs, pair_tables(noisy_pairs, pairs, sizes)):
        table = simplex_projection(noisy.ravel()).reshape(noisy.shape)
        clear = noisy > cell_z * cell_noise
        for source, target, joint, held in ((a, b, table, clear), (b, a, table.T, clear.T)):  # rows = source cells
            commonest = float(joint.sum(axis=0).max())
            if not layout.coordinates[target].is_discrete or 1.0 - commonest < min_spread:
                continue
            strength = goodman_kruskal(joint)
            if strength >= min_lambda:
                candidates.append((strength, source, target, joint, held))
    links, used = [], set()
    for strength, source, target, joint, held in sorted(candidates, key=lambda c: (-c[0], c[1], c[2])):
        if source in used or target in used:
            continue
        used |= {source, target}
        links.append(Link(source, target, _conditional(joint, held), strength))
    return tuple(links)


def goodman_kruskal(joint: np.ndarray) -> float:
    """lambda(column | row) of a joint table (non-negative, summing to 1): the share of the errors in guessing the
    column's cell that knowing the row's removes (0 when the commonest column holds everything)."""
    commonest = float(joint.sum(axis=0).max())
    return (float(joint.max(axis=1).sum()) - commonest) / (1.0 - commonest) if commonest < 1.0 else 0.0


def _conditional(joint: np.ndarray, held: np.ndarray) -> np.ndarray:
    """Rows of ``joint`` on their ``held`` cells, normalised. A source cell whose row holds none (its counts all within
    the noise: a rare level) keeps its whole row, whose largest cell is still its likeliest target (the target's
    marginal instead broke coil2000's rules, docs/decisions/0075); one with no mass gets the target's marginal."""
    kept = np.where(held, joint, 0.0)
    kept = np.where((kept.sum(axis=1) > 0)[:, None], kept, joint)
    rows = kept.sum(axis=1, keepdims=True)
    total = float(joint.sum())
    marginal = joint.sum(axis=0) / total if total > 0 else np.full(joint.shape[1], 1.0 / joint.shape[1])
    return np.where(rows > 0, kept / np.where(rows > 0, rows, 1.0), marginal)


def balanced(links: Sequence[Link], targets: MarginalTargets, layout: EncodingLayout,
             iterations: int = BALANCE_ITERATIONS) -> tuple[Link, ...]:
    """Each link's conditional made to carry its source's 1-way target onto its target's: the joint t(u) P(v | u)
    scaled to both margins by iterative proportional fitting, then conditioned on u again. Its cells at 0 stay 0, so
    the rows a source cell's noisy counts pin keep their target cells, and the rows within the noise (whole rows,
    ``_conditional``) lean toward the target cells the rest leave short. Without it, the redraw's margin of v and v's
    own 1-way target differed by the noise of two separately measured tables (2.3% of adult's rows for education_num
    and education), and matching moved that many rows off the link. Post-processing of public targets and noisy
    tables."""
    tables = targets.per_coordinate(layout)
    out = []
    for link in links:
        source, target = tables[link.source], tables[link.target]
        joint = source[:, None] * link.conditional
        for _ in range(iterations):
            columns = joint.sum(axis=0)
            joint *= np.where(columns > 0, target / np.where(columns > 0, columns, 1.0), 0.0)[None, :]
            rows = joint.sum(axis=1)
            joint *= np.where(rows > 0, source / np.where(rows > 0, rows, 1.0), 0.0)[:, None]
        if not np.isfinite(joint).all() or joint.sum() <= 0:  # targets the link cannot carry (no common support)
            out.append(link)
            continue
        out.append(replace(link, conditional=_conditional(joint, joint > 0)))
    return tuple(out)


def redraw_linked(
    cube: np.ndarray, layout: EncodingLayout, numeric_bins: int, links: Sequence[Link], rng: np.random.Generator
) -> np.ndarray:
    """``cube`` (n, d) in [-1, 1] with every link's (discrete) target redrawn on its grid given its source's cell."""
    out = np.array(cube, dtype=np.float64)
    for link in links:  # links share no coordinate: no redraw moves another link's source
        source_cells = coordinate_cells(out[:, link.source], layout.coordinates[link.source], numeric_bins)
        grid = layout.coordinates[link.target].grid()
        cdf = np.cumsum(link.conditional, axis=1)[source_cells]
        u = rng.random((len(out), 1)) * cdf[:, -1:]
        out[:, link.target] = grid[np.minimum((cdf <= u).sum(axis=1), len(grid) - 1)]
    return out


def describe(links: Sequence[Link], layout: EncodingLayout) -> list[dict[str, object]]:
    """Public summary for release records: the columns of every link and its lambda."""
    columns = [c.column for c in layout.coordinates]
    return [
        {"source": columns[link.source], "target": columns[link.target], "lambda": round(link.strength, 4)}
        for link in links
    ]
