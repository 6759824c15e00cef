"""PRIVATE exact statistics of cube-encoded rows: sliced Chebyshev moment sums, 1-way and 2-way counts.

The per-row statistic is ``T_j(clamp(theta_l^T x / s_l))`` for j = 1..k, l = 1..L, where ``s_l`` is the public
scale of direction l (sqrt(d) in "ball" mode, ||theta_l||_1 in "l1" mode). The projection is clamped to
[-1, 1] before the recurrence and every T_j value is clamped to [-1, 1] after it, so each row contributes
at most 1 in absolute value to every sum whatever floating-point rounding does.

Sums are kept in fixed point (int64, 32 fractional bits): each row's value is rounded once to the grid, then
summed exactly. Exact integer sums make the sensitivity argument independent of summation order and let
``MomentSums`` from disjoint chunks or workers add up to exactly the one-shot result (n < 2^31 rows).
Per chunk of rows one BLAS GEMM gives the projections; a fused numba kernel then runs the clamp, recurrence,
rounding and int64 accumulation in one pass (compiled once, cached on disk with ``cache=True``).

The 1-way counts add 1 per row to one cell of every coordinate's histogram, the 2-way counts 1 per row to one
cell of every pair's table (cells: ``layout.marginal_cells``), the fine counts 1 per row with a value to one cell
of every numeric column's fine table (cells: ``fine_cells.FineCells``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numba
import numpy as np

from splice_assets.defaults import MAX_ROWS as MAX_ROWS
from splice_assets.fine_cells import FineCells
from splice_assets.layout import (
    DEFAULT_NUMERIC_BINS,
    EncodingLayout,
    ScalingMode,
    direction_scales,
    marginal_cells,
    marginal_sizes,
    pair_sizes,
    triple_cell_index,
    triple_sizes,
)

DEFAULT_CHUNK_ROWS = 1024  # the (chunk, L) float64 GEMM output stays cache-sized


FRACTION_BITS = 32


_FIXED_ONE = float(2**FRACTION_BITS)



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

    def __add__(self, other: MomentSums) -> MomentSums:
        if self.sums.shape != other.sums.shape:
            raise ValueError(f"cannot add moment sums of shapes {self.sums.shape} and {other.sums.shape}")
        return MomentSums(self.sums + other.sums, self.rows + other.rows)

    def moments(self, n: int) -> np.ndarray:
        """Divide by the *public* n (replace-one neighbours), giving m[j-1, l] in [-1, 1]; n = 1 gives the sums
        (add-remove, where n is private)."""
        return self.sums / (_FIXED_ONE * n)


@numba.njit(cache=True, fastmath=False)
def _accumulate_chebyshev(proj: np.ndarray, k: int, total: np.ndarray) -> bool:
    """total[j-1, l] += round(2^32 T_j(clamp(proj[i, l]))) over rows i; False if some projection is NaN.

    The float operations and their order are those of a plain numpy evaluation (np.clip, 2 z T_j - T_{j-1},
    np.rint); fastmath stays off so LLVM cannot contract to FMA or reorder, and tests/test_moment_kernel.py
    checks bit-equality with numpy. The inner loops run over contiguous directions so LLVM vectorises them.
    """
    rows, n_dirs = proj.shape
    two_z = np.empty(n_dirs)
    prev = np.empty(n_dirs)
    cur = np.empty(n_dirs)
    finite = True
    for i in range(rows):
        for l in range(n_dirs):
            p = proj[i, l]
            finite &= not math.isnan(p)  # a NaN would survive the clamps and round to garbage: report it instead
            z = min(max(p, -1.0), 1.0)  # T_1 = z, clamped before the recurrence
            two_z[l] = z * 2.0
            prev[l] = 1.0  # T_0
            cur[l] = z
        for j in range(k):
            for l in range(n_dirs):
                c = cur[l]
                # np.rint rounds half to even; |value| <= 2^32, so the int64 sum over < 2^31 rows is exact.
                total[j, l] += np.int64(np.rint(min(max(c, -1.0), 1.0) * _FIXED_ONE))
                nxt = two_z[l] * c - prev[l]  # T_{j+1} = 2 z T_j - T_{j-1}
                prev[l] = c
                cur[l] = nxt
    return finite


def moment_sums(
    x: np.ndarray,
    directions: np.ndarray,
    k: int,
    mode: ScalingMode = "ball",
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
) -> MomentSums:
    """Chebyshev sums of cube-encoded rows ``x`` (n, d) over ``directions`` (L, d).

    Memory is O(chunk_rows * L + k * L): per chunk one GEMM, then the kernel accumulates each T_j straight
    into the running int64 sum, so no (n, L, k) or (chunk, L, k) array is ever built. Rows whose projection is
    NaN (non-finite input) raise ValueError: they would break the per-row bound.
    """
    if k < 1:
        raise ValueError(f"moment order k must be >= 1, got {k!r}")
    if not 1 <= chunk_rows <= 2**20:
        raise ValueError(f"chunk_rows must be in [1, 2^20], got {chunk_rows!r}")
    if x.ndim != 2 or x.shape[1] != directions.shape[1]:
        # Neither message quotes the row count: it is private under add-remove.
        raise ValueError(f"rows have dimension {x.shape[1:]} but directions have dimension {directions.shape[1]}")
    n_dirs = directions.shape[0]
    scaled_dirs = (directions / direction_scales(directions, mode)[:, None]).T.copy()
    if len(x) > MAX_ROWS:
        raise ValueError(f"at most {MAX_ROWS} rows fit the fixed-point sums, got more")
    total = np.zeros((k, n_dirs), dtype=np.int64)
    proj = np.empty((min(chunk_rows, max(len(x), 1)), n_dirs))
    for start in range(0, len(x), chunk_rows):
        block = np.asarray(x[start : start + chunk_rows], dtype=np.float64)
        out = proj[: len(block)]
        np.matmul(block, scaled_dirs, out=out)
        if not _accumulate_chebyshev(out, k, total):
            raise ValueError("rows must be finite: a projection theta^T x is NaN (NaN or inf - inf in a row)")
    return MomentSums(total, len(x))


@dataclass(frozen=True)
class MarginalCounts:
    """Exact integer counts of every coordinate's 1-way histogram, concatenated; partial counts add up."""

    counts: np.ndarray
    rows: int

    def __add__(self, other: MarginalCounts) -> MarginalCounts:
        if self.counts.shape != other.counts.shape:
            raise ValueError(f"cannot add marginal counts of shapes {self.counts.shape} and {other.counts.shape}")
        return MarginalCounts(self.counts + other.counts, self.rows + other.rows)

    def frequencies(self, n: int) -> np.ndarray:
        """Divide by the *public* n: each coordinate's block sums to 1 (n = 1: the counts, for add-remove)."""
        return self.counts / n


