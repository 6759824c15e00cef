"""The SPLICE model q: a mixture of K product components, and its exact sliced Chebyshev moments.

Component c (weight pi_c) is a product of
  * one probability vector per *discrete* coordinate over its grid levels (categoricals, ordinals, and the
    two-level missing indicators of nullable numeric columns, so missingness depends on the component), and
  * ONE Gaussian N(mu_c, U_c U_c^T + diag(D_c)) of rank R over all *continuous* coordinates.
With ``numeric_model="histogram"`` (the default, ``encoding.histogram_layout``) there are no continuous
coordinates: each numeric column is a *binned* discrete coordinate, its grid the bin centres, plus a uniform offset
inside the bin that enters the closed form as a Gaussian of the same variance h^2/12 (``MomentEvaluator.jitter_var``).

Closed-form moments (exact in float64, differentiable, cost independent of n)
--------------------------------------------------------------------------
Within a component the scaled projection z = theta^T x / s is a sum of independent parts:
``w_i x_i`` for every discrete coordinate i (w = theta / s) and one Gaussian G ~ N(w_C^T mu, w_C^T Sigma w_C).
Two evaluations share that decomposition; both are batched over components and directions, with a Python loop over
discrete coordinates only (never over k or rows).

Fast path (centred Taylor, O(k^2) per part and direction):
1. Every part is centred on its own mean (the projection mean mu_{c,l} is kept separately). A discrete part's
   divided central moments are ``w^m M_{c,i,m}`` with ``M = sum_r p_r (g_r - gbar)^m / m!`` independent of the
   direction; the Gaussian's are ``(var/2)^h / h!`` at m = 2h.
2. Divided moments of independent parts multiply as truncated power series. On CPU the whole chain (and steps 1,
   3 and 6) runs in fused numba kernels with hand-written backward passes (``kernels``: one pass per batch instead
   of ~190 small torch ops: 2.3-2.6x faster per Adam step); elsewhere multiplying by part i is one batched GEMM per
   component, ``w^m [(acc / w^q) @ Toeplitz(M_{c,i})]_m`` (|w| floored at 10^(-280/k), which changes moments by
   < 3e-18). Both forms are tested against each other and against exact enumeration.
3. E[T_j(mu + u)] = sum_p P_j[p] E[u^p], P_j the Taylor coefficients of T_j at mu from the Chebyshev recurrence
   P_{j+1} = 2 (mu + u) P_j - P_{j-1}.
   The power basis amplifies rounding roughly by |T_k(mu + i spread)|: harmless for concentrated components, fatal
   at k = 32 for components spread over [-1, 1] (this path alone vs exact enumeration: 9e-2 at d = 2, 1e-3 at
   d = 3, 6e-5 at d = 4; 7e-10 at d = 2 for k = 16). So it also returns the first-order estimate
   eps * sum_p |P_j[p]| Mbar_p (j = k-1, k) of its rounding error, Mbar = the same GEMM chain run on *absolute*
   central moments (so the chain's own cancellation is covered). Measured error / estimate <= 1.3 over 54 000
   component-direction pairs (random layouts with d <= 8, k = 12..32, random / two-ended / one-ended mixtures).

Stable path (Chebyshev moments of partial sums, O(k^3) per part and direction), used for every direction where some
component's estimate exceeds ``max_taylor_error`` (default 1e-11, so the fast path keeps errors around 1e-11 at most):
4. The partial sum S_t = (mean + G) + w_1 x_1 + ... + w_t x_t is carried as its Chebyshev moments
   c_a = E[T_a(S_t / rho_t)], a = 0..k, on its own interval rho_t = rho_0 + r_1 + ... + r_t, where
   r_i = |w_i| max|g_i| is part i's reach (a binned grid's outer centres are 1 - h/2) and
   rho_0 = 1 - sum_discrete r (>= sum_continuous |w| because the public scales give the projection <= 1). The last
   interval is exactly [-1, 1], so the final c_j *are* the moments; every c_a stays O(1) (no cancellation anywhere).
   The start (mean + G) / rho_0 uses Gauss-Hermite with k/2 + 1 nodes (exact for degree k) and T_a by its
   recurrence, so the Gaussian tails beyond [-1, 1] keep their tiny weights.
5. Adding w x: S_{t+1} / rho_{t+1} = alpha S_t / rho_t + (1 - alpha) sign(w) x / max|g| with alpha = rho_t / rho_{t+1},
   and T_j(alpha s + (1 - alpha) y) = sum_ab C_j[a, b](alpha) T_a(s) T_b(y) with |C| <= 4 (its argument stays in
   [-1, 1]), so c'_j = sum_ab C_j[a, b](alpha) c_a nu_b with nu_b = E[T_b(x / max|g|)] = sum_r p_r T_b(g_r / max|g|).
   C_j is a polynomial of degree j in alpha, stored exactly by its Chebyshev coefficients in 2 alpha - 1
   (``_merge_table``, extended precision); contracting it with nu per component first leaves one GEMM per part and
   component: c'_j = sum_{e <= j} T_e(2 alpha_l - 1) [c @ G_c]_{(j, e)}. A negative w flips the parities of c and c'.

Joint parts (``joint_pairs``): two discrete coordinates a, b may share one (levels_a, levels_b) table per component
instead of two independent vectors. Their sum w_a x_a + w_b x_b is then one part of the projection:
6. Fast path: its divided central moments are sum_{s <= m} w_a^s w_b^(m-s) M[s, m-s] with the direction-free
   M[s, t] = sum_ij p_ij (g_i - gbar_a)^s (g_j - gbar_b)^t / (s! t!) (binomial theorem), an einsum against a
   precomputed (L, k+1, k+1) shear of w_a^s w_b^t (the fused kernel forms it from w_a^s and w_b^t per direction);
   it joins the chain after the separable coordinates (the absolute chain likewise).
7. Stable path: the part's values on its own interval [-(reach_a + reach_b), ...] depend on the direction, so
   nu_b = sum_ij p_ij T_b((w_a g_i + w_b g_j) / reach) is computed per flagged direction and merged like step 5.

Accuracy (tests/test_model_moments.py): vs exact enumeration (discrete atoms x Gauss-Hermite) <= 1e-10 relative to
max(1, |m|) up to k = 32 at d = 2, 3, 4 and on a mixed layout, each path separately (measured: <= 3e-14 where the
stable path runs, <= 6e-13 where the fast path is kept); vs Gauss-Hermite 1e-10 relative up to k = 32; vs 10^6-draw
Monte Carlo within 4 s.e. for all j <= 32. Cost: at k = 16 a typical configuration stays on the fast path; at
k = 32 most directions take the stable path, slower than the fast path alone, which was not exact there
(docs/decisions/0003).

Tails: outside [-1, 1] T_j explodes (|z| + sqrt(z^2 - 1))^j. In ``ball`` scaling |z| <= max_i |x_i|, so keeping
every Gaussian marginal inside [-1, 1] keeps every model moment bounded. The torch module below therefore
uses a bounded parametrisation, mean first: means ``(1 - tail_sigmas * sd_min) * tanh(a)``, then sd in
[sd_min, min(sd_max, (1 - |mean|) / tail_sigmas)] (each marginal has at least ``tail_sigmas`` standard deviations
of room inside [-1, 1]), and a correlation of rank R plus diagonal; ``tail_mass`` gives the per-coordinate Gaussian
mass outside [-1, 1] for an optional penalty.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np
import torch

from splice_assets.layout import EncodingLayout
from splice_assets.model import kernels

DTYPE = torch.float64


@dataclass(frozen=True)
class MixtureParameters:
    """Natural parameters of a fitted mixture (numpy, float64).

    ``probs[t]`` is the (K, levels) probability table of the t-th discrete coordinate in ``layout.discrete_index``
    order; ``means``/``factors``/``diag`` cover the continuous coordinates in ``layout.continuous_index`` order:
    component c's Gaussian is N(means[c], factors[c] @ factors[c].T + diag(diag[c])).

    ``joint[u]`` is the (K, levels_a, levels_b) table of the joint part ``joint_pairs[u] = (a, b)`` (coordinate
    indices of two discrete coordinates): within a component a and b follow it instead of being independent.
    ``probs`` still holds their marginals, so everything that reads one coordinate at a time is unchanged.
    """

    weights: np.ndarray
    probs: tuple[np.ndarray, ...]
    means: np.ndarray
    factors: np.ndarray
    diag: np.ndarray
    joint_pairs: tuple[tuple[int, int], ...] = ()
    joint: tuple[np.ndarray, ...] = ()

    @property
    def K(self) -> int:
        return int(self.weights.shape[0])

    @property
    def R(self) -> int:
        return int(self.factors.shape[2])

    def describe_joint(self, layout: EncodingLayout) -> list[list[str]]:
        """Public summary for release records: the (column, role) names of every joint part."""
        name = lambda c: c.column if c.role in ("value", "binned") else f"{c.column}/{c.role}"  # noqa: E731
        return [[name(layout.coordinates[a]), name(layout.coordinates[b])] for a, b in self.joint_pairs]

    def check(self, layout: EncodingLayout) -> None:
        """Raise ``ValueError`` if the shapes do not match ``layout`` or a value is out of its domain."""
        K = self.K
        disc = [layout.coordinates[i] for i in layout.discrete_index]
        n_cont = len(layout.continuous_index)
        if self.weights.ndim != 1 or K < 1 or not np.all(self.weights >= 0) or abs(self.weights.sum() - 1) > 1e-9:
            raise ValueError("weights must be a probability vector of length K >= 1")
        if len(self.probs) != len(disc):
            raise ValueError(f"expected {len(disc)} probability tables, got {len(self.probs)}")
        for coord, p in zip(disc, self.probs):
            if p.shape != (K, coord.levels) or np.any(p < 0) or np.any(np.abs(p.sum(axis=1) - 1) > 1e-9):
                raise ValueError(f"probability table of {coord.column!r}/{coord.role} has a bad shape or values")
        if self.means.shape != (K, n_cont) or self.diag.shape != (K, n_cont) or self.factors.shape[:2] != (K, n_cont):
            raise ValueError("Gaussian parameters do not match the continuous coordinates of the layout")
        if np.any(self.diag < 0):
            raise ValueError("diagonal variances must be >= 0")
        positions = joint_positions(layout, self.joint_pairs)
        if len(self.joint) != len(self.joint_pairs):
            raise ValueError(f"expected {len(self.joint_pairs)} joint tables, got {len(self.joint)}")
        for (a, b), (ta, tb), table in zip(self.joint_pairs, positions, self.joint):
            name = f"{layout.coordinates[a].column!r} x {layout.coordinates[b].column!r}"
            if table.shape != (K, self.probs[ta].shape[1], self.probs[tb].shape[1]) or np.any(table < 0):
                raise ValueError(f"joint table of {name} has a bad shape or values")
            if np.any(np.abs(table.sum(2) - self.probs[ta]) > 1e-6) or np.any(
                np.abs(table.sum(1) - self.probs[tb]) > 1e-6
            ):
                raise ValueError(f"joint table of {name} does not sum to its coordinates' probabilities")


def joint_positions(layout: EncodingLayout, joint_pairs: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Each joint pair's two positions in ``layout.discrete_index`` (the order of ``probs``); raises ``ValueError``
    unless the pairs are disjoint pairs of discrete coordinates."""
    position = {int(i): t for t, i in enumerate(layout.discrete_index)}
    seen: set[int] = set()
    for pair in joint_pairs:
        if len(pair) != 2 or pair[0] == pair[1] or any(i not in position for i in pair) or seen & set(pair):
            raise ValueError(f"joint pair {tuple(pair)!r} is not a pair of two unused discrete coordinates")
        seen.update(pair)
    return [(position[a], position[b]) for a, b in joint_pairs]


