"""Sliced Chebyshev moments of encoded rows: directions from a public seed, chunked exact sums.

The per-row statistic is ``T_j(clamp(theta_l^T x / s_l))`` for j = 1..k, l = 1..L, where ``s_l`` is the public
scale of direction l (sqrt(d) in "ball" mode, ||theta_l||_1 in "l1" mode). The projection is clamped to
[-1, 1] before the recurrence and every T_j value is clamped to [-1, 1] after it, so each row contributes
at most 1 in absolute value to every sum whatever floating-point rounding does.

Sums are kept in fixed point (int64, 32 fractional bits): each row's value is rounded once to the grid, then
summed exactly. Exact integer sums make the sensitivity argument independent of summation order and let
``MomentSums`` from disjoint chunks or workers add up to exactly the one-shot result (n < 2^31 rows).

The second query family is every coordinate's 1-way histogram (grid levels of discrete coordinates, equal-width
public bins of continuous ones): exact integer counts, each row adding 1 to one cell per coordinate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .encoding import EncodingLayout, ScalingMode, unit_ball_scale

DEFAULT_CHUNK_ROWS = 1024  # (chunk, L) float64 buffers stay cache-sized; measured ~2x faster than 8192
FRACTION_BITS = 32
_FIXED_ONE = float(2**FRACTION_BITS)
MAX_ROWS = 2**31 - 1


def draw_directions(seed: int, n_directions: int, d: int) -> np.ndarray:
    """L unit directions uniform on S^(d-1), from the recorded *public* seed (never the noise source)."""
    if n_directions < 1:
        raise ValueError(f"number of directions L must be >= 1, got {n_directions!r}")
    if d < 1:
        raise ValueError(f"dimension d must be >= 1, got {d!r}")
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x5D1EC7]))
    g = rng.standard_normal((n_directions, d))
    norms = np.linalg.norm(g, axis=1, keepdims=True)
    # A zero draw has probability 0; guard anyway so the map is total.
    g[norms[:, 0] == 0.0, 0] = 1.0
    return g / np.linalg.norm(g, axis=1, keepdims=True)


def direction_scales(directions: np.ndarray, mode: ScalingMode) -> np.ndarray:
    """Public per-direction divisor s_l with |theta_l^T x| / s_l <= 1 for every x in [-1, 1]^d."""
    if mode == "ball":
        return np.full(directions.shape[0], unit_ball_scale(directions.shape[1]))
    if mode == "l1":
        return np.abs(directions).sum(axis=1)
    raise ValueError(f"scaling mode must be 'ball' or 'l1', got {mode!r}")


def chebyshev_values(z: np.ndarray, k: int) -> np.ndarray:
    """T_1..T_k at z (any shape) -> array (k, *z.shape), with z clamped and values clamped to [-1, 1]."""
    z = np.clip(z, -1.0, 1.0)
    out = np.empty((k, *z.shape))
    prev, cur = np.ones_like(z), z
    for j in range(k):
        out[j] = cur
        prev, cur = cur, 2.0 * z * cur - prev
    return np.clip(out, -1.0, 1.0, out=out)


@dataclass(frozen=True)
class MomentSums:
    """Exact fixed-point sums S[j-1, l] = sum_i round(2^32 T_j(z_il)) over a set of rows (int64), and the row count."""

    sums: np.ndarray
    rows: int

    def __add__(self, other: "MomentSums") -> "MomentSums":
        if self.sums.shape != other.sums.shape:
            raise ValueError(f"cannot add moment sums of shapes {self.sums.shape} and {other.sums.shape}")
        return MomentSums(self.sums + other.sums, self.rows + other.rows)

    def moments(self, n: int) -> np.ndarray:
        """Divide by the *public* n (replace-one neighbours), giving m[j-1, l] in [-1, 1]."""
        return self.sums / (_FIXED_ONE * n)


def moment_sums(
    x: np.ndarray,
    directions: np.ndarray,
    k: int,
    mode: ScalingMode = "ball",
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
) -> MomentSums:
    """Chebyshev sums of cube-encoded rows ``x`` (n, d) over ``directions`` (L, d).

    Memory is O(chunk_rows * L + k * L): per chunk one GEMM, then the recurrence accumulates each T_j
    straight into the running sum, so no (n, L, k) or (chunk, L, k) array is ever built.
    """
    if k < 1:
        raise ValueError(f"moment order k must be >= 1, got {k!r}")
    if not 1 <= chunk_rows <= 2**20:
        raise ValueError(f"chunk_rows must be in [1, 2^20] for exact float sums, got {chunk_rows!r}")
    if x.ndim != 2 or x.shape[1] != directions.shape[1]:
        raise ValueError(f"rows have shape {x.shape} but directions have dimension {directions.shape[1]}")
    n_dirs = directions.shape[0]
    scaled_dirs = (directions / direction_scales(directions, mode)[:, None]).T.copy()
    if len(x) > MAX_ROWS:
        raise ValueError(f"at most {MAX_ROWS} rows fit the fixed-point sums, got {len(x)}")
    total = np.zeros((k, n_dirs), dtype=np.int64)
    rows = min(chunk_rows, max(len(x), 1))
    buffers = [np.empty((rows, n_dirs)) for _ in range(4)]
    for start in range(0, len(x), chunk_rows):
        block = np.asarray(x[start : start + chunk_rows], dtype=np.float64)
        two_z, prev, cur, scratch = (b[: len(block)] for b in buffers)
        np.matmul(block, scaled_dirs, out=cur)
        np.clip(cur, -1.0, 1.0, out=cur)  # T_1 = z, clamped before the recurrence
        np.multiply(cur, 2.0, out=two_z)
        prev.fill(1.0)  # T_0
        for j in range(k):
            np.clip(cur, -1.0, 1.0, out=scratch)
            scratch *= _FIXED_ONE
            np.rint(scratch, out=scratch)
            # The column sums of integers |v| <= 2^32 over <= 2^20 rows are exact in float64.
            total[j] += scratch.sum(axis=0).astype(np.int64)
            if j + 1 < k:
                np.multiply(two_z, cur, out=scratch)
                scratch -= prev  # T_{j+1} = 2 z T_j - T_{j-1}
                prev, cur, scratch = cur, scratch, prev
    return MomentSums(total, len(x))


def harmonic(k: int) -> float:
    return math.fsum(1.0 / j for j in range(1, k + 1))


# --- 1-way marginal queries -----------------------------------------------------------------------------------

DEFAULT_NUMERIC_BINS = 16


def marginal_sizes(layout: EncodingLayout, numeric_bins: int = DEFAULT_NUMERIC_BINS) -> tuple[int, ...]:
    """Number of cells of each coordinate's 1-way histogram: its grid levels, or equal-width public bins."""
    if numeric_bins < 1:
        raise ValueError(f"numeric_bins must be >= 1, got {numeric_bins!r}")
    return tuple(c.levels if c.is_discrete else numeric_bins for c in layout.coordinates)


