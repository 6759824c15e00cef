"""Fitting the mixture to (noisy) sliced moments: recovery, determinism, privacy-safe API, real small table."""

from __future__ import annotations

import inspect

import numpy as np
import pandas as pd
import pytest
import torch

from splice_assets.layout import (
    Coordinate,
    EncodingLayout,
    direction_scales,
    draw_directions,
    harmonic,
    layout_for,
)
from splice_assets.measurement import Measurement
from splice_assets.model.fit import FitConfig, fit_measurement, fit_mixture
from splice_assets.model.mixture import MixtureParameters, model_moments
from splice_assets.postprocess.synthetic_model import SyntheticModel
from splice_assets.postprocess.targets import fit_denoised
from splice_assets.private.encoding import encode
from splice_assets.private.validation import conform, validate
from splice_assets.sampling import from_parameters, sample_cube, sample_table
from splice_assets.schema import parse_schema

torch.set_num_threads(1)


def sliced_w1(a: np.ndarray, b: np.ndarray, n_dirs: int = 64, seed: int = 999) -> float:
    """Mean over random unit directions of the 1-d W1 between projections (equal sample sizes)."""
    dirs = draw_directions(seed, n_dirs, a.shape[1])
    pa, pb = np.sort(a @ dirs.T, axis=0), np.sort(b @ dirs.T, axis=0)
    return float(np.abs(pa - pb).mean())


def two_way_tvd(real: pd.DataFrame, synth: pd.DataFrame, bins: dict[str, np.ndarray]) -> float:
    def codes(df):
        out = {}
        for c in df.columns:
            if c in bins:
                out[c] = np.digitize(df[c].to_numpy(dtype=float), bins[c][1:-1])
            else:
                out[c] = df[c].astype(str).to_numpy()
        return pd.DataFrame(out)

    r, s = codes(real), codes(synth)
    tvds = []
    cols = list(real.columns)
    for i in range(len(cols)):
        for j in range(i + 1, len(cols)):
            pr = r.groupby([cols[i], cols[j]]).size() / len(r)
            ps = s.groupby([cols[i], cols[j]]).size() / len(s)
            tvds.append(0.5 * pr.sub(ps, fill_value=0).abs().sum())
    return float(np.mean(tvds))


LAYOUT = EncodingLayout(
    (Coordinate("a", "value", 3), Coordinate("x", "value", 0), Coordinate("y", "value", 0), Coordinate("b", "value", 2))
)
TRUTH = MixtureParameters(
    weights=np.array([0.4, 0.6]),
    probs=(np.array([[0.8, 0.15, 0.05], [0.1, 0.2, 0.7]]), np.array([[0.9, 0.1], [0.2, 0.8]])),
    means=np.array([[-0.5, 0.3], [0.4, -0.2]]),
    factors=np.array([[[0.08], [0.06]], [[-0.05], [0.07]]]),
    diag=np.array([[0.01, 0.008], [0.012, 0.01]]),
)


def test_recovery_from_noise_free_moments():
    dirs = draw_directions(1, 256, LAYOUT.d)
    scales = direction_scales(dirs, "ball")
    exact = model_moments(TRUTH, LAYOUT, dirs, scales, 12)
    fitted = fit_mixture(
        exact,
        dirs,
        scales,
        LAYOUT,
        sigma=0.0,
        config=FitConfig(numeric_model="gaussian", K=3, R=1, max_steps=400, seed=0),
    )
    truth_rows = sample_cube(from_parameters(TRUTH, LAYOUT), 100_000, 1)
    fit_rows = sample_cube(SyntheticModel.of(fitted), 100_000, 2)
    other_truth = sample_cube(from_parameters(TRUTH, LAYOUT), 100_000, 3)
    baseline = sliced_w1(truth_rows, other_truth)  # sampling noise level
    sw1 = sliced_w1(truth_rows, fit_rows)
    assert sw1 < 0.02, (sw1, baseline)
    assert fitted.loss_curve[-1] < 0.05 * fitted.loss_curve[0]


