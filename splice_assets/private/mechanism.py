"""Privacy calculus of SPLICE: parameter checks, sensitivity, calibration, noise and composition.

The released statistic is the (k, L) matrix of sliced Chebyshev moments m[j-1, l] (``moments.py``), with
moment order j scaled by 1/sqrt(j), plus weighted 1-way and 2-way histograms. Two neighbouring relations:
**replace one row, n public** (``Relation.REPLACE_ONE``, the default: frequencies are released) and **add or remove
one row, n private** (``Relation.ADD_REMOVE``: sums, counts and a weighted row count are released, and frequencies
are their post-processing). The Gaussian mechanism adds N(0, sigma^2) to every scaled coordinate, i.e.
N(0, j sigma^2) to raw moment j. Calibration uses the exact analytic Gaussian mechanism (Balle & Wang 2018,
``gaussian_dp``); noise comes from OpenDP's float-safe sampler fed by OS entropy; releases compose at one fixed
total delta, exactly for Gaussian ones and through dp_accounting's PLD accountant for pure epsilon-DP ones.

Pure functions and frozen dataclasses only (no Dagster import). Nothing here logs a noise draw.
"""

from __future__ import annotations

import functools
import math
import numbers
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal
from typing import NamedTuple, cast

import numpy as np

from splice_assets import limits
from splice_assets.defaults import DEFAULT_K as DEFAULT_K
from splice_assets.defaults import DEFAULT_MARGINAL_SHARE as DEFAULT_MARGINAL_SHARE
from splice_assets.defaults import DEFAULT_N_DIRECTIONS as DEFAULT_N_DIRECTIONS
from splice_assets.defaults import DEFAULT_PAIR_SHARE as DEFAULT_PAIR_SHARE
from splice_assets.defaults import MAX_ROWS
from splice_assets.layout import harmonic
from splice_assets.limits import Relation
from splice_assets.measurement import RELATIONS
from splice_assets.private.errors import PrivacyParameterError as PrivacyParameterError
from splice_assets.private.gaussian_dp import epsilon_for, log_delta, sigma_for

#: Relative safety margin on the root-finder output of ``sigma_for`` (its delta can round ~1e-15 above the target).
SIGMA_MARGIN = 1e-9
#: Composed epsilons are rounded *up* to this quantum before any comparison with a budget.
EPSILON_QUANTUM = Decimal("1e-6")
#: Padding on the analytic epsilon of a Gaussian composition (against rounding in its delta curve).
ANALYTIC_PAD = 1e-10
#: Floor of the relative floating-point slack on the sensitivity.
MIN_FLOAT_SLACK = 1e-9
#: OpenDP draws a discrete Gaussian on the grid 2^g; the grid sits this many binary orders below sigma
#: (plus half the log2 of the vector length), so rounding the input onto it is negligible (see add_noise).
GRID_BITS_BELOW_SIGMA = 60

_UNIT_ROUNDOFF = 2.0**-53


