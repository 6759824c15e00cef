"""Post-processing of the noisy fine tables (``fine_cells``): each coarse bin's noisy fine cells shrunk toward the
bin's shape and projected onto its mass (``FineTables.consistent``), a sampled value drawn inside its coarse bin
from them (``FineTables.refine``), the couplings of near-identical numeric columns inside their bins
(``choose_couplings``), and the shrinkage every denoising step uses (``shrunk_toward``, ``james_stein``).

Reads only the noisy tables of the Measurement and the public schema; costs no privacy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from splice_assets.fine_cells import FineCells, candidate_z, fine_cells, noise_passes, per_column
from splice_assets.layout import DEFAULT_NUMERIC_BINS, layout_for
from splice_assets.measurement import Measurement
from splice_assets.model.fit import (
    DEFAULT_FINE_CAPACITY_SHAPES,
    DEFAULT_FINE_CORRECTED_SPIKES,
    DEFAULT_FINE_EXPONENTIAL_TAILS,
    DEFAULT_FINE_KNOT_SHAPES,
    DEFAULT_FINE_LEVEL_FIRST,
    DEFAULT_FINE_SHRINK,
    DEFAULT_FINE_STRATIFIED,
    DEFAULT_FINE_THRESHOLD,
)
from splice_assets.schema import TableSchema

#: ... and whose correlation the noisy table tells to within this standard error (docs/decisions/0030).
COUPLING_MAX_ERROR = 0.04
#: The largest copula correlation a coupling uses (at 1 a follower's draw inside its bin would be degenerate).
MAX_COUPLING = 0.9999
#: A follower's row whose bin lies wholly outside this many sd of its copula score given its leader takes its bin
#: from the copula (``FineTables.followers``; docs/decisions/0053). A 2-sd band cost 2-way fidelity.
FOLLOW_BAND = 3.0



@dataclass(frozen=True)
class FineTables:
    """The noisy fine tables of a measurement (concatenated in ``fine_cells`` order) and their noise std: public
    mechanism output, stored with the model. ``threshold`` (in noise std) reads a cell at or below it as empty."""

    frequencies: np.ndarray
    noise_std: float
    fine_bins: int
    threshold: float = DEFAULT_FINE_THRESHOLD
    #: (follower, leader, correlation) positions in ``fine_cells`` order, leaders first: the follower's draw inside
    #: its bin is conditioned on its leader's through a Gaussian copula; see ``choose_couplings``.
    couplings: tuple[tuple[int, int, float], ...] = ()
    shrink: bool = DEFAULT_FINE_SHRINK
    #: Before the shrinkage, shift a bin's noisy cells by one constant so that they sum to the bin's mass: the
    #: shrinkage then reads only their shape (``consistent``).
    level_first: bool = DEFAULT_FINE_LEVEL_FIRST
    #: Shrink a column's tail bins toward an exponential density where it fits their cells better than the straight
    #: one (``_tail_bins``, ``_steeper_tail``).
    exponential_tails: bool = DEFAULT_FINE_EXPONENTIAL_TAILS
    #: The bin shapes read the neighbours' densities on the column's scale (mass / ``FineCells.bin_widths``), not
    #: their masses: a column with ``knots`` has bins of unequal widths.
    knot_shapes: bool = DEFAULT_FINE_KNOT_SHAPES
    #: The rows of a bin take evenly spaced quantiles of its fine table, in random order (a stratified draw: the
    #: bin's values follow the table up to one row per bin instead of up to multinomial noise); else independent.
    stratified: bool = DEFAULT_FINE_STRATIFIED
    #: A per-value fine table's cells carry noise_std / sqrt(grid_weight), an interval table's noise_std /
    #: sqrt(interval_weight) (``FineCells.weight_units``).
    grid_weight: int = 1
    interval_weight: int = 1
    #: Followers (``couplings``) whose bins the copula corrects too, not only their places inside the bins: a row
    #: far outside the copula's band given its leader takes its bin from the copula (``_follow_leader``).
    followers: tuple[int, ...] = ()
    #: The bin shapes give each cell its share by the values it holds (``FineCells.capacities``): an integer
    #: column's interval of two integers twice that of an interval of one.
    capacity_shapes: bool = DEFAULT_FINE_CAPACITY_SHAPES
    #: A cell is left as measured only above ``spike_z`` noise std over its shape (3.4 for 160 cells), not above 3:
    #: of a column's hundreds of cells, one or two pass 3 sd by noise alone and became values at 3-4x their share.
    corrected_spikes: bool = DEFAULT_FINE_CORRECTED_SPIKES

    def noise_std_of(self, column: FineCells) -> float:
        return self.noise_std / math.sqrt(column.weight_units(self.grid_weight, self.interval_weight))

    def per_column(self, cells: tuple[FineCells, ...]) -> list[np.ndarray]:
        return per_column(self.frequencies, cells)

    def kept(self, table: np.ndarray, noise_std: float) -> np.ndarray:
        """A column's fine table with cells at or below the threshold set to 0 (post-processing)."""
        return np.where(table > self.threshold * noise_std, table, 0.0)

    def consistent(
        self, column: FineCells, table: np.ndarray, coarse: np.ndarray | None = None,
        numeric_bins: int = DEFAULT_NUMERIC_BINS,
    ) -> np.ndarray:
        """A column's fine table made consistent (post-processing): the cells of each coarse bin (thresholded,
        ``kept``) projected onto the non-negative tables summing to the bin's mass in ``coarse`` (the noisy coarse
        1-way table; default: the fine cells' own sum). The Euclidean projection is a soft threshold whose level the
        sum sets, so it removes the noise of many empty cells in a sparse bin and little of a smooth one. Before it,
        the cells are shrunk toward the bin's straight shape, or in a tail bin of intervals toward an exponential one
        where that fits them better (``exponential_tails``). A sentinel's cell is left out (its rows sit on it through
        the sentinel coordinate), and so is its mass from the bin's; so is a candidate's
        cell whose noisy count is below ``candidate_z``, its count added to the interval that holds its value."""
        noise_std = self.noise_std_of(column)
        counts = table[: column.n_cells].copy()
        tentative = column.tentative_cells()
        # A candidate the noise cannot tell from absent is no cell at all: its noisy count goes back to the interval
        # that holds its value, as if it had not been measured apart.
        dropped = tentative & (counts <= candidate_z(int(tentative.sum())) * noise_std)
        values = np.asarray(column.points, dtype=np.float64)[dropped[: len(column.points)]]
        np.add.at(counts, column.interval_cells(column.cube(values)), counts[dropped])
        fine = np.where(column.holds_values() & ~dropped, self.kept(counts, noise_std), 0.0)
        declared = np.isin(np.arange(column.n_cells), [column.points.index(v) for v in column.declared
                                                       if v in column.points])
        parents = np.asarray(column.parents)
        weights = np.zeros(column.n_cells)
        inside_of = [np.flatnonzero((parents == bin_) & ~declared & ~dropped) for bin_ in range(numeric_bins)]
        points = [np.clip(fine[(parents == bin_) & declared], 0.0, None).sum() for bin_ in range(numeric_bins)]
        masses = np.array([fine[inside].sum() if coarse is None else max(coarse[bin_] - points[bin_], 0.0)
                           for bin_, inside in enumerate(inside_of)])
        widths = column.bin_widths(numeric_bins) if self.knot_shapes else np.ones(numeric_bins)
        tails = _tail_bins(masses / widths) if self.exponential_tails and column.intervals else {}
        capacity = column.capacities() if self.capacity_shapes else np.ones(column.n_cells)
        spike = spike_z(column.n_cells) if self.corrected_spikes else SPIKE_Z
        for bin_, inside in enumerate(inside_of):
            if len(inside):
                cells = fine[inside]
                if self.shrink:
                    if self.level_first:  # the projection's own first move, so the shrinkage sees only the shape
                        cells = cells + (masses[bin_] - cells.sum()) / len(cells)
                    shape = _bin_shape(masses, bin_, len(inside), widths, capacity[inside])
                    if bin_ in tails and inside[0] >= len(column.points):  # intervals only, in value order
                        steep = _tail_shape(masses, bin_, cells, tails[bin_], widths, capacity[inside])
                        shape = _steeper_tail(cells, shape, steep, noise_std)
                    cells = shrunk_toward(cells, shape, noise_std, spike)
                weights[inside] = _project(cells[None, :], np.array([masses[bin_]]))[0]
        return weights

    def refine(
        self, x: np.ndarray, cells: tuple[FineCells, ...], rng: np.random.Generator,
        coarse: list[np.ndarray] | None = None, numeric_bins: int = DEFAULT_NUMERIC_BINS, in_place: bool = False,
        cell_weights: Mapping[int, np.ndarray] | None = None,
    ) -> np.ndarray:
        """Rows ``x`` (cube) with every present numeric value redrawn inside its coarse bin from the column's
        consistent fine tables (``consistent``; ``coarse``: each column's noisy coarse table) restricted to that
        bin, by the inverse of their distribution function at a uniform draw; with ``stratified`` the m rows of a bin
        draw one uniform each from [i/m, (i+1)/m), the i in random order. A coupled column (``couplings``) draws
        its uniform given its leader's (``_conditional_uniforms``, evenly spaced in the copula's order), so
        near-identical columns stay near-identical inside the bins too. A row off a column's sentinels in a bin only
        its sentinels hold moves to another bin first (``_rehome_off_sentinel_rows``); a bin whose fine cells are all
        empty keeps its values as drawn. ``in_place``: written into ``x``. ``cell_weights`` (index into ``cells`` ->
        a weight per fine cell, the share of the cell inside a condition: ``sampling``'s conditional draws) multiplies
        each column's consistent table, so the values are drawn from the fine table restricted to the condition."""
        out = x if in_place else x.copy(order="K")  # (column-major rows stay so: a transposing copy is slow)
        tables = self.per_column(cells)
        leader_of = {follower: (leader, r) for follower, leader, r in self.couplings}
        order = [c for c in range(len(cells)) if c not in leader_of] + [f for f, _, _ in self.couplings]
        leaders = {leader for _, leader, _ in self.couplings}
        latent: dict[int, np.ndarray] = {}  # a leader's normal score of each row's drawn quantile (NaN: not drawn)
        for c in order:
            column = cells[c]
            weights = self.consistent(column, tables[c], None if coarse is None else coarse[c], numeric_bins)
            if cell_weights is not None and c in cell_weights:
                weights = weights * cell_weights[c]
            order_c = column.ordered()
            parents = np.asarray(column.parents)[order_c]
            z = np.clip(out[:, column.coordinate], -1.0, 1.0)
            row_bins = np.minimum(np.floor((z + 1.0) * numeric_bins / 2.0), numeric_bins - 1).astype(np.int64)
            present = np.ones(len(x), dtype=bool) if column.missing is None else out[:, column.missing] <= 0.0
            if column.exact is not None:  # a row at a sentinel (its coordinate's level) sits on it exactly
                levels = len(column.declared) + 1
                level = np.rint((np.clip(out[:, column.exact], -1, 1) + 1.0) * (levels - 1) / 2.0).astype(np.int64)
                on_point = present & (level > 0)
                declared = column.cube(np.asarray(column.declared, dtype=np.float64))
                out[on_point, column.coordinate] = declared[level[on_point] - 1]
                present &= level == 0
            bin_mass = np.array([weights[order_c[parents == bin_]].sum() for bin_ in range(numeric_bins)])
            if column.exact is not None:
                _rehome_off_sentinel_rows(column, bin_mass, self.noise_std_of(column), row_bins, present, rng)
            below = np.concatenate([[0.0], np.cumsum(bin_mass)]) / max(bin_mass.sum(), 1e-300)
            u_column = rng.uniform(size=len(x))
            if c in leader_of:
                leader, r = leader_of[c]
                if c in self.followers:
                    _follow_leader(u_column, row_bins, present, latent[leader], below, r)
                u_column = _conditional_uniforms(u_column, latent[leader], row_bins, below, r)
            if c in leaders:
                latent[c] = np.full(len(x), np.nan)
            # The present rows grouped by bin, each group in row order (a stable sort of small integers).
            by_bin = np.flatnonzero(present)
            by_bin = by_bin[np.argsort(row_bins[by_bin].astype(np.int16), kind="stable")]
            bounds = np.searchsorted(row_bins[by_bin], np.arange(numeric_bins + 1))
            for bin_ in np.flatnonzero(np.diff(bounds)):
                inside = order_c[parents == bin_]
                mass = weights[inside]
                if not mass.sum() > 0:
                    continue
                rows = by_bin[bounds[bin_] : bounds[bin_ + 1]]
                cdf = np.cumsum(mass) / mass.sum()
                u = u_column[rows]
                if self.stratified and c not in leader_of:  # a follower's are evenly spaced already
                    u = (rng.permutation(len(rows)) + u) / len(rows)
                k = np.minimum(np.searchsorted(cdf, u, side="right"), len(inside) - 1)  # skips empty cells
                below_k = np.where(k > 0, cdf[np.maximum(k - 1, 0)], 0.0)
                position = np.clip((u - below_k) / np.maximum(cdf[k] - below_k, 1e-300), 0.0, 1.0 - 1e-12)
                out[rows, column.coordinate] = column.at(inside[k], position)
                if c in leaders:
                    latent[c][rows] = _normal_score(below[bin_] + u * (below[bin_ + 1] - below[bin_]))
        return out