def test_fit_is_deterministic_and_never_sees_rows():
    params = inspect.signature(fit_mixture).parameters
    assert list(params) == ["noisy_moments", "directions", "scales", "layout", "sigma", "config", "marginals", "pairs"]
    dirs = draw_directions(2, 64, LAYOUT.d)
    scales = direction_scales(dirs, "ball")
    m = model_moments(TRUTH, LAYOUT, dirs, scales, 8)
    cfg = FitConfig(numeric_model="gaussian", K=2, R=1, max_steps=60, min_steps=60, seed=5)
    a = fit_mixture(m, dirs, scales, LAYOUT, 0.01, cfg)
    b = fit_mixture(m, dirs, scales, LAYOUT, 0.01, cfg)
    assert np.array_equal(a.loss_curve, b.loss_curve)
    assert np.array_equal(a.params.means, b.params.means)
    c = fit_mixture(
        m, dirs, scales, LAYOUT, 0.01, FitConfig(numeric_model="gaussian", K=2, R=1, max_steps=60, min_steps=60, seed=6)
    )
    assert not np.array_equal(a.params.means, c.params.means)
    # A stored Measurement (public facts + noisy moments) is all the fit needs.
    meas = Measurement("toy", 1, 2, 64, 8, 1000, LAYOUT.d, "ball", m, 0.01, 0.002, 1.0, 1e-9)
    d = fit_measurement(meas, LAYOUT, cfg)
    assert np.array_equal(d.loss_curve, a.loss_curve)
    assert a.noise_floor == pytest.approx(0.01**2 * harmonic(8))



def test_marginals_enter_the_loss_only_with_a_positive_weight():
    """Targets are kept for matching either way; with ``marginal_loss_weight`` > 0 they also pull the fit (and
    the noise floor counts their cells). Targets here are deliberately far from the moments' truth: summed over the
    4 coordinates, the model's mass in the target cells measured 1.05 without and 2.99 with the loss term (max 4)."""
    from splice_assets.model.fit import MarginalTargets
    from splice_assets.model.mixture import MarginalEvaluator, TorchMixture

    dirs = draw_directions(2, 64, LAYOUT.d)
    scales = direction_scales(dirs, "ball")
    m = model_moments(TRUTH, LAYOUT, dirs, scales, 8)
    bins = 4
    sizes = [c.levels if c.is_discrete else bins for c in LAYOUT.coordinates]
    targets = MarginalTargets(np.concatenate([np.eye(s)[0] for s in sizes]), 5.0, bins)  # all mass in cell 0
    fits = {
        weight: fit_mixture(m, dirs, scales, LAYOUT, 0.01,
                            FitConfig(numeric_model="gaussian", K=2, R=1, max_steps=80, min_steps=80, seed=5,
                                      marginal_loss_weight=weight), targets)
        for weight in (0.0, 1.0)
    }  # fmt: skip

    def cell0_mass(fitted) -> float:
        q = TorchMixture.from_numpy(fitted.params, LAYOUT)
        return float((MarginalEvaluator(LAYOUT, bins)(q).numpy() * targets.frequencies).sum())

    assert all(f.marginal_targets is targets for f in fits.values())
    assert fits[0.0].noise_floor == pytest.approx(0.01**2 * harmonic(8))
    assert fits[1.0].noise_floor == pytest.approx(0.01**2 * (harmonic(8) + sum(sizes) / 64))
    assert cell0_mass(fits[1.0]) > cell0_mass(fits[0.0]) + 0.5

def test_pairs_enter_the_loss_with_their_weight():
    """2-way targets pull the model's 2-way tables: targets with all mass in cell (0, 0) of every pair, far from
    the moments' truth. Summed over the 5 pairs, the mass in the target cells measured 0.60 without the term and
    2.01 with it (max 5); tolerance: a rise of at least 0.5."""
    from splice_assets.layout import coordinate_pairs, pair_sizes
    from splice_assets.model.fit import PairTargets
    from splice_assets.model.mixture import PairEvaluator, TorchMixture

    dirs = draw_directions(2, 64, LAYOUT.d)
    scales = direction_scales(dirs, "ball")
    m = model_moments(TRUTH, LAYOUT, dirs, scales, 8)
    bins, pairs = 4, coordinate_pairs(LAYOUT)
    targets = PairTargets(np.concatenate([np.eye(s)[0] for s in pair_sizes(LAYOUT, pairs, bins)]), 5.0, bins, pairs)
    fits = {
        weight: fit_mixture(m, dirs, scales, LAYOUT, 0.01,
                            FitConfig(numeric_model="gaussian", K=2, R=1, max_steps=80, min_steps=80, seed=5,
                                      pair_loss_weight=weight),
                            pairs=targets)
        for weight in (0.0, 1.0)
    }  # fmt: skip

    def target_mass(fitted) -> float:
        q = TorchMixture.from_numpy(fitted.params, LAYOUT)
        return float((PairEvaluator(LAYOUT, bins, pairs)(q).numpy() * targets.frequencies).sum())

    assert fits[0.0].noise_floor == pytest.approx(0.01**2 * harmonic(8))
    cells = sum(pair_sizes(LAYOUT, pairs, bins))
    assert fits[1.0].noise_floor == pytest.approx(0.01**2 * (harmonic(8) + cells / 64))
    assert target_mass(fits[1.0]) > target_mass(fits[0.0]) + 0.5, (target_mass(fits[0.0]), target_mass(fits[1.0]))


