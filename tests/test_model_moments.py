"""Closed-form mixture moments: Monte Carlo, exact references, gradients, and bounded tails."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from numpy.polynomial import chebyshev as C

from splice_assets.layout import (
    Coordinate,
    EncodingLayout,
    direction_scales,
    draw_directions,
)
from splice_assets.model import kernels
from splice_assets.model import mixture as model
from splice_assets.model.mixture import (
    Bounds,
    MixtureModule,
    MixtureParameters,
    MomentEvaluator,
    TorchMixture,
    chebyshev_taylor_expectations,
    model_moments,
)

torch.set_num_threads(1)


def _cheb(z: np.ndarray, k: int) -> np.ndarray:
    prev, cur, out = np.ones_like(z), z, []
    for _ in range(k):
        out.append(cur)
        prev, cur = cur, 2 * z * cur - prev
    return np.stack(out)


def _random_params(
    layout: EncodingLayout, K: int, R: int, rng: np.random.Generator, sd: float = 0.12
) -> MixtureParameters:
    disc = [layout.coordinates[i].levels for i in layout.discrete_index]
    nc = len(layout.continuous_index)
    probs = tuple((lambda p: p / p.sum(1, keepdims=True))(rng.random((K, r)) + 0.05) for r in disc)
    w = rng.random(K) + 0.2
    return MixtureParameters(
        w / w.sum(),
        probs,
        rng.uniform(-0.6, 0.6, (K, nc)),
        rng.normal(0, sd / 2, (K, nc, R)),
        rng.uniform(0.2, 1, (K, nc)) * sd**2,
    )


def _sample(params: MixtureParameters, layout: EncodingLayout, n: int, rng: np.random.Generator) -> np.ndarray:
    comp = rng.choice(params.K, n, p=params.weights)
    x = np.zeros((n, layout.d))
    cont = layout.continuous_index
    for c in range(params.K):
        idx = np.flatnonzero(comp == c)
        for t, i in enumerate(layout.discrete_index):
            x[idx, i] = layout.coordinates[i].grid()[
                rng.choice(len(params.probs[t][c]), len(idx), p=params.probs[t][c])
            ]
        if len(cont):
            cov = params.factors[c] @ params.factors[c].T + np.diag(params.diag[c])
            x[np.ix_(idx, cont)] = rng.multivariate_normal(params.means[c], cov, len(idx))
    return x


MIXED = EncodingLayout(
    (
        Coordinate("a", "value", 3),
        Coordinate("b", "value", 0),
        Coordinate("b", "missing", 2),
        Coordinate("c", "value", 0),
        Coordinate("d", "value", 5),
        Coordinate("e", "value", 0),
    )
)


def _assert_matches_monte_carlo(params, layout, x, dirs_seed: int, k: int) -> None:
    """Every closed-form moment (8 directions) within 4 standard errors of its Monte Carlo mean over rows ``x``."""
    dirs = draw_directions(dirs_seed, 8, layout.d)
    scales = direction_scales(dirs, "ball")
    exact = model_moments(params, layout, dirs, scales, k)
    values = _cheb(x @ (dirs / scales[:, None]).T, k)  # (k, n, L)
    mc, se = values.mean(axis=1), values.std(axis=1) / np.sqrt(len(x))
    assert np.all(np.abs(mc - exact) <= 4 * se + 1e-12), np.max(np.abs(mc - exact) / se)


@pytest.mark.parametrize("n", [100_000, pytest.param(1_000_000, marks=pytest.mark.slow)])
def test_closed_form_matches_monte_carlo_up_to_k32(n):
    # Within 4 standard errors of n draws: 10^5 in CI, 10^6 (a 3x tighter check) with `make test-slow`.
    rng = np.random.default_rng(11)
    params = _random_params(MIXED, K=3, R=1, rng=rng)
    _assert_matches_monte_carlo(params, MIXED, _sample(params, MIXED, n, rng), 3, 32)


def _enumerate(params: MixtureParameters, layout: EncodingLayout, dirs, scales, k, gh: int = 40):
    """Independent exact reference: every discrete atom, times Gauss-Hermite (exact to degree 2 gh - 1) for the
    Gaussian part, T_j by its recurrence at each point."""
    w = dirs / scales[:, None]
    disc, cont = layout.discrete_index, layout.continuous_index
    grids = [layout.coordinates[i].grid() for i in disc]
    nodes, gh_w = np.polynomial.hermite_e.hermegauss(gh)
    gh_w = gh_w / gh_w.sum()
    out = np.zeros((k, len(dirs)))
    for c in range(params.K):
        mean, sd = np.zeros(len(dirs)), np.zeros(len(dirs))
        if len(cont):
            cov = params.factors[c] @ params.factors[c].T + np.diag(params.diag[c])
            mean = w[:, cont] @ params.means[c]
            sd = np.sqrt(np.einsum("li,ij,lj->l", w[:, cont], cov, w[:, cont]))
        position = {i: t for t, i in enumerate(disc)}
        joined = {position[i] for pair in params.joint_pairs for i in pair}
        for atom in itertools.product(*[range(len(g)) for g in grids]):
            pr = params.weights[c] * np.prod([params.probs[t][c][a] for t, a in enumerate(atom) if t not in joined])
            for (i, j), table in zip(params.joint_pairs, params.joint):
                pr *= table[c, atom[position[i]], atom[position[j]]]
            z = mean + sum(w[:, i] * grids[t][a] for t, (i, a) in enumerate(zip(disc, atom)))
            out += pr * _cheb(z[:, None] + sd[:, None] * nodes, k) @ gh_w
    return out


def _with_joint(params: MixtureParameters, layout: EncodingLayout, pairs, rng: np.random.Generator,
                product: bool = False) -> MixtureParameters:
    """``params`` with joint parts on ``pairs``: random dependent tables (or the product of the current probs)."""
    position = {i: t for t, i in enumerate(layout.discrete_index)}
    probs, joint = list(params.probs), []
    for a, b in pairs:
        ta, tb = position[a], position[b]
        if product:
            table = probs[ta][:, :, None] * probs[tb][:, None, :]
        else:
            table = rng.random((params.K, probs[ta].shape[1], probs[tb].shape[1])) ** 3 + 0.01
            table /= table.sum(axis=(1, 2), keepdims=True)
        probs[ta], probs[tb] = table.sum(2), table.sum(1)
        joint.append(table)
    out = MixtureParameters(
        params.weights, tuple(probs), params.means, params.factors, params.diag, tuple(pairs), tuple(joint)
    )
    out.check(layout)
    return out


def _two_ended(layout: EncodingLayout, K: int, rng: np.random.Generator) -> MixtureParameters:
    """Most spread mixture: every discrete coordinate puts its mass on its two end levels; widest allowed Gaussians."""
    probs = []
    for i in layout.discrete_index:
        p = np.full((K, layout.coordinates[i].levels), 1e-9)
        p[:, 0] = rng.uniform(0.2, 0.8, K)
        p[:, -1] = 1.0 - p[:, 0]
        probs.append(p / p.sum(1, keepdims=True))
    nc = len(layout.continuous_index)
    return MixtureParameters(
        np.ones(K) / K, tuple(probs), np.zeros((K, nc)), np.zeros((K, nc, 0)), np.full((K, nc), 1 / 36)
    )


def _rel_err(got: np.ndarray, ref: np.ndarray) -> float:
    return float(np.max(np.abs(got - ref) / np.maximum(1.0, np.abs(ref))))


@pytest.mark.parametrize("d", [3, 4, 6])
def test_all_discrete_matches_exact_enumeration(d):
    rng = np.random.default_rng(d)
    layout = EncodingLayout(tuple(Coordinate(f"c{i}", "value", r) for i, r in enumerate([3, 2, 4, 2, 3, 2][:d])))
    params = _random_params(layout, K=2, R=0, rng=rng)
    dirs = draw_directions(5, 16, d)
    scales = direction_scales(dirs, "ball")
    k = 16
    assert (
        np.max(np.abs(model_moments(params, layout, dirs, scales, k) - _enumerate(params, layout, dirs, scales, k)))
        < 1e-10
    )


@pytest.mark.parametrize("d", [2, 3, 4])
@pytest.mark.parametrize("spread", ["random", "two_ended"])
def test_k32_matches_exact_enumeration_for_spread_components(d, spread):
    """k = 32 with components spread over most of [-1, 1] (small d, plus directions along the all-ones diagonal):
    the power-basis path alone is off by up to 1e-1 here; its error estimate hands these directions to the
    Chebyshev path, which must be exact."""
    rng = np.random.default_rng(d)
    layout = EncodingLayout(tuple(Coordinate(f"c{i}", "value", r) for i, r in enumerate([3, 2, 4, 2][:d])))
    params = _random_params(layout, K=2, R=0, rng=rng) if spread == "random" else _two_ended(layout, 2, rng)
    dirs = np.vstack([draw_directions(5, 16, d), np.ones((1, d)) / np.sqrt(d), -np.eye(d)[:1]])
    scales = direction_scales(dirs, "ball")
    assert (
        _rel_err(model_moments(params, layout, dirs, scales, 32), _enumerate(params, layout, dirs, scales, 32)) <= 1e-10
    )


@pytest.mark.parametrize(
    "k, max_taylor_error",
    [(16, 1e-11), (32, 1e-11), (16, 0.0), (32, 0.0), (16, math.inf)],
    ids=["hybrid-16", "hybrid-32", "stable-16", "stable-32", "fast-16"],
)
@pytest.mark.parametrize("fused", [True, False], ids=["kernels", "torch"])
def test_each_path_matches_exact_reference_on_mixed_layout(k, max_taylor_error, fused):
    """Discrete and Gaussian parts together, also along coordinate axes (zero weights, pure discrete or pure
    Gaussian projections). The fast path alone is not exact at k = 32 (see the estimate test below)."""
    rng = np.random.default_rng(k)
    for params in (_random_params(MIXED, K=3, R=1, rng=rng), _two_ended(MIXED, 2, rng)):
        dirs = np.vstack([draw_directions(7, 12, MIXED.d), np.eye(MIXED.d)])
        scales = direction_scales(dirs, "ball")
        ev = MomentEvaluator(MIXED, dirs, scales, k, max_taylor_error=max_taylor_error, fused=fused)
        with torch.no_grad():
            got = ev(TorchMixture.from_numpy(params, MIXED)).numpy()
        assert _rel_err(got, _enumerate(params, MIXED, dirs, scales, k)) <= 1e-10


@pytest.mark.parametrize(
    "k, max_taylor_error",
    [(16, 1e-11), (32, 1e-11), (16, 0.0), (32, 0.0), (16, math.inf)],
    ids=["hybrid-16", "hybrid-32", "stable-16", "stable-32", "fast-16"],
)
@pytest.mark.parametrize("fused", [True, False], ids=["kernels", "torch"])
def test_joint_parts_match_exact_reference(k, max_taylor_error, fused):
    """Dependent joint tables on (a, d) of the mixed layout, and on two pairs of an all-discrete layout, spread
    and random: each path against exact enumeration over the joint atoms."""
    rng = np.random.default_rng(100 + k)
    discrete = EncodingLayout(tuple(Coordinate(f"c{i}", "value", r) for i, r in enumerate([3, 2, 4, 2, 3])))
    cases = [
        (MIXED, _with_joint(_random_params(MIXED, K=3, R=1, rng=rng), MIXED, [(0, 4)], rng)),
        (MIXED, _with_joint(_two_ended(MIXED, 2, rng), MIXED, [(4, 2)], rng)),
        (discrete, _with_joint(_random_params(discrete, K=2, R=0, rng=rng), discrete, [(1, 3), (4, 0)], rng)),
        (discrete, _with_joint(_two_ended(discrete, 2, rng), discrete, [(0, 1), (2, 3)], rng)),
    ]
    for layout, params in cases:
        dirs = np.vstack(
            [draw_directions(7, 12, layout.d), np.eye(layout.d), np.ones((1, layout.d)) / np.sqrt(layout.d)]
        )
        scales = direction_scales(dirs, "ball")
        ev = MomentEvaluator(layout, dirs, scales, k, max_taylor_error=max_taylor_error, joint_pairs=params.joint_pairs,
                             fused=fused)
        with torch.no_grad():
            got = ev(TorchMixture.from_numpy(params, layout)).numpy()
        assert _rel_err(got, _enumerate(params, layout, dirs, scales, k)) <= 1e-10


@pytest.mark.parametrize("max_taylor_error", [1e-11, 0.0])
def test_product_joint_part_reproduces_the_separable_model(max_taylor_error):
    """A joint table that is the product of its margins is the separable model: same moments to rounding."""
    rng = np.random.default_rng(7)
    separable = _random_params(MIXED, K=3, R=1, rng=rng)
    joint = _with_joint(separable, MIXED, [(2, 0)], rng, product=True)
    dirs = draw_directions(3, 24, MIXED.d)
    scales = direction_scales(dirs, "ball")
    for k in (16, 32):
        got = [
            MomentEvaluator(MIXED, dirs, scales, k, max_taylor_error=max_taylor_error, joint_pairs=p.joint_pairs)(
                TorchMixture.from_numpy(p, MIXED)).detach().numpy()
            for p in (separable, joint)
        ]
        assert np.max(np.abs(got[0] - got[1])) < 1e-12


def test_joint_pairs_are_checked():
    rng = np.random.default_rng(1)
    params = _random_params(MIXED, K=2, R=1, rng=rng)
    for pairs in ([(0, 1)], [(0, 0)], [(0, 2), (2, 4)]):  # a continuous coordinate; twice the same; overlapping
        with pytest.raises(ValueError, match="joint pair"):
            MomentEvaluator(MIXED, np.eye(MIXED.d), np.ones(MIXED.d) * 3, 8, joint_pairs=pairs)
    joint = _with_joint(params, MIXED, [(0, 4)], rng)
    bad = MixtureParameters(
        joint.weights, params.probs, joint.means, joint.factors, joint.diag, joint.joint_pairs, joint.joint
    )
    with pytest.raises(ValueError, match="does not sum"):
        bad.check(MIXED)
    with pytest.raises(ValueError, match="joint pairs"):
        MomentEvaluator(MIXED, np.eye(MIXED.d), np.ones(MIXED.d) * 3, 8)(TorchMixture.from_numpy(joint, MIXED))


@pytest.mark.parametrize("d", [2, 4])
@pytest.mark.parametrize("fused", [True, False], ids=["kernels", "torch"])
def test_fast_path_error_estimate_covers_its_error(d, fused):
    """The switch relies on the fast path's first-order error estimate: check it against the stable path per
    component and direction wherever the error is measurable (> 1e-13)."""
    rng = np.random.default_rng(3)
    layout = EncodingLayout(tuple(Coordinate(f"c{i}", "value", r) for i, r in enumerate([3, 0, 4, 2][:d])))
    dirs = draw_directions(9, 32, d)
    ev = MomentEvaluator(layout, dirs, direction_scales(dirs, "l1"), 32, fused=fused)
    for params in (_random_params(layout, K=2, R=0, rng=rng, sd=0.15), _two_ended(layout, 2, rng)):
        q = TorchMixture.from_numpy(params, layout)
        with torch.no_grad():
            mean, var = ev._gaussian_projection(q)
            fast, estimate = ev._taylor_moments(q, mean, var)
            stable = ev._stable_moments(q, mean, var, torch.arange(len(dirs)))
        err = (fast - stable).abs().amax(-1)
        assert err.max() > 1e-10  # the regime where the switch matters
        assert torch.all(err <= 2.0 * estimate + 1e-13), float((err / estimate).max())


def test_one_dimensional_gaussian_matches_gauss_hermite():
    layout = EncodingLayout((Coordinate("x", "value", 0),))
    nodes, weights = np.polynomial.hermite_e.hermegauss(60)
    weights = weights / weights.sum()
    for mean, sd in [(0.0, 0.1), (0.5, 0.08), (-0.85, 0.02), (0.3, 0.25)]:
        params = MixtureParameters(np.ones(1), (), np.array([[mean]]), np.zeros((1, 1, 0)), np.array([[sd**2]]))
        dirs = np.array([[1.0], [-1.0]])
        got = model_moments(params, layout, dirs, np.ones(2), 32)
        z = mean + sd * nodes
        ref = np.stack([weights @ C.chebval(z, [0] * j + [1]) for j in range(1, 33)])
        tol = 1e-10 * np.maximum(1.0, np.abs(ref))  # sd = 0.25 puts mass outside [-1, 1]: moments ~1e8
        assert np.all(np.abs(got[:, 0] - ref) < tol)
        assert np.all(np.abs(got[:, 1] - ref * (-1.0) ** np.arange(1, 33)) < tol)


@pytest.mark.parametrize("k", [1, 2, 8, 16])
def test_taylor_expectations_values_and_closed_form_gradient(k):
    """E[T_j(mu + u)] for u on three atoms matches numpy's Chebyshev values, and its gradient finite differences."""
    gen = torch.Generator().manual_seed(k)
    mu = torch.rand(4, 3, dtype=torch.float64, generator=gen) - 0.5
    atoms = 0.3 * (torch.rand(4, 3, 3, dtype=torch.float64, generator=gen) - 0.5)
    probs = torch.softmax(torch.randn(4, 3, 3, dtype=torch.float64, generator=gen), -1)
    central = (probs.unsqueeze(-1) * atoms.unsqueeze(-1) ** torch.arange(k + 1)).sum(-2)  # E[u^p], p = 0..k
    z = (mu.unsqueeze(-1) + atoms).numpy()
    ref = np.stack([(probs.numpy() * C.chebval(z, [0] * j + [1])).sum(-1) for j in range(1, k + 1)], -1)
    kernel = lambda m, c: kernels.TaylorExpectations.apply(m, c)[0]
    for taylor in (lambda m, c: chebyshev_taylor_expectations(m, c, k), kernel):
        assert np.max(np.abs(taylor(mu, central).numpy() - ref)) < 1e-13
        leaves = (mu.clone().requires_grad_(True), central.clone().requires_grad_(True))
        assert torch.autograd.gradcheck(taylor, leaves, eps=1e-6, atol=1e-7)
    # The kernel's last two Taylor coefficient vectors are the torch form's.
    last = kernels.TaylorExpectations.apply(mu, central)[1]
    assert torch.allclose(last, model._taylor_expectations(mu, central, k)[1], rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("max_taylor_error, fused", [(math.inf, True), (math.inf, False), (0.0, True)],
                         ids=["fast-kernels", "fast-torch", "stable"])
def test_gradcheck_small_model(max_taylor_error, fused):
    layout = EncodingLayout(
        (
            Coordinate("a", "value", 3),
            Coordinate("b", "value", 0),
            Coordinate("c", "value", 0),
            Coordinate("d", "value", 2),
        )
    )
    dirs = np.vstack([draw_directions(0, 5, layout.d), np.eye(layout.d)[[0, 1]]])  # axes: zero-variance cases
    ev = MomentEvaluator(
        layout, dirs, direction_scales(dirs, "ball"), 8, max_taylor_error=max_taylor_error, fused=fused
    )
    module = MixtureModule(layout, K=2, R=1)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * 0.5)
    names = [n for n, _ in module.named_parameters()]
    leaves = [p.detach().clone().requires_grad_(True) for p in module.parameters()]

    def f(*tensors):
        for name, t in zip(names, tensors):
            setattr(module, name, t)
        return ev(module())

    for name in names:
        delattr(module, name)
    assert torch.autograd.gradcheck(f, leaves, eps=1e-6, atol=1e-7)


