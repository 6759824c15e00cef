"""The public library call (being replaced by ``Synthesizer``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import pandas as pd

from splice_assets.measurement import (
    RELATION_REPLACE_ONE,
    Measurement,
)
from splice_assets.model.fit import FitConfig, FittedMixture
from splice_assets.postprocess.chain import fit
from splice_assets.private.encoding import encode
from splice_assets.private.measuring import SpendRecorder, make_plan, measure
from splice_assets.private.mechanism import (
    DEFAULT_K,
    DEFAULT_MARGINAL_SHARE,
    DEFAULT_N_DIRECTIONS,
    DEFAULT_PAIR_SHARE,
)
from splice_assets.sampling import (
    sample_table,
)
from splice_assets.schema import TableSchema


@dataclass(frozen=True)
class SynthesisResult:
    measurement: Measurement
    model: FittedMixture
    synthetic: pd.DataFrame
    seconds: dict[str, float] = field(default_factory=dict)


def synthesize(
    table: pd.DataFrame,
    schema: TableSchema,
    epsilon: float,
    delta: float,
    n_rows: int | None = None,
    n_directions: int = DEFAULT_N_DIRECTIONS,
    k: int = DEFAULT_K,
    seed: int = 0,
    fit_config: FitConfig | None = None,
    ledger: SpendRecorder | None = None,
    release_id: str = "adhoc",
    marginal_share: float = DEFAULT_MARGINAL_SHARE,
    pair_share: float = DEFAULT_PAIR_SHARE,
    relation: str = RELATION_REPLACE_ONE,
) -> SynthesisResult:
    """encode -> measure -> fit -> sample, for a table already passed through ``validation.validate``.

    ``n_rows`` defaults to the measurement's n: the table's under replace-one, the noisy one under add-remove."""
    seconds: dict[str, float] = {}
    start = time.perf_counter()
    x = encode(table, schema)
    seconds["encode"] = time.perf_counter() - start
    plan, calibration = make_plan(
        schema, len(table), epsilon, delta, n_directions, k, seed, marginal_share=marginal_share,
        pair_share=pair_share, relation=relation,
    )
    start = time.perf_counter()
    measurement = measure(x, schema, plan, calibration, ledger, release_id)
    seconds["measure"] = time.perf_counter() - start
    start = time.perf_counter()
    model = fit(measurement, schema, fit_config or FitConfig(seed=seed))
    seconds["fit"] = time.perf_counter() - start
    start = time.perf_counter()
    synthetic = sample_table(model, schema, n_rows or measurement.n, seed)
    seconds["sample"] = time.perf_counter() - start
    return SynthesisResult(measurement, model, synthetic, seconds)