FAIR_SCHEMA = parse_schema(
    {
        "name": "fair",
        "version": 1,
        "n_min": 100,
        "columns": [
            {"name": "rate_marriage", "kind": "ordinal", "categories": [1, 2, 3, 4, 5]},
            {"name": "age", "kind": "continuous", "bounds": [15, 65]},
            {"name": "yrs_married", "kind": "continuous", "bounds": [0, 45]},
            {"name": "children", "kind": "continuous", "bounds": [0, 10]},
            {"name": "religious", "kind": "ordinal", "categories": [1, 2, 3, 4]},
            {"name": "educ", "kind": "ordinal", "categories": [9, 12, 14, 16, 17, 20]},
            {"name": "occupation", "kind": "categorical", "categories": [1, 2, 3, 4, 5, 6]},
            {"name": "occupation_husb", "kind": "categorical", "categories": [1, 2, 3, 4, 5, 6]},
            {"name": "affairs", "kind": "continuous", "bounds": [0, 100]},
        ],
    }
)


def _fair_split():
    """The bundled demo table and its public schema, split 80/20 with seed 0 (holdout = the judge)."""
    from splice_assets.datasets import DEMO_DATASET, demo_data_path, schema_path
    from splice_assets.schema import load_schema

    schema = load_schema(schema_path(DEMO_DATASET))
    table = validate(pd.read_csv(demo_data_path()), schema).table
    order = np.random.default_rng(0).permutation(len(table))
    cut = int(0.8 * len(table))
    return schema, table.iloc[order[:cut]].reset_index(drop=True), table.iloc[order[cut:]].reset_index(drop=True)


def _fair_scores(schema, train, holdout, measurement, config):
    from splice_assets.evaluation.metrics import marginal_tvd, sliced_wasserstein

    fitted = SyntheticModel.of(fit_denoised(measurement, layout_for(schema), config))
    synth = sample_table(fitted, schema, len(train), seed=1)
    conform(synth, schema)
    tvd = marginal_tvd(holdout, synth, schema, 0)
    return tvd.two_way, tvd.three_way, sliced_wasserstein(encode(synth, schema), encode(holdout, schema), 7), fitted


def _fair_measurement(schema, train, epsilon: float | None, seed: int = 0) -> Measurement:
    """Exact statistics through the release path; noise (if epsilon) drawn from a SEEDED generator, test only."""
    from splice_assets.private import measuring

    plan, cal = measuring.make_plan(schema, len(train), epsilon or 1.0, 1e-9)  # the product's default queries
    stats = measuring.exact_statistics(encode(train, schema), plan, layout_for(schema))
    moments, marginals, pairs, sigma = stats.moments, stats.marginals, stats.pairs, 1e-4
    if epsilon is not None:
        rng = np.random.default_rng(seed)
        sigma = cal.sigma
        moments = moments + rng.standard_normal(moments.shape) * sigma * np.sqrt(np.arange(1, plan.k + 1))[:, None]
        marginals = marginals + rng.standard_normal(marginals.shape) * sigma / plan.marginal_weight
        pairs = pairs + rng.standard_normal(pairs.shape) * sigma / plan.pair_weight
    return Measurement(
        schema.name, schema.version, plan.seed, plan.n_directions, plan.k, plan.n, stats.d, "ball", moments, sigma,
        cal.sensitivity, epsilon or 0.0, 1e-9, noisy_marginals=marginals, marginal_sizes=plan.marginal_sizes,
        marginal_weight=plan.marginal_weight, numeric_bins=plan.numeric_bins, noisy_pairs=pairs, pairs=plan.pairs,
        pair_sizes=plan.pair_sizes, pair_weight=plan.pair_weight,
    )


@pytest.fixture(scope="module")
def fair_baseline():
    from splice_assets.evaluation.metrics import (
        independent_marginals_baseline,
        marginal_tvd,
        sliced_wasserstein,
    )

    schema, train, holdout = _fair_split()
    indep = independent_marginals_baseline(train, schema, len(train), 1)
    tvd = marginal_tvd(holdout, indep, schema, 0)
    sw1 = sliced_wasserstein(encode(indep, schema), encode(holdout, schema), 7)
    return schema, train, holdout, (tvd.two_way, tvd.three_way, sw1)


def test_fair_affairs_noise_free_beats_independent_marginals(fair_baseline):
    """Bundled data, default model and queries (moments, 1-way and 2-way marginals), exact statistics.

    Measured: 2-way 0.059 vs 0.100, 3-way 0.119 vs 0.212, SW1 0.0081 vs 0.0254. Tolerance: strict inequalities;
    fixed seeds make the run deterministic.
    """
    schema, train, holdout, (tvd2_ind, tvd3_ind, sw_ind) = fair_baseline
    tvd2, tvd3, sw, fitted = _fair_scores(schema, train, holdout, _fair_measurement(schema, train, None),
                                          FitConfig(max_steps=800, seed=0))
    assert tvd2 < tvd2_ind and tvd3 < tvd3_ind and sw < sw_ind, (tvd2, tvd2_ind, tvd3, tvd3_ind, sw, sw_ind)


