"""Fused CPU kernels (numba) for the moment evaluator's fast path, each with a hand-written backward pass.

The fast path works on (components x directions) batches of short power series (k + 1 coefficients). In torch
each step of it is a few small ops on (K, L, k+1) tensors, and a training step ran ~190 of them plus their
backward (its cost: docs/decisions/0020). These kernels do the same arithmetic in one pass
per batch row:
  * ``DiscreteCentral`` / ``JointCentral``: each part's direction-free divided central moments
    M_m = sum_r p_r (g_r - gbar)^m / m! (a joint pair's mixed M[s, t]), with their absolute twins;
  * ``SeriesChain``: the Gaussian part's series times every other part's, one after another, as truncated power
    series (c_m = sum_q a_q b_(m-q)): a separable coordinate's w_(t,l)^m M_(c,t,m), a joint pair's
    sum_s w_a^s w_b^(m-s) J_(c,s,m-s);
  * ``TaylorExpectations``: E[T_j(mu + u)] = sum_p P_j[p] E[u^p] for j = 1..k, with P_j the Taylor coefficients
    of T_j at mu (the Chebyshev recurrence P_(j+1) = 2 (mu + u) P_j - P_(j-1)).
All take and return float64 CPU tensors; ``model.MomentEvaluator`` keeps the batched torch forms for other devices,
and the tests check both against each other and by gradcheck. No privacy role: these evaluate the model.
The innermost loops run over a contiguous axis of 1-d row views: numba vectorises those, not 2-d indexing.
"""

from __future__ import annotations

import numba
import numpy as np
import torch

# ---------------------------------------------------------------------------------------------------------------
# Every part's direction-free divided central moments (step 1 and 6 of ``model``), and their absolute twins.
# With gbar = sum_r p_r g_r, dM_m / dp_r = (g_r - gbar)^m / m! - g_r M_(m-1): the mean moves with p.


@numba.njit(cache=True, fastmath=True)
def _central_forward(probs: np.ndarray, grid: np.ndarray, inv_factorial: np.ndarray, central: np.ndarray,
                     abs_central: np.ndarray) -> None:
    """probs (K, T, r), grid (T, r): central[c, t, m] = sum_r p_r (g_r - gbar)^m / m!, abs_central with |.|^m."""
    K, T, R = probs.shape
    n = central.shape[2]
    central[:] = 0.0
    abs_central[:] = 0.0
    for c in range(K):
        for t in range(T):
            gbar = 0.0
            for r in range(R):
                gbar += probs[c, t, r] * grid[t, r]
            for r in range(R):
                d = grid[t, r] - gbar
                term = probs[c, t, r]
                for m in range(n):
                    central[c, t, m] += term * inv_factorial[m]
                    abs_central[c, t, m] += abs(term) * inv_factorial[m]
                    term *= d


@numba.njit(cache=True, fastmath=True)
def _central_backward(grad: np.ndarray, probs: np.ndarray, grid: np.ndarray, inv_factorial: np.ndarray,
                      central: np.ndarray, g_probs: np.ndarray) -> None:
    K, T, R = probs.shape
    n = central.shape[2]
    for c in range(K):
        for t in range(T):
            gbar = 0.0
            for r in range(R):
                gbar += probs[c, t, r] * grid[t, r]
            through_mean = 0.0
            for m in range(1, n):
                through_mean += grad[c, t, m] * central[c, t, m - 1]
            for r in range(R):
                d = grid[t, r] - gbar
                power, total = 1.0, 0.0
                for m in range(n):
                    total += grad[c, t, m] * power * inv_factorial[m]
                    power *= d
                g_probs[c, t, r] = total - grid[t, r] * through_mean


class DiscreteCentral(torch.autograd.Function):
    """(probs (K, T, r), grid (T, r) numpy, inv_factorial (n,) numpy) -> divided central moments (K, T, n) and their
    absolute twin (not differentiable)."""

    @staticmethod
    def forward(ctx, probs: torch.Tensor, grid: np.ndarray, inv_factorial: np.ndarray):
        probs_np = probs.detach().contiguous().numpy()
        central = np.empty((*probs.shape[:2], inv_factorial.shape[0]))
        abs_central = np.empty_like(central)
        _central_forward(probs_np, grid, inv_factorial, central, abs_central)
        ctx.arrays = probs_np, grid, inv_factorial, central
        abs_t = torch.from_numpy(abs_central)
        ctx.mark_non_differentiable(abs_t)
        return torch.from_numpy(central), abs_t

    @staticmethod
    def backward(ctx, grad: torch.Tensor, _grad_abs: torch.Tensor):
        probs, grid, inv_factorial, central = ctx.arrays
        g_probs = np.empty_like(probs)
        _central_backward(grad.detach().contiguous().numpy(), probs, grid, inv_factorial, central, g_probs)
        return torch.from_numpy(g_probs), None, None


