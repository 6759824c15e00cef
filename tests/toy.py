"""A small public schema shared by the tests that fit and sample end to end: one numeric, one categorical and one
ordinal column, none nullable (d = 3)."""

import numpy as np

from splice_assets.layout import layout_for
from splice_assets.measurement import Measurement
from splice_assets.private import measuring
from splice_assets.schema import parse_schema

TOY_SCHEMA = parse_schema({
    "name": "toy", "version": 1, "n_min": 2,
    "columns": [
        {"name": "a", "kind": "continuous", "bounds": [0, 1]},
        {"name": "b", "kind": "categorical", "categories": ["x", "y", "z"]},
        {"name": "c", "kind": "ordinal", "categories": [1, 2, 3, 4, 5]},
    ],
})


def toy_measurement(rows: np.ndarray, epsilon: float = 2.0, seed: int = 0) -> Measurement:
    """Exact statistics of cube-encoded toy ``rows`` (L = 32, k = 4, shares 0.2 / 0.5) plus the mechanism's noise at
    ``epsilon``, drawn from a SEEDED generator (test only: the product's noise is unseeded OS entropy)."""
    plan, cal = measuring.make_plan(TOY_SCHEMA, len(rows), epsilon, 1e-6, 32, 4, marginal_share=0.2, pair_share=0.5)
    stats = measuring.exact_statistics(rows, plan, layout_for(TOY_SCHEMA))
    rng = np.random.default_rng(seed)
    moment_std = cal.sigma * np.sqrt(np.arange(1, plan.k + 1))[:, None]
    return measuring.measurement_of(
        plan, cal, rows.shape[1],
        stats.moments + rng.standard_normal(stats.moments.shape) * moment_std,
        stats.marginals + rng.standard_normal(stats.marginals.shape) * cal.sigma / plan.marginal_weight,
        stats.pairs + rng.standard_normal(stats.pairs.shape) * cal.sigma / plan.pair_weight,
    )
