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
from splice_assets.model.settings import (  # noqa: F401 (re-exported: the fit's settings live where planning can read them)
    DEFAULT_FINE_CAPACITY_SHAPES,
    DEFAULT_FINE_CORRECTED_SPIKES,
    DEFAULT_FINE_COUPLING,
    DEFAULT_FINE_EXPONENTIAL_TAILS,
    DEFAULT_FINE_KNOT_SHAPES,
    DEFAULT_FINE_LEVEL_FIRST,
    DEFAULT_FINE_SHRINK,
    DEFAULT_FINE_STRATIFIED,
    DEFAULT_FINE_THRESHOLD,
    DEFAULT_ISLAND_Z,
    DEFAULT_TAIL_NOISE_SHARE,
    DEFAULT_TAIL_Z,
    NUMERIC_MODELS,
    FitConfig,
)


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
    """A fitted mixture plus its fit record. ``params`` is all sampling needs; the rest is diagnostics. The
    post-processed model that sampling reads and a release stores (tilt, links, field, fine tables) is
    ``postprocess.synthetic_model.SyntheticModel``, built on this."""

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
    can remove. Ranking by the per-cell misfit instead favours small tables: it can spend a coordinate on a small
    table where a larger one misfits more in total (docs/decisions/0010).
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
    marginals: MarginalTargets | None = None, pairs: PairTargets | None = None,
) -> FittedMixture:
    """``fit_mixture`` on a stored ``Measurement`` (directions and scales recomputed from the public seed), to the
    given 1-way and 2-way targets (``postprocess.targets``: the measurement's noisy tables, denoised)."""
    if measurement.d != layout.d:
        raise ValueError(f"measurement has d = {measurement.d} but the layout has d = {layout.d}")
    return fit_mixture(
        measurement.noisy_moments,
        measurement.directions(),
        measurement.scales(),
        layout,
        measurement.sigma,
        config,
        marginals,
        pairs,
    )


__all__: Sequence[str] = (
    "FitConfig", "FittedMixture", "MarginalTargets", "PairTargets", "fit_mixture", "fit_measurement", "noise_floor",
)