def test_moments_stay_bounded_for_extreme_allowed_parameters_ball_k32():
    """Every parameter the bounded parametrisation allows (here the extremes) keeps |m_j| <= 1 at k = 32."""
    layout = EncodingLayout(tuple(Coordinate(f"x{i}", "value", 0) for i in range(3)) + (Coordinate("c", "value", 2),))
    bounds = Bounds()
    module = MixtureModule(layout, K=3, R=1, bounds=bounds)
    with torch.no_grad():
        module.sd_raw.fill_(30.0)  # sd at its maximum
        module.mean_raw.copy_(torch.tensor([[30.0] * 3, [-30.0] * 3, [30.0, -30.0, 0.0]], dtype=torch.float64))
        module.corr_factors.fill_(100.0)  # fully correlated coordinates
        module.prob_logits[..., 0] = 20.0
    q = module()
    aligned = np.array([[1, 1, 1, -1], [1, 1, 1, 1], [1, -1, 0, 0], [1, 0, 0, 0]], dtype=float)
    aligned /= np.linalg.norm(aligned, axis=1, keepdims=True)
    dirs = np.vstack([aligned, draw_directions(1, 60, 4)])
    ev = MomentEvaluator(layout, dirs, direction_scales(dirs, "ball"), 32)
    with torch.no_grad():
        m = ev(q).numpy()
    assert np.max(np.abs(m)) <= 1.0 + 1e-6
    assert float(module.tail_mass().detach()) < 1e-8
    # Without the bounds (sd = 1, means 0) and with the l1 scaling on axis directions, T_j explodes.
    wild = MixtureParameters(
        np.ones(1), (np.array([[0.5, 0.5]]),), np.zeros((1, 3)), np.zeros((1, 3, 0)), np.ones((1, 3))
    )
    axes = np.eye(4)[:3]
    blown = model_moments(wild, layout, axes, direction_scales(axes, "l1"), 32)
    assert np.max(np.abs(blown)) > 1e10