# ---------------------------------------------------------------------------------------------------------------
# Truncated power-series helpers (last axis = coefficient index 0..k), batched over leading axes.


def series_product(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Truncated product of power series (last axis = coefficients 0..k), batched: c_m = sum_q a_q b_{m-q}."""
    n = a.shape[-1]
    out = a[..., :1] * b
    for q in range(1, n):
        out = out + a[..., q : q + 1] * torch.nn.functional.pad(b[..., : n - q], (q, 0))
    return out


def chebyshev_taylor_expectations(mu: torch.Tensor, central: torch.Tensor, k: int) -> torch.Tensor:
    """E[T_j(mu + u)] for j = 1..k given the central moments ``central[..., p] = E[u^p]`` (p = 0..k).

    Uses the Taylor coefficients of T_j at mu, built by the Chebyshev recurrence. Returns (..., k).
    """
    return _taylor_expectations(mu, central, k)[0]


def _taylor_expectations(mu: torch.Tensor, central: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``chebyshev_taylor_expectations`` plus the Taylor coefficients of T_(k-1) and T_k at mu: (..., 2, k+1)."""
    # (cur @ shift2)[p] = 2 cur[p-1]: the "2 u P_j" term of the recurrence as one exact GEMM.
    shift2 = torch.diag(torch.full((k,), 2.0, dtype=central.dtype, device=central.device), 1)
    e0 = torch.zeros(k + 1, dtype=central.dtype, device=central.device)
    e0[0] = 1.0
    e1 = torch.zeros_like(e0)
    e1[1] = 1.0
    prev = e0.expand_as(central)
    cur = mu.unsqueeze(-1) * e0 + e1
    out = [(cur * central).sum(-1)]
    two_mu = 2.0 * mu.unsqueeze(-1)
    for _ in range(1, k):
        prev, cur = cur, torch.addcmul(cur @ shift2 - prev, two_mu, cur)
        out.append((cur * central).sum(-1))
    return torch.stack(out, dim=-1), torch.stack([prev, cur], dim=-2)


@functools.lru_cache(maxsize=8)
def _merge_table(k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Coefficients of T_j(alpha s + (1 - alpha) y) in T_e(2 alpha - 1) T_a(s) T_b(y), for j, a, b = 0..k.

    C_j has degree j in alpha, so only the pairs p = (j, e <= j) are kept. Returns ``(table[b, a, p], e[p], j[p])``.
    Computed in extended precision: the coefficient recurrence C_(j+1) = 2 (alpha s + (1 - alpha) y) C_j - C_(j-1)
    at k + 1 Chebyshev points in alpha, then the discrete cosine transform (exact for degree <= k).
    """
    n = k + 1
    ld = np.longdouble
    theta = np.arccos(ld(-1.0)) * (np.arange(n, dtype=ld) + ld(0.5)) / n
    alpha = ((1 + np.cos(theta)) / 2)[:, None, None]

    def times_variable(c: np.ndarray, axis: int) -> np.ndarray:
        # x T_0 = T_1 and x T_a = (T_(a+1) + T_(a-1)) / 2; degree k is never exceeded for j <= k.
        c = np.moveaxis(c, axis, -1)
        out = np.zeros_like(c)
        out[..., 1:] += c[..., :-1] / 2
        out[..., 1] += c[..., 0] / 2
        out[..., :-1] += c[..., 1:] / 2
        return np.moveaxis(out, -1, axis)

    def step(c: np.ndarray) -> np.ndarray:
        return alpha * times_variable(c, -2) + (1 - alpha) * times_variable(c, -1)

    values = np.zeros((n, n, n, n), dtype=ld)  # [alpha sample, j, a, b]
    values[:, 0, 0, 0] = 1
    if k >= 1:
        values[:, 1] = step(values[:, 0])
    for j in range(1, k):
        values[:, j + 1] = 2 * step(values[:, j]) - values[:, j - 1]
    dct = np.cos(np.arange(n, dtype=ld)[:, None] * theta[None, :]) * (ld(2) / n)  # [e, sample]
    dct[0] /= 2
    coef = np.tensordot(dct, values, axes=(1, 0))  # [e, j, a, b]
    j_idx, e_idx = np.tril_indices(n)
    table = coef[e_idx, j_idx].transpose(2, 1, 0)  # [b, a, p]
    return np.ascontiguousarray(table, dtype=np.float64), e_idx, j_idx


# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TorchMixture:
    """Natural parameters as torch tensors; ``probs`` is padded to (K, n_discrete, max_levels) with zeros."""

    weights: torch.Tensor
    probs: torch.Tensor
    means: torch.Tensor
    factors: torch.Tensor
    diag: torch.Tensor
    joint_pairs: tuple[tuple[int, int], ...] = ()
    joint: tuple[torch.Tensor, ...] = ()

    def to_numpy(self, layout: EncodingLayout) -> MixtureParameters:
        levels = [layout.coordinates[i].levels for i in layout.discrete_index]
        probs = self.probs.detach().cpu().numpy()
        tables = []
        for t, r in enumerate(levels):
            p = np.clip(probs[:, t, :r], 0.0, None)
            tables.append(p / p.sum(axis=1, keepdims=True))
        w = np.clip(self.weights.detach().cpu().numpy(), 0.0, None)
        joint = []
        for (ta, tb), table in zip(joint_positions(layout, self.joint_pairs), self.joint):
            j = np.clip(table.detach().cpu().numpy(), 0.0, None)
            j = j / j.sum(axis=(1, 2), keepdims=True)
            tables[ta], tables[tb] = j.sum(2), j.sum(1)
            joint.append(j)
        return MixtureParameters(
            weights=w / w.sum(),
            probs=tuple(tables),
            means=self.means.detach().cpu().numpy().copy(),
            factors=self.factors.detach().cpu().numpy().copy(),
            diag=self.diag.detach().cpu().numpy().copy(),
            joint_pairs=tuple(self.joint_pairs),
            joint=tuple(joint),
        )

    @classmethod
    def from_numpy(
        cls, params: MixtureParameters, layout: EncodingLayout, device: str | torch.device = "cpu"
    ) -> TorchMixture:
        levels = [layout.coordinates[i].levels for i in layout.discrete_index]
        rmax = max(levels, default=1)
        padded = np.zeros((params.K, len(levels), rmax))
        for t, (r, p) in enumerate(zip(levels, params.probs)):
            padded[:, t, :r] = p
        as_t = lambda a: torch.as_tensor(np.asarray(a, dtype=np.float64), dtype=DTYPE, device=device)  # noqa: E731
        return cls(
            as_t(params.weights), as_t(padded), as_t(params.means), as_t(params.factors), as_t(params.diag),
            tuple(params.joint_pairs), tuple(as_t(j) for j in params.joint),
        )


def _powers(x: torch.Tensor, n: int) -> torch.Tensor:
    """x^0..x^n along a new last axis; exponents >= 1 only go through pow, so the gradient is finite at x = 0."""
    exps = torch.arange(1, n + 1, dtype=x.dtype, device=x.device)
    return torch.cat([torch.ones_like(x).unsqueeze(-1), x.unsqueeze(-1) ** exps], dim=-1)


class MomentEvaluator:
    """Exact model moments m_j(theta_l, q) for fixed directions, scales and order k (all batched).

    Precomputes everything that depends only on public inputs (directions, scales, layout). Calling it with a
    ``TorchMixture`` returns a (k, L) tensor, differentiable with respect to the mixture parameters. Directions where
    the fast path's rounding-error estimate exceeds ``max_taylor_error`` for some component are recomputed by the
    stable path (``0`` forces the stable path everywhere, ``math.inf`` disables it).
    """

    def __init__(
        self,
        layout: EncodingLayout,
        directions: np.ndarray,
        scales: np.ndarray,
        k: int,
        device: str | torch.device = "cpu",
        max_taylor_error: float = 1e-11,
        joint_pairs: Sequence[tuple[int, int]] = (),
        fused: bool | None = None,
    ) -> None:
        if k < 1:
            raise ValueError(f"moment order k must be >= 1, got {k}")
        directions = np.asarray(directions, dtype=np.float64)
        scales = np.asarray(scales, dtype=np.float64)
        if directions.ndim != 2 or directions.shape[1] != layout.d or scales.shape != (directions.shape[0],):
            raise ValueError(f"directions {directions.shape} / scales {scales.shape} do not match d = {layout.d}")
        self.layout = layout
        self.k = k
        self.device = torch.device(device)
        self.max_taylor_error = float(max_taylor_error)
        # The fast path's fused kernels (``kernels``) run on CPU; the batched torch form is kept for other devices.
        self.fused = self.device.type == "cpu" if fused is None else bool(fused)
        if self.fused and self.device.type != "cpu":
            raise ValueError(f"the fused kernels run on CPU only, not on {self.device}")
        # Parts of the projection besides the Gaussian: separable discrete coordinates, then joint pairs (positions
        # in the discrete order).
        self.joint_pairs = tuple((int(a), int(b)) for a, b in joint_pairs)
        self.joint_positions = joint_positions(layout, self.joint_pairs)
        joined = {t for pair in self.joint_positions for t in pair}
        self.separable = [t for t in range(len(layout.discrete_index)) if t not in joined]
        w_np = directions / scales[:, None]
        w = torch.as_tensor(w_np, dtype=DTYPE, device=self.device)
        disc, cont = layout.discrete_index, layout.continuous_index
        self.w_disc = w[:, torch.as_tensor(disc, dtype=torch.long)] if len(disc) else w[:, :0]
        self.w_cont = w[:, torch.as_tensor(cont, dtype=torch.long)] if len(cont) else w[:, :0]
        # A binned coordinate is its bin centre plus a within-bin offset, uniform on a bin of width h: the offset
        # joins the Gaussian part as N(0, h^2 / 12) (same mean and variance; higher cumulants O(h^4 w^4)).
        bin_var = np.array([(2.0 / c.levels) ** 2 / 12.0 if c.is_binned else 0.0 for c in layout.coordinates])
        self.jitter_var = torch.as_tensor(w_np**2 @ bin_var, dtype=DTYPE, device=self.device)  # (L,)
        orders = torch.arange(k + 1, dtype=DTYPE, device=self.device)
        self.half_orders = torch.arange(k // 2 + 1, dtype=DTYPE, device=self.device)
        self.even_index = torch.arange(0, k + 1, 2, device=self.device)
        levels = [layout.coordinates[i].levels for i in disc]
        rmax = max(levels, default=1)
        grid = np.zeros((len(levels), rmax))
        for t, r in enumerate(levels):
            grid[t, :r] = layout.coordinates[disc[t]].grid()
        self.grid = torch.as_tensor(grid, dtype=DTYPE, device=self.device)
        self.orders = orders
        inv_factorial = np.array([1.0 / math.factorial(m) for m in range(k + 1)])
        self.inv_factorial = torch.as_tensor(inv_factorial, dtype=DTYPE, device=self.device)
        self.factorial = 1.0 / self.inv_factorial
        # Fast path, step 2: every part's divided central moments in direction l are w^m M_m (a joint part's
        # sum_s w_a^s w_b^(m-s) M[s, m-s]), so the chain needs w^m per (part, direction).
        if self.fused:
            joint_weights = [w_np[:, disc][:, [ta, tb]].T for ta, tb in self.joint_positions]
            w_joint = np.stack(joint_weights) if joint_weights else np.zeros((0, 2, w_np.shape[0]))
            self.chain_powers = kernels.chain_powers(w_np[:, disc][:, self.separable], w_joint, k)
            self.abs_chain_powers = tuple(np.abs(t) for t in self.chain_powers)
            self.sep_grid = (np.ascontiguousarray(grid[self.separable]), inv_factorial)
            self.joint_grids = [(grid[ta, : levels[ta]].copy(), grid[tb, : levels[tb]].copy(), inv_factorial)
                                for ta, tb in self.joint_positions]
        else:
            self._init_gemm_chain(self.w_disc[:, self.separable].T, orders)

        # Stable path: the intervals rho_t of the partial sums (step 4 of the module docstring), one per part.
        as_t = lambda a: torch.as_tensor(np.ascontiguousarray(a), dtype=DTYPE, device=self.device)
        reach = np.abs(w_np[:, disc]) * np.abs(grid).max(axis=1)  # (L, n_disc): |w| * max |grid|
        cont_reach = np.abs(w_np[:, cont]).sum(axis=1)
        if np.any(reach.sum(axis=1) + cont_reach > 1.0 + 1e-9):
            raise ValueError("scales must give |theta^T x| / s <= 1 on [-1, 1]^d (see moments.direction_scales)")
        # A joint part's values w_a g_i + w_b g_j lie on [-(reach_a + reach_b), ...], per direction.
        joint_reach = [reach[:, ta] + reach[:, tb] for ta, tb in self.joint_positions]
        part_reach = np.column_stack([reach[:, self.separable], *joint_reach])
        rho0 = np.maximum(1.0 - reach.sum(axis=1), cont_reach)
        rho = rho0[:, None] + np.cumsum(part_reach, axis=1)
        before = np.concatenate([rho0[:, None], rho[:, :-1]], axis=1)
        alpha = np.divide(before, rho, out=np.ones_like(rho), where=rho > 0)  # 0/0: nothing to add, keep
        self.inv_rho0 = as_t(np.divide(1.0, rho0, out=np.zeros_like(rho0), where=rho0 > 0))
        self.alpha_cheb = as_t(np.polynomial.chebyshev.chebvander(2.0 * alpha.T - 1.0, k))  # (n_parts, L, k+1)
        sign = np.where(w_np[:, disc][:, self.separable].T < 0, -1.0, 1.0)
        self.parity = as_t(sign[..., None] ** np.arange(k + 1))  # (n_sep, L, k+1)
        # T_b(g_r / max|g|): a part's values on its own interval [-reach, reach] (binned grids end inside [-1, 1]).
        top = np.abs(grid).max(axis=1, keepdims=True)
        self.cheb_grid = as_t(np.polynomial.chebyshev.chebvander(grid / np.where(top > 0, top, 1.0), k))
        self.joint_reach = [as_t(r) for r in joint_reach]
        table, pair_e, pair_j = _merge_table(k)
        self.merge_table = as_t(table.reshape(k + 1, -1))  # [b, (a, p)]
        self.pair_e = torch.as_tensor(pair_e, dtype=torch.long, device=self.device)
        self.segment = as_t(np.arange(k + 1)[None, :] == pair_j[:, None])  # sums the pairs of each j: (P, k+1)
        nodes, weights = np.polynomial.hermite_e.hermegauss(k // 2 + 1)
        self.gh_nodes, self.gh_weights = as_t(nodes), as_t(weights / weights.sum())

    def _init_gemm_chain(self, w_sep: torch.Tensor, orders: torch.Tensor) -> None:
        """Constants of the batched torch chain (steps 2 and 6 on devices without the fused kernels)."""
        # w^m and w^-m per (separable coordinate, direction): (n_sep, L, k+1). |w| is floored at 10^(-280/k) so
        # that w^-k stays finite; the floor changes central moments by < floor^2 (<= 3e-18 for k <= 32).
        floor = 10.0 ** (-280.0 / self.k)
        w_safe = torch.where(w_sep.abs() < floor, torch.full_like(w_sep, floor), w_sep)
        w_pow = w_safe.unsqueeze(-1) ** orders
        w_invpow = w_safe.unsqueeze(-1) ** (-orders)
        # (acc / w_1^q) @ toe_1 * (w_1 / w_2)^m @ toe_2 ... * w_n^m: one scaling per coordinate.
        self.w_invpow_first = w_invpow[0] if self.separable else w_invpow
        self.w_ratio = torch.cat([w_pow[:-1] * w_invpow[1:], w_pow[-1:]]) if self.separable else w_pow
        self.abs_w_invpow_first, self.abs_w_ratio = self.w_invpow_first.abs(), self.w_ratio.abs()
        qi = torch.arange(self.k + 1, device=self.device)
        diff = qi.unsqueeze(0) - qi.unsqueeze(1)  # [q, m] -> m - q
        self.toe_index = diff.clamp(min=0)
        self.toe_mask = (diff >= 0).to(DTYPE)
        # A joint part's shear[l, s, m] = w_a^s w_b^(m-s) for s <= m.
        self.joint_shear = []
        for ta, tb in self.joint_positions:
            wa, wb = self.w_disc[:, ta].unsqueeze(-1) ** orders, self.w_disc[:, tb].unsqueeze(-1) ** orders
            self.joint_shear.append(wa.unsqueeze(-1) * wb[:, self.toe_index] * self.toe_mask)

    @property
    def n_directions(self) -> int:
        return int(self.w_disc.shape[0])

    def component_moments(self, q: TorchMixture) -> torch.Tensor:
        """E_c[T_j(theta_l^T x / s_l)] for every component c, direction l and j = 1..k: (K, L, k)."""
        if tuple(q.joint_pairs) != self.joint_pairs:
            raise ValueError(
                f"the mixture's joint pairs {q.joint_pairs!r} are not the evaluator's {self.joint_pairs!r}"
            )
        mean, var = self._gaussian_projection(q)
        moments, error = self._taylor_moments(q, mean, var)
        rows = torch.nonzero(error.amax(0) > self.max_taylor_error).squeeze(1)
        if rows.numel():
            moments = moments.index_copy(1, rows, self._stable_moments(q, mean[:, rows], var[:, rows], rows))
        return moments

    def __call__(self, q: TorchMixture) -> torch.Tensor:
        """Mixture moments (k, L)."""
        return torch.einsum("c,clj->jl", q.weights, self.component_moments(q))

    def _gaussian_projection(self, q: TorchMixture) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and variance (K, L) of the Gaussian part w_C^T x_C plus the binned coordinates' within-bin offsets."""
        K, L = q.weights.shape[0], self.n_directions
        mean = torch.zeros(K, L, dtype=DTYPE, device=self.device)
        var = torch.zeros(K, L, dtype=DTYPE, device=self.device)
        if self.w_cont.shape[1]:
            mean = q.means @ self.w_cont.T
            var = q.diag @ (self.w_cont**2).T
            if q.factors.shape[-1]:
                proj = torch.einsum("li,cir->clr", self.w_cont, q.factors)
                var = var + (proj**2).sum(-1)
        return mean, var + self.jitter_var

    def _taylor_moments(
        self, q: TorchMixture, mean: torch.Tensor, var: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Fast path (steps 1-3 and 6): moments (K, L, k) and the estimate of their rounding error (K, L)."""
        k = self.k
        mu = mean
        # Start from the Gaussian part's divided central moments (var/2)^h / h! at m = 2h (1 if no Gaussian).
        even = _powers(0.5 * var, self.half_orders.shape[0] - 1) * self.inv_factorial[: self.half_orders.shape[0]]
        acc = torch.zeros(*mean.shape, k + 1, dtype=DTYPE, device=self.device).index_copy(-1, self.even_index, even)
        abs_acc = acc.detach()  # the same chain on absolute central moments: bounds every term the chain sums
        if self.w_disc.shape[1]:
            gbar = (q.probs * self.grid).sum(-1)  # (K, n_disc)
            mu = mu + gbar @ self.w_disc.T
            if self.fused:
                separable, abs_separable = kernels.DiscreteCentral.apply(q.probs[:, self.separable], *self.sep_grid)
                mixed, abs_mixed = self._fused_joint_moments(q)
                acc = kernels.SeriesChain.apply(acc, separable, mixed, *self.chain_powers)
                abs_acc = kernels.series_chain_values(abs_acc, abs_separable, abs_mixed, *self.abs_chain_powers)
            else:
                separable, abs_separable, mixed, abs_mixed = self._part_moments(q, gbar)
                acc, abs_acc = self._gemm_chain(acc, abs_acc, separable, abs_separable, mixed, abs_mixed)
        central = acc * self.factorial  # E[(z - mu)^p], p = 0..k
        if self.fused:
            moments, last = kernels.TaylorExpectations.apply(mu, central)
        else:
            moments, last = _taylor_expectations(mu, central, k)
        # First-order rounding estimate eps * sum_p |P_j[p]| Mbar_p for the two largest orders j = k - 1, k.
        abs_central = (abs_acc * self.factorial).unsqueeze(-2)
        error = torch.finfo(DTYPE).eps * (last.detach().abs() * abs_central).sum(-1).amax(-1)
        return moments, error

    def _fused_joint_moments(self, q: TorchMixture) -> tuple[torch.Tensor, torch.Tensor]:
        """Step 6 by the fused kernel: the joint pairs' M[c, u, s, t] (K, U, k+1, k+1) and the absolute twin."""
        if not q.joint:
            empty = q.weights.new_zeros(q.weights.shape[0], 0, self.k + 1, self.k + 1)
            return empty, empty
        moments = [kernels.JointCentral.apply(table, *grids) for table, grids in zip(q.joint, self.joint_grids)]
        return torch.stack([m for m, _ in moments], 1), torch.stack([a for _, a in moments], 1)

    def _part_moments(self, q: TorchMixture, gbar: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Steps 1 and 6 in batched torch: the separable coordinates' M[c, t, m] (K, n_sep, k+1), the joint pairs'
        M[c, u, s, t] (K, U, k+1, k+1), and their absolute twins."""
        dev = self.grid - gbar.unsqueeze(-1)  # (K, n_disc, rmax): centred on the component's own mean
        sep = self.separable
        sep_powers = _powers(dev[:, sep], self.k) * self.inv_factorial  # (g - gbar)^m / m!
        central = (q.probs[:, sep].unsqueeze(-1) * sep_powers).sum(-2)
        mixed = self._joint_mixed(q, dev)
        with torch.no_grad():
            abs_central = (q.probs[:, sep].unsqueeze(-1) * sep_powers.abs()).sum(-2)
            abs_mixed = self._joint_mixed(q, dev, absolute=True)
        return central, abs_central, mixed, abs_mixed

    def _joint_mixed(self, q: TorchMixture, dev: torch.Tensor, absolute: bool = False) -> torch.Tensor:
        """Step 6: every joint pair's direction-free M[s, t] = sum_ij p_ij (g_i - gbar_a)^s (g_j - gbar_b)^t / (s! t!)
        (absolute values inside with ``absolute``): (K, U, k+1, k+1)."""
        mixed = []
        for (ta, tb), table in zip(self.joint_positions, q.joint):
            da, db = (_powers(dev[:, t, : n], self.k) * self.inv_factorial
                      for t, n in ((ta, table.shape[1]), (tb, table.shape[2])))
            if absolute:
                da, db = da.abs(), db.abs()
            mixed.append(torch.einsum("cij,cis,cjt->cst", table, da, db))
        if not mixed:
            return dev.new_zeros(dev.shape[0], 0, self.k + 1, self.k + 1)
        return torch.stack(mixed, 1)

    def _gemm_chain(self, acc: torch.Tensor, abs_acc: torch.Tensor, central: torch.Tensor, abs_central: torch.Tensor,
                    mixed: torch.Tensor, abs_mixed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Steps 2 and 6 in batched torch (devices without the fused kernels): the chain and its absolute twin."""
        if self.separable:
            # Toeplitz of each coordinate's divided central moments: toe[c, i, q, m] = M[c, i, m - q] (m >= q).
            toe = central[..., self.toe_index] * self.toe_mask  # (K, n_sep, k+1, k+1)
            abs_toe = abs_central[..., self.toe_index] * self.toe_mask
            # Multiplying by the part w x_i: sum_q acc_q w^(m-q) M_(m-q) = w^m [(acc / w^q) @ toe]_m, one GEMM.
            acc, abs_acc = acc * self.w_invpow_first, abs_acc * self.abs_w_invpow_first
            for t in range(toe.shape[1]):
                acc = torch.matmul(acc, toe[:, t]) * self.w_ratio[t]
                with torch.no_grad():
                    abs_acc = torch.matmul(abs_acc, abs_toe[:, t]) * self.abs_w_ratio[t]
        # A joint part's divided central moments: sum_{s <= m} w_a^s w_b^(m-s) M[s, m-s], M sheared against shear.
        expand = self.toe_index.expand(mixed.shape[0], -1, -1)
        for u, shear in enumerate(self.joint_shear):
            sheared = torch.gather(mixed[:, u], 2, expand) * self.toe_mask
            acc = series_product(acc, torch.einsum("lsm,csm->clm", shear, sheared))
            with torch.no_grad():
                abs_sheared = torch.gather(abs_mixed[:, u], 2, expand) * self.toe_mask
                abs_acc = series_product(abs_acc, torch.einsum("lsm,csm->clm", shear.abs(), abs_sheared))
        return acc, abs_acc

    def _joint_nu(self, table: torch.Tensor, u: int, rows: torch.Tensor) -> torch.Tensor:
        """E_c[T_b(y)] (K, rows, k+1) of the u-th joint part's value y = (w_a x_a + w_b x_b) / reach per direction."""
        ta, tb = self.joint_positions[u]
        reach = self.joint_reach[u][rows]
        scale = torch.where(reach > 0, 1.0 / torch.where(reach > 0, reach, 1.0), 0.0)
        ga, gb = self.grid[ta, : table.shape[1]], self.grid[tb, : table.shape[2]]
        wa, wb = self.w_disc[rows, ta] * scale, self.w_disc[rows, tb] * scale
        y = (wa[:, None, None] * ga[:, None] + wb[:, None, None] * gb[None, :]).reshape(len(rows), -1)
        prev, cur = torch.ones_like(y), y
        cheb = [prev, cur]
        for _ in range(1, self.k):
            prev, cur = cur, 2.0 * y * cur - prev
            cheb.append(cur)
        values = torch.stack(cheb, dim=-1)  # (rows, cells, k+1)
        return torch.einsum("cx,rxb->crb", table.reshape(table.shape[0], -1), values)

    def _stable_moments(
        self, q: TorchMixture, mean: torch.Tensor, var: torch.Tensor, rows: torch.Tensor
    ) -> torch.Tensor:
        """Stable path (steps 4-5) for the directions ``rows``; ``mean``/``var`` (K, len(rows)).

        Returns (K, rows, k)."""
        k = self.k
        inv = self.inv_rho0[rows]
        # Start: Chebyshev moments of (mean + G) / rho_0 by Gauss-Hermite (clamp: finite sqrt gradient at var = 0).
        sd = torch.sqrt(torch.clamp(var * inv**2, min=1e-300))
        nodes = (mean * inv).unsqueeze(-1) + sd.unsqueeze(-1) * self.gh_nodes  # (K, rows, k/2 + 1)
        prev, cur = torch.ones_like(nodes), nodes
        cheb = [prev @ self.gh_weights, cur @ self.gh_weights]
        for _ in range(1, k):
            prev, cur = cur, 2.0 * nodes * cur - prev
            cheb.append(cur @ self.gh_weights)
        c = torch.stack(cheb, dim=-1)  # (K, rows, k+1)
        sep, k1 = self.separable, k + 1
        if sep:
            nu = torch.einsum("ctr,trb->ctb", q.probs[:, sep], self.cheb_grid[sep])  # E_c[T_b(x_t)]: (K, n_sep, k+1)
            merge = (nu @ self.merge_table).reshape(nu.shape[0], len(sep), k1, -1)  # [c, t, a, (j, e)]
            for t in range(len(sep)):
                parity = self.parity[t, rows]
                pairs = torch.bmm(c * parity, merge[:, t]) * self.alpha_cheb[t, rows][:, self.pair_e]
                c = (pairs @ self.segment) * parity
        table_b = self.merge_table.reshape(k1, k1, -1)  # [b, a, (j, e)]
        for u, table in enumerate(q.joint):
            # nu depends on the direction here: contract c with the merge table one b at a time.
            nu = self._joint_nu(table, u, rows)
            pairs = cast(torch.Tensor, sum(nu[..., b : b + 1] * (c @ table_b[b]) for b in range(k1)))
            c = (pairs * self.alpha_cheb[len(sep) + u, rows][:, self.pair_e]) @ self.segment
        return c[..., 1:]


def model_moments(
    params: MixtureParameters,
    layout: EncodingLayout,
    directions: np.ndarray,
    scales: np.ndarray,
    k: int,
) -> np.ndarray:
    """Exact moments m[j-1, l] of a numpy mixture (float64), same convention as ``moments.moment_sums``."""
    params.check(layout)
    evaluator = MomentEvaluator(layout, directions, scales, k, joint_pairs=params.joint_pairs)
    with torch.no_grad():
        return evaluator(TorchMixture.from_numpy(params, layout)).cpu().numpy()


# ---------------------------------------------------------------------------------------------------------------
# Bounded, differentiable parametrisation used by the fit.


@dataclass(frozen=True)
class Bounds:
    """Box for the Gaussian marginals: sd in [sd_min, sd_max] and |mean| + tail_sigmas * sd <= 1."""

    sd_min: float = 1e-3
    sd_max: float = 1.0
    tail_sigmas: float = 6.0

    def __post_init__(self) -> None:
        if not (0 < self.sd_min < self.sd_max) or self.tail_sigmas < 0:
            raise ValueError(f"invalid bounds {self}")

    @property
    def effective_sd_max(self) -> float:
        """The largest sd that still leaves ``tail_sigmas`` standard deviations of room around mean 0."""
        if self.tail_sigmas > 0:
            return min(self.sd_max, 0.999 / self.tail_sigmas)
        return self.sd_max


class MixtureModule(torch.nn.Module):
    """Unconstrained raw tensors -> a ``TorchMixture`` inside ``Bounds`` (always a valid mixture)."""

    level_mask: torch.Tensor  # a buffer (registered in __init__)

    def __init__(self, layout: EncodingLayout, K: int, R: int, bounds: Bounds = Bounds(),
                 device: str | torch.device = "cpu", joint_pairs: Sequence[tuple[int, int]] = ()) -> None:
        super().__init__()
        if K < 1 or R < 0:
            raise ValueError(f"need K >= 1 and R >= 0, got K={K}, R={R}")
        self.layout = layout
        self.bounds = bounds
        self.joint_pairs = tuple((int(a), int(b)) for a, b in joint_pairs)
        self.joint_positions = joint_positions(layout, self.joint_pairs)
        levels = [layout.coordinates[i].levels for i in layout.discrete_index]
        rmax = max(levels, default=1)
        mask = torch.zeros(len(levels), rmax, dtype=torch.bool)
        for t, r in enumerate(levels):
            mask[t, :r] = True
        self.register_buffer("level_mask", mask.to(device))
        n_cont = len(layout.continuous_index)
        z = lambda *s: torch.nn.Parameter(torch.zeros(*s, dtype=DTYPE, device=device))  # noqa: E731
        self.weight_logits = z(K)
        self.prob_logits = z(K, len(levels), rmax)
        self.mean_raw = z(K, n_cont)
        self.sd_raw = z(K, n_cont)
        self.corr_factors = z(K, n_cont, R)
        self.corr_diag_raw = z(K, n_cont)
        # A joint part's logits over its (levels_a * levels_b) cells; its coordinates' prob_logits go unused.
        self.joint_logits = torch.nn.ParameterList([z(K, levels[ta] * levels[tb]) for ta, tb in self.joint_positions])

    @property
    def K(self) -> int:
        return int(self.weight_logits.shape[0])

    def mean_and_sd(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Marginal means and sds of the continuous coordinates, mean first: |mean| + tail_sigmas * sd <= 1.

        The mean moves freely in (-m_max, m_max) and the sd's ceiling shrinks as it nears a bound, so a spike at
        a public bound (e.g. capital_gain = 0) is reachable without first shrinking the sd by hand.
        """
        lo, ts = self.bounds.sd_min, self.bounds.tail_sigmas
        means = (1.0 - ts * lo) * torch.tanh(self.mean_raw)
        room = 1.0 - torch.sqrt(means**2 + 1e-24)
        cap = torch.clamp(room / ts, max=self.bounds.sd_max) if ts > 0 else torch.full_like(means, self.bounds.sd_max)
        cap = torch.clamp(cap, min=lo)
        return means, lo + (cap - lo) * torch.sigmoid(self.sd_raw)

    def forward(self) -> TorchMixture:
        weights = torch.softmax(self.weight_logits, dim=0)
        logits = self.prob_logits.masked_fill(~self.level_mask, -torch.inf)
        probs = torch.softmax(logits, dim=-1)
        if probs.shape[1] == 0:
            probs = self.prob_logits * 0.0
        joint = []
        for (ta, tb), logits in zip(self.joint_positions, self.joint_logits):
            table = torch.softmax(logits, dim=-1).reshape(logits.shape[0], -1, int(self.level_mask[tb].sum()))
            pad = lambda m: torch.nn.functional.pad(m, (0, probs.shape[2] - m.shape[1]))  # noqa: E731, B023
            margins = torch.stack([pad(table.sum(2)), pad(table.sum(1))], dim=1)
            probs = probs.index_copy(1, torch.tensor([ta, tb], device=probs.device), margins)
            joint.append(table)
        means, sd = self.mean_and_sd()
        corr_diag = torch.nn.functional.softplus(self.corr_diag_raw) + 1e-4
        norm2 = (self.corr_factors**2).sum(-1) + corr_diag
        scale = sd / torch.sqrt(norm2)  # marginal variance of every coordinate is exactly sd^2
        factors = self.corr_factors * scale.unsqueeze(-1)
        diag = corr_diag * scale**2
        return TorchMixture(weights, probs, means, factors, diag, self.joint_pairs, tuple(joint))

    def tail_mass(self) -> torch.Tensor:
        """sum_c pi_c sum_i P_c(|x_i| > 1) over the continuous coordinates (a scalar)."""
        weights = torch.softmax(self.weight_logits, dim=0)
        means, sd = self.mean_and_sd()
        if means.shape[1] == 0:
            return weights.sum() * 0.0
        out = torch.special.ndtr((-1.0 - means) / sd) + torch.special.ndtr((means - 1.0) / sd)
        return (weights * out.sum(-1)).sum()

    @torch.no_grad()
    def initialise(
        self,
        weights: np.ndarray,
        probs: np.ndarray,
        means: np.ndarray,
        sds: np.ndarray,
        corr_factors: np.ndarray,
        corr_diag: np.ndarray,
        joint: Sequence[np.ndarray] = (),
    ) -> None:
        """Set raw tensors from target natural values (clipped into the bounds); ``joint`` as (K, r_a, r_b) tables,
        one per joint pair (default: the product of the pair's ``probs``)."""
        dev = self.weight_logits.device
        t = lambda a: torch.as_tensor(np.asarray(a, dtype=np.float64), dtype=DTYPE, device=dev)  # noqa: E731
        self.weight_logits.copy_(t(np.log(np.clip(weights, 1e-6, None))))
        self.prob_logits.copy_(t(np.log(np.clip(probs, 1e-6, None))))
        lo, ts = self.bounds.sd_min, self.bounds.tail_sigmas
        m_max = 1.0 - ts * lo
        self.mean_raw.copy_(t(np.arctanh(np.clip(means / m_max, -0.999, 0.999))))
        mean = m_max * np.tanh(self.mean_raw.detach().cpu().numpy())
        cap = np.clip((1.0 - np.abs(mean)) / ts if ts > 0 else self.bounds.sd_max, lo, self.bounds.sd_max)
        frac = np.clip((sds - lo) / np.maximum(cap - lo, 1e-12), 1e-4, 1 - 1e-4)
        self.sd_raw.copy_(t(np.log(frac / (1 - frac))))
        self.corr_factors.copy_(t(corr_factors))
        d = np.clip(corr_diag - 1e-4, 1e-4, None)
        self.corr_diag_raw.copy_(t(np.log(np.expm1(d))))
        for u, ((ta, tb), logits) in enumerate(zip(self.joint_positions, self.joint_logits)):
            ra, rb = int(self.level_mask[ta].sum()), int(self.level_mask[tb].sum())
            table = joint[u] if len(joint) else probs[:, ta, :ra, None] * probs[:, tb, None, :rb]
            logits.copy_(t(np.log(np.clip(np.asarray(table).reshape(logits.shape), 1e-12, None))))


# ---------------------------------------------------------------------------------------------------------------
# 1-way and 2-way marginals of the model (the second and third query families).


class MarginalEvaluator:
    """Exact 1-way cell probabilities of q for every coordinate, in ``moments.marginal_sizes`` order.

    Discrete coordinate: sum_c pi_c p_c. Binned coordinate: the same, its levels summed in runs of
    levels / numeric_bins (a model bin lies inside one measured bin). Continuous coordinate:
    sum_c pi_c P(N(mu_ci, sd_ci^2) in bin); the two edge bins are open-ended because sampling clips to [-1, 1].
    Differentiable; cost O(K * cells).
    """

    def __init__(self, layout: EncodingLayout, numeric_bins: int, device: str | torch.device = "cpu") -> None:
        self.layout = layout
        self.device = torch.device(device)
        self.numeric_bins = numeric_bins
        # Inner edges only: the open edge bins come from padding the CDF with exact 0 and 1 (an infinite edge
        # would give 0 * inf = NaN gradients).
        self.edges = -1.0 + 2.0 * torch.arange(1, numeric_bins, dtype=DTYPE, device=self.device) / numeric_bins
        # Where each coordinate's block of measured cells comes from: ("discrete", t, levels), ("binned", t, bins)
        # or ("continuous", position, bins).
        disc = {int(i): t for t, i in enumerate(layout.discrete_index)}
        cont = {int(i): t for t, i in enumerate(layout.continuous_index)}
        for c in layout.coordinates:
            if c.is_binned and c.levels % numeric_bins:
                raise ValueError(
                    f"column {c.column!r}: {c.levels} model bins do not refine the {numeric_bins} measured bins"
                )
        self.blocks = [
            ("binned" if c.is_binned else "discrete", disc[i], numeric_bins if c.is_binned else c.levels)
            if c.is_discrete else ("continuous", cont[i], numeric_bins)
            for i, c in enumerate(layout.coordinates)
        ]
        self.levels = {t: layout.coordinates[i].levels for i, t in disc.items()}

    def component_cells(self, q: TorchMixture) -> torch.Tensor:
        """(K, B) cell probabilities of every coordinate within each component, in ``marginal_sizes`` order."""
        parts = []
        if q.means.shape[1]:
            sd = torch.sqrt(q.diag + (q.factors**2).sum(-1))  # (K, n_cont)
            inner = torch.special.ndtr((self.edges.view(1, 1, -1) - q.means.unsqueeze(-1)) / sd.unsqueeze(-1))
            cdf = torch.nn.functional.pad(inner, (1, 0), value=0.0)
            cdf = torch.nn.functional.pad(cdf, (0, 1), value=1.0)
            cont_cells = cdf[..., 1:] - cdf[..., :-1]  # (K, n_cont, bins)
        for kind, t, size in self.blocks:
            if kind == "discrete":
                parts.append(q.probs[:, t, :size])
            elif kind == "binned":
                parts.append(q.probs[:, t, : self.levels[t]].reshape(-1, size, self.levels[t] // size).sum(-1))
            else:
                parts.append(cont_cells[:, t])
        if not parts:
            return torch.zeros((q.weights.shape[0], 0), dtype=DTYPE, device=self.device)
        return torch.cat(parts, dim=1)

    def __call__(self, q: TorchMixture) -> torch.Tensor:
        return q.weights @ self.component_cells(q)


class PairEvaluator:
    """Exact 2-way cell probabilities of q for the given coordinate pairs, in ``moments.pair_counts`` order.

    Within a component coordinates are independent, so the (a, b) table is sum_c pi_c p_ca p_cb^T: one weighted
    Gram matrix of the per-component 1-way cells, read at each pair's block. A pair that is one of the mixture's
    joint parts reads sum_c pi_c P_c(a, b) instead. Cost O(K B^2), independent of n.
    """

    def __init__(self, layout: EncodingLayout, numeric_bins: int, pairs: Sequence[tuple[int, int]],
                 device: str | torch.device = "cpu", joint_pairs: Sequence[tuple[int, int]] = ()) -> None:
        self.cells = MarginalEvaluator(layout, numeric_bins, device)
        sizes = [size for _, _, size in self.cells.blocks]
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        rows, cols = [], []
        for a, b in pairs:
            r, c = np.meshgrid(np.arange(sizes[a]) + offsets[a], np.arange(sizes[b]) + offsets[b], indexing="ij")
            rows.append(r.ravel())
            cols.append(c.ravel())
        self.rows, self.cols = (
            torch.as_tensor(np.concatenate(idx) if idx else np.zeros(0, np.int64), device=device)
            for idx in (rows, cols)
        )
        # Joint blocks: (joint part u, transposed?, measured sizes, levels) per pair that is a joint part.
        self.block_sizes = [sizes[a] * sizes[b] for a, b in pairs]
        self.joint_blocks = {}
        for u, pair in enumerate(joint_pairs):
            for block, (a, b) in enumerate(pairs):
                if {a, b} == set(pair):
                    ja, jb = pair
                    shape = (sizes[ja], layout.coordinates[ja].levels // sizes[ja],
                             sizes[jb], layout.coordinates[jb].levels // sizes[jb])
                    self.joint_blocks[block] = (u, a != ja, shape)

    def __call__(self, q: TorchMixture) -> torch.Tensor:
        p = self.cells.component_cells(q)
        gram = (p * q.weights.unsqueeze(1)).T @ p
        out = gram[self.rows, self.cols]
        if not self.joint_blocks:
            return out
        blocks = list(out.split(self.block_sizes))
        for block, (u, transposed, shape) in self.joint_blocks.items():
            table = q.joint[u].reshape(-1, *shape).sum((2, 4))  # model levels summed into measured bins
            table = torch.einsum("c,cij->ij", q.weights, table)
            blocks[block] = (table.T if transposed else table).reshape(-1)
        return torch.cat(blocks)
