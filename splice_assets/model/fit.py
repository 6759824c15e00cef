""""Match": fit the mixture q to noisy sliced Chebyshev moments (post-processing only, never raw rows).

Objective: (1/L) sum_l sum_j (m~_{j,l} - m_j(theta_l, q))^2 / j^2  +  tail_penalty * (Gaussian mass outside [-1, 1]),
plus the weighted residuals of the noisy histograms in the loss, minimised with Adam and a cosine learning-rate
decay. The initialisation uses only the noisy statistics and the public layout: least squares on the first moments
gives the mean vector, on the second moments the second-moment matrix (a diagonal fallback when L < d(d+1)/2);
components start as jittered copies of that Gaussian drawn from a ``torch.Generator`` seeded with the public seed;
discrete coordinates as discretised Gaussians. With histogram numerics and measured pairs, a few composite-EM
iterations on the noisy 1-/2-way histograms (``product_em``) then move the weights and probabilities, and the pairs
that start misfits most (largest chi^2 excess over the noise level) become joint parts (``choose_joint_pairs``; one
joint table per component) before EM runs again.

Expected loss under pure noise (the noise floor): raw moment j carries noise variance j sigma^2, so
E[(1/L) sum_l sum_j noise^2 / j^2] = sigma^2 H_k.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

import numpy as np
import torch

from splice_assets import progress
from splice_assets.layout import (
    DEFAULT_NUMERIC_BINS,
    EncodingLayout,
    histogram_layout,
    marginal_sizes,
    pair_tables,
)
from splice_assets.measurement import Measurement
from splice_assets.model.adam import ScheduledAdam
from splice_assets.model.mixture import (
    Bounds,
    MarginalEvaluator,
    MixtureModule,
    MixtureParameters,
    MomentEvaluator,
    PairEvaluator,
    TorchMixture,
)
from splice_assets.model.product_em import (
    ProductMixture,
    composite_em,
    pair_misfit,
    simplex_projection,
)
from splice_assets.postprocess.field import FieldChoice, PairwiseField
from splice_assets.postprocess.links import Link
from splice_assets.postprocess.tilt import CellTilt
from splice_assets.resolution import (
    DEFAULT_FINE_CAPACITY_SHAPES,
    DEFAULT_FINE_CORRECTED_SPIKES,
    DEFAULT_FINE_COUPLING,
    DEFAULT_FINE_EXPONENTIAL_TAILS,
    DEFAULT_FINE_KNOT_SHAPES,
    DEFAULT_FINE_STRATIFIED,
    DEFAULT_FINE_THRESHOLD,
    FineCells,
    FineTables,
    james_stein,
)

#: ``FitConfig.marginal_tail_z``: a run of outer coarse bins within this many noise std of zero is read as empty.
DEFAULT_TAIL_Z = 1.0
#: ``FitConfig.smooth_ordinals``: only ordinal columns with at least this many categories (the shape has three
#: parameters, and James-Stein gains from the cells beyond them).
MIN_SMOOTHED_LEVELS = 6
#: ``FitConfig.marginal_island_z``: an outer run of coarse bins cut off from the rest by bins that look empty is read
#: as noise while its mass stays within this many noise std (0 = never).
DEFAULT_ISLAND_Z = 3.0


@dataclass(frozen=True)
class FitConfig:
    """Fit settings (all public), checked on construction (messages quote the value)."""

    # Diagonal (R = 0) components, more of them: measured at eps = 1 with rank matching, K = 10 / R = 0 beat the
    # paper's K = 5 / R = 2 on every metric (adult 2-way TVD 0.093 vs 0.098, SW1 0.0058 vs 0.0080, MMD 0.012 vs
    # 0.016, TSTR AUC 0.862 vs 0.828; california 2-way 0.199 vs 0.240): low-rank factors let the fit put mass on
    # thin curves that rank matching then stretches into false near-deterministic relations. With the 2-way
    # marginals in the loss, K = 20 beat 10 (adult 2-way 0.077 vs 0.095) and K = 30 added little (0.073). With joint
    # parts K = 16 matched K = 20 on TVD (paired, 3 seeds) at ~15% less per step, but california lost TSTR R^2
    # (paired .571 / .505 against .584 / .515 at eps = 1 / 0.5; its bench .514 / .524 against .544 / .581) and had up
    # to 1.6% duplicate rows.
    K: int = 20
    #: How a component holds a numeric column: "histogram" (probabilities over public bins that refine the
    #: measured marginals' bins, uniform inside a bin) or "gaussian" (one diagonal/low-rank Gaussian over all
    #: numeric columns). One fit each at eps = 1 (pairs in the loss, K = 20), gaussian -> histogram with 4 model
    #: bins per measured bin: adult 2-way / 3-way TVD 0.081 / 0.170 -> 0.069 / 0.142, SW1 0.0055 -> 0.0062, MMD
    #: 0.010 -> 0.015, TSTR AUC 0.868 -> 0.846; california 0.134 / 0.271 -> 0.113 / 0.234, SW1 0.0078 -> 0.0064,
    #: MMD 0.018 -> 0.022, TSTR R^2 0.577 -> 0.546. A Gaussian per component cannot hold spikes (hours = 40,
    #: capital_gain = 0, capped house values); a histogram can.
    numeric_model: str = "histogram"
    #: Model bins per measured bin. 1 measured the same TVD but worse SW1 / MMD (adult 0.0075 / 0.027) and
    #: california TSTR (0.48): uniform offsets in a 1/16-wide bin smear spikes at a bound.
    bin_refinement: int = 4
    R: int = 0
    max_steps: int = 600
    min_steps: int = 100
    lr: float = 0.03
    # Relative improvement of the best loss per window below which the fit stops. 3e-3 instead of 1e-3 cut the
    # steps by 25-50% (adult 445 -> 307, california 383 -> 275) at equal quality within seed noise (eps = 1:
    # adult 2-way TVD 0.098 vs 0.094, TSTR AUC 0.843 vs 0.856; california 0.184 vs 0.195).
    tol: float = 3e-3
    window: int = 50
    seed: int = 0
    tail_sigmas: float = 6.0
    sd_min: float = 1e-3
    tail_penalty: float = 10.0
    init_jitter: float = 0.7
    threads: int | None = 1
    device: str | None = None
    #: Multiplier on the mechanism's weight w for the noisy 1-way marginals in the loss; 0 = moments only.
    #: Measured (adult, california at eps = 1): moments-only fit + rank matching onto the noisy marginals
    #: beats putting them in the loss on every metric (california TSTR R^2 0.60 vs 0.02).
    marginal_loss_weight: float = 0.0
    #: Multiplier on the mechanism's weight w2 for the noisy 2-way marginals in the loss (when measured). At 1 (the
    #: weight that makes the loss a Gaussian log-likelihood) the histograms swamp the moments: california TSTR R^2
    #: 0.27 (0.3: 0.29, 0.1: 0.58); adult 2-way TVD 0.074 / 0.075 / 0.081, MMD 0.021 / 0.023 / 0.010.
    pair_loss_weight: float = 0.1
    #: Composite-EM iterations on the noisy 1-/2-way histograms that set the starting weights and probabilities
    #: (``product_em``; only with histogram numerics and measured pairs; 0 = the jittered moment start).
    #: Bench medians of 3 seeds, no EM -> EM: 2-way TVD adult 0.063 -> 0.057 at eps = 1, 0.055 -> 0.044 at 3;
    #: california 0.108 -> 0.091, 0.096 -> 0.069; SW1 lower, fit steps about halved. Fewer iterations denoise:
    #: one fit each at eps = 1, 200 / 100 / 50 / 20 iterations gave adult 0.059 / 0.058 / 0.058 / 0.056,
    #: california 0.094 / 0.093 / 0.088 / 0.086.
    em_iterations: int = 20
    #: Cell tilt (``tilt``; with measured pairs): chi^2 per cell of the noisy 1-/2-way tables at which its fit
    #: stops (1 = the noise level; 0 = no tilt), pool rows per output row, and its iteration cap.
    tilt_chi2: float = 1.0
    tilt_pool_factor: int = 4
    tilt_max_iterations: int = 300
    #: The tilt toward the target's 3-way tables (``chain.fit_target_tilt``; with measured triples) stops at this
    #: chi^2 per cell of the 1-, 2- and 3-way tables, or where its holdout pool stops improving (0 = no target tilt).
    #: Below the noise level on purpose: the class boundary is a few cells of many, and the average over all cells
    #: reaches 1 before it is fitted. Paired refits on nursery (docs/decisions/0049), TSTR at 1 -> 0.5: .956 ->
    #: .978, decile 2-way TVD .0193 -> .0186. At 0.5 the holdout pool stops it (chi^2 .83-.90).
    target_tilt_chi2: float = 0.5
    #: When the holdout stops the tilt short of ``tilt_chi2`` (the pool's support, not the noise, is the limit: at
    #: eps >= 3 on adult and california), it is refitted from there on pools this many times min(n, 25,000) rows in
    #: total, and sampling then draws half this many pool rows per output row (0 = never). Paired (add-remove, 3
    #: seeds), 3-way TVD without -> with: california .1439 -> .1396 at eps = 3, .1394 -> .1338 at eps = 10; adult
    #: .0756 -> .0732 at eps = 3. At eps <= 1 the narrow tilt reaches chi^2 = 1 and nothing changes (wide pools
    #: there regardless: adult .0886 -> .0899 at eps = 1). Cost, the whole fit at eps = 3: adult 12.6 -> 18.2 s,
    #: california 10.3 -> 11.8 s; the 400,000 x 24 scaling cell 35.8 -> 53.5 s (the refit runs at any large n).
    tilt_wide_pool_factor: int = 16
    #: Linked coordinates (``links``; with measured pairs): the Goodman-Kruskal lambda of a noisy 2-way table at
    #: or above which its (discrete) target is redrawn from the table given its source when sampling (0 = none).
    #: Bench medians of 3 seeds, adult 2-way / 3-way TVD without -> with: eps = 1 0.051 / 0.112 -> 0.050 / 0.106,
    #: eps = 3 0.040 / 0.093 -> 0.037 / 0.085. 0.4 let a spurious link in (native_country -> capital_loss).
    link_lambda: float = 0.6
    #: Joint parts (``model``): up to this many disjoint measured pairs whose noisy 2-way table the product EM
    #: start misfits by a mean squared standardised residual of at least ``joint_min_misfit`` (1 = the noise
    #: level; ``product_em.pair_misfit``), largest chi^2 excess first, get one joint table per component instead
    #: of two independent ones (0 = none; only with histogram numerics and measured pairs). Ranking by excess
    #: rather than misfit: california 3-way TVD eps = 1 .1856 -> .1758, eps = 10 .1457 -> .1383, adult eps = 1
    #: .1014 -> .1026 (paired, medians of 3 seeds). Paired A/B, medians of 3 seeds, 0 -> 6 pairs
    #: (2-way / 3-way TVD): adult eps = 0.5 .0675 / .135 -> .0656 / .128, eps = 1 .0521 / .110 -> .0491 / .101,
    #: eps = 3 .0369 / .083 -> .0355 / .078 (TSTR AUC .868 / .877 / .890 -> .876 / .887 / .900); california
    #: .1146 / .230 -> .1119 / .224, .0845 / .188 -> .0828 / .186, .0644 / .159 -> .0637 / .149. Cost: fit steps
    #: about 20% dearer (california eps = 1: 52 -> 61 ms with the torch fast path; 37 ms with ``kernels``). At
    #: most 3 pairs (misfit >= 5) kept most of adult's gain but little of california's.
    joint_pairs: int = 6
    joint_min_misfit: float = 2.0
    #: Pairwise field (``field``; with the tilt and histogram numerics): iterations of its fit to the tilted
    #: mixture's tables (0 = none), its persistent chains (the rows of the tilted mixture's sample it is fitted to),
    #: and the Gibbs sweeps each sampled row takes from its chain. The tilt is then refitted on the field's pools and
    #: sampling draws from the field times the tilt. Paired (add-remove, 3 seeds, means; 50 iterations on 25,000
    #: chains, 4 sweeps, the field's pools resampled by the tilt), 3-way TVD without -> with: california .2036 ->
    #: .1883 / .1650 -> .1515 / .1396 -> .1269 / .1338 -> .1206 at eps = 0.5 / 1 / 3 / 10, adult .1098 -> .1067 /
    #: .0886 -> .0865 / .0732 -> .0709 / .0697 -> .0660; 2-way TVD no worse anywhere, adult TSTR AUC +.004 to +.007,
    #: california SW1 +5-7% and TSTR R^2 .591 -> .575 at eps = 1 (+.005 / +.010 at 3 / 10). These defaults (40 on
    #: 12,500, 2 sweeps, sampled from the folded field) cost a third as much: california eps = 1 .1515, adult eps =
    #: 0.5 .1075 (the fit 6.5 -> 8.8 s and 6.5 -> 10.8 s with two runs sharing the 2 cores).
    field_iterations: int = 40
    field_chains: int = 12_500
    field_sweeps: int = 2
    #: Fine tables (``resolution``): a fine cell whose noisy frequency is at most this many noise std is read as
    #: empty when values are drawn inside their coarse bin.
    fine_threshold: float = DEFAULT_FINE_THRESHOLD
    #: Numeric pairs whose noisy coarse 2-way table shows a Gaussian-copula |correlation| >= this couple their draws
    #: inside the bins (``resolution.choose_couplings``; 0 = none).
    fine_coupling: float = DEFAULT_FINE_COUPLING
    #: A numeric column's outermost coarse bins are read as empty while their pooled noisy mass stays within this
    #: many noise std of zero (``trimmed_tails``; 0 = never). Without it, the positive noise of the empty bins of
    #: wide public bounds became rows far outside the data (churn at eps = 1: 1% of international minutes above
    #: 1,000 where the data end at 20). z = 1 kept churn's gain and, unlike z = 2, cost California nothing under
    #: replace-one, whose larger noise let z = 2 cut thin real tails (docs/decisions/0021); z = 0.5 left more values
    #: beyond the real extremes on eight of nine tables (0040, docs/decisions/alternatives.md).
    marginal_tail_z: float = DEFAULT_TAIL_Z
    #: After that cut, an outer run of bins separated from the others by bins within ``marginal_tail_z`` noise std of
    #: zero is cut too while its mass stays within this many noise std (``trimmed_tails``; 0 = never): one bin of
    #: noise above z sd ends the run the first cut may take, and in a narrow bin of an integer column (a log-scale
    #: count's 0-1) its mass became a spike at one value. z = 2 left California's spikes (docs/decisions/0054).
    marginal_island_z: float = DEFAULT_ISLAND_Z
    #: Pool each numeric column's noisy fine table into its coarse 1-way target (``pooled_marginals``).
    pool_fine_tables: bool = True
    #: Shrink each categorical column's pooled 1-way target toward its mean cell (``resolution.shrunk_toward``).
    shrink_categories: bool = True
    #: Shrink each ordinal column's pooled 1-way target toward its nearest log-quadratic shape (``ordinal_shape``)
    #: instead of its mean cell, its frequent cells left alone: coil2000's qtvd1 .0309 -> .0286, qtvd2 .0836 ->
    #: .0797 (docs/decisions/0056).
    smooth_ordinals: bool = True
    #: Move a bin's noisy fine cells to the bin's mass before shrinking them (``FineTables.level_first``).
    fine_level_first: bool = True
    #: Shrink a column's tail bins toward an exponential density where it fits them better than a straight one
    #: (``FineTables.exponential_tails``).
    fine_exponential_tails: bool = DEFAULT_FINE_EXPONENTIAL_TAILS
    #: The bin shapes read densities on the column's scale where its knots make the bins unequal
    #: (``FineTables.knot_shapes``).
    fine_knot_shapes: bool = DEFAULT_FINE_KNOT_SHAPES
    #: Draw a bin's rows at evenly spaced quantiles of its fine table (``FineTables.stratified``).
    fine_stratified: bool = DEFAULT_FINE_STRATIFIED
    #: A coupled follower's rows far outside its copula's band take their bins from the copula where the noisy tables
    #: that hold it stay within this many sd of their chi^2 without it (``chain.choose_followers``; None = never).
    fine_follow_z: float | None = 3.0
    #: Weight the bin shapes by the values each fine cell holds (``FineTables.capacity_shapes``).
    fine_capacity_shapes: bool = DEFAULT_FINE_CAPACITY_SHAPES
    #: Leave a fine cell as measured only above a spike threshold that grows with its column's cell count
    #: (``FineTables.corrected_spikes``).
    fine_corrected_spikes: bool = DEFAULT_FINE_CORRECTED_SPIKES

    def __post_init__(self) -> None:
        for name in ("K", "bin_refinement", "max_steps", "window", "field_chains", "field_sweeps", "tilt_pool_factor"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        for name in ("R", "min_steps", "em_iterations", "joint_pairs", "tilt_max_iterations", "tilt_wide_pool_factor",
                     "field_iterations"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
        for name, positive in (("lr", True), ("tol", False), ("tail_sigmas", True), ("sd_min", True),
                               ("tail_penalty", False), ("init_jitter", False), ("marginal_loss_weight", False),
                               ("pair_loss_weight", False), ("joint_min_misfit", False), ("fine_threshold", False),
                               ("fine_coupling", False), ("marginal_tail_z", False),
                               ("marginal_island_z", False)):
            value = getattr(self, name)
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)
            if not ok or value < 0 or (positive and not 0 < value < math.inf):
                raise ValueError(f"{name} must be a number {'in (0, inf)' if positive else '>= 0'}, got {value!r}")
        for name in ("pool_fine_tables", "shrink_categories", "smooth_ordinals", "fine_level_first",
                     "fine_exponential_tails", "fine_knot_shapes", "fine_stratified", "fine_capacity_shapes",
                     "fine_corrected_spikes"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        z = self.fine_follow_z
        if z is not None and (isinstance(z, bool) or not isinstance(z, (int, float)) or not 0 <= z < math.inf):
            raise ValueError(f"fine_follow_z must be a finite number >= 0 or null (never), got {z!r}")
        if self.numeric_model not in NUMERIC_MODELS:
            raise ValueError(f"numeric_model must be one of {NUMERIC_MODELS}, got {self.numeric_model!r}")


@dataclass(frozen=True)
class MarginalTargets:
    """Noisy 1-way frequencies (concatenated in ``moments.marginal_sizes`` order) and their public weight w.

    In the loss each cell's residual is scaled by w, like its noise in the mechanism (noise std sigma / w).
    """

    frequencies: np.ndarray
    weight: float
    numeric_bins: int

    def per_coordinate(self, layout: EncodingLayout) -> list[np.ndarray]:
        sizes = marginal_sizes(layout, self.numeric_bins)
        return list(np.split(np.asarray(self.frequencies, dtype=np.float64), np.cumsum(sizes)[:-1]))


@dataclass(frozen=True)
class PairTargets:
    """Noisy 2-way frequencies of coordinate ``pairs`` (concatenated, a-major per pair) and their weight w2."""

    frequencies: np.ndarray
    weight: float
    numeric_bins: int
    pairs: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class FittedMixture:
    """A fitted model plus its fit record. ``params`` is all sampling needs; the rest is diagnostics."""

    layout: EncodingLayout
    params: MixtureParameters
    k: int
    loss_curve: np.ndarray
    final_loss: float
    noise_floor: float
    steps: int
    converged: bool
    device: str
    seconds: float
    seconds_per_step: float
    config: FitConfig
    #: The noisy 1-way marginals the fit saw (public mechanism output); sampling can match them exactly.
    marginal_targets: MarginalTargets | None = None
    #: Potentials that tilt the mixture toward the noisy tables (``tilt``); sampling applies them when matching.
    tilt: CellTilt | None = None
    #: Near-functional pairs redrawn from the noisy tables' conditionals when sampling is matched (``links``).
    links: tuple[Link, ...] = ()
    #: The tilted model's 1-/2-way tables as a pairwise field (``field``); matched sampling draws its cells from it.
    field: PairwiseField | None = None
    #: The noisy fine tables of the numeric columns (``resolution``); sampling draws values inside their bins from them.
    fine: FineTables | None = None
    #: Potentials toward the target's noisy 3-way tables, holding the 1-/2-way ones (``chain.fit_target_tilt``);
    #: sampling resamples the matched rows by them.
    target_tilt: CellTilt | None = None
    #: Whether the pairwise field was fitted and why it was kept or dropped (public diagnostics; None: not fitted).
    field_choice: FieldChoice | None = None

    @property
    def loss_over_noise_floor(self) -> float:
        return self.final_loss / self.noise_floor if self.noise_floor > 0 else math.inf


def noise_floor(sigma: float, k: int, n_directions: int = 1, marginal_cells: float = 0) -> float:
    """Expected loss of the true statistics against the noisy ones: sigma^2 (H_k + B / L), B = histogram cells in
    the loss, each weighted by its loss multiplier squared."""
    return float(sigma) ** 2 * (math.fsum(1.0 / j for j in range(1, k + 1)) + marginal_cells / n_directions)


def _device(config: FitConfig) -> torch.device:
    if config.device is not None:
        return torch.device(config.device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


# ---------------------------------------------------------------------------------------------------------------
# Private-safe initialisation: only noisy moments, directions, scales and the layout.


def _moment_init(noisy: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean vector and covariance of x from first/second noisy moments (w = theta / s, shape (L, d))."""
    L, d = w.shape
    mean, *_ = np.linalg.lstsq(w, noisy[0], rcond=None)
    mean = np.clip(mean, -1.0, 1.0)
    if noisy.shape[0] < 2:
        return mean, np.eye(d) * 0.1
    second = (noisy[1] + 1.0) / 2.0  # E[z^2] from T_2 = 2 z^2 - 1
    iu = np.triu_indices(d)
    if L >= d * (d + 1) // 2 + d:
        feats = w[:, iu[0]] * w[:, iu[1]] * np.where(iu[0] == iu[1], 1.0, 2.0)
        sol, *_ = np.linalg.lstsq(feats, second, rcond=None)
        S = np.zeros((d, d))
        S[iu] = sol
        S = S + S.T - np.diag(np.diag(S))
    else:  # diagonal second moments, cross terms from the mean (independence)
        cross = (w @ mean) ** 2 - (w**2) @ (mean**2)
        diag, *_ = np.linalg.lstsq(w**2, second - cross, rcond=None)
        S = np.outer(mean, mean)
        np.fill_diagonal(S, diag)
    cov = S - np.outer(mean, mean)
    vals, vecs = np.linalg.eigh((cov + cov.T) / 2.0)
    vals = np.clip(vals, 1e-4, 1.0)
    return mean, (vecs * vals) @ vecs.T