def test_scales_must_bound_the_projection():
    layout = EncodingLayout((Coordinate("a", "value", 3), Coordinate("b", "value", 0)))
    with pytest.raises(ValueError, match="direction_scales"):
        MomentEvaluator(layout, np.array([[1.0, 1.0]]), np.array([1.0]), 8)


# --------------------------------------------------------------------------------------------------------------
# Numeric columns as per-component histograms ("binned" coordinates: bin centre + uniform offset in the bin)

BINNED = EncodingLayout(
    (
        Coordinate("a", "binned", 16),
        Coordinate("b", "value", 3),
        Coordinate("c", "binned", 64),
        Coordinate("x", "value", 0),
    )
)


def test_binned_coordinates_match_monte_carlo():
    """The closed form treats the uniform in-bin offset as N(0, h^2/12): same mean and variance, higher cumulants
    O(h^4 w^4). Monte Carlo draws the actual uniform offsets; every moment up to k = 16 must lie within 4
    standard errors of 10^6 draws, which bounds the approximation too. ``sample_cube`` must draw inside the bins."""
    from splice_assets.sampling import from_parameters, sample_cube

    rng = np.random.default_rng(12)
    params = _random_params(BINNED, K=3, R=0, rng=rng)
    n = 1_000_000
    x = _sample(params, BINNED, n, rng)
    for i, c in enumerate(BINNED.coordinates):
        if c.is_binned:
            x[:, i] += rng.uniform(-1.0, 1.0, n) / c.levels
    _assert_matches_monte_carlo(params, BINNED, x, 4, 16)
    cube = sample_cube(from_parameters(params, BINNED), 20_000, seed=3, match_marginals=False)
    grid_a, grid_c = BINNED.coordinates[0].grid(), BINNED.coordinates[2].grid()
    assert np.allclose(grid_a, -1 + (2 * np.arange(16) + 1) / 16) and np.all(np.abs(cube) <= 1.0)
    assert np.all(np.abs(cube[:, 0, None] - grid_a).min(axis=1) <= 1 / 16 + 1e-12)
    assert np.all(np.abs(cube[:, 2, None] - grid_c).min(axis=1) <= 1 / 64 + 1e-12)
    # The offsets fill the bins uniformly: bin-relative positions of coordinate a have mean 0.5 and variance 1/12.
    rel = (cube[:, 0] + 1) * 8 % 1
    assert abs(rel.mean() - 0.5) < 0.01 and abs(rel.var() - 1 / 12) < 0.005