def _is_int(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _finite_real(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(float(value))


def validate_parameters(
    epsilon: float, delta: float, k: int, n_directions: int, n_min: int, n: int | None = None
) -> None:
    """Reject invalid privacy/moment parameters with a ``PrivacyParameterError`` quoting the bad value.

    epsilon must be finite and > 0; delta must lie in (0, 1/n_min) (delta << 1/n keeps the guarantee
    meaningful for the public lower bound n_min on the row count); k (moment order) and L (directions) are
    integers >= 1. When given, the public row count n must be an integer >= n_min.
    """
    # The mechanism's own invariants (no product caps: those are ``splice_assets.limits``, checked where settings
    # enter); the limits shared with the entry points are checked through ``limits``, with their messages.
    try:
        limits.check_n_min(n_min)
    except limits.SettingsError as exc:
        raise PrivacyParameterError(str(exc)) from None
    if not _finite_real(epsilon) or float(epsilon) <= 0.0:
        raise PrivacyParameterError(f"epsilon must be a finite number > 0, got {epsilon!r}")
    try:
        limits.DELTA.check(delta)
        limits.check_delta_for(delta, n_min)
        if n is not None:
            limits.check_rows_for(n, n_min)
    except limits.SettingsError as exc:
        raise PrivacyParameterError(str(exc)) from None
    if not _is_int(k) or k < 1:
        raise PrivacyParameterError(f"moment order k must be an integer >= 1, got {k!r}")
    if not _is_int(n_directions) or n_directions < 1:
        raise PrivacyParameterError(f"number of directions L must be an integer >= 1, got {n_directions!r}")


def _check_shape(n: int | None, n_directions: int, k: int, n_private: bool = False) -> None:
    """Check L and k, and the public n unless ``n_private`` (add-remove, where n is not an input)."""
    if not n_private and (n is None or not _is_int(n) or n < 1):
        raise PrivacyParameterError(f"row count n must be an integer >= 1, got {n!r}")
    if not _is_int(k) or k < 1:
        raise PrivacyParameterError(f"moment order k must be an integer >= 1, got {k!r}")
    if not _is_int(n_directions) or n_directions < 1:
        raise PrivacyParameterError(f"number of directions L must be an integer >= 1, got {n_directions!r}")


def sensitivity(
    n: int | None,
    n_directions: int,
    k: int,
    marginal_coordinates: int = 0,
    marginal_weight: float = 0.0,
    pair_count: int = 0,
    pair_weight: float = 0.0,
    relation: Relation = Relation.REPLACE_ONE,
    count_weight: float = 0.0,
) -> float:
    """l2 sensitivity of the released vector.

    Replace-one (n public, frequencies): Delta = (1/n) sqrt(4 L H_k + 2 w^2 C + 2 w2^2 P).
    Replacing one row moves each sum of T_j values (each in [-1, 1]) by at most 2, so m[j, l] moves by <= 2/n and
    m[j, l]/sqrt(j) by <= 2/(n sqrt(j)); summing squares over l and j gives 4 L H_k / n^2. Each of the C weighted
    1-way histograms (cells w * count / n) changes in at most two cells by w/n each (the old row's cell loses it,
    the new row's gains it): 2 w^2 C / n^2; likewise each of the P weighted 2-way histograms: 2 w2^2 P / n^2.

    Add-remove (n private, sums and counts): Delta = sqrt(L H_k + w^2 C + w2^2 P + wn^2), with n ignored.
    One row adds T_j/sqrt(j) (|T_j| <= 1) to each scaled sum, w to one cell of each 1-way histogram, w2 to one cell
    of each 2-way histogram and wn to the weighted row count.
    """
    _check_relation(relation)
    _check_shape(n, n_directions, k, n_private=relation == Relation.ADD_REMOVE)
    if relation == Relation.ADD_REMOVE:
        if not _finite_real(count_weight) or count_weight < 0:
            raise PrivacyParameterError(f"count weight must be a finite number >= 0, got {count_weight!r}")
    else:
        if count_weight != 0:
            raise PrivacyParameterError(
                f"n is public under {relation!r}: the count weight must be 0, got {count_weight!r}"
            )
    _check_marginals(marginal_coordinates, marginal_weight)
    _check_marginals(pair_count, pair_weight)
    moment_factor, table_factor = _factors(relation)
    squared = (
        moment_factor * n_directions * harmonic(k) + table_factor * marginal_weight**2 * marginal_coordinates
        + table_factor * pair_weight**2 * pair_count + count_weight**2
    )
    # Under replace-one, _check_shape has checked that n is an integer >= 1.
    return math.sqrt(squared) if relation == Relation.ADD_REMOVE else math.sqrt(squared) / cast(int, n)


def _factors(relation: Relation) -> tuple[float, float]:
    """Squared per-row change of a moment sum (|T_j| <= 1) and of one histogram: replacing a row moves a sum by up
    to 2 and two cells by 1; adding or removing one moves a sum by up to 1 and one cell by 1."""
    return (4.0, 2.0) if relation == Relation.REPLACE_ONE else (1.0, 1.0)


def _check_relation(relation: Relation) -> None:
    if relation not in RELATIONS:
        raise PrivacyParameterError(f"relation must be one of {RELATIONS}, got {relation!r}")


def _check_marginals(coordinates: int, weight: float) -> None:
    if not _is_int(coordinates) or coordinates < 0:
        raise PrivacyParameterError(f"marginal coordinate count must be an integer >= 0, got {coordinates!r}")
    if not _finite_real(weight) or weight < 0:
        raise PrivacyParameterError(f"marginal weight must be a finite number >= 0, got {weight!r}")


# The marginal and pair shares, L and k live in splice_assets.defaults (re-exported above, read by the CLI's options
# without numpy). Add-remove only: the share of Delta^2 for the noisy row count. The histograms' totals also
# estimate n (each row falls in exactly one cell of every histogram), so the count mostly serves moment-only plans.
DEFAULT_COUNT_SHARE = 0.01


class QueryWeights(NamedTuple):
    """The weight of each query family's cells in the released vector (0 = family absent)."""

    marginal: float
    pair: float
    row_count: float


def query_weights(
    marginal_share: float, pair_share: float, n_directions: int, k: int, marginal_coordinates: int, pair_count: int,
    relation: Relation = Relation.REPLACE_ONE, count_share: float = 0.0,
) -> QueryWeights:
    """Weights (w, w2, wn) giving the 1-way histograms, the 2-way histograms and (add-remove only) the row count
    their shares of Delta^2, the moments the rest: with M = a L H_k the moments' part and s0 = 1 - s1 - s2 - sn,
    b w^2 C = s1 / s0 M, b w2^2 P = s2 / s0 M and wn^2 = sn / s0 M (a, b = 4, 2 under replace-one, 1, 1 under
    add-remove; see ``sensitivity``).

    A public function of public parameters; 1-way cells then carry noise sigma / w, 2-way cells sigma / w2, the
    count sigma / wn.
    """
    _check_relation(relation)
    for name, share in (("marginal", marginal_share), ("pair", pair_share), ("count", count_share)):
        if not _finite_real(share) or not 0.0 <= share < 1.0:
            raise PrivacyParameterError(f"{name} share must be in [0, 1), got {share!r}")
    if relation == Relation.REPLACE_ONE and count_share != 0:
        raise PrivacyParameterError(f"n is public under {relation!r}: the count share must be 0, got {count_share!r}")
    if relation == Relation.ADD_REMOVE and not count_share > 0:
        raise PrivacyParameterError(
            f"n is private under {relation!r}: the count share must be > 0, got {count_share!r}"
        )
    moment_share = 1.0 - marginal_share - pair_share - count_share
    if not moment_share > 0.0:
        raise PrivacyParameterError(
            f"marginal share {marginal_share!r} + pair share {pair_share!r} + count share {count_share!r} must leave "
            "the moments a share > 0"
        )
    moment_factor, table_factor = _factors(relation)
    moments = moment_factor * n_directions * harmonic(k) / moment_share

    def weight(share: float, count: int, factor: float) -> float:
        return math.sqrt(share * moments / (factor * count)) if share > 0.0 and count > 0 else 0.0

    return QueryWeights(
        weight(marginal_share, marginal_coordinates, table_factor), weight(pair_share, pair_count, table_factor),
        weight(count_share, 1, 1.0),
    )


def marginal_weight(share: float, n_directions: int, k: int, marginal_coordinates: int) -> float:
    """Weight w giving the 1-way histograms ``share`` of Delta^2 when there are no 2-way histograms (replace-one)."""
    return query_weights(share, 0.0, n_directions, k, marginal_coordinates, 0)[0]


def float_slack(n: int | None, k: int, n_directions: int = 1, marginal_cells: int = 0, marginal_weight: float = 0.0,
                marginal_coordinates: int = 0, pair_cells: int = 0, pair_weight: float = 0.0,
                pair_count: int = 0, relation: Relation = Relation.REPLACE_ONE, count_weight: float = 0.0) -> float:
    """Relative slack on Delta covering floating-point rounding (>= 1e-9).

    ``moments.py`` sums in exact fixed point / integers: every row contributes values rounded once (|T| <= 1,
    counts exactly 0 or 1), and integer sums are exact, so the sums' sensitivity is exact. Only the conversion to
    float, the division by n (replace-one) and the 1/sqrt(j) or w scaling round, each within one ulp of a value
    <= N (<= N w for a weighted cell), where N = 1 under replace-one (frequencies) and N = n under add-remove
    (sums). So every coordinate of f(D) and of f(D') is off by < 2 * 2^-53 * N * scale and their difference by
    < 4 * 2^-53 * N * scale. Over L k moment, B weighted 1-way, B2 weighted 2-way cells (and the count):
    < 4 * 2^-53 N sqrt(L k + w^2 B + w2^2 B2 + wn^2); relative to Delta and with a safety factor 2, that is
    8 * 2^-53 N sqrt(L k + w^2 B + w2^2 B2 + wn^2) / (n Delta) under replace-one. Under add-remove n is private, so
    the public cap ``MAX_ROWS`` on the rows the fixed-point sums hold stands in for it.
    """
    # Under replace-one, sensitivity() below has checked that n is an integer >= 1.
    rows = MAX_ROWS if relation == Relation.ADD_REMOVE else cast(int, n)
    delta = sensitivity(
        n, n_directions, k, marginal_coordinates, marginal_weight, pair_count, pair_weight, relation, count_weight,
    )
    rounding = math.sqrt(
        n_directions * k + marginal_weight**2 * marginal_cells + pair_weight**2 * pair_cells + count_weight**2
    )
    scale = delta if relation == Relation.ADD_REMOVE else delta * cast(int, n)
    return max(MIN_FLOAT_SLACK, 8.0 * _UNIT_ROUNDOFF * rows * rounding / scale)


@dataclass(frozen=True)
class Calibration:
    """A calibrated Gaussian mechanism. ``sensitivity`` already includes the float slack; record ``sigma``.

    Under add-remove ``n`` is None and sigma is on the scale of sums and counts, not frequencies."""

    epsilon: float
    delta: float
    n: int | None
    n_directions: int
    k: int
    sensitivity: float
    sigma: float
    noise_multiplier: float
    slack: float
    relation: Relation = Relation.REPLACE_ONE
    marginal_coordinates: int = 0
    marginal_cells: int = 0
    marginal_weight: float = 0.0
    pair_count: int = 0
    pair_cells: int = 0
    pair_weight: float = 0.0
    count_weight: float = 0.0

    def marginal_noise_std(self) -> float:
        """Noise std of one 1-way histogram cell (a frequency): sigma / w (inf without marginals)."""
        return self.sigma / self.marginal_weight if self.marginal_weight > 0 else math.inf

    def pair_noise_std(self) -> float:
        """Noise std of one 2-way histogram cell (a frequency): sigma / w2 (inf without 2-way queries)."""
        return self.sigma / self.pair_weight if self.pair_weight > 0 else math.inf

    def count_noise_std(self) -> float:
        """Noise std of the row count (add-remove): sigma / wn (inf under replace-one, where n is public)."""
        return self.sigma / self.count_weight if self.count_weight > 0 else math.inf

    def noise_std_per_order(self) -> np.ndarray:
        """Noise standard deviation of each raw moment order j = 1..k."""
        return raw_moment_noise_std(self.sigma, self.k)


def delta_for(noise_multiplier: float, epsilon: float) -> float:
    """Exact delta(epsilon) of the Gaussian mechanism with sigma/Delta = noise_multiplier (Balle & Wang, eq. 6).

    delta = Phi(1/(2s) - eps s) - e^eps Phi(-1/(2s) - eps s), evaluated in log space for small deltas.
    """
    s = float(noise_multiplier)
    if not s > 0.0:
        raise PrivacyParameterError(f"noise multiplier must be > 0, got {noise_multiplier!r}")
    return 0.0 if math.isinf(s) else math.exp(log_delta(s, float(epsilon)))


def classical_noise_multiplier(epsilon: float, delta: float) -> float:
    """The classical bound sqrt(2 ln(1.25/delta))/epsilon (valid only for epsilon < 1); for comparison only."""
    return math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon


def calibrate(
    epsilon: float,
    delta: float,
    n: int | None,
    n_directions: int,
    k: int,
    relation: Relation = Relation.REPLACE_ONE,
    marginal_coordinates: int = 0,
    marginal_cells: int = 0,
    marginal_weight: float = 0.0,
    pair_count: int = 0,
    pair_cells: int = 0,
    pair_weight: float = 0.0,
    count_weight: float = 0.0,
) -> Calibration:
    """Smallest safe sigma for (epsilon, delta)-DP of the released vector under ``relation``: scaled moments
    [+ weighted histograms] as frequencies (replace-one, n public), or as sums plus the weighted count (add-remove,
    n private and ignored here).

    Sensitivity: Delta_used = Delta (1 + float_slack) bounds the l2 change of the *computed* scaled vector
    between neighbours; sigma = Delta_used * sigma_analytic(eps, delta) * (1 + 1e-9) is then (eps, delta)-DP.
    """
    _check_relation(relation)
    if not _finite_real(epsilon) or float(epsilon) <= 0.0:
        raise PrivacyParameterError(f"epsilon must be a finite number > 0, got {epsilon!r}")
    if not _finite_real(delta) or not 0.0 < float(delta) < 1.0:
        raise PrivacyParameterError(f"delta must lie in (0, 1), got {delta!r}")
    if relation == Relation.ADD_REMOVE:
        if n is not None:
            raise PrivacyParameterError(f"n is private under {relation!r} and must not shape the noise; got n={n!r}")
        if not count_weight > 0:
            raise PrivacyParameterError(
                f"add-remove needs a noisy row count: count weight must be > 0, got {count_weight!r}"
            )
    epsilon, delta = float(epsilon), float(delta)
    slack = float_slack(
        n, k, n_directions, marginal_cells, marginal_weight, marginal_coordinates, pair_cells, pair_weight, pair_count,
        relation, count_weight,
    )
    delta_used = sensitivity(
        n, n_directions, k, marginal_coordinates, marginal_weight, pair_count, pair_weight, relation, count_weight,
    ) * (1.0 + slack)
    multiplier = sigma_for(epsilon, delta) * (1.0 + SIGMA_MARGIN)
    # Defensive: never hand out a sigma whose exact delta misses the target.
    for _ in range(100):
        if delta_for(multiplier, epsilon) <= delta:
            break
        multiplier *= 1.0 + SIGMA_MARGIN
    else:  # pragma: no cover - the root-finder is far more accurate than this
        raise RuntimeError(f"could not calibrate sigma for epsilon={epsilon!r}, delta={delta!r}")
    sigma = delta_used * multiplier
    return Calibration(
        epsilon=epsilon,
        delta=delta,
        n=None if n is None else int(n),
        n_directions=int(n_directions),
        k=int(k),
        sensitivity=delta_used,
        sigma=sigma,
        noise_multiplier=sigma / delta_used,
        slack=slack,
        relation=relation,
        marginal_coordinates=int(marginal_coordinates),
        marginal_cells=int(marginal_cells),
        marginal_weight=float(marginal_weight),
        pair_count=int(pair_count),
        pair_cells=int(pair_cells),
        pair_weight=float(pair_weight),
        count_weight=float(count_weight),
    )


def epsilon_of(noise_multiplier: float, delta: float) -> float:
    """The epsilon at ``delta`` of one Gaussian mechanism with sigma/Delta = ``noise_multiplier`` (for the record)."""
    return epsilon_for(float(noise_multiplier), float(delta)) + ANALYTIC_PAD


def split_privacy(epsilon: float, delta: float, share: float) -> tuple[float, float]:
    """Split one (epsilon, delta) Gaussian budget between a main and a side Gaussian measurement.

    With z the noise multiplier that alone is (epsilon, delta)-DP, the side measurement gets z / sqrt(share) and
    the main one z / sqrt(1 - share). Gaussian mechanisms compose exactly to one Gaussian with multiplier
    (sum_i z_i^-2)^(-1/2) (Dong, Roth & Su 2022, Cor. 3.3), here z again, so together they are (epsilon, delta)-DP.
    Returns (the main measurement's epsilon at delta, to calibrate it with ``calibrate``, which can only make its
    multiplier larger; the side measurement's noise multiplier).
    """
    if not (_finite_real(share) and 0.0 < float(share) < 1.0):
        raise PrivacyParameterError(f"a privacy share must lie in (0, 1), got {share!r}")
    z = sigma_for(float(epsilon), float(delta)) * (1.0 + SIGMA_MARGIN)
    while delta_for(z, epsilon) > delta:  # the same defensive step as ``calibrate``
        z *= 1.0 + SIGMA_MARGIN
    main = z / math.sqrt(1.0 - share)
    # Rounded down, so that the calibrated main multiplier is at least ``main``.
    return epsilon_for(main, float(delta)) * (1.0 - 1e-9), z / math.sqrt(share)


def raw_moment_noise_std(sigma: float, k: int) -> np.ndarray:
    """Noise std of raw moment order j = 1..k: sigma * sqrt(j) (the scaled coordinate m_j/sqrt(j) gets sigma)."""
    return float(sigma) * np.sqrt(np.arange(1, int(k) + 1, dtype=np.float64))


def _grid_exponent(sigma: float, size: int) -> int:
    return max(-1074, math.floor(math.log2(sigma)) - GRID_BITS_BELOW_SIGMA - math.ceil(math.log2(max(size, 1)) / 2))


def gaussian_noise(values: np.ndarray, sigma: float) -> np.ndarray:
    """values + N(0, sigma^2) per coordinate, from OpenDP's float-safe sampler (OS entropy, never seeded).

    OpenDP rounds the input onto the grid 2^g and adds an exact discrete Gaussian on that grid, so no
    float artefact of a continuous sampler leaks. The grid is chosen with sqrt(size) * 2^g <= sigma 2^-60:
    the rounding moves ||f(D) - f(D')|| by less than (sigma/Delta) 2^-60 Delta, far below ``float_slack``.
    Coordinates are independent, so one call may hold many independent runs.
    """
    import opendp.prelude as dp

    dp.enable_features("contrib")
    sigma = float(sigma)
    if not (math.isfinite(sigma) and sigma > 0.0):
        raise PrivacyParameterError(f"sigma must be a finite number > 0, got {sigma!r}")
    flat = np.ascontiguousarray(values, dtype=np.float64).ravel()
    if not np.all(np.isfinite(flat)):
        # Structural: moments are finite by construction (clamped Chebyshev values), so this is a bug.
        raise ValueError("the statistic to be noised contains non-finite values")
    if flat.size == 0:
        return flat.reshape(np.shape(values))
    space = dp.vector_domain(dp.atom_domain(T=float, nan=False), size=int(flat.size)), dp.l2_distance(T=float)
    measurement = space >> dp.m.then_gaussian(scale=sigma, k=_grid_exponent(sigma, flat.size))
    noisy = np.asarray(measurement(flat), dtype=np.float64)
    return noisy.reshape(np.shape(values))


def add_noise(moments: np.ndarray, sigma: float) -> np.ndarray:
    """The Gaussian mechanism on raw moments (k, L): scale order j by 1/sqrt(j), add N(0, sigma^2), unscale.

    Sensitivity: the scaled vector has l2 sensitivity Delta_used (``calibrate``), so sigma from ``calibrate``
    gives (eps, delta)-DP; unscaling (x sqrt(j)) is post-processing. Returns the noisy raw moments.
    """
    moments = np.asarray(moments, dtype=np.float64)
    if moments.ndim != 2:
        raise ValueError(f"moments must be a (k, L) array, got shape {moments.shape}")
    root_j = np.sqrt(np.arange(1, moments.shape[0] + 1, dtype=np.float64))[:, None]
    return gaussian_noise(moments / root_j, sigma) * root_j


def add_noise_joint(
    moments: np.ndarray, marginals: np.ndarray, weight: float | np.ndarray, sigma: float
) -> tuple[np.ndarray, np.ndarray]:
    """One Gaussian mechanism on [moments_j / sqrt(j), w * marginals]: N(0, sigma^2) on every coordinate.

    ``weight`` is one w for every histogram cell, or one per cell (1-way cells w, 2-way cells w2, concatenated).
    Sensitivity: ``sensitivity(n, L, k, C, w, P, w2)`` bounds the l2 change of this concatenated vector, so sigma
    from ``calibrate`` with the same counts and weights gives (eps, delta)-DP. Unscaling is post-processing.
    Returns the noisy raw moments (k, L) and noisy histogram frequencies (B,) (noise std sigma / w per cell).
    """
    moments = np.asarray(moments, dtype=np.float64)
    marginals = np.asarray(marginals, dtype=np.float64).ravel()
    weights = np.broadcast_to(np.asarray(weight, dtype=np.float64), marginals.shape)
    if moments.ndim != 2:
        raise ValueError(f"moments must be a (k, L) array, got shape {moments.shape}")
    if marginals.size and not np.all(weights > 0):
        raise ValueError("marginal queries need a weight > 0")
    root_j = np.sqrt(np.arange(1, moments.shape[0] + 1, dtype=np.float64))[:, None]
    scaled = np.concatenate([(moments / root_j).ravel(), weights * marginals])
    noisy = gaussian_noise(scaled, sigma)
    noisy_moments = noisy[: moments.size].reshape(moments.shape) * root_j
    noisy_marginals = noisy[moments.size :] / weights if marginals.size else marginals.copy()
    return noisy_moments, noisy_marginals


def _round_up(value: float) -> float:
    return float(Decimal(value).quantize(EPSILON_QUANTUM, rounding=ROUND_CEILING))


def compose_epsilon(
    noise_multipliers: Sequence[float | None], delta: float, pure_epsilons: Sequence[float] = ()
) -> float:
    """Total epsilon at total ``delta`` of Gaussian releases with the given sigma/Delta, rounded up to 1e-6.

    Gaussian releases compose *exactly* to one Gaussian with sigma/Delta = (sum_i s_i^-2)^(-1/2) (their
    privacy-loss variables are Gaussian; Dong, Roth & Su 2022, Cor. 3.3): its analytic epsilon, padded by 1e-10
    against rounding, is the total. Each noise multiplier is relative to the replace-one Delta already.
    Zero-cost entries (None or inf) are skipped; an empty list costs 0. ``pure_epsilons`` are pure epsilon-DP
    releases; with any of them the PLDs of all events are composed by dp_accounting's accountant (pessimistic
    discretisation, its default ADD_OR_REMOVE_ONE relation, the dominating pair of a multiplier taken against the
    replace-one Delta: its REPLACE_ONE setting would double the sensitivity a second time).
    """
    if not _finite_real(delta) or not 0.0 < float(delta) < 1.0:
        raise PrivacyParameterError(f"delta must lie in (0, 1), got {delta!r}")
    delta = float(delta)
    counts: Counter[float] = Counter()
    for value in noise_multipliers:
        if value is None or (isinstance(value, numbers.Real) and math.isinf(float(value)) and value > 0):
            continue
        if not _finite_real(value) or float(value) <= 0.0:
            raise PrivacyParameterError(f"a noise multiplier must be > 0 (or inf for zero cost), got {value!r}")
        counts[float(value)] += 1
    pure = [float(e) for e in pure_epsilons if float(e) > 0.0]
    for value in pure:
        if not math.isfinite(value):
            raise PrivacyParameterError(f"a pure epsilon must be finite, got {value!r}")
    if not counts and not pure:
        return 0.0
    return _composed(tuple(sorted(counts.items())), delta, tuple(pure))


@functools.lru_cache(maxsize=256)
def _composed(counts: tuple[tuple[float, int], ...], delta: float, pure: tuple[float, ...]) -> float:
    """``compose_epsilon`` of validated events, computed once per process for each distinct set: a pure function of
    its (hashable) arguments, so the lifetime total a release reads about ten times (pre-flight, reservation, budget
    check, public facts, the CLI's last line) is composed once."""
    if pure:
        return _round_up(_compose_with_pure(counts, list(pure), delta))
    effective = math.fsum(count / m**2 for m, count in counts) ** -0.5
    return _round_up(epsilon_for(effective, delta) + ANALYTIC_PAD)


def _compose_with_pure(counts: Sequence[tuple[float, int]], pure: list[float], delta: float) -> float:
    """PLD composition of Gaussian events (sigma/Delta, count; sorted) and pure epsilon-DP events (pessimistic
    estimates)."""
    from dp_accounting.pld import common
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    interval = 1e-4
    total = None
    for multiplier, count in counts:
        part = pld_lib.from_gaussian_mechanism(multiplier, value_discretization_interval=interval).self_compose(count)
        total = part if total is None else total.compose(part)
    for eps in pure:
        part = pld_lib.from_privacy_parameters(
            common.DifferentialPrivacyParameters(eps, 0.0), value_discretization_interval=interval
        )
        total = part if total is None else total.compose(part)
    assert total is not None  # the caller passes at least one pure event
    return float(total.get_epsilon_for_delta(delta))