def _initial_values(
    layout: EncodingLayout,
    K: int,
    R: int,
    bounds: Bounds,
    noisy: np.ndarray,
    w: np.ndarray,
    seed: int,
    jitter: float,
    marginals: MarginalTargets | None = None,
    em_tables: tuple[MarginalTargets | None, PairTargets | None] = (None, None),
    em_iterations: int = 0,
    joint: tuple[int, float, float] = (0, math.inf, 0.0),
) -> dict:
    """Starting values; ``joint`` = (most joint parts, least misfit, noise std of a 2-way cell) for the EM start."""
    mean, cov = _moment_init(noisy, w)
    d = layout.d
    gen = torch.Generator().manual_seed(int(seed))
    g = torch.randn(K, d, generator=gen, dtype=torch.float64).numpy()
    chol = np.linalg.cholesky(cov + 1e-9 * np.eye(d))
    centres = np.clip(mean + jitter * g @ chol.T, -0.98, 0.98)
    if K == 1:
        centres = mean[None, :]
    sd_all = np.sqrt(np.diag(cov))
    shrink = math.sqrt(max(1.0 - jitter**2, 0.2)) if K > 1 else 1.0
    disc, cont = layout.discrete_index, layout.continuous_index
    levels = [layout.coordinates[i].levels for i in disc]
    rmax = max(levels, default=1)
    noisy_marginals = marginals.per_coordinate(layout) if marginals is not None else None
    probs = np.full((K, len(levels), rmax), 1e-9)
    for t, (i, r) in enumerate(zip(disc, levels)):
        grid = layout.coordinates[i].grid()
        s = max(sd_all[i] * shrink, 2.0 / max(r - 1, 1) * 0.5)
        p = np.exp(-0.5 * ((grid[None, :] - centres[:, i : i + 1]) / s) ** 2) + 1e-3
        if noisy_marginals is not None:
            # Tilt the noisy 1-way marginal towards each component's centre (post-processing of noisy values);
            # a binned coordinate spreads each measured bin's share over its model bins.
            marginal = np.clip(noisy_marginals[i], 1e-4, None)
            p = p * np.repeat(marginal / (r // len(marginal)), r // len(marginal))[None, :]
        probs[:, t, :r] = p / p.sum(axis=1, keepdims=True)
    sd_c = np.clip(sd_all[cont] * shrink, bounds.sd_min * 2, bounds.effective_sd_max * 0.9)
    n_cont = len(cont)
    corr = np.eye(n_cont)
    if n_cont:
        s = np.sqrt(np.diag(cov)[cont])
        corr = cov[np.ix_(cont, cont)] / np.outer(s, s)
    vals, vecs = np.linalg.eigh(corr) if n_cont else (np.zeros(0), np.zeros((0, 0)))
    order = np.argsort(vals)[::-1][:R]
    factors = np.zeros((n_cont, R))
    if n_cont and R:
        top = vecs[:, order] * np.sqrt(np.clip(vals[order], 0.0, None))
        factors[:, : top.shape[1]] = top
    resid = np.clip(1.0 - (factors**2).sum(1), 0.05, None) if n_cont else np.zeros(0)
    g2 = torch.randn(K, n_cont, R, generator=gen, dtype=torch.float64).numpy() * 0.05
    weights = np.full(K, 1.0 / K)
    joint_pairs: tuple[tuple[int, int], ...] = ()
    joint_tables: tuple[np.ndarray, ...] = ()
    marginal_targets, pair_targets = em_tables
    if em_iterations > 0 and pair_targets is not None and not n_cont:
        weights, probs, joint_pairs, joint_tables = _em_start(
            layout, weights, probs, marginal_targets, pair_targets, em_iterations, *joint
        )
    return {
        "weights": weights,
        "probs": probs,
        "joint_pairs": joint_pairs,
        "joint": joint_tables,
        "means": centres[:, cont],
        "sds": np.broadcast_to(sd_c, (K, n_cont)).copy(),
        "corr_factors": factors[None] + g2,
        "corr_diag": np.broadcast_to(resid, (K, n_cont)).copy(),
    }


def _em_start(
    layout: EncodingLayout, weights: np.ndarray, probs: np.ndarray, marginals: MarginalTargets | None,
    pairs: PairTargets, iterations: int, max_joint: int = 0, min_misfit: float = math.inf, noise_std: float = 0.0,
) -> tuple[np.ndarray, np.ndarray, tuple[tuple[int, int], ...], tuple[np.ndarray, ...]]:
    """Composite EM (``product_em``) on the simplex-projected noisy 1-/2-way histograms from the jittered start.

    Only for an all-discrete model layout. EM works on the measured bins; a binned coordinate keeps its start's
    split of each measured bin over its finer model bins (the moments refine it in the fit). With ``max_joint``,
    the pairs the product start misfits most (``choose_joint_pairs``) become joint parts and EM runs again from
    the same start. Returns weights, padded probs, the joint pairs and their (K, levels_a, levels_b) tables.
    """
    measured = marginal_sizes(layout, pairs.numeric_bins)
    K = len(weights)
    start, within = [], []
    for t, (coord, size) in enumerate(zip(layout.coordinates, measured)):
        p = probs[:, t, : coord.levels].reshape(K, size, coord.levels // size)
        start.append(p.sum(axis=2))
        within.append(p / p.sum(axis=2, keepdims=True))
    raw = pair_tables(pairs.frequencies, pairs.pairs, measured)
    two_way = [simplex_projection(table.ravel()).reshape(table.shape) for table in raw]
    one_way = [simplex_projection(h) for h in marginals.per_coordinate(layout)] if marginals is not None else []
    fitted = composite_em(ProductMixture(weights, tuple(start)), one_way, two_way, pairs.pairs, iterations)
    if max_joint > 0:
        misfit = pair_misfit(fitted, raw, pairs.pairs, noise_std)
        chosen = choose_joint_pairs(misfit, [t.size for t in raw], pairs.pairs, max_joint, min_misfit)
        if chosen:
            products = tuple(start[a][:, :, None] * start[b][:, None, :] for a, b in chosen)
            begin = ProductMixture(weights, tuple(start), chosen, products)
            fitted = composite_em(begin, one_way, two_way, pairs.pairs, iterations)
    out = np.full_like(probs, 1e-9)
    for t, coord in enumerate(layout.coordinates):
        p = np.clip((fitted.probs[t][:, :, None] * within[t]).reshape(K, coord.levels), 1e-9, None)
        out[:, t, : coord.levels] = p / p.sum(axis=1, keepdims=True)
    joint = []
    for (a, b), table in zip(fitted.joint_pairs, fitted.joint):
        fine = table[:, :, None, :, None] * within[a][:, :, :, None, None] * within[b][:, None, None, :, :]
        fine = np.clip(fine.reshape(K, layout.coordinates[a].levels, layout.coordinates[b].levels), 1e-12, None)
        joint.append(fine / fine.sum(axis=(1, 2), keepdims=True))
    kept = np.clip(fitted.weights, 1e-6, None)
    return kept / kept.sum(), out, fitted.joint_pairs, tuple(joint)


def choose_joint_pairs(misfit: np.ndarray, cells: Sequence[int], pairs: Sequence[tuple[int, int]], count: int,
                       min_misfit: float) -> tuple[tuple[int, int], ...]:
    """Up to ``count`` disjoint pairs among those with misfit >= ``min_misfit``, largest chi^2 excess first.

    A pair's excess (misfit - 1) * cells is how far its table's chi^2 lies above the noise level: what a joint part
    can remove. Ranking by the per-cell misfit instead favours small tables and, on california, spent longitude on
    ocean_proximity where longitude x latitude (256 cells) misfit more in total.
    """
    misfit = np.asarray(misfit, dtype=float)
    excess = np.where(misfit >= min_misfit, (misfit - 1.0) * np.asarray(cells, dtype=float), -np.inf)
    chosen: list[tuple[int, int]] = []
    used: set[int] = set()
    for i in np.argsort(-excess, kind="stable"):
        a, b = pairs[i]
        if len(chosen) == count or excess[i] == -np.inf:
            break
        if a not in used and b not in used:
            chosen.append((int(a), int(b)))
            used.update((a, b))
    return tuple(chosen)


# ---------------------------------------------------------------------------------------------------------------


def _run_adam(
    layout: EncodingLayout,
    noisy: torch.Tensor,
    directions: np.ndarray,
    scales: np.ndarray,
    K: int,
    config: FitConfig,
    device: torch.device,
    sigma: float,
    loss_marginals: MarginalTargets | None = None,
    loss_pairs: PairTargets | None = None,
    em_tables: tuple[MarginalTargets | None, PairTargets | None] = (None, None),
) -> tuple[MixtureModule, list[float], bool]:
    bounds = Bounds(sd_min=config.sd_min, tail_sigmas=config.tail_sigmas)
    w = directions / scales[:, None]
    noise_std = sigma / em_tables[1].weight if em_tables[1] is not None and em_tables[1].weight > 0 else math.inf
    start = _initial_values(
        layout, K, config.R, bounds, noisy.cpu().numpy(), w, config.seed, config.init_jitter, loss_marginals,
        em_tables, config.em_iterations, (config.joint_pairs, config.joint_min_misfit, noise_std),
    )
    joint_pairs = start.pop("joint_pairs")
    module = MixtureModule(layout, K, config.R, bounds, device=device, joint_pairs=joint_pairs)
    module.initialise(**start)
    evaluator = MomentEvaluator(layout, directions, scales, noisy.shape[0], device, joint_pairs=joint_pairs)
    histogram_terms = []
    if loss_marginals is not None:
        evaluator_1 = MarginalEvaluator(layout, loss_marginals.numeric_bins, device)
        histogram_terms.append(_histogram_term(evaluator_1, loss_marginals, noisy.shape[1], device))
    if loss_pairs is not None:
        evaluator_2 = PairEvaluator(layout, loss_pairs.numeric_bins, loss_pairs.pairs, device, joint_pairs)
        histogram_terms.append(_histogram_term(evaluator_2, loss_pairs, noisy.shape[1], device))

    k = noisy.shape[0]
    inv_j2 = (1.0 / torch.arange(1, k + 1, dtype=noisy.dtype, device=device) ** 2).unsqueeze(1)
    L = noisy.shape[1]
    # torch.optim.Adam(foreach=True) with a cosine LambdaLR, without the torch._dynamo import (model/adam.py).
    opt = ScheduledAdam(
        module.parameters(), config.lr,
        lambda s: 0.5 * (1.0 + math.cos(math.pi * min(s, config.max_steps) / config.max_steps)),
    )
    curve: list[float] = []
    converged = False
    for step in range(config.max_steps):
        opt.zero_grad()
        q = module()
        fit = ((noisy - evaluator(q)) ** 2 * inv_j2).sum() / L
        for term in histogram_terms:
            fit = fit + term(q)
        loss = fit + config.tail_penalty * module.tail_mass() if config.tail_penalty else fit
        loss.backward()
        opt.step()
        curve.append(float(fit.detach()))
        progress.advance()
        if step + 1 >= max(config.min_steps, config.window + 1):
            # Converged when the best loss of the last window improves on the best before it by < tol
            # (relative); a loss that merely stopped rising or oscillates does not count as progress.
            before, recent = min(curve[: -config.window]), min(curve[-config.window :])
            if before - recent <= config.tol * abs(recent):
                converged = True
                break
    return module, curve, converged


Targets = TypeVar("Targets", MarginalTargets, PairTargets)


def _histogram_term(
    evaluator: MarginalEvaluator | PairEvaluator, targets: MarginalTargets | PairTargets, n_directions: int,
    device: torch.device,
) -> Callable[[TorchMixture], torch.Tensor]:
    """The loss term of one histogram family: its weighted squared residuals, on the moments' per-direction scale."""
    target = torch.as_tensor(np.asarray(targets.frequencies, dtype=np.float64), device=device)
    return lambda q: ((targets.weight * (target - evaluator(q))) ** 2).sum() / n_directions


def _loss_targets(targets: Targets | None, multiplier: float) -> Targets | None:
    """Histogram targets as they enter the loss (weight scaled by ``multiplier``), or None if they do not."""
    if targets is None or not targets.weight > 0 or not multiplier > 0:
        return None
    return replace(targets, weight=targets.weight * multiplier)


NUMERIC_MODELS = ("histogram", "gaussian")


def _model_layout(
    layout: EncodingLayout, config: FitConfig, marginals: MarginalTargets | None, pairs: PairTargets | None
) -> EncodingLayout:
    """The layout the mixture lives in: numeric columns binned on the measured histograms' public bins."""
    if config.numeric_model not in NUMERIC_MODELS:
        raise ValueError(f"numeric_model must be one of {NUMERIC_MODELS}, got {config.numeric_model!r}")
    if config.numeric_model == "gaussian" or any(c.is_binned for c in layout.coordinates):
        return layout
    if config.bin_refinement < 1:
        raise ValueError(f"bin_refinement must be >= 1, got {config.bin_refinement!r}")
    bins = next((t.numeric_bins for t in (marginals, pairs) if t is not None), DEFAULT_NUMERIC_BINS)
    return histogram_layout(layout, bins * config.bin_refinement)


def _weighted_cells(targets: MarginalTargets | PairTargets | None, loss_weight: float) -> float:
    """Histogram cells in the loss, each counted by its loss weight squared (its share of the noise floor)."""
    return 0.0 if targets is None else loss_weight**2 * len(targets.frequencies)


def fit_mixture(
    noisy_moments: np.ndarray,
    directions: np.ndarray,
    scales: np.ndarray,
    layout: EncodingLayout,
    sigma: float,
    config: FitConfig = FitConfig(),
    marginals: MarginalTargets | None = None,
    pairs: PairTargets | None = None,
) -> FittedMixture:
    """Fit q to noisy moments ``noisy_moments[j-1, l]`` (k, L) on public ``directions`` (L, d) / ``scales`` (L,).

    Noisy 1-way ``marginals`` are kept with the model for sampling to match; they enter the loss only with
    ``config.marginal_loss_weight > 0``.

    Deterministic given ``config.seed`` (on CPU). ``sigma`` is the mechanism's noise scale (raw moment j has
    noise std sigma * sqrt(j)); it only sets the reported noise floor.
    """
    started = time.perf_counter()
    noisy_np = np.asarray(noisy_moments, dtype=np.float64)
    directions = np.asarray(directions, dtype=np.float64)
    scales = np.asarray(scales, dtype=np.float64)
    if noisy_np.ndim != 2 or noisy_np.shape[1] != directions.shape[0]:
        raise ValueError(f"noisy moments {noisy_np.shape} do not match {directions.shape[0]} directions")
    if config.K < 1 or config.R < 0:
        raise ValueError(f"need K >= 1 and R >= 0, got K = {config.K!r}, R = {config.R!r}")
    if config.em_iterations < 0:
        raise ValueError(f"em_iterations must be >= 0, got {config.em_iterations!r}")
    if config.joint_pairs < 0 or not config.joint_min_misfit >= 0:
        raise ValueError(
            f"joint_pairs and joint_min_misfit must be >= 0, got {config.joint_pairs!r} and {config.joint_min_misfit!r}"
        )
    layout = _model_layout(layout, config, marginals, pairs)
    old_threads = torch.get_num_threads()
    if config.threads:
        torch.set_num_threads(config.threads)
    try:
        device = _device(config)
        k, L = noisy_np.shape
        loss_marginals = _loss_targets(marginals, config.marginal_loss_weight)
        loss_pairs = _loss_targets(pairs, config.pair_loss_weight)
        y = torch.as_tensor(noisy_np, device=device)
        fit_started = time.perf_counter()
        with progress.stage("mixture: gradient steps (stops early once converged)", total=config.max_steps):
            module, curve, converged = _run_adam(
                layout, y, directions, scales, config.K, config, device, sigma, loss_marginals, loss_pairs,
                (marginals, pairs),
            )
        fit_seconds = time.perf_counter() - fit_started
        with torch.no_grad():
            params = module().to_numpy(layout)
    finally:
        torch.set_num_threads(old_threads)
    return FittedMixture(
        layout=layout,
        params=params,
        k=k,
        loss_curve=np.asarray(curve),
        final_loss=curve[-1],
        noise_floor=noise_floor(sigma, k, L, _weighted_cells(loss_marginals, config.marginal_loss_weight)
                                + _weighted_cells(loss_pairs, config.pair_loss_weight)),
        steps=len(curve),
        converged=converged,
        device=str(device),
        seconds=time.perf_counter() - started,
        seconds_per_step=fit_seconds / max(len(curve), 1),
        config=config,
        marginal_targets=marginals,
    )


def fit_measurement(
    measurement: Measurement, layout: EncodingLayout, config: FitConfig = FitConfig(),
    fine: Sequence[FineCells] = (),
) -> FittedMixture:
    """``fit_mixture`` on a stored ``Measurement`` (directions and scales recomputed from the public seed); ``fine``:
    the public fine cells of its fine tables (``resolution.fine_cells``), pooled into the 1-way targets."""
    if measurement.d != layout.d:
        raise ValueError(f"measurement has d = {measurement.d} but the layout has d = {layout.d}")
    return fit_mixture(
        measurement.noisy_moments,
        measurement.directions(),
        measurement.scales(),
        layout,
        measurement.sigma,
        config,
        fit_targets(measurement, layout, config, fine),
        pair_targets(measurement),
    )


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
                  island_z: float = 0.0) -> np.ndarray:
    """A numeric column's noisy coarse table as a distribution over the bins left when its outermost runs of bins
    that look empty are cut: from each end, the longest run of k bins whose noisy mass is at most z times its
    noise std (noise_std * sqrt(k) for equal stds) and whose innermost bin is at most z times its own; the kept bins
    are then projected onto the simplex, the cut ones stay 0. Post-processing: the sum of k empty bins' noise has
    std noise_std * sqrt(k), so a run of truly empty bins is kept with probability about Phi(-z), and a run holding
    more than about 2 z noise_std * sqrt(k) of mass is never cut. (Projecting the whole table instead would give
    every cut bin back a share of the mass the noise left missing.) A bin of noise std 0 is empty by the schema
    (``_pooled``): it stays 0.

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
        within = np.flatnonzero((runs <= z * spread) & (view[:-1] <= z * view_std[:-1]))
        cut = int(within[-1]) + 1 if len(within) else 0
        if island_z > 0:
            cut += _island_cut(view[cut:], view_std[cut:], z, island_z)
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


def _island_cut(view: np.ndarray, std: np.ndarray, z: float, island_z: float) -> int:
    """How many bins to cut from the start of ``view`` (outermost first): the largest a + g such that the first a
    bins (the island, its innermost bin above z times its noise std) hold at most ``island_z`` times their noise
    std and the next g (the gap) each at most z times their own, with at least one bin left after them; 0 when there
    is none. Post-processing of the noisy table."""
    bins = len(view)
    empty = view <= z * std  # a bin of noise std 0 is empty by the schema
    island_mass = np.cumsum(view)
    island_spread = np.sqrt(np.cumsum(std ** 2))
    best = 0
    for a in range(1, bins - 1):
        if empty[a - 1] or island_mass[a - 1] > island_z * island_spread[a - 1]:
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
    smooth_ordinals: bool = False,
) -> MarginalTargets | None:
    """The measurement's noisy 1-way marginals, pooled with its 2-way margins and its ``fine`` tables
    (``pooled_marginals``), as targets (None without them); with ``layout`` and ``tail_z`` > 0, every numeric
    column's tails trimmed (``trimmed_tails``), and with ``shrink_categories`` every other coordinate's table
    shrunk toward its mean cell, its frequent cells left alone (``resolution.shrunk_toward``); with
    ``smooth_ordinals`` too, an ordinal column of ``MIN_SMOOTHED_LEVELS`` categories or more toward its
    log-quadratic shape instead (``ordinal_shape``; its missing level as pooled)."""
    if not measurement.marginal_sizes:
        return None
    tables, stds = _pooled(measurement, fine)
    if layout is not None:
        for i, coordinate in enumerate(layout.coordinates):
            if coordinate.is_binned or not coordinate.is_discrete:
                if tail_z > 0:
                    tables[i] = trimmed_tails(tables[i], stds[i], tail_z, island_z)
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
                            config.shrink_categories, config.marginal_island_z, config.smooth_ordinals)


def pair_targets(measurement: Measurement) -> PairTargets | None:
    """The measurement's noisy 2-way marginals as fit targets (None if it has none)."""
    if not measurement.pairs:
        return None
    return PairTargets(measurement.noisy_pairs, measurement.pair_weight, measurement.numeric_bins, measurement.pairs)


__all__: Sequence[str] = (
    "FitConfig", "FittedMixture", "MarginalTargets", "PairTargets", "fit_mixture", "fit_measurement", "fit_targets",
    "marginal_targets", "noise_floor", "pair_targets",
)
