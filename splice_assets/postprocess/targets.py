"""Post-processing of the noisy 1-way and 2-way tables into the targets the mixture is fitted to and sampling is
matched onto: each coordinate's noisy 1-way table pooled with the margins of its 2-way tables and its fine table
(``pooled_marginals``), a numeric column's empty-looking tails cut (``trimmed_tails``), a categorical column's table
shrunk toward its mean cell and an ordinal one's toward its log-quadratic shape (``marginal_targets``).

Reads only the Measurement and the public layout; costs no privacy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from splice_assets.fine_cells import FineCells
from splice_assets.layout import EncodingLayout, pair_tables
from splice_assets.measurement import Measurement
from splice_assets.model.fit import (
    DEFAULT_TAIL_NOISE_SHARE,
    DEFAULT_TAIL_Z,
    FitConfig,
    FittedMixture,
    MarginalTargets,
    PairTargets,
    fit_measurement,
)
from splice_assets.model.product_em import simplex_projection
from splice_assets.postprocess.fine_tables import james_stein

#: ``FitConfig.smooth_ordinals``: only ordinal columns with at least this many categories (the shape has three
#: parameters, and James-Stein gains from the cells beyond them).
MIN_SMOOTHED_LEVELS = 6


def pooled_marginals(measurement: Measurement, fine: Sequence[FineCells] = ()) -> np.ndarray:
    """Each coordinate's noisy 1-way histogram pooled, by inverse variance, with the margins of its noisy 2-way
    histograms and, for a numeric column with ``fine`` cells, with its noisy fine table summed over each coarse bin
    (post-processing). A margin of pair (a, b) sums s_b independent noisy cells, so each of its cells has noise
    variance s_b (sigma / w2)^2, against (sigma / w)^2 / u for the direct histogram (u its ``level_units``); a
    bin's sum of m fine cells has m (sigma / w_f)^2, w_f = sqrt(grid_weight) w for a per-value table,
    sqrt(interval_weight) w for one of intervals. A bin holding no fine cell (no value on the column's public grid)
    is empty by the schema: 0."""
    tables, _ = _pooled(measurement, fine)
    return np.concatenate(tables) if tables else measurement.noisy_marginals.copy()


def _pooled(measurement: Measurement, fine: Sequence[FineCells] = ()) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """``pooled_marginals`` per coordinate, with the noise std of each pooled cell."""
    direct = measurement.marginals()
    precision1 = measurement.table_noise_stds() ** -2
    total = [h * p for h, p in zip(direct, precision1)]
    weight = [np.full(len(h), p) for h, p in zip(direct, precision1)]
    sizes = measurement.marginal_sizes
    if measurement.pairs and direct:
        precision2 = measurement.pair_noise_std() ** -2
        for (a, b), table in zip(measurement.pairs, pair_tables(measurement.noisy_pairs, measurement.pairs, sizes)):
            for axis, this, other in ((1, a, b), (0, b, a)):
                total[this] = total[this] + table.sum(axis) * precision2 / sizes[other]
                weight[this] = weight[this] + precision2 / sizes[other]
    empty: dict[int, np.ndarray] = {}
    if fine and direct:
        fine_tables = np.split(measurement.noisy_fine, np.cumsum([c.size for c in fine])[:-1])
        for column, table in zip(fine, fine_tables):
            i = column.coordinate
            if column.missing is not None or sizes[i] != measurement.numeric_bins:
                continue  # a missing value counts in a coarse bin but in no fine cell
            parents = np.asarray(column.parents, dtype=np.int64)
            held = np.bincount(parents, minlength=sizes[i])
            summed = np.bincount(parents, weights=table[: column.n_cells], minlength=sizes[i])
            cells = held > 0
            precision = measurement.fine_noise_std(column.per_value) ** -2
            total[i][cells] += summed[cells] * precision / held[cells]
            weight[i][cells] += precision / held[cells]
            empty[i] = ~cells
    pooled = [t / w for t, w in zip(total, weight)]
    stds = [w**-0.5 for w in weight]
    for i, cells in empty.items():
        pooled[i][cells], stds[i][cells] = 0.0, 0.0
    return pooled, stds


def trimmed_tails(frequencies: np.ndarray, noise_std: float | np.ndarray, z: float = DEFAULT_TAIL_Z,
                  island_z: float = 0.0, noise_share: float = DEFAULT_TAIL_NOISE_SHARE) -> np.ndarray:
    """A numeric column's noisy coarse table as a distribution over the bins left when its outermost runs of bins
    that look empty are cut: from each end, the longest run of k bins whose noisy mass is at most z times its
    noise std (noise_std * sqrt(k) for equal stds) and whose innermost bin is at most z times its own; the kept bins
    are then projected onto the simplex, the cut ones stay 0. Post-processing: the sum of k empty bins' noise has
    std noise_std * sqrt(k), so a run of truly empty bins is kept with probability about Phi(-z), and a run holding
    more than about 2 z noise_std * sqrt(k) of mass is never cut. (Projecting the whole table instead would give
    every cut bin back a share of the mass the noise left missing.) A bin of noise std 0 is empty by the schema
    (``_pooled``): it stays 0. A bin whose noise std is above ``noise_share`` ends the cut (a run's noise would
    hide real mass of that size), so a table as noisy as that is projected whole.

    With ``island_z`` > 0 the cut then goes on past an island (``_island_cut``): an outer run of bins whose mass is
    within ``island_z`` of its noise std, separated from the rest by a gap of bins each within z of its own. One
    bin of noise above z sd otherwise keeps every empty bin inside it."""
    out = np.array(frequencies, dtype=np.float64)
    std = np.broadcast_to(np.asarray(noise_std, dtype=np.float64), out.shape)
    if not z > 0 or not np.any(std > 0) or len(out) < 2:
        return out
    lo, hi = 0, len(out)  # the kept bins: [lo, hi)
    for from_top in (True, False):
        view, view_std = (out[lo:hi][::-1], std[lo:hi][::-1]) if from_top else (out[lo:hi], std[lo:hi])
        runs = np.cumsum(view[:-1])
        spread = np.sqrt(np.cumsum(view_std[:-1] ** 2))
        testable = np.cumprod(view_std[:-1] <= noise_share).astype(bool)
        within = np.flatnonzero((runs <= z * spread) & (view[:-1] <= z * view_std[:-1]) & testable)
        cut = int(within[-1]) + 1 if len(within) else 0
        if island_z > 0:
            cut += _island_cut(view[cut:], view_std[cut:], z, island_z, noise_share)
        if from_top:
            hi -= cut
        else:
            lo += cut
    kept = np.zeros(len(out), dtype=bool)
    kept[lo:hi] = True
    kept &= std > 0
    trimmed = np.zeros_like(out)
    trimmed[kept] = simplex_projection(out[kept])
    return trimmed


def _island_cut(view: np.ndarray, std: np.ndarray, z: float, island_z: float, noise_share: float) -> int:
    """How many bins to cut from the start of ``view`` (outermost first): the largest a + g such that the first a
    bins (the island, its innermost bin above z times its noise std) hold at most ``island_z`` times their noise
    std and the next g (the gap) each at most z times their own, with at least one bin left after them, every one of
    them of noise std within ``noise_share``; 0 when there is none. Post-processing of the noisy table."""
    bins = len(view)
    testable = std <= noise_share
    empty = (view <= z * std) & testable  # a bin of noise std 0 is empty by the schema
    island_mass = np.cumsum(view)
    island_spread = np.sqrt(np.cumsum(std ** 2))
    best = 0
    for a in range(1, bins - 1):
        if not testable[:a].all() or empty[a - 1] or island_mass[a - 1] > island_z * island_spread[a - 1]:
            continue
        g = 0
        while a + g < bins - 1 and empty[a + g]:
            g += 1
        if g:
            best = max(best, a + g)
    return best


def marginal_targets(
    measurement: Measurement, layout: EncodingLayout | None = None, tail_z: float = 0.0,
    fine: Sequence[FineCells] = (), shrink_categories: bool = False, island_z: float = 0.0,
    smooth_ordinals: bool = False, tail_noise_share: float = DEFAULT_TAIL_NOISE_SHARE,
) -> MarginalTargets | None:
    """The measurement's noisy 1-way marginals, pooled with its 2-way margins and its ``fine`` tables
    (``pooled_marginals``), as targets (None without them); with ``layout`` and ``tail_z`` > 0, every numeric
    column's tails trimmed (``trimmed_tails``, through bins of noise std within ``tail_noise_share``), and with
    ``shrink_categories`` every other coordinate's table shrunk toward its mean cell, its frequent cells left alone
    (``fine_tables.shrunk_toward``); with ``smooth_ordinals`` too, an ordinal column of ``MIN_SMOOTHED_LEVELS``
    categories or more toward its log-quadratic shape instead (``ordinal_shape``; its missing level as pooled)."""
    if not measurement.marginal_sizes:
        return None
    tables, stds = _pooled(measurement, fine)
    if layout is not None:
        for i, coordinate in enumerate(layout.coordinates):
            if coordinate.is_binned or not coordinate.is_discrete:
                if tail_z > 0:
                    tables[i] = trimmed_tails(tables[i], stds[i], tail_z, island_z, tail_noise_share)
            elif shrink_categories and np.all(stds[i] > 0):
                k = coordinate.ordered if smooth_ordinals and coordinate.ordered >= MIN_SMOOTHED_LEVELS else None
                table = tables[i][:k]
                shape = ordinal_shape(table) if k else np.full(len(table), np.mean(table))
                tables[i][:k] = james_stein(table, shape, float(stds[i][0]))[0]
    return MarginalTargets(np.concatenate(tables), measurement.marginal_weight, measurement.numeric_bins)


def ordinal_shape(table: np.ndarray) -> np.ndarray:
    """The discretised log-quadratic density exp(a + b t + c t^2) over an ordinal column's levels (t evenly spaced in
    [-1, 1]) nearest to its noisy frequencies in least squares: a smooth, possibly skewed, unimodal (or U-shaped)
    shape of three parameters that ``marginal_targets`` shrinks the table toward. Post-processing of the noisy
    table."""
    ones = np.ones(len(table))
    fit = _LogQuadratic(table, ones, np.linspace(-1.0, 1.0, len(table)), ones)
    return fit.shape(fit.fitted(np.arange(len(table)), fit.start()))


@dataclass(frozen=True)
class _LogQuadratic:
    """Cell masses relative * exp(a + b t + c t^2) fitted to noisy ``table`` cells of noise ``std`` by least squares
    (``ordinal_shape``)."""

    table: np.ndarray
    std: np.ndarray
    t: np.ndarray
    relative: np.ndarray

    @property
    def design(self) -> np.ndarray:
        return np.column_stack([np.ones_like(self.t), self.t, self.t * self.t])

    def shape(self, theta: np.ndarray, rows: np.ndarray | slice = slice(None)) -> np.ndarray:
        return self.relative[rows] * np.exp(np.clip(self.design[rows] @ theta, -50.0, 50.0))

    def start(self) -> np.ndarray:
        """Least squares on the logs of the cells, floored at a tenth of the mean cell."""
        floor = max(float(np.clip(self.table, 0.0, None).sum()), 1e-12) / (10.0 * len(self.table))
        return np.linalg.lstsq(self.design, np.log(np.maximum(self.table, floor) / self.relative), rcond=None)[0]

    def fitted(self, rows: np.ndarray, start: np.ndarray) -> np.ndarray:
        from scipy.optimize import least_squares

        design, table, std = self.design[rows], self.table[rows], self.std[rows]
        return least_squares(lambda theta: (self.shape(theta, rows) - table) / std, start,
                             jac=lambda theta: design * (self.shape(theta, rows) / std)[:, None]).x


def fit_targets(
    measurement: Measurement, layout: EncodingLayout, config: FitConfig, fine: Sequence[FineCells] = ()
) -> MarginalTargets | None:
    """The 1-way targets a fit with ``config`` reads (``marginal_targets`` with its tail cut, fine-table pooling and
    category shrinkage, an ordinal's toward its shape); the couplings take their margins from the same ones."""
    return marginal_targets(measurement, layout, config.marginal_tail_z, fine if config.pool_fine_tables else (),
                            config.shrink_categories, config.marginal_island_z, config.smooth_ordinals,
                            config.marginal_tail_noise_share)


def pair_targets(measurement: Measurement) -> PairTargets | None:
    """The measurement's noisy 2-way marginals as fit targets (None if it has none)."""
    if not measurement.pairs:
        return None
    return PairTargets(measurement.noisy_pairs, measurement.pair_weight, measurement.numeric_bins, measurement.pairs)


def fit_denoised(
    measurement: Measurement, layout: EncodingLayout, config: FitConfig, fine: Sequence[FineCells] = (),
) -> FittedMixture:
    """The mixture fitted to a stored ``Measurement``'s targets: its 1-way tables denoised as ``config`` says
    (``fit_targets``; ``fine``: the public fine cells of its fine tables, ``fine_cells.fine_cells``, pooled into
    them) and its 2-way tables (``pair_targets``)."""
    return fit_measurement(measurement, layout, config, fit_targets(measurement, layout, config, fine),
                           pair_targets(measurement))


__all__: Sequence[str] = (
    "fit_denoised", "fit_targets", "marginal_targets", "ordinal_shape", "pair_targets", "pooled_marginals",
    "trimmed_tails",
)