@numba.njit(cache=True, fastmath=True)
def _divided_deviations(table: np.ndarray, grid_a: np.ndarray, grid_b: np.ndarray, inv_factorial: np.ndarray,
                        da: np.ndarray, db: np.ndarray) -> None:
    """da[i, s] = (g_i - gbar_a)^s / s! and db[j, t] likewise, the means from the (r_a, r_b) table."""
    ra, rb = table.shape
    n = inv_factorial.shape[0]
    mean_a, mean_b = 0.0, 0.0
    for i in range(ra):
        for j in range(rb):
            mean_a += table[i, j] * grid_a[i]
            mean_b += table[i, j] * grid_b[j]
    for i in range(ra):
        power = 1.0
        for m in range(n):
            da[i, m] = power * inv_factorial[m]
            power *= grid_a[i] - mean_a
    for j in range(rb):
        power = 1.0
        for m in range(n):
            db[j, m] = power * inv_factorial[m]
            power *= grid_b[j] - mean_b


@numba.njit(cache=True, fastmath=True)
def _mixed_forward(table: np.ndarray, grid_a: np.ndarray, grid_b: np.ndarray, inv_factorial: np.ndarray,
                   mixed: np.ndarray, abs_mixed: np.ndarray) -> None:
    """table (K, r_a, r_b): mixed[c] = da^T p db, i.e. sum_ij p_ij (g_i - gbar_a)^s (g_j - gbar_b)^t / (s! t!)."""
    K, ra, rb = table.shape
    n = inv_factorial.shape[0]
    da, db = np.empty((ra, n)), np.empty((rb, n))
    for c in range(K):
        _divided_deviations(table[c], grid_a, grid_b, inv_factorial, da, db)
        p = np.ascontiguousarray(table[c])
        mixed[c] = np.dot(np.ascontiguousarray(da.T), np.dot(p, db))
        abs_mixed[c] = np.dot(np.ascontiguousarray(np.abs(da).T), np.dot(p, np.abs(db)))


@numba.njit(cache=True, fastmath=True)
def _mixed_backward(grad: np.ndarray, table: np.ndarray, grid_a: np.ndarray, grid_b: np.ndarray,
                    inv_factorial: np.ndarray, mixed: np.ndarray, g_table: np.ndarray) -> None:
    """dM[s, t] / dp_ij = da[i, s] db[j, t] - g_i M[s - 1, t] - g_j M[s, t - 1]."""
    K, ra, rb = table.shape
    n = inv_factorial.shape[0]
    da, db = np.empty((ra, n)), np.empty((rb, n))
    for c in range(K):
        _divided_deviations(table[c], grid_a, grid_b, inv_factorial, da, db)
        g = np.ascontiguousarray(grad[c])
        through_a = np.sum(g[1:, :] * mixed[c, :-1, :])
        through_b = np.sum(g[:, 1:] * mixed[c, :, :-1])
        direct = np.dot(np.dot(da, g), np.ascontiguousarray(db.T))
        for i in range(ra):
            for j in range(rb):
                g_table[c, i, j] = direct[i, j] - grid_a[i] * through_a - grid_b[j] * through_b


class JointCentral(torch.autograd.Function):
    """(table (K, r_a, r_b), grid_a, grid_b, inv_factorial numpy) -> the pair's divided mixed central moments
    (K, n, n) and their absolute twin (not differentiable)."""

    @staticmethod
    def forward(ctx, table: torch.Tensor, grid_a: np.ndarray, grid_b: np.ndarray,
                inv_factorial: np.ndarray):
        table_np = table.detach().contiguous().numpy()
        n = inv_factorial.shape[0]
        mixed, abs_mixed = np.empty((table.shape[0], n, n)), np.empty((table.shape[0], n, n))
        _mixed_forward(table_np, grid_a, grid_b, inv_factorial, mixed, abs_mixed)
        ctx.arrays = table_np, grid_a, grid_b, inv_factorial, mixed
        abs_t = torch.from_numpy(abs_mixed)
        ctx.mark_non_differentiable(abs_t)
        return torch.from_numpy(mixed), abs_t

    @staticmethod
    def backward(ctx, grad: torch.Tensor, _grad_abs: torch.Tensor):
        table, grid_a, grid_b, inv_factorial, mixed = ctx.arrays
        g_table = np.empty_like(table)
        _mixed_backward(grad.detach().contiguous().numpy(), table, grid_a, grid_b, inv_factorial, mixed, g_table)
        return torch.from_numpy(g_table), None, None, None


