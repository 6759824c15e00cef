"""The bench's peers at the replace-one-equivalent epsilon (bench/peer_runner.py), with a stand-in for smartnoise's
zCDP -> (eps, delta) conversion (the real one lives in the peers' virtualenv)."""

from __future__ import annotations

import math

import pytest

from bench.peer_runner import REPLACE_ONE_FACTOR, replace_one_epsilon


def zcdp_rho(epsilon: float, delta: float) -> float:
    """The rho whose classic bound eps = rho + 2 sqrt(rho ln(1/delta)) gives ``epsilon`` (monotone, as cdp_rho is)."""
    log_term = math.log(1.0 / delta)
    return (math.sqrt(log_term + epsilon) - math.sqrt(log_term)) ** 2


@pytest.mark.parametrize("method", ["aim", "mst"])
@pytest.mark.parametrize("epsilon", [0.5, 1.0, 3.0, 10.0])
def test_the_peer_spends_its_replace_one_share_of_rho_and_no_more(method, epsilon):
    eps_add_remove, rho = replace_one_epsilon(method, epsilon, 1e-9, zcdp_rho)
    target = zcdp_rho(epsilon, 1e-9) / REPLACE_ONE_FACTOR[method]
    assert rho == zcdp_rho(eps_add_remove, 1e-9)
    assert rho <= target  # never more than the share: the peer is (eps, delta)-DP under replace-one
    assert rho == pytest.approx(target, rel=1e-9)  # and not needlessly less
    assert 0 < eps_add_remove < epsilon