def _rehome_off_sentinel_rows(
    column: FineCells, bin_mass: np.ndarray, noise_std: float, row_bins: np.ndarray, present: np.ndarray,
    rng: np.random.Generator,
) -> None:
    """Rows off a column's sentinels (``present``) that sit in a bin holding a sentinel whose other values' fine
    mass (``bin_mass``) is within the noise of its m cells (at most noise_std * sqrt(m)) take a new bin, drawn by
    the other values' mass of the bins that hold some (``row_bins``, in place). The sentinel coordinate and the
    value's bin are matched each to its own target, so the model's rows off the sentinels can land in a bin only
    the sentinels hold: a column with sentinels below its other codes drew rows as values between them, which never
    occur (docs/decisions/0038). The row's sentinel level is kept: its value follows the
    column's other values. Post-processing of the noisy fine tables and the public seed's stream."""
    parents = np.asarray(column.parents)
    sentinel_parents = [int(parents[column.points.index(v)]) for v in column.declared if v in column.points]
    sentinels = np.bincount(np.asarray(sentinel_parents, dtype=np.int64), minlength=len(bin_mass))
    other = np.bincount(parents, minlength=len(bin_mass)) - sentinels  # the bin's cells of other values
    hidden = (sentinels > 0) & (bin_mass <= noise_std * np.sqrt(np.maximum(other, 1)))
    held = np.where(hidden, 0.0, np.clip(bin_mass, 0.0, None))
    stray = np.flatnonzero(present & hidden[row_bins])
    if len(stray) and held.sum() > 0:
        row_bins[stray] = rng.choice(len(held), size=len(stray), p=held / held.sum())


