"""The fused numba moment kernel against the former numpy implementation: bit-identical int64 sums."""

from __future__ import annotations

import numpy as np
import pytest

from splice_assets.layout import direction_scales, draw_directions
from splice_assets.private.statistics import _FIXED_ONE, moment_sums


def _reference_moment_sums(
    x: np.ndarray, directions: np.ndarray, k: int, mode: str = "ball", chunk_rows: int = 1024
) -> np.ndarray:
    """The numpy implementation the kernel replaced (numpy passes per order over a (chunk, L) buffer)."""
    n_dirs = directions.shape[0]
    scaled_dirs = (directions / direction_scales(directions, mode)[:, None]).T.copy()
    total = np.zeros((k, n_dirs), dtype=np.int64)
    rows = min(chunk_rows, max(len(x), 1))
    buffers = [np.empty((rows, n_dirs)) for _ in range(4)]
    for start in range(0, len(x), chunk_rows):
        block = np.asarray(x[start : start + chunk_rows], dtype=np.float64)
        two_z, prev, cur, scratch = (b[: len(block)] for b in buffers)
        np.matmul(block, scaled_dirs, out=cur)
        np.clip(cur, -1.0, 1.0, out=cur)
        np.multiply(cur, 2.0, out=two_z)
        prev.fill(1.0)
        for j in range(k):
            np.clip(cur, -1.0, 1.0, out=scratch)
            scratch *= _FIXED_ONE
            np.rint(scratch, out=scratch)
            total[j] += scratch.sum(axis=0).astype(np.int64)
            if j + 1 < k:
                np.multiply(two_z, cur, out=scratch)
                scratch -= prev
                prev, cur, scratch = cur, scratch, prev
    return total


@pytest.mark.parametrize("mode", ["ball", "l1"])
@pytest.mark.parametrize(("n", "d", "L", "k", "chunk"), [
    (2500, 24, 67, 16, 1024),  # several chunks and a partial one; L not a multiple of the vector width
    (300, 6, 33, 1, 1024),
    (300, 6, 33, 2, 7),
    (1000, 5, 128, 32, 256),  # high orders, where the recurrence's rounding matters
    (1, 3, 1, 3, 1024),
])  # fmt: skip
def test_kernel_bit_identical_to_numpy(mode: str, n: int, d: int, L: int, k: int, chunk: int) -> None:
    rng = np.random.default_rng([n, d, L, k])
    # Cells up to +-3 push projections past [-1, 1], so both clamps are exercised; some rows sit on corners.
    x = rng.uniform(-3.0, 3.0, size=(n, d))
    x[::5] = np.sign(x[::5])
    directions = draw_directions(n + k, L, d)
    got = moment_sums(x, directions, k, mode, chunk_rows=chunk)
    assert got.sums.dtype == np.int64 and got.rows == n
    assert np.array_equal(got.sums, _reference_moment_sums(x, directions, k, mode, chunk))


def test_ties_round_half_to_even() -> None:
    # d = 1, theta = +-1: z = x exactly. z = m / 2^33 puts 2^32 T_1 = m / 2 on every half-integer tie, and
    # z = 2^-17 gives 2^32 T_2 = 2^32 (2^-33 - 1) = -2^32 + 0.5, a tie at order 2.
    m = np.arange(-41, 42, dtype=np.float64)
    x = np.concatenate([m / 2**33, [2.0**-17, -(2.0**-17), 1.0, -1.0, 1.5, -1.5]])[:, None]
    for theta in (1.0, -1.0):
        directions = np.array([[theta]])
        sums = moment_sums(x, directions, 4).sums
        assert np.array_equal(sums, _reference_moment_sums(x, directions, 4))
        one_row = [moment_sums(row[None], directions, 2).sums[:, 0] for row in x]
        np.testing.assert_array_equal([r[0] for r in one_row[: len(m)]], np.rint(theta * m / 2).astype(np.int64))
        assert one_row[len(m)][1] == one_row[len(m) + 1][1] == -(2**32)  # -2^32 + 0.5 rounds to the even -2^32
    assert moment_sums(np.array([[2.5 / 2**32]]), np.array([[1.0]]), 1).sums[0, 0] == 2
    assert moment_sums(np.array([[-3.5 / 2**32]]), np.array([[1.0]]), 1).sums[0, 0] == -4


def test_input_dtypes_layouts_and_empty() -> None:
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, size=(700, 9))
    directions = draw_directions(2, 40, 9)
    ref = _reference_moment_sums(x, directions, 5)
    for variant in (np.asfortranarray(x), x.astype(np.float32).astype(np.float64)):
        want = _reference_moment_sums(variant, directions, 5)
        assert np.array_equal(moment_sums(variant, directions, 5).sums, want)
    assert np.array_equal(moment_sums(np.asfortranarray(x), directions, 5).sums, ref)
    empty = moment_sums(np.zeros((0, 9)), directions, 5)
    assert empty.rows == 0 and np.array_equal(empty.sums, np.zeros((5, 40), dtype=np.int64))


def test_nan_rows_are_rejected() -> None:
    x = np.zeros((10, 3))
    x[4, 1] = np.nan
    with pytest.raises(ValueError, match="finite"):
        moment_sums(x, draw_directions(0, 8, 3), 4)
    # +-inf cells with no inf - inf cancellation project to +-inf, which the clamp maps to +-1, as before.
    x = np.zeros((2, 1))
    x[0, 0] = np.inf
    directions = np.array([[1.0]])
    assert np.array_equal(moment_sums(x, directions, 3).sums, _reference_moment_sums(x, directions, 3))
