"""Trimming the empty outer bins of a numeric column's noisy coarse table (``model.fit.trimmed_tails``)."""

from __future__ import annotations

import numpy as np
import pytest

from splice_assets.model.product_em import simplex_projection
from splice_assets.postprocess.targets import trimmed_tails


def test_empty_tails_are_cut_and_the_rest_is_a_distribution():
    """Mass in bins 2-4 of 16, noise sd 1% per bin, 1,000 draws (fixed seed): the cut bins are exactly 0, the
    result sums to 1, no bin holding real mass is ever cut, and a draw leaves more than 1% of the mass in the
    empty bins in under 10% of the draws (mostly when the empty bin next to the data clears 2 sd, 2.3% per end),
    against over 70% with no trim (a simplex projection keeps the positive noise of 13 empty bins)."""
    rng = np.random.default_rng(3)
    truth = np.zeros(16)
    truth[2:5] = [0.3, 0.5, 0.2]
    leaks = untrimmed = 0
    for _ in range(1000):
        noisy = truth + rng.normal(0.0, 0.01, 16)
        out = trimmed_tails(noisy, 0.01, 2.0)
        assert out.sum() == pytest.approx(1.0) and (out >= 0).all()
        assert (out[2:5] > 0).all()
        leaks += out[truth == 0].sum() > 0.01
        untrimmed += simplex_projection(noisy)[truth == 0].sum() > 0.01
    assert leaks < 100 and untrimmed > 700


def test_a_thin_real_tail_beside_the_data_is_kept():
    """A bin holding 3 noise sd just outside the data stays (its own count clears 2 sd); z = 0 cuts nothing."""
    table = np.array([0.0, 0.0, 0.45, 0.45, 0.03, 0.0, 0.0, 0.0]) + np.array([0, 0, 0, 0, 0, 0.004, -0.003, 0.002])
    out = trimmed_tails(table, 0.01, 2.0)
    assert out[4] > 0 and (out[5:] == 0).all() and (out[:2] == 0).all()
    assert np.array_equal(trimmed_tails(table, 0.01, 0.0), table)


def test_at_least_one_bin_is_kept():
    out = trimmed_tails(np.array([0.001, -0.002, 0.0005]), 0.01, 2.0)
    assert out.sum() == pytest.approx(1.0) and (out > 0).sum() >= 1


def test_bins_empty_by_the_schema_stay_empty_and_count_as_empty_runs():
    """A bin of noise std 0 (no value of the column's grid falls in it, ``_pooled``) is 0 after the projection, even
    where the projection raises every other kept bin; it neither blocks nor lengthens a cut run."""
    table = np.array([0.004, 0.0, 0.3, 0.0, 0.3, 0.3, 0.0, -0.003])
    std = np.array([0.01, 0.0, 0.01, 0.0, 0.01, 0.01, 0.0, 0.01])
    out = trimmed_tails(table, std, 2.0)
    assert out.sum() == pytest.approx(1.0)
    assert (out[std == 0] == 0).all() and out[0] == 0 and out[7] == 0
    assert out[[2, 4, 5]] == pytest.approx([1 / 3] * 3)
    np.testing.assert_array_equal(trimmed_tails(table, 0.01, 2.0) > 0, [False, False, True, True, True, True,
                                                                          False, False])


def test_islands_of_noise_beyond_an_empty_bin_are_cut():
    """Mass in bins 5-10 of 16, noise sd 1% per bin, 2,000 draws (fixed seed). Without the island cut, one empty
    bin's noise above z = 1 sd keeps it and every empty bin inside it: some mass stays two or more bins away from
    the data in 25% of the draws. With islands of up to 3 sd cut it does so in 7% (the rest: the empty bin next to
    the data is above 1 sd too, so no gap separates the far bins), and no bin of the data is ever cut."""
    rng = np.random.default_rng(11)
    truth = np.zeros(16)
    truth[5:11] = [0.1, 0.2, 0.3, 0.2, 0.15, 0.05]
    far = np.r_[0:4, 12:16]
    kept = {0.0: 0, 3.0: 0}
    for _ in range(2000):
        noisy = truth + rng.normal(0.0, 0.01, 16)
        for island_z in kept:
            out = trimmed_tails(noisy, 0.01, 1.0, island_z)
            assert (out[5:11] > 0).all() and out.sum() == pytest.approx(1.0)
            kept[island_z] += out[far].sum() > 0
    assert kept[0.0] > 400 and kept[3.0] < 200


def test_an_island_above_the_noise_and_a_tail_beside_the_data_are_kept():
    """A bin holding 5 noise sd beyond an empty one stays (an island is cut only within 3 sd); a bin of 2 sd right
    beside the data stays too (no gap: it is a tail, not an island); an island of 2 sd goes, with its gap."""
    data = np.array([0.0, 0.0, 0.0, 0.0, 0.3, 0.4, 0.3, 0.0])
    far = data + np.array([0.05, 0.0, 0.0, 0, 0, 0, 0, 0.0])
    assert trimmed_tails(far, 0.01, 1.0, 3.0)[0] > 0
    beside = data + np.array([0.0, 0.0, 0.0, 0.02, 0, 0, 0, 0.0])
    assert trimmed_tails(beside, 0.01, 1.0, 3.0)[3] > 0
    island = data + np.array([0.0, 0.02, 0.004, 0.0, 0, 0, 0, 0.0])
    assert trimmed_tails(island, 0.01, 1.0, 0.0)[1] > 0
    assert (trimmed_tails(island, 0.01, 1.0, 3.0)[:4] == 0).all()


def test_no_cut_where_the_noise_would_hide_the_mass_it_moves():
    """A column spread over 16 bins (a spike of 27% at the bottom, 3-13% in each other bin) at 65 columns on 1,438
    rows: each bin's noise std is .075, above ``DEFAULT_TAIL_NOISE_SHARE``. Over 500 draws (fixed seed) the cut at
    z = 1 with islands at 3 sd would leave at most half of the 15 upper bins in 437 draws (its median TVD to the
    truth .73, against .35 for the table projected whole); with the noise share it cuts no bin, and a table with
    empty upper bins at a bin's noise of .01 is trimmed as before."""
    from splice_assets.model.fit import DEFAULT_TAIL_NOISE_SHARE

    truth = np.array([0.27, 0.04, 0.05, 0.03, 0.04, 0.03, 0.04, 0.04, 0.06, 0.05, 0.04, 0.05, 0.07, 0.07, 0.07, 0.05])
    assert 0.01 < DEFAULT_TAIL_NOISE_SHARE < 0.075
    rng = np.random.default_rng(11)
    gutted = 0
    for _ in range(500):
        noisy = truth + rng.normal(0.0, 0.075, 16)
        gutted += (trimmed_tails(noisy, 0.075, 1.0, 3.0, np.inf)[1:] > 0).sum() <= 7
        out = trimmed_tails(noisy, 0.075, 1.0, 3.0)
        np.testing.assert_allclose(out, simplex_projection(noisy))
    assert gutted > 400
    empty_top = np.concatenate([truth[:10] / truth[:10].sum(), np.zeros(6)]) + rng.normal(0.0, 0.001, 16)
    assert (trimmed_tails(empty_top, 0.01, 1.0, 3.0)[10:] == 0).all()