def _follow_leader(
    own: np.ndarray, row_bins: np.ndarray, present: np.ndarray, leader_score: np.ndarray, below: np.ndarray, r: float,
) -> None:
    """In place: a present row whose leader was drawn and whose bin lies wholly outside the copula's band given its
    leader (the follower's score r z +- ``FOLLOW_BAND`` sqrt(1 - r^2)) takes its bin and its uniform inside it from the
    copula: score r z + sqrt(1 - r^2) N(0, 1), read at the follower's own bin masses (``below``). Then every
    present row's bin is matched back onto those masses by the rank of its quantile, so the column keeps them
    (the moved rows left the mixture's tails: without it, California's on-grid 1-way TVD rose .0111 -> .0145)."""
    from scipy.special import ndtr

    if not below[-1] > 0:  # no mass in any bin: the rows keep their values (``refine``)
        return
    r = float(np.clip(r, -MAX_COUPLING, MAX_COUPLING))
    spread = math.sqrt(1.0 - r * r)
    rows = np.flatnonzero(present & np.isfinite(leader_score))
    centre = r * leader_score[rows]
    low, high = ndtr(centre - FOLLOW_BAND * spread), ndtr(centre + FOLLOW_BAND * spread)
    far = rows[(below[row_bins[rows] + 1] < low) | (below[row_bins[rows]] > high)]
    score = r * leader_score[far] + spread * _normal_score(own[far])
    quantile = np.clip(ndtr(score) * below[-1], 0.0, below[-1] * (1.0 - 1e-12))
    row_bins[far] = _bin_of(quantile, below)
    own[far] = np.clip((quantile - below[row_bins[far]]) / np.maximum(np.diff(below)[row_bins[far]], 1e-300),
                       0.0, 1.0 - 1e-12)
    rows = np.flatnonzero(present)
    position = below[row_bins[rows]] + own[rows] * np.diff(below)[row_bins[rows]]
    rank = np.empty(len(rows))
    rank[np.argsort(position, kind="stable")] = np.arange(len(rows))
    row_bins[rows] = _bin_of((rank + 0.5) / max(len(rows), 1) * below[-1], below)