def marginal_counts(
    x: np.ndarray, layout: EncodingLayout, numeric_bins: int = DEFAULT_NUMERIC_BINS, chunk_rows: int = 65536
) -> MarginalCounts:
    """Counts of cube-encoded rows per coordinate cell. Each row adds exactly 1 to one cell per coordinate."""
    return table_counts(x, layout, (), numeric_bins, chunk_rows)[0]


def pair_counts(
    x: np.ndarray,
    layout: EncodingLayout,
    pairs: Sequence[tuple[int, int]],
    numeric_bins: int = DEFAULT_NUMERIC_BINS,
    chunk_rows: int = 65536,
) -> MarginalCounts:
    """Counts of cube-encoded rows per 2-way cell of each pair, concatenated in ``pairs`` order.

    Each row adds exactly 1 to one cell of every pair's table.
    """
    return table_counts(x, layout, pairs, numeric_bins, chunk_rows, marginals=False)[1]


def table_counts(
    x: np.ndarray,
    layout: EncodingLayout,
    pairs: Sequence[tuple[int, int]],
    numeric_bins: int = DEFAULT_NUMERIC_BINS,
    chunk_rows: int = 65536,
    marginals: bool = True,
    triples: Sequence[tuple[int, int, int]] = (),
) -> tuple[MarginalCounts, MarginalCounts, MarginalCounts]:
    """(``marginal_counts``, ``pair_counts``, the counts of the ``triples``' 3-way tables, concatenated, t-major)
    in one pass: each chunk's cells are computed once for all. Each row adds exactly 1 to one cell of every table."""
    sizes = marginal_sizes(layout, numeric_bins)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    blocks = pair_sizes(layout, pairs, numeric_bins)
    pair_offsets = np.concatenate([[0], np.cumsum(blocks)[:-1]]).astype(np.int64)
    triple_blocks = triple_sizes(layout, triples, numeric_bins)
    triple_offsets = np.concatenate([[0], np.cumsum(triple_blocks)[:-1]]).astype(np.int64)
    ones = np.zeros(int(sum(sizes)) if marginals else 0, dtype=np.int64)
    twos = np.zeros(int(sum(blocks)), dtype=np.int64)
    threes = np.zeros(int(sum(triple_blocks)), dtype=np.int64)
    for start in range(0, len(x), chunk_rows):
        cells = marginal_cells(np.asarray(x[start : start + chunk_rows], dtype=np.float64), layout, numeric_bins)
        if marginals:
            ones += np.bincount((cells + offsets).ravel(), minlength=ones.size)
        for (a, b), offset, size in zip(pairs, pair_offsets, blocks):
            twos[offset : offset + size] += np.bincount(cells[:, a] * sizes[b] + cells[:, b], minlength=size)
        for triple, offset, size in zip(triples, triple_offsets, triple_blocks):
            threes[offset : offset + size] += np.bincount(triple_cell_index(cells, sizes, triple), minlength=size)
    return MarginalCounts(ones, len(x)), MarginalCounts(twos, len(x)), MarginalCounts(threes, len(x))


def fine_counts(x: np.ndarray, cells: Sequence[FineCells], chunk_rows: int = 65536) -> MarginalCounts:
    """Counts of cube-encoded rows per fine cell of each numeric column (``fine_cells``), concatenated in ``cells``
    order. Each row adds 1 to one cell of every column's fine table; a missing value adds to none."""
    offsets = np.concatenate([[0], np.cumsum([c.size for c in cells])]).astype(np.int64)
    total = np.zeros(int(offsets[-1]), dtype=np.int64)
    for start in range(0, len(x), chunk_rows):
        block = np.asarray(x[start : start + chunk_rows], dtype=np.float64)
        for column, offset in zip(cells, offsets[:-1]):
            present = np.ones(len(block), dtype=bool) if column.missing is None else block[:, column.missing] <= 0.0
            z = block[present, column.coordinate]
            index = column.cells_of(z)
            total[offset : offset + column.n_cells] += np.bincount(index, minlength=column.n_cells)
    return MarginalCounts(total, len(x))