@pytest.mark.parametrize("k", [8, 16])
def test_stable_path_agrees_with_the_fast_path_on_binned_coordinates(k):
    """A binned grid ends inside [-1, 1] (its outer centres are 1 - h/2): the stable path must read every part on
    its own interval [-|w| max|g|, |w| max|g|]. Before that fix the two paths differed by 0.06 at k = 16 (measured);
    where the fast path's own error estimate is small they must agree to 1e-10 (at k = 32 it rarely is)."""
    rng = np.random.default_rng(k)
    params = _random_params(BINNED, K=3, R=0, rng=rng)
    dirs = np.vstack([draw_directions(5, 32, BINNED.d), np.eye(BINNED.d)])
    scales = direction_scales(dirs, "ball")
    q = TorchMixture.from_numpy(params, BINNED)
    fast_ev = MomentEvaluator(BINNED, dirs, scales, k, max_taylor_error=math.inf)
    with torch.no_grad():
        fast = fast_ev(q).numpy()
        stable = MomentEvaluator(BINNED, dirs, scales, k, max_taylor_error=0.0)(q).numpy()
        mean, var = fast_ev._gaussian_projection(q)
        estimate = fast_ev._taylor_moments(q, mean, var)[1].amax(0).numpy()
    trusted = estimate < 1e-12
    assert trusted.sum() >= len(dirs) // 2
    assert np.max(np.abs(fast - stable)[:, trusted]) <= 1e-10


def test_binned_marginals_sum_model_bins_into_measured_bins():
    from splice_assets.model.mixture import MarginalEvaluator

    params = _random_params(BINNED, K=2, R=0, rng=np.random.default_rng(13))
    with torch.no_grad():
        cells = MarginalEvaluator(BINNED, 16)(TorchMixture.from_numpy(params, BINNED)).numpy()
    a, b, c = cells[:16], cells[16:19], cells[19:35]
    np.testing.assert_allclose(a, params.weights @ params.probs[0], atol=1e-15)
    np.testing.assert_allclose(b, params.weights @ params.probs[1], atol=1e-15)
    np.testing.assert_allclose(c, (params.weights @ params.probs[2]).reshape(16, 4).sum(1), atol=1e-15)
    with pytest.raises(ValueError, match="'a': 16 model bins do not refine the 32 measured bins"):
        MarginalEvaluator(BINNED, 32)