def _bin_of(quantile: np.ndarray, below: np.ndarray) -> np.ndarray:
    """The bin whose cumulative range [below[b], below[b + 1]) holds each quantile."""
    return np.clip(np.searchsorted(below, quantile, side="right") - 1, 0, len(below) - 2)


def _normal_score(quantile: np.ndarray) -> np.ndarray:
    from scipy.special import ndtri

    return ndtri(np.clip(quantile, 1e-12, 1.0 - 1e-12))


def _conditional_uniforms(
    own: np.ndarray, leader_score: np.ndarray, row_bins: np.ndarray, below: np.ndarray, r: float,
) -> np.ndarray:
    """A follower's draws inside its bins, given its leader's normal scores: under a Gaussian copula with
    correlation r the follower's score is N(r z, 1 - r^2) cut to its bin's quantile range, drawn by inverting that
    truncated normal at the follower's own uniform; the rows of each bin then take evenly spaced positions in the
    order of those draws. Rows whose leader was not drawn keep their own uniform."""
    from scipy.special import ndtr

    r = float(np.clip(r, -MAX_COUPLING, MAX_COUPLING))  # bundles before 0030 hold a sign: +-1 follows the leader
    s = math.sqrt(1.0 - r * r)
    out = own.copy()
    rows = np.flatnonzero(np.isfinite(leader_score))
    if not len(rows):
        return out
    lo, hi = below[row_bins[rows]], below[row_bins[rows] + 1]
    width = hi - lo
    rows, lo, hi, width = rows[width > 0], lo[width > 0], hi[width > 0], width[width > 0]
    centre = r * leader_score[rows]
    a, b = (_normal_score(lo) - centre) / s, (_normal_score(hi) - centre) / s
    score = centre + s * _truncated_normal_ppf(own[rows], a, b)
    drawn = np.clip((ndtr(score) - lo) / width, 0.0, 1.0 - 1e-12)
    drawn = np.where(np.isfinite(drawn), drawn, own[rows])  # a bin too far in a tail to resolve: its own draw
    # Keep the copula's order but not its within-bin shares: the rows of a bin take evenly spaced positions in
    # that order, so the follower's values inside the bin still follow its own fine table (the mixture's bins and
    # the copula disagree where the leader sits far from the follower's bin, which would crowd one edge).
    bins = row_bins[rows]
    order = np.lexsort((drawn, bins))
    start = np.searchsorted(bins[order], bins[order], side="left")
    count = np.searchsorted(bins[order], bins[order], side="right") - start
    even = np.empty(len(rows))
    even[order] = (np.arange(len(rows)) - start + own[rows][order]) / count
    out[rows] = np.clip(even, 0.0, 1.0 - 1e-12)
    return out


