"""The public library call: validated table + schema -> measurement -> fitted model -> synthetic rows.

Scripts, the benchmark and the Dagster assets all go through these functions, so the privacy-relevant
order is written once: exact moments (private, never stored) -> ledger reservation -> noise -> artifact ->
commit. Everything after ``measure`` is post-processing of the ``Measurement`` and costs no privacy.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Protocol

import numpy as np
import pandas as pd

from . import privacy
from .encoding import ScalingMode, encode, layout_for
from .fit import FitConfig, FittedMixture, fit_mixture
from .ledger import params_hash
from .measurement import RELATION_REPLACE_ONE, Measurement
from .moments import draw_directions, moment_sums
from .sampling import sample_table
from .schema import TableSchema


class MomentsOutOfRange(RuntimeError):
    """Exact moments were not finite or left [-1, 1]: a bug upstream. Raised before any budget is reserved."""


@dataclass(frozen=True)
class MeasurementPlan:
    """Public parameters of one measurement (validated where it is built)."""

    dataset: str
    schema_version: int
    n: int
    epsilon: float
    delta: float
    n_directions: int = 1024
    k: int = 16
    seed: int = 0
    scaling: ScalingMode = "ball"

    def public_params(self) -> dict[str, object]:
        return {
            "dataset": self.dataset,
            "schema_version": self.schema_version,
            "n": self.n,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "L": self.n_directions,
            "k": self.k,
            "seed": self.seed,
            "scaling": self.scaling,
            "relation": RELATION_REPLACE_ONE,
        }


def make_plan(
    schema: TableSchema,
    n: int,
    epsilon: float,
    delta: float,
    n_directions: int = 1024,
    k: int = 16,
    seed: int = 0,
    scaling: ScalingMode = "ball",
) -> tuple[MeasurementPlan, privacy.Calibration]:
    """Validate the parameters against the schema's public n_min and calibrate the noise."""
    privacy.validate_parameters(epsilon, delta, k, n_directions, schema.n_min)
    if scaling != "ball":
        # The model's tail control relies on |theta^T x| / sqrt(d) <= max_i |x_i|; see model.py.
        raise ValueError(f"scaling mode {scaling!r} is not supported for releases yet; use 'ball'")
    plan = MeasurementPlan(schema.name, schema.version, n, epsilon, delta, n_directions, k, seed, scaling)
    return plan, privacy.calibrate(epsilon, delta, n, n_directions, k)


class SpendRecorder(Protocol):
    """What ``measure`` needs from a budget ledger."""

    def reserve(self, **entry: object) -> str: ...

    def commit(self, entry_id: str) -> None: ...

    def abort(self, entry_id: str) -> None: ...


def exact_moments(x: np.ndarray, plan: MeasurementPlan) -> np.ndarray:
    """PRIVATE exact moments (k, L) of cube-encoded rows; never store or log them."""
    directions = draw_directions(plan.seed, plan.n_directions, x.shape[1])
    return moment_sums(x, directions, plan.k, plan.scaling).moments(plan.n)


def check_moments(moments: np.ndarray) -> None:
    if not np.all(np.isfinite(moments)) or np.max(np.abs(moments), initial=0.0) > 1.0:
        raise MomentsOutOfRange("exact moments are not finite or leave [-1, 1]; nothing was charged")


def measure(
    x: np.ndarray,
    plan: MeasurementPlan,
    calibration: privacy.Calibration,
    ledger: SpendRecorder | None = None,
    release_id: str = "adhoc",
    on_noisy: Callable[[Measurement], None] | None = None,
) -> Measurement:
    """Private measurement of cube-encoded rows ``x``; see ``measure_exact`` for the order of events."""
    if x.shape[0] != plan.n:
        raise ValueError(f"the plan says n={plan.n} rows but the table has a different row count")
    return measure_exact(exact_moments(x, plan), x.shape[1], plan, calibration, ledger, release_id, on_noisy)


def measure_exact(
    moments: np.ndarray,
    d: int,
    plan: MeasurementPlan,
    calibration: privacy.Calibration,
    ledger: SpendRecorder | None = None,
    release_id: str = "adhoc",
    on_noisy: Callable[[Measurement], None] | None = None,
) -> Measurement:
    """Check the exact moments -> reserve the spend -> add noise -> ``on_noisy`` (persist) -> commit.

    Sensitivity: each row adds T_j(z)/n with |T_j| <= 1 to moment (j, l); replacing one row moves the
    1/sqrt(j)-scaled vector by at most (2/n) sqrt(L H_k) = calibration.sensitivity (slack included).
    A failure before the noise is drawn aborts the reservation; after it, the spend stays counted.
    """
    check_moments(moments)
    entry_id = None
    if ledger is not None:
        entry_id = ledger.reserve(
            dataset=plan.dataset,
            release_id=release_id,
            mechanism="gaussian/sliced-chebyshev",
            noise_multiplier=calibration.noise_multiplier,
            sigma=calibration.sigma,
            sensitivity=calibration.sensitivity,
            epsilon=plan.epsilon,
            delta=plan.delta,
            relation=RELATION_REPLACE_ONE,
            params_hash=params_hash(plan.public_params()),
        )
    try:
        noisy = privacy.add_noise(moments, calibration.sigma)
    except BaseException:
        if ledger is not None and entry_id is not None:
            ledger.abort(entry_id)
        raise
    measurement = Measurement(
        dataset=plan.dataset,
        schema_version=plan.schema_version,
        seed=plan.seed,
        n_directions=plan.n_directions,
        k=plan.k,
        n=plan.n,
        d=d,
        scaling=plan.scaling,
        noisy_moments=noisy,
        sigma=calibration.sigma,
        sensitivity=calibration.sensitivity,
        epsilon=plan.epsilon,
        delta=plan.delta,
        relation=RELATION_REPLACE_ONE,
        ledger_entry_id=entry_id,
    )
    if on_noisy is not None:
        on_noisy(measurement)
    if ledger is not None and entry_id is not None:
        ledger.commit(entry_id)
    return measurement


def fit(measurement: Measurement, schema: TableSchema, config: FitConfig) -> FittedMixture:
    """Post-processing only: the fit sees the measurement and the public schema, never rows."""
    return fit_mixture(
        measurement.noisy_moments,
        measurement.directions(),
        measurement.scales(),
        layout_for(schema),
        measurement.sigma,
        config,
    )


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
    n_directions: int = 1024,
    k: int = 16,
    seed: int = 0,
    fit_config: FitConfig | None = None,
    ledger: SpendRecorder | None = None,
    release_id: str = "adhoc",
) -> SynthesisResult:
    """encode -> measure -> fit -> sample, for a table already passed through ``validation.validate``."""
    seconds: dict[str, float] = {}
    start = time.perf_counter()
    x = encode(table, schema)
    seconds["encode"] = time.perf_counter() - start
    plan, calibration = make_plan(schema, len(table), epsilon, delta, n_directions, k, seed)
    start = time.perf_counter()
    measurement = measure(x, plan, calibration, ledger, release_id)
    seconds["measure"] = time.perf_counter() - start
    start = time.perf_counter()
    model = fit(measurement, schema, fit_config or FitConfig(seed=seed))
    seconds["fit"] = time.perf_counter() - start
    start = time.perf_counter()
    synthetic = sample_table(model, schema, n_rows or len(table), seed)
    seconds["sample"] = time.perf_counter() - start
    return SynthesisResult(measurement, model, synthetic, seconds)