def marginal_cells(x: np.ndarray, layout: EncodingLayout, numeric_bins: int = DEFAULT_NUMERIC_BINS) -> np.ndarray:
    """(n, d) cell index of every coordinate: nearest grid level, or the equal-width bin of [-1, 1]."""
    cells = np.empty(x.shape, dtype=np.int64)
    clipped = np.clip(np.nan_to_num(x, nan=0.0), -1.0, 1.0)
    for i, coord in enumerate(layout.coordinates):
        bins = coord.levels if coord.is_discrete else numeric_bins
        if coord.is_discrete:
            cells[:, i] = np.rint((clipped[:, i] + 1.0) * (bins - 1) / 2.0) if bins > 1 else 0
        else:
            cells[:, i] = np.minimum(np.floor((clipped[:, i] + 1.0) * bins / 2.0), bins - 1)
    return cells


@dataclass(frozen=True)
class MarginalCounts:
    """Exact integer counts of every coordinate's 1-way histogram, concatenated; partial counts add up."""

    counts: np.ndarray
    rows: int

    def __add__(self, other: "MarginalCounts") -> "MarginalCounts":
        if self.counts.shape != other.counts.shape:
            raise ValueError(f"cannot add marginal counts of shapes {self.counts.shape} and {other.counts.shape}")
        return MarginalCounts(self.counts + other.counts, self.rows + other.rows)

    def frequencies(self, n: int) -> np.ndarray:
        """Divide by the *public* n: each coordinate's block sums to 1."""
        return self.counts / n


def marginal_counts(
    x: np.ndarray, layout: EncodingLayout, numeric_bins: int = DEFAULT_NUMERIC_BINS, chunk_rows: int = 65536
) -> MarginalCounts:
    """Counts of cube-encoded rows per coordinate cell. Each row adds exactly 1 to one cell per coordinate."""
    sizes = marginal_sizes(layout, numeric_bins)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    total = np.zeros(int(sum(sizes)), dtype=np.int64)
    for start in range(0, len(x), chunk_rows):
        cells = marginal_cells(np.asarray(x[start : start + chunk_rows], dtype=np.float64), layout, numeric_bins)
        total += np.bincount((cells + offsets).ravel(), minlength=total.size)
    return MarginalCounts(total, len(x))