def test_fair_affairs_at_epsilon_1_beats_independent_on_sw1(fair_baseline):
    """eps = 1, delta = 1e-9 noise on every query (seeded here), default shares: the fit reaches the noise floor
    (measured final loss / floor 0.95-1.00 over three draws) and beats independent marginals on sliced W1
    (measured 0.0124 vs 0.0254)."""
    schema, train, holdout, (_, _, sw_ind) = fair_baseline
    _, _, sw, fitted = _fair_scores(schema, train, holdout, _fair_measurement(schema, train, 1.0),
                                    FitConfig(max_steps=600, seed=0))
    assert sw < sw_ind, (sw, sw_ind)
    assert fitted.final_loss < 1.5 * fitted.noise_floor


def test_fair_affairs_at_epsilon_1_beats_independent_on_2way_and_3way(fair_baseline):
    """eps = 1 with the default queries (moments, 1-way and 2-way marginals; noise seeded here). Measured over noise
    seeds 0 / 1 / 2: 2-way TVD 0.090 / 0.091 / 0.082 vs 0.100 for independent EXACT marginals, 3-way 0.166 / 0.170 /
    0.162 vs 0.212. (With 1-way marginals only it was 0.105 / 0.099 / 0.096: parity.) Tolerance: strict
    inequality on seed 0 (fixed seeds make the run deterministic; the worst draw, seed 1, is 0.091)."""
    schema, train, holdout, (tvd2_ind, tvd3_ind, _) = fair_baseline
    tvd2, tvd3, _, _ = _fair_scores(schema, train, holdout, _fair_measurement(schema, train, 1.0),
                                    FitConfig(max_steps=600, seed=0))
    assert tvd2 < tvd2_ind and tvd3 < tvd3_ind, (tvd2, tvd2_ind, tvd3, tvd3_ind)



@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_scheduled_adam_is_bit_identical_to_torch_adam_with_lambda_lr(dtype):
    """``ScheduledAdam`` (no torch._dynamo import) against ``torch.optim.Adam(foreach=True)`` + ``LambdaLR`` on a
    fixed seed: parameters of several shapes and dtypes, one without a gradient for its first steps, a cosine
    schedule that reaches its end before the last step. Every parameter must match to the bit at every step."""
    import math

    from splice_assets.model.adam import ScheduledAdam

    max_steps = 25

    def schedule(s: int) -> float:
        return 0.5 * (1.0 + math.cos(math.pi * min(s, max_steps) / max_steps))

    def params() -> list[torch.Tensor]:
        gen = torch.Generator().manual_seed(7)
        shapes = [(5, 3), (4,), (2, 3, 2), ()]
        return [torch.randn(shape, generator=gen, dtype=dtype).requires_grad_() for shape in shapes]

    def loss(ps: list[torch.Tensor], step: int) -> torch.Tensor:
        used = ps if step >= 3 else ps[:-1]  # the scalar gets its first gradient at step 3
        return sum(((p - 0.3) ** 2 * (1 + i) + 0.1 * torch.sin(3 * p)).sum() for i, p in enumerate(used))

    ours, theirs = params(), params()
    mine = ScheduledAdam(ours, 0.05, schedule)
    opt = torch.optim.Adam(theirs, lr=0.05, foreach=True)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule)
    for step in range(40):
        mine.zero_grad()
        loss(ours, step).backward()
        mine.step()
        opt.zero_grad(set_to_none=True)
        loss(theirs, step).backward()
        opt.step()
        sched.step()
        for a, b in zip(ours, theirs):
            assert a.dtype == b.dtype and a.detach().numpy().tobytes() == b.detach().numpy().tobytes(), step
        assert mine.lr == opt.param_groups[0]["lr"]


def test_scheduled_adam_does_not_import_the_compiler():
    """The point of ScheduledAdam: a fit's optimizer steps leave torch._dynamo (and sympy) unimported."""
    import subprocess
    import sys

    code = (
        "import sys, torch\n"
        "from splice_assets.model.adam import ScheduledAdam\n"
        "p = torch.zeros(3, dtype=torch.float64, requires_grad=True)\n"
        "opt = ScheduledAdam([p], 0.1, lambda s: 1.0)\n"
        "for _ in range(3):\n"
        "    opt.zero_grad(); ((p - 1) ** 2).sum().backward(); opt.step()\n"
        "print('torch._dynamo' in sys.modules, bool((p > 0).all()))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "True"]