# ---------------------------------------------------------------------------------------------------------------
# The chain of parts: acc_(t+1)[c, l] = acc_t[c, l] * b_t[c, l] as truncated series, where a separable coordinate's
# series is b[m] = w^m M[c, t, m] and a joint pair's is b[m] = sum_(s <= m) w_a^s w_b^(m-s) J[c, u, s, m - s].
# Arrays put the direction axis last, and the innermost loops run over 1-d row views of contiguous directions
# (2-2.5x faster than 2-d indexing: they vectorise). The direction constants per part are (k+1, L) powers, small
# enough to stay in cache across components.


@numba.njit(cache=True, fastmath=True)
def _part_series(c: int, t: int, central: np.ndarray, wpow: np.ndarray, mixed: np.ndarray, joint_pow: np.ndarray,
                 b: np.ndarray) -> None:
    """Part t's divided central moments b[m, l] for component c in every direction."""
    n, L = b.shape
    T = central.shape[1]
    if t < T:
        for m in range(n):
            for l in range(L):
                b[m, l] = wpow[t, m, l] * central[c, t, m]
        return
    u = t - T
    b[:] = 0.0
    for s in range(n):
        wa = joint_pow[u, 0, s]
        for r in range(n - s):
            coefficient, wb, out = mixed[c, u, s, r], joint_pow[u, 1, r], b[s + r]
            for l in range(L):
                out[l] += wa[l] * wb[l] * coefficient


@numba.njit(cache=True, fastmath=True)
def _chain_forward(acc0: np.ndarray, central: np.ndarray, wpow: np.ndarray, mixed: np.ndarray, joint_pow: np.ndarray,
                   steps: np.ndarray) -> None:
    """acc0 (K, n, L); separable parts central (K, T, n), wpow (T, n, L) = w^m; joint parts mixed (K, U, n, n),
    joint_pow (U, 2, n, L) = w_a^m, w_b^m. steps (T + U + 1, K, n, L) receives every partial product."""
    K, n, L = acc0.shape
    parts = central.shape[1] + mixed.shape[1]
    b, product = np.empty((n, L)), np.empty((n, L))
    steps[0] = acc0
    for c in range(K):
        for t in range(parts):
            _part_series(c, t, central, wpow, mixed, joint_pow, b)
            acc = steps[t, c]
            product[:] = 0.0
            for q in range(n):
                a = acc[q]
                for s in range(n - q):
                    part, out = b[s], product[q + s]
                    for l in range(L):
                        out[l] += a[l] * part[l]
            steps[t + 1, c] = product


@numba.njit(cache=True, fastmath=True)
def _chain_backward(grad: np.ndarray, central: np.ndarray, wpow: np.ndarray, mixed: np.ndarray,
                    joint_pow: np.ndarray, steps: np.ndarray, g_acc0: np.ndarray, g_central: np.ndarray,
                    g_mixed: np.ndarray) -> None:
    K, n, L = grad.shape
    T = central.shape[1]
    parts = T + mixed.shape[1]
    b, g, g_prev, g_b = np.empty((n, L)), np.empty((n, L)), np.empty((n, L)), np.empty((n, L))
    for c in range(K):
        g[:] = grad[c]
        for t in range(parts - 1, -1, -1):
            _part_series(c, t, central, wpow, mixed, joint_pow, b)
            acc = steps[t, c]
            g_prev[:] = 0.0
            g_b[:] = 0.0
            for q in range(n):
                to_acc = g_prev[q]
                for m in range(q, n):
                    gm, part = g[m], b[m - q]
                    for l in range(L):
                        to_acc[l] += gm[l] * part[l]
            for q in range(n):
                to_b = g_b[q]
                for m in range(q, n):
                    gm, before = g[m], acc[m - q]
                    for l in range(L):
                        to_b[l] += gm[l] * before[l]
            if t < T:
                for s in range(n):
                    total = 0.0
                    for l in range(L):
                        total += wpow[t, s, l] * g_b[s, l]
                    g_central[c, t, s] = total
            else:
                u = t - T
                g_mixed[c, u] = 0.0
                for s in range(n):
                    wa = joint_pow[u, 0, s]
                    for r in range(n - s):
                        wb, gm = joint_pow[u, 1, r], g_b[s + r]
                        total = 0.0
                        for l in range(L):
                            total += gm[l] * wa[l] * wb[l]
                        g_mixed[c, u, s, r] = total
            g[:] = g_prev
        g_acc0[c] = g


