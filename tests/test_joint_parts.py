"""Joint parts: two discrete coordinates that share one table per component (fit module, 2-way tables, sampling,
save/load). Their moments are checked against exact enumeration in ``test_model_moments``."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from test_marginal_queries import LAYOUT as DATA_LAYOUT

from splice_assets.layout import (
    coordinate_pairs,
    direction_scales,
    draw_directions,
    histogram_layout,
    marginal_sizes,
    pair_sizes,
)
from splice_assets.model.mixture import (
    MarginalEvaluator,
    MixtureModule,
    MixtureParameters,
    MomentEvaluator,
    PairEvaluator,
    TorchMixture,
)
from splice_assets.private.statistics import pair_counts
from splice_assets.sampling import from_parameters, load_model, sample_cube, save_model

torch.set_num_threads(1)

BINS = 4
LAYOUT = histogram_layout(DATA_LAYOUT, 2 * BINS)  # a binned (8 model bins over 4 measured), a missing, b, c
PAIRS = coordinate_pairs(LAYOUT)
JOINT = ((2, 0), (1, 3))  # b x a(value) and a(missing) x c, given in the order opposite to their pair blocks


def _params(rng: np.random.Generator, K: int = 3) -> MixtureParameters:
    levels = [c.levels for c in LAYOUT.coordinates]
    joint = [
        rng.dirichlet(np.full(levels[a] * levels[b], 0.3), size=K).reshape(K, levels[a], levels[b]) for a, b in JOINT
    ]
    probs = [None] * LAYOUT.d
    for (a, b), table in zip(JOINT, joint):
        probs[a], probs[b] = table.sum(2), table.sum(1)
    params = MixtureParameters(
        np.array([0.5, 0.3, 0.2]),
        tuple(probs),
        np.zeros((K, 0)),
        np.zeros((K, 0, 0)),
        np.zeros((K, 0)),
        JOINT,
        tuple(joint),
    )
    params.check(LAYOUT)
    return params


def test_pair_tables_match_the_sampler_and_their_margins():
    """Exact 2-way tables (joint blocks read from the joint tables, the rest from the product) against 10^6 rows
    drawn by ``sample_cube``: every cell within 4.5 standard errors."""
    params = _params(np.random.default_rng(3))
    q = from_parameters(params, LAYOUT)

    tm = TorchMixture.from_numpy(params, LAYOUT)
    with torch.no_grad():
        exact = PairEvaluator(LAYOUT, BINS, PAIRS, joint_pairs=JOINT)(tm).numpy()
        product = PairEvaluator(LAYOUT, BINS, PAIRS)(tm).numpy()
        one_way = np.split(MarginalEvaluator(LAYOUT, BINS)(tm).numpy(), np.cumsum(marginal_sizes(LAYOUT, BINS))[:-1])
    sizes = marginal_sizes(LAYOUT, BINS)
    blocks = np.cumsum(pair_sizes(LAYOUT, PAIRS, BINS))[:-1]
    for (a, b), block, prod in zip(PAIRS, np.split(exact, blocks), np.split(product, blocks)):
        table = block.reshape(sizes[a], sizes[b])
        np.testing.assert_allclose(table.sum(1), one_way[a], atol=1e-14)
        np.testing.assert_allclose(table.sum(0), one_way[b], atol=1e-14)
        if {a, b} in ({2, 0}, {1, 3}):  # the dependent tables differ from the product of their margins
            assert np.abs(block - prod).sum() > 0.05
    n = 1_000_000
    cube = sample_cube(q, n, seed=2, match_marginals=False)
    mc = pair_counts(cube, DATA_LAYOUT, PAIRS, BINS).frequencies(n)  # the data layout bins a on the measured bins
    se = np.sqrt(np.clip(exact * (1 - exact), 1e-12, None) / n)
    assert np.all(np.abs(mc - exact) <= 4.5 * se + 1e-12)


def test_module_keeps_margins_consistent_and_learns_a_joint_table():
    """The module's probs for joint coordinates are the joint tables' margins, and a few Adam steps on the 2-way
    loss alone move a product start towards a dependent target (loss down by more than half)."""
    rng = np.random.default_rng(4)
    target = _params(rng)
    module = MixtureModule(LAYOUT, K=3, R=0, joint_pairs=JOINT)
    q = module()
    for (a, b), table in zip(JOINT, q.joint):
        np.testing.assert_allclose(q.probs[:, a, : table.shape[1]].detach(), table.sum(2).detach(), atol=1e-14)
        np.testing.assert_allclose(q.probs[:, b, : table.shape[2]].detach(), table.sum(1).detach(), atol=1e-14)
    evaluator = PairEvaluator(LAYOUT, BINS, PAIRS, joint_pairs=JOINT)

    with torch.no_grad():
        goal = evaluator(TorchMixture.from_numpy(target, LAYOUT))
    opt = torch.optim.Adam(module.parameters(), lr=0.1)
    losses = []
    for _ in range(60):
        opt.zero_grad()
        loss = ((evaluator(module()) - goal) ** 2).sum()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < 0.5 * losses[0]
    params = module().to_numpy(LAYOUT)
    params.check(LAYOUT)
    assert params.joint_pairs == JOINT


def test_initialise_with_joint_tables_round_trips():
    params = _params(np.random.default_rng(5))
    module = MixtureModule(LAYOUT, K=3, R=0, joint_pairs=JOINT)
    rmax = max(c.levels for c in LAYOUT.coordinates)
    probs = np.zeros((3, LAYOUT.d, rmax))
    for t, p in enumerate(params.probs):
        probs[:, t, : p.shape[1]] = p
    empty = np.zeros((3, 0))
    module.initialise(params.weights, probs, empty, empty, np.zeros((3, 0, 0)), empty, joint=params.joint)
    back = module().to_numpy(LAYOUT)
    for got, want in zip(back.joint, params.joint):
        np.testing.assert_allclose(got, want, atol=1e-9)
    np.testing.assert_allclose(back.weights, params.weights, atol=1e-6)


def test_save_and_load_keep_the_joint_parts(tmp_path):
    params = _params(np.random.default_rng(6))
    model = from_parameters(params, LAYOUT, k=8)
    save_model(model, tmp_path / "m")
    back = load_model(tmp_path / "m")
    assert back.params.joint_pairs == JOINT
    # Version 2 only with joint parts: a reader from before them refuses the file rather than sample the pair
    # independently; models without joint parts stay readable by it.
    assert json.loads((tmp_path / "m.json").read_text())["format_version"] == 2
    plain = MixtureParameters(params.weights, params.probs, params.means, params.factors, params.diag)
    save_model(from_parameters(plain, LAYOUT, k=8), tmp_path / "plain")
    assert json.loads((tmp_path / "plain.json").read_text())["format_version"] == 1
    meta = json.loads((tmp_path / "m.json").read_text())
    (tmp_path / "m.json").write_text(json.dumps({**meta, "format_version": 3}))
    with pytest.raises(ValueError, match="unsupported format version"):
        load_model(tmp_path / "m")
    for got, want in zip(back.params.joint, params.joint):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(sample_cube(back, 500, seed=1, match_marginals=False),
                                  sample_cube(model, 500, seed=1, match_marginals=False))
    dirs = draw_directions(0, 8, LAYOUT.d)
    ev = MomentEvaluator(LAYOUT, dirs, direction_scales(dirs, "ball"), 8, joint_pairs=JOINT)

    with torch.no_grad():
        assert torch.equal(
            ev(TorchMixture.from_numpy(back.params, LAYOUT)), ev(TorchMixture.from_numpy(params, LAYOUT))
        )


@pytest.mark.parametrize("pairs", [((0, 0),), ((0, 2), (2, 3))])
def test_module_rejects_bad_joint_pairs(pairs):
    with pytest.raises(ValueError, match="joint pair"):
        MixtureModule(LAYOUT, K=2, R=0, joint_pairs=pairs)


def _dependent_toy(n: int, rng: np.random.Generator) -> np.ndarray:
    """Toy rows where c is nearly a function of b (and a independent): a K = 1 product model cannot hold b x c."""
    from toy import TOY_SCHEMA

    from splice_assets.layout import layout_for

    layout = layout_for(TOY_SCHEMA)
    b = rng.integers(0, 3, n)
    c = np.where(rng.random(n) < 0.9, np.array([0, 2, 4])[b], rng.integers(0, 5, n))
    return np.column_stack([rng.uniform(-1, 1, n), layout.coordinates[1].grid()[b], layout.coordinates[2].grid()[c]])


def test_fit_chooses_the_misfit_pair_and_holds_its_table():
    """K = 1 on exact statistics: without joint parts b x c is the product of its margins (TVD ~0.6 from the
    truth); with ``joint_pairs = 1`` the fit picks (b, c), the only pair far above the noise, and its table comes
    within 0.05 of the truth (measured 0.615 and 0.003)."""
    from toy import TOY_SCHEMA

    from splice_assets.layout import layout_for
    from splice_assets.model.fit import FitConfig
    from splice_assets.postprocess.targets import fit_denoised
    from splice_assets.private import measuring

    layout = layout_for(TOY_SCHEMA)
    x = _dependent_toy(4000, np.random.default_rng(9))
    plan, cal = measuring.make_plan(TOY_SCHEMA, len(x), 1.0, 1e-6, 32, 4, marginal_share=0.2, pair_share=0.5)
    stats = measuring.exact_statistics(x, plan, layout)
    exact = measuring.measurement_of(plan, cal, layout.d, stats.moments, stats.marginals, stats.pairs)
    index = plan.pairs.index((1, 2))
    truth = np.split(stats.pairs, np.cumsum(plan.pair_sizes)[:-1])[index]

    def bc_tvd(joint_pairs: int) -> tuple[float, tuple]:
        model = fit_denoised(exact, layout, FitConfig(K=1, max_steps=150, joint_pairs=joint_pairs))
        tables = PairEvaluator(model.layout, plan.numeric_bins, plan.pairs, joint_pairs=model.params.joint_pairs)(
            TorchMixture.from_numpy(model.params, model.layout)).detach().numpy()
        got = np.split(tables, np.cumsum(plan.pair_sizes)[:-1])[index]
        return 0.5 * float(np.abs(got - truth).sum()), model.params.joint_pairs

    without, none = bc_tvd(0)
    with_joint, chosen = bc_tvd(1)
    assert none == () and chosen == ((1, 2),)
    assert without > 0.4 and with_joint < 0.05, (without, with_joint)


def test_negative_joint_settings_are_rejected_with_the_value():
    from toy import TOY_SCHEMA

    from splice_assets.layout import layout_for
    from splice_assets.model.fit import FitConfig, fit_mixture

    with pytest.raises(ValueError, match="joint_pairs must be an integer >= 0, got -1"):
        fit_mixture(
            np.zeros((2, 4)), np.ones((4, 3)) / 3, np.ones(4), layout_for(TOY_SCHEMA), 0.1, FitConfig(joint_pairs=-1)
        )


@pytest.mark.parametrize("max_taylor_error, fused", [(1e-11, True), (1e-11, False), (0.0, True)],
                         ids=["fast-kernels", "fast-torch", "stable"])
def test_moment_gradients_through_joint_parts(max_taylor_error, fused):
    """Analytic gradients of the moments with respect to a joint table, the weights and the other probabilities
    (on the fast path the fused kernels' hand-written backward passes) agree with finite differences."""
    params = _params(np.random.default_rng(7), K=3)
    dirs = draw_directions(2, 6, LAYOUT.d)
    ev = MomentEvaluator(LAYOUT, dirs, direction_scales(dirs, "ball"), 6, max_taylor_error=max_taylor_error,
                         joint_pairs=JOINT, fused=fused)
    base = TorchMixture.from_numpy(params, LAYOUT)

    def moments(weights, table, probs):
        q = TorchMixture(weights, probs, base.means, base.factors, base.diag, JOINT, (table, base.joint[1]))
        return ev(q)

    inputs = tuple(t.clone().requires_grad_(True) for t in (base.weights, base.joint[0], base.probs))
    assert torch.autograd.gradcheck(moments, inputs, eps=1e-6, atol=1e-8)
