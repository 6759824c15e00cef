"""The fused fast-path kernels against their batched torch forms, and their hand-written backward passes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from splice_assets.model import kernels
from splice_assets.model.mixture import series_product

torch.set_num_threads(1)


def _probs(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.softmax(torch.randn(*shape, dtype=torch.float64, generator=gen), -1)


def _divided(x: torch.Tensor, n: int) -> torch.Tensor:
    """x^m / m!, m = 0..n-1, along a new last axis."""
    return torch.stack([x**m / float(np.prod(np.arange(1, m + 1))) for m in range(n)], -1)


def test_discrete_central_moments_and_gradient():
    gen = torch.Generator().manual_seed(0)
    n = 7
    probs = _probs(gen, 3, 2, 5)
    grid = np.linspace(-0.8, 0.8, 5)[None].repeat(2, 0) * np.array([[1.0], [0.5]])
    inv_factorial = 1.0 / np.cumprod(np.r_[1.0, np.arange(1, n)])
    central, absolute = kernels.DiscreteCentral.apply(probs, grid, inv_factorial)
    g = torch.as_tensor(grid)
    dev = g - (probs * g).sum(-1, keepdim=True)
    assert torch.allclose(central, (probs.unsqueeze(-1) * _divided(dev, n)).sum(-2), rtol=0, atol=1e-15)
    assert torch.allclose(absolute, (probs.unsqueeze(-1) * _divided(dev, n).abs()).sum(-2), rtol=0, atol=1e-15)
    leaf = probs.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda p: kernels.DiscreteCentral.apply(p, grid, inv_factorial)[0], (leaf,))


def test_joint_central_moments_and_gradient():
    gen = torch.Generator().manual_seed(1)
    n = 6
    table = _probs(gen, 3, 12).reshape(3, 4, 3)
    grid_a, grid_b = np.linspace(-0.9, 0.6, 4), np.array([-0.5, 0.1, 0.7])
    inv_factorial = 1.0 / np.cumprod(np.r_[1.0, np.arange(1, n)])
    mixed, absolute = kernels.JointCentral.apply(table, grid_a, grid_b, inv_factorial)
    da = torch.as_tensor(grid_a) - (table.sum(2) * torch.as_tensor(grid_a)).sum(-1, keepdim=True)
    db = torch.as_tensor(grid_b) - (table.sum(1) * torch.as_tensor(grid_b)).sum(-1, keepdim=True)
    ref = torch.einsum("cij,cis,cjt->cst", table, _divided(da, n), _divided(db, n))
    ref_abs = torch.einsum("cij,cis,cjt->cst", table, _divided(da, n).abs(), _divided(db, n).abs())
    assert torch.allclose(mixed, ref, rtol=0, atol=1e-15) and torch.allclose(absolute, ref_abs, rtol=0, atol=1e-15)
    leaf = table.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda t: kernels.JointCentral.apply(t, grid_a, grid_b, inv_factorial)[0], (leaf,))


@pytest.mark.parametrize("separable, joint", [(3, 0), (0, 2), (2, 2)])
def test_series_chain_matches_repeated_series_products(separable, joint):
    """The chain is acc times each part's directional series in turn; a joint part's is
    sum_s w_a^s w_b^(m-s) M[s, m-s]."""
    gen = torch.Generator().manual_seed(separable + 3 * joint)
    K, L, n = 2, 5, 6
    randn = lambda *shape: torch.randn(*shape, dtype=torch.float64, generator=gen)
    acc0, central, mixed = randn(K, L, n), randn(K, separable, n), randn(K, joint, n, n)
    w_sep, w_joint = randn(L, separable).numpy(), randn(joint, 2, L).numpy()
    powers = kernels.chain_powers(w_sep, w_joint, n - 1)
    got = kernels.SeriesChain.apply(acc0, central, mixed, *powers)
    ref = acc0
    orders = torch.arange(n, dtype=torch.float64)
    for t in range(separable):
        ref = series_product(ref, torch.as_tensor(w_sep[:, t]).unsqueeze(-1) ** orders * central[:, t].unsqueeze(1))
    for u in range(joint):
        wa, wb = (torch.as_tensor(w_joint[u, i]).unsqueeze(-1) ** orders for i in (0, 1))  # (L, n)
        series = torch.stack([sum(wa[:, s] * wb[:, m - s] * mixed[:, u, s, m - s].unsqueeze(-1) for s in range(m + 1))
                              for m in range(n)], -1)
        ref = series_product(ref, series)
    assert torch.allclose(got, ref, rtol=1e-13, atol=1e-13)
    absolute = kernels.series_chain_values(acc0.abs(), central.abs(), mixed.abs(), *(np.abs(p) for p in powers))
    assert torch.all(absolute >= got.abs() - 1e-13)  # the absolute chain bounds every term the chain sums
    leaves = tuple(t.clone().requires_grad_(True) for t in (acc0, central, mixed))
    assert torch.autograd.gradcheck(lambda a, c, m: kernels.SeriesChain.apply(a, c, m, *powers), leaves)


def test_fused_kernels_are_refused_off_cpu_naming_the_device():
    from splice_assets.layout import Coordinate, EncodingLayout
    from splice_assets.model.mixture import MomentEvaluator

    layout = EncodingLayout((Coordinate("a", "value", 3), Coordinate("b", "value", 2)))
    with pytest.raises(ValueError, match="meta"):
        MomentEvaluator(layout, np.eye(2), np.full(2, 3.0), 4, device="meta", fused=True)