def chain_powers(w_sep: np.ndarray, w_joint: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The chain's direction constants from w (L, T) and the joint pairs' (w_a, w_b) (U, 2, L): wpow (T, k+1, L)
    = w^m and joint_pow (U, 2, k+1, L) = w_a^m, w_b^m."""
    orders = np.arange(k + 1)[:, None]
    return (np.ascontiguousarray(w_sep.T[:, None, :] ** orders),
            np.ascontiguousarray(w_joint[:, :, None, :] ** orders))


def _direction_last(t: torch.Tensor) -> np.ndarray:
    return np.ascontiguousarray(t.detach().numpy().transpose(0, 2, 1))


def _chain_steps(acc0: torch.Tensor, central: np.ndarray, wpow: np.ndarray, mixed: np.ndarray,
                 joint_pow: np.ndarray) -> np.ndarray:
    steps = np.empty((central.shape[1] + mixed.shape[1] + 1, acc0.shape[0], acc0.shape[2], acc0.shape[1]))
    _chain_forward(_direction_last(acc0), central, wpow, mixed, joint_pow, steps)
    return steps


def series_chain_values(acc0: torch.Tensor, central: torch.Tensor, mixed: torch.Tensor, wpow: np.ndarray,
                        joint_pow: np.ndarray) -> torch.Tensor:
    """The chain without gradients (the absolute chain of the rounding estimate): (K, L, n)."""
    steps = _chain_steps(acc0, central.detach().contiguous().numpy(), wpow, mixed.detach().contiguous().numpy(),
                         joint_pow)
    return torch.from_numpy(steps[-1].transpose(0, 2, 1).copy())


class SeriesChain(torch.autograd.Function):
    """acc0 (K, L, n) times every part's series in order: the separable coordinates' w_(t,l)^m M[c, t, m], then the
    joint pairs' sum_s w_a^s w_b^(m-s) J[c, u, s, m - s]. Returns (K, L, n).

    ``acc0``, ``central`` (K, T, n) and ``mixed`` (K, U, n, n) are differentiable; ``wpow`` and ``joint_pow`` are
    the numpy constants of ``chain_powers``. Every partial product is kept for the backward pass ((T + U + 1) K L n
    doubles: 17 MB at K = 20, L = 256, 24 parts, k = 16).
    """

    @staticmethod
    def forward(ctx, acc0: torch.Tensor, central: torch.Tensor, mixed: torch.Tensor, wpow: np.ndarray,
                joint_pow: np.ndarray) -> torch.Tensor:
        central_np, mixed_np = central.detach().contiguous().numpy(), mixed.detach().contiguous().numpy()
        steps = _chain_steps(acc0, central_np, wpow, mixed_np, joint_pow)
        ctx.arrays, ctx.steps = (central_np, wpow, mixed_np, joint_pow), steps
        return torch.from_numpy(steps[-1].transpose(0, 2, 1).copy())

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        central, wpow, mixed, joint_pow = ctx.arrays
        steps = ctx.steps
        g_acc0, g_central, g_mixed = np.empty(steps.shape[1:]), np.empty(central.shape), np.empty(mixed.shape)
        _chain_backward(_direction_last(grad), central, wpow, mixed, joint_pow, steps, g_acc0, g_central, g_mixed)
        return (torch.from_numpy(g_acc0.transpose(0, 2, 1).copy()), torch.from_numpy(g_central),
                torch.from_numpy(g_mixed), None, None)


# ---------------------------------------------------------------------------------------------------------------
# E[T_j(mu + u)] from central moments, j = 1..k. Rows last again (the innermost loops run over rows).


@numba.njit(cache=True, fastmath=True)
def _taylor_step(j: int, mu: np.ndarray, prev: np.ndarray, cur: np.ndarray, nxt: np.ndarray) -> None:
    """P_(j+1)[p] = 2 P_j[p - 1] + 2 mu P_j[p] - P_(j-1)[p], p <= j + 1 (entries above a degree stay 0)."""
    N = mu.shape[0]
    out, here, before = nxt[0], cur[0], prev[0]
    for i in range(N):
        out[i] = 2.0 * mu[i] * here[i] - before[i]
    for p in range(1, j + 2):
        out, lower, here, before = nxt[p], cur[p - 1], cur[p], prev[p]
        for i in range(N):
            out[i] = 2.0 * lower[i] + 2.0 * mu[i] * here[i] - before[i]


@numba.njit(cache=True, fastmath=True)
def _taylor_forward(mu: np.ndarray, central: np.ndarray, moments: np.ndarray, last: np.ndarray) -> None:
    """mu (N,), central (n, N) = E[u^p]; moments (n - 1, N) = E[T_j], j = 1..k; last (2, n, N) = P_(k-1), P_k."""
    n, N = central.shape
    P = np.zeros((3, n, N))  # P_j in P[j % 3]
    P[0, 0] = 1.0
    P[1, 0] = mu
    P[1, 1] = 1.0
    first = moments[0]
    for i in range(N):
        first[i] = mu[i] * central[0, i] + central[1, i]
    for j in range(1, n - 1):
        nxt = P[(j + 1) % 3]
        _taylor_step(j, mu, P[(j - 1) % 3], P[j % 3], nxt)
        out = moments[j]
        out[:] = 0.0
        for p in range(j + 2):
            coefficient, moment = nxt[p], central[p]
            for i in range(N):
                out[i] += coefficient[i] * moment[i]
    last[0] = P[(n - 2) % 3]
    last[1] = P[(n - 1) % 3]


@numba.njit(cache=True, fastmath=True)
def _taylor_backward(grad: np.ndarray, mu: np.ndarray, central: np.ndarray, g_mu: np.ndarray,
                     g_central: np.ndarray) -> None:
    """d/dmu P_j[p] = (p + 1) P_j[p + 1] (P_j[p] = T_j^(p)(mu) / p!), so
    dE[T_j]/dmu = sum_p E[u^p] (p + 1) P_j[p + 1]."""
    n, N = central.shape
    P = np.zeros((3, n, N))
    P[0, 0] = 1.0
    P[1, 0] = mu
    P[1, 1] = 1.0
    g_central[:] = 0.0
    g = grad[0]
    for i in range(N):
        g_central[0, i] = g[i] * mu[i]
        g_central[1, i] = g[i]
        g_mu[i] = g[i] * central[0, i]
    for j in range(1, n - 1):
        nxt = P[(j + 1) % 3]
        _taylor_step(j, mu, P[(j - 1) % 3], P[j % 3], nxt)
        g = grad[j]
        for p in range(j + 2):
            to_central, coefficient = g_central[p], nxt[p]
            for i in range(N):
                to_central[i] += g[i] * coefficient[i]
        for p in range(j + 1):
            moment, higher, order = central[p], nxt[p + 1], p + 1.0
            for i in range(N):
                g_mu[i] += order * g[i] * moment[i] * higher[i]


def _rows_last(t: torch.Tensor) -> np.ndarray:
    """(..., n) -> a C-contiguous (n, rows) float64 array."""
    return np.ascontiguousarray(t.detach().reshape(-1, t.shape[-1]).numpy().T)


class TaylorExpectations(torch.autograd.Function):
    """(mu (...), central (..., k+1)) -> (E[T_j(mu + u)] (..., k), P_(k-1) and P_k (..., 2, k+1), not
    differentiable)."""

    @staticmethod
    def forward(ctx, mu: torch.Tensor, central: torch.Tensor):
        rows_mu, rows_central = mu.detach().reshape(-1).contiguous().numpy(), _rows_last(central)
        ctx.arrays = rows_mu, rows_central
        n, N = rows_central.shape
        moments, last = np.empty((n - 1, N)), np.empty((2, n, N))
        _taylor_forward(rows_mu, rows_central, moments, last)
        last_t = torch.from_numpy(last.transpose(2, 0, 1).copy()).reshape(*central.shape[:-1], 2, n)
        ctx.mark_non_differentiable(last_t)
        return torch.from_numpy(moments.T.copy()).reshape(*central.shape[:-1], n - 1), last_t

    @staticmethod
    def backward(ctx, grad: torch.Tensor, _grad_last: torch.Tensor):
        rows_mu, rows_central = ctx.arrays
        g_mu, g_central = np.empty_like(rows_mu), np.empty_like(rows_central)
        _taylor_backward(_rows_last(grad), rows_mu, rows_central, g_mu, g_central)
        shape = grad.shape[:-1]
        return torch.from_numpy(g_mu).reshape(shape), torch.from_numpy(g_central.T.copy()).reshape(*shape, -1)