def _truncated_normal_ppf(u: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Quantile u of the standard normal cut to [a, b] (scipy's truncnorm.ppf to 1e-12, at 5x its speed); in the
    upper tail it inverts the mirror image, where the normal distribution function keeps its precision."""
    from scipy.special import ndtr, ndtri

    upper = a > 0
    lo, hi = np.where(upper, -b, a), np.where(upper, -a, b)
    below, above = ndtr(lo), ndtr(hi)
    x = ndtri(below + np.where(upper, 1.0 - u, u) * (above - below))
    return np.where(upper, -x, x)


#: A cell more than this many noise std above its shrinkage target is read as a spike and left as measured.
SPIKE_Z = 3.0


def spike_z(cells: int) -> float:
    """The spike threshold of a column of ``cells`` fine cells: at most ``FALSE_POSITIVES`` of them pass it by
    noise alone in expectation (the frequent-value selection's rule, ``candidate_z``), and never below ``SPIKE_Z``."""
    return max(SPIKE_Z, noise_passes(cells))


def shrunk_toward(cells: np.ndarray, target: np.ndarray, noise_std: float | np.ndarray,
                  spike: float = SPIKE_Z, fitted: int = 0) -> np.ndarray:
    """Noisy cells of equal noise std shrunk toward ``target`` by positive-part James-Stein, which never raises the
    expected squared error for three or more cells; spikes (cells more than ``spike`` noise std above the target)
    are left alone, and the others' target holds the total less theirs. Post-processing. Used on a coarse bin's
    fine cells, toward the bin's mass spread along the slope its neighbours show (``_bin_shape``): without it the
    projection alone zeroes every cell whose count is below the bin's noise level, so a smooth integer column came
    out with half its values never drawn; with it cells the noise cannot tell apart follow the coarse shape. And on
    a categorical column's 1-way table, toward its mean cell (``targets.marginal_targets``): categories the noise
    hides keep a common share instead of the noise, the frequent ones (spikes) stay as measured. Cells of unequal
    noise std (an array) are shrunk by one factor read from their standardised residuals. A target with ``fitted``
    parameters read from the same cells takes that many fewer degrees of freedom (Lindley's estimator)."""
    return james_stein(cells, target, noise_std, spike, fitted)[0]


def james_stein(cells: np.ndarray, target: np.ndarray, noise_std: float | np.ndarray,
                spike: float = SPIKE_Z, fitted: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``shrunk_toward``'s cells and each cell's factor: the share of its residual kept (1 for a spike or where
    nothing is shrunk). In the normal model James-Stein estimates, a cell's posterior variance is its factor times
    its noise variance."""
    out = cells.astype(np.float64, copy=True)
    kept = np.ones(len(out))
    rest = out <= target + spike * noise_std
    k = int(rest.sum()) - fitted
    if k < 3 or not np.all(np.asarray(noise_std) > 0):
        return out, kept
    level = target[rest] * max(target.sum() - out[~rest].sum(), 0.0) / max(target[rest].sum(), 1e-300)
    residual = out[rest] - level
    if np.ndim(noise_std):
        standardised = residual / np.asarray(noise_std)[rest]
        spread, noise_std = float(standardised @ standardised), 1.0
    else:
        spread = float(residual @ residual)
    factor = max(0.0, 1.0 - (k - 2) * noise_std**2 / spread) if spread > 0 else 0.0
    out[rest] = level + factor * residual
    kept[rest] = factor
    return out, kept


def _tail_bins(masses: np.ndarray) -> dict[int, bool]:
    """The outermost bins with mass on each side that hold less than their inner neighbour (the column's tails), each
    with whether its density rises with the value (the lower tail) or falls (the upper one)."""
    occupied = np.flatnonzero(masses > 0)
    if len(occupied) < 2:
        return {}
    first, last = int(occupied[0]), int(occupied[-1])
    tails = {}
    if masses[first] < masses[first + 1]:
        tails[first] = True
    if masses[last] < masses[last - 1]:
        tails[last] = False
    return tails


def _tail_shape(masses: np.ndarray, bin_: int, cells: np.ndarray, rising: bool,
                widths: np.ndarray | None = None, capacity: np.ndarray | None = None) -> np.ndarray:
    """A tail bin's mass spread over its ``cells`` along the exponential density, rising with the value in the lower
    tail and falling in the upper one, nearest to the noisy cells in least squares (post-processing: one parameter
    read from the noisy cells). A straight density (``_bin_shape``) cannot follow a tail that falls steeply inside
    a wide outer bin, where most of its rows sit near the inner edge. The rate is at least the one at which the
    density falls from the inner neighbour bin's mass to this bin's (a tail that falls no slower inside the bin than
    into it), so the noise of a thin tail's cells does not flatten it toward the outer edge. ``bin_`` is one of
    ``_tail_bins``: it has mass, and its inner neighbour more."""
    from scipy.optimize import minimize_scalar

    mass = float(masses[bin_])
    capacity = np.ones(len(cells)) if capacity is None else capacity
    position = _centres(capacity)
    position = position if rising else 1.0 - position  # 1 at the inner edge

    def shape(rate: float) -> np.ndarray:
        density = np.exp(rate * (position - 1.0)) * capacity
        return density * (mass / density.sum())

    # At least as steep as the fall from the inner neighbour's density to this bin's, over the distance between
    # their centres (one bin when the widths are equal), per width of this bin.
    widths = np.ones(len(masses)) if widths is None else widths
    inner = bin_ + 1 if rising else bin_ - 1
    fall = math.log(float(masses[inner] / widths[inner]) / (mass / float(widths[bin_])))
    least = fall * float(widths[bin_]) / (0.5 * float(widths[inner] + widths[bin_]))
    fit = minimize_scalar(lambda rate: float(np.sum((cells - shape(rate)) ** 2)), bounds=(least, least + 50.0),
                          method="bounded", options={"xatol": 1e-3})
    return shape(float(fit.x))


def _steeper_tail(cells: np.ndarray, straight: np.ndarray, steep: np.ndarray, noise_std: float) -> np.ndarray:
    """The exponential tail shape where it is nearer the noisy cells than the straight one by more than its one fitted
    parameter costs (2 sigma^2, as in SURE and AIC); else the straight one."""
    gain = float(np.sum((cells - straight) ** 2) - np.sum((cells - steep) ** 2))
    return steep if gain > 2.0 * noise_std**2 else straight


def _centres(capacity: np.ndarray) -> np.ndarray:
    """Each cell's centre as a fraction of its bin, the cells in order holding ``capacity`` values each (equal
    capacities: (i + 0.5) / cells)."""
    total = float(capacity.sum())
    if not total > 0:
        return (np.arange(len(capacity)) + 0.5) / max(len(capacity), 1)
    return (np.cumsum(capacity) - 0.5 * capacity) / total


def _bin_shape(masses: np.ndarray, bin_: int, cells: int, widths: np.ndarray | None = None,
               capacity: np.ndarray | None = None) -> np.ndarray:
    """The mass of coarse bin ``bin_`` spread over its ``cells`` cells along a straight density whose slope
    is that between the neighbouring bins' densities (mass / width, ``widths`` equal by default; a missing
    neighbour counts as this bin) at their centres, clipped at 0; each cell takes the density at its centre times
    its ``capacity`` (the values it holds; equal by default)."""
    widths = np.ones(len(masses)) if widths is None else widths
    centres = np.cumsum(widths) - 0.5 * widths
    here = max(float(masses[bin_]), 0.0)
    density_here = here / float(widths[bin_])
    low, high = max(bin_ - 1, 0), min(bin_ + 1, len(masses) - 1)
    below = max(float(masses[low]), 0.0) / float(widths[low]) if low < bin_ else density_here
    above = max(float(masses[high]), 0.0) / float(widths[high]) if high > bin_ else density_here
    span = float(centres[high] - centres[low]) if high > low else 1.0
    capacity = np.ones(cells) if capacity is None else capacity
    position = (_centres(capacity) - 0.5) * float(widths[bin_])
    density = np.clip(density_here + (above - below) / span * position, 0.0, None) * capacity
    total = density.sum()
    return density * (here / total) if total > 0 else np.full(cells, here / cells)


def _project(values: np.ndarray, totals: np.ndarray) -> np.ndarray:
    """Each row of ``values`` projected (Euclidean) onto the non-negative vectors summing to its ``totals`` entry
    (0 where the total is not positive): max(v - lambda, 0) with lambda set by the sum (Duchi et al. 2008)."""
    out = np.zeros_like(values)
    rows = np.flatnonzero(totals > 0)
    if not len(rows):
        return out
    v, t = values[rows], totals[rows]
    ordered = -np.sort(-v, axis=1)
    steps = (np.cumsum(ordered, axis=1) - t[:, None]) / np.arange(1, v.shape[1] + 1)
    last = (ordered > steps).sum(axis=1) - 1  # the largest j with v_(j) > (sum_{i<=j} v_(i) - t) / j
    level = steps[np.arange(len(rows)), np.maximum(last, 0)]
    out[rows] = np.maximum(v - level[:, None], 0.0)
    return out


def below_noise(
    measurement: Measurement, schema: TableSchema, sigmas: float = 2.0, limit: int = 20
) -> dict[str, list[Any]]:
    """What the noise hides, from the noisy statistics only: per column, the categories and the exact (declared or
    grid) values whose noisy frequency is below ``sigmas`` noise std, so the release cannot tell them from absent
    (at most ``limit`` per column, rarest first)."""
    out: dict[str, list[Any]] = {}
    layout = layout_for(schema)
    for coordinate, table, std in zip(layout.coordinates, measurement.marginals(), measurement.table_noise_stds()):
        spec, floor = schema.column(coordinate.column), sigmas * std
        if spec.is_discrete and coordinate.role == "value" and spec.categories is not None:
            labels = [*spec.categories, *(["<missing>"] if spec.nullable else [])]
            out[spec.name] = [labels[i] for i in np.argsort(table) if table[i] < floor][:limit]
    if measurement.fine_sizes:
        cells = fine_cells(schema, measurement.fine_bins, measurement.numeric_bins)
        for column, table in zip(cells, per_column(measurement.noisy_fine, cells)):
            points = table[: len(column.points)]
            fine_floor = sigmas * measurement.fine_noise_std(column.per_value)
            out[column.column] = [column.points[i] for i in np.argsort(points)
                                  if points[i] < fine_floor and column.points[i] not in column.tentative][:limit]
    return {name: values for name, values in out.items() if values}


def choose_couplings(
    noisy_pairs: np.ndarray, pairs: tuple[tuple[int, int], ...], sizes: tuple[int, ...],
    cells: tuple[FineCells, ...], minimum: float, noise_std: float, max_error: float = COUPLING_MAX_ERROR,
    margins: Sequence[np.ndarray] | None = None,
) -> tuple[tuple[int, int, float], ...]:
    """The numeric columns whose draws inside their bins are coupled (post-processing of mechanism output): the
    maximum spanning forest of the pairs whose noisy coarse 2-way table (cell noise std ``noise_std``) shows a
    Gaussian-copula correlation (``latent_correlation``) of at least ``minimum`` in absolute value, known to within
    ``max_error`` (one standard error), as (follower, leader, correlation) in an order where every leader comes
    before its followers. A Gaussian tree's joint law does not depend on its root. ``margins`` (per coordinate, the
    1-way targets) place the copula's cuts; without them, each table's own margins do.

    Only columns with a continuous part (fine intervals) take part. A column on a public grid of at most
    ``GRID_LIMIT`` points draws one of a few values inside a bin, and the order of those codes or counts need not
    follow the dependence between the bins: coupled at their tables' correlation, grid columns lost 2-way fidelity
    (docs/decisions/0044)."""
    if not 0.0 < minimum <= 1.0 or not pairs:
        return ()
    position = {column.coordinate: i for i, column in enumerate(cells) if column.intervals}
    edges = []
    starts = np.concatenate([[0], np.cumsum([sizes[a] * sizes[b] for a, b in pairs])])
    for (a, b), start in zip(pairs, starts[:-1]):
        if a in position and b in position:
            table = noisy_pairs[start : start + sizes[a] * sizes[b]].reshape(sizes[a], sizes[b])
            r, error = latent_correlation(table, noise_std, None if margins is None else (margins[a], margins[b]))
            if abs(r) >= minimum and error <= max_error:
                edges.append((abs(r), position[a], position[b], r))
    root = list(range(len(cells)))

    def find(i: int) -> int:
        while root[i] != i:
            root[i] = root[root[i]]
            i = root[i]
        return i

    neighbours: dict[int, list[tuple[int, float]]] = {}
    for _, a, b, r in sorted(edges, key=lambda e: (-e[0], e[1], e[2])):  # Kruskal, strongest first
        if find(a) != find(b):
            root[find(a)] = find(b)
            neighbours.setdefault(a, []).append((b, r))
            neighbours.setdefault(b, []).append((a, r))
    couplings: list[tuple[int, int, float]] = []
    seen: set[int] = set()
    for start in sorted(neighbours):  # breadth first from the lowest position of each tree
        if start in seen:
            continue
        seen.add(start)
        queue = [start]
        while queue:
            leader = queue.pop(0)
            for follower, r in sorted(neighbours[leader]):
                if follower not in seen:
                    seen.add(follower)
                    couplings.append((follower, leader, r))
                    queue.append(follower)
    return tuple(couplings)


def latent_correlation(
    table: np.ndarray, noise_std: float, margins: tuple[np.ndarray, np.ndarray] | None = None
) -> tuple[float, float]:
    """The correlation of the Gaussian copula whose coarse 2-way table is nearest, in least squares, to a noisy
    table of frequencies (post-processing; its noiseless cells sum to 1). Least squares is the likelihood of the
    table's Gaussian noise, so the noise of empty cells does not pull the estimate toward 0 the way it pulls a rank
    correlation of the clipped table, and a skewed column's few occupied bins still tell the correlation. The cuts
    are ``margins`` (the two columns' 1-way targets, better measured than a table's margin, whose cells each sum 16
    noisy cells) or else the table's own, projected onto the simplex. Neither the copula's mass nor its margins take
    the clipped noise of the empty cells: read as a share of its clipped sum (well above the rows where many cells
    are empty), the table had pulled r far toward 0 for a near-deterministic pair (docs/decisions/0044).
    Returns (r, its standard error): ``noise_std`` (a cell's noise std, in frequencies) over the length of the
    table's derivative in r. Where one value holds most of a column the table barely moves with r (a 2 x 2
    table with a 90% corner), and the error says so."""
    from scipy.optimize import minimize_scalar

    margins = (table.sum(1), table.sum(0)) if margins is None else margins
    cuts = [_normal_cuts(_project(np.asarray(margin, dtype=np.float64)[None, :], np.ones(1))[0]) for margin in margins]
    if min(np.count_nonzero(np.diff(c) > 0) for c in cuts) < 2:
        return 0.0, math.inf  # all of one column's mass in one bin: the table says nothing about the dependence

    def cells(r: float) -> np.ndarray:
        return _copula_cells(cuts[0], cuts[1], r)

    def misfit(r: float) -> float:
        return float(np.sum((cells(r) - table) ** 2))

    grid = np.linspace(-0.99, 0.99, 67)
    best = grid[int(np.argmin([misfit(r) for r in grid]))]
    bounds = (max(best - 0.03, -MAX_COUPLING), min(best + 0.03, MAX_COUPLING))
    fit = minimize_scalar(misfit, bounds=bounds, method="bounded", options={"xatol": 1e-4})
    r, step = float(fit.x), 1e-3
    slope = (cells(min(r + step, 1.0 - 1e-6)) - cells(max(r - step, -1.0 + 1e-6))) / (2 * step)
    return r, float(noise_std / max(np.sqrt(np.sum(slope**2)), 1e-300))


def copula_table(margin_a: np.ndarray, margin_b: np.ndarray, r: float) -> np.ndarray:
    """The 2-way table of a Gaussian copula of correlation ``r`` with the given margins (clipped at 0 and normalised;
    the table sums to 1): each cell the bivariate normal mass between its bins' normal scores."""
    return _copula_cells(_normal_cuts(margin_a), _normal_cuts(margin_b), r)


def _normal_cuts(margin: np.ndarray) -> np.ndarray:
    """The normal scores of a margin's bin edges (its mass clipped at 0 and normalised)."""
    from scipy.special import ndtri

    mass = np.clip(margin, 0.0, None)
    return ndtri(np.clip(np.concatenate([[0.0], np.cumsum(mass)]) / max(mass.sum(), 1e-300), 1e-15, 1 - 1e-15))


def _copula_cells(cuts_a: np.ndarray, cuts_b: np.ndarray, r: float) -> np.ndarray:
    return np.diff(np.diff(_normal_cdf2(cuts_a[:, None], cuts_b[None, :], r), axis=0), axis=1)


def _normal_cdf2(h: np.ndarray, k: np.ndarray, r: float) -> np.ndarray:
    """The standard bivariate normal distribution function at correlation r (Owen's T form, exact to rounding)."""
    from scipy.special import ndtr, owens_t

    h, k = np.broadcast_arrays(np.where(h == 0, 1e-12, h), np.where(k == 0, 1e-12, k))
    s = math.sqrt(max(1.0 - r * r, 1e-300))
    beyond = np.where(h * k > 0, 0.0, 0.5)
    tails = owens_t(h, (k - r * h) / (h * s)) + owens_t(k, (h - r * k) / (k * s))
    return 0.5 * ndtr(h) + 0.5 * ndtr(k) - tails - beyond
