"""The public library call: validated table + schema -> measurement -> fitted model -> synthetic rows.

Scripts, the benchmark and the Dagster assets all go through these functions, so the privacy-relevant
order is written once: exact moments (private, never stored) -> ledger reservation -> noise -> artifact ->
commit. Everything after ``measure`` is post-processing of the ``Measurement`` and costs no privacy.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Protocol

import numpy as np
import pandas as pd

from . import privacy
from .privacy import DEFAULT_K, DEFAULT_MARGINAL_SHARE, DEFAULT_N_DIRECTIONS, DEFAULT_PAIR_SHARE
from .encoding import EncodingLayout, ScalingMode, encode, layout_for
from .fit import FitConfig, FittedMixture, fit_measurement
from .ledger import params_hash
from .measurement import RELATION_REPLACE_ONE, Measurement
from .moments import (
    DEFAULT_NUMERIC_BINS, coordinate_pairs, draw_directions, marginal_counts, marginal_sizes, moment_sums,
    pair_counts, pair_sizes,
)
from .sampling import TILT_CHUNK_ROWS, integer_coordinates, mixture_draws, sample_table
from .schema import TableSchema
from .links import choose_links
from .tilt import CellTilt, fit_tilt, table_cells

# Stream of the public-seed pool the cell tilt is fitted on (distinct from sampling's stream).
_TAG_TILT_POOL = 0x7117_B001


class MomentsOutOfRange(RuntimeError):
    """Exact statistics were not finite or out of range: a bug upstream. Raised before any budget is reserved."""


@dataclass(frozen=True)
class MeasurementPlan:
    """Public parameters of one measurement (validated where it is built)."""

    dataset: str
    schema_version: int
    n: int
    epsilon: float
    delta: float
    n_directions: int = DEFAULT_N_DIRECTIONS
    k: int = DEFAULT_K
    seed: int = 0
    scaling: ScalingMode = "ball"
    marginal_share: float = DEFAULT_MARGINAL_SHARE
    numeric_bins: int = DEFAULT_NUMERIC_BINS
    marginal_sizes: tuple[int, ...] = ()
    marginal_weight: float = 0.0
    pair_share: float = DEFAULT_PAIR_SHARE
    pairs: tuple[tuple[int, int], ...] = ()
    pair_sizes: tuple[int, ...] = ()
    pair_weight: float = 0.0

    @property
    def mechanism(self) -> str:
        families = ["sliced-chebyshev"] + ["marginals"] * bool(self.marginal_sizes) + ["pairs"] * bool(self.pairs)
        return "gaussian/" + "+".join(families)

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
            "marginal_share": self.marginal_share,
            "numeric_bins": self.numeric_bins,
            "pair_share": self.pair_share,
        }


def make_plan(
    schema: TableSchema,
    n: int,
    epsilon: float,
    delta: float,
    n_directions: int = DEFAULT_N_DIRECTIONS,
    k: int = DEFAULT_K,
    seed: int = 0,
    scaling: ScalingMode = "ball",
    marginal_share: float = DEFAULT_MARGINAL_SHARE,
    numeric_bins: int = DEFAULT_NUMERIC_BINS,
    pair_share: float = DEFAULT_PAIR_SHARE,
) -> tuple[MeasurementPlan, privacy.Calibration]:
    """Validate the parameters against the schema's public n_min and calibrate the one Gaussian mechanism.

    ``marginal_share`` of Delta^2 goes to every coordinate's 1-way histogram, ``pair_share`` to the 2-way
    histograms of every pair of coordinates from different columns (both 0 = the paper's moments only).
    """
    privacy.validate_parameters(epsilon, delta, k, n_directions, schema.n_min)
    if scaling != "ball":
        # The model's tail control relies on |theta^T x| / sqrt(d) <= max_i |x_i|; see model.py.
        raise ValueError(f"scaling mode {scaling!r} is not supported for releases yet; use 'ball'")
    layout = layout_for(schema)
    sizes = marginal_sizes(layout, numeric_bins) if marginal_share > 0 else ()
    pairs = coordinate_pairs(layout) if pair_share > 0 else ()
    cells = pair_sizes(layout, pairs, numeric_bins)
    weight, pair_weight = privacy.query_weights(marginal_share, pair_share, n_directions, k, len(sizes), len(pairs))
    plan = MeasurementPlan(
        schema.name, schema.version, n, epsilon, delta, n_directions, k, seed, scaling,
        marginal_share, numeric_bins, sizes, weight, pair_share, pairs, cells, pair_weight,
    )
    calibration = privacy.calibrate(
        epsilon, delta, n, n_directions, k,
        marginal_coordinates=len(sizes), marginal_cells=int(sum(sizes)), marginal_weight=weight,
        pair_count=len(pairs), pair_cells=int(sum(cells)), pair_weight=pair_weight,
    )
    return plan, calibration


class SpendRecorder(Protocol):
    """What ``measure`` needs from a budget ledger."""

    def reserve(self, **entry: object) -> str: ...

    def commit(self, entry_id: str) -> None: ...

    def abort(self, entry_id: str) -> None: ...


@dataclass(frozen=True)
class ExactStatistics:
    """PRIVATE exact statistics of the measured rows; never store, log or return them past ``measure``."""

    moments: np.ndarray
    marginals: np.ndarray
    d: int
    pairs: np.ndarray = field(default_factory=lambda: np.zeros(0))


def exact_statistics(x: np.ndarray, plan: MeasurementPlan, layout: EncodingLayout) -> ExactStatistics:
    """Exact moments (k, L) and, if planned, 1-way and 2-way histogram frequencies of cube-encoded rows."""
    if x.shape[0] != plan.n:
        raise ValueError(f"the plan says n={plan.n} rows but the table has a different row count")
    directions = draw_directions(plan.seed, plan.n_directions, x.shape[1])
    moments = moment_sums(x, directions, plan.k, plan.scaling).moments(plan.n)
    marginals = (
        marginal_counts(x, layout, plan.numeric_bins).frequencies(plan.n) if plan.marginal_sizes else np.zeros(0)
    )
    pairs = (
        pair_counts(x, layout, plan.pairs, plan.numeric_bins).frequencies(plan.n) if plan.pairs else np.zeros(0)
    )
    return ExactStatistics(moments, marginals, x.shape[1], pairs)


def statistics_in_range(stats: ExactStatistics) -> bool:
    """Moments finite in [-1, 1], histogram frequencies finite in [0, 1]: the pre-noise sanity check."""
    moments_ok = bool(np.all(np.isfinite(stats.moments)) and np.max(np.abs(stats.moments), initial=0.0) <= 1.0)
    freq = np.concatenate([stats.marginals, stats.pairs])
    return moments_ok and bool(np.all(np.isfinite(freq)) and np.all((freq >= 0.0) & (freq <= 1.0)))


def measure(
    x: np.ndarray,
    schema: TableSchema,
    plan: MeasurementPlan,
    calibration: privacy.Calibration,
    ledger: SpendRecorder | None = None,
    release_id: str = "adhoc",
    on_noisy: Callable[[Measurement], None] | None = None,
) -> Measurement:
    """Private measurement of cube-encoded rows ``x``; see ``measure_exact`` for the order of events."""
    stats = exact_statistics(x, plan, layout_for(schema))
    return measure_exact(stats, plan, calibration, ledger, release_id, on_noisy)


def measure_exact(
    stats: ExactStatistics,
    plan: MeasurementPlan,
    calibration: privacy.Calibration,
    ledger: SpendRecorder | None = None,
    release_id: str = "adhoc",
    on_noisy: Callable[[Measurement], None] | None = None,
) -> Measurement:
    """Check the exact statistics -> reserve the spend -> add noise -> ``on_noisy`` (persist) -> commit.

    Sensitivity: each row adds T_j(z)/n with |T_j| <= 1 to moment (j, l) and 1/n to one cell of each coordinate's
    histogram and of each pair's; replacing one row moves [m_j/sqrt(j), w * h1, w2 * h2] by at most
    sqrt(4 L H_k + 2 w^2 C + 2 w2^2 P)/n, which is calibration.sensitivity (float slack included). A failure
    before the noise is drawn aborts the reservation; after it, the spend stays counted.
    """
    if not statistics_in_range(stats):
        raise MomentsOutOfRange("exact statistics are not finite or out of range; nothing was charged")
    entry_id = None
    if ledger is not None:
        entry_id = ledger.reserve(
            dataset=plan.dataset,
            release_id=release_id,
            mechanism=plan.mechanism,
            noise_multiplier=calibration.noise_multiplier,
            sigma=calibration.sigma,
            sensitivity=calibration.sensitivity,
            epsilon=plan.epsilon,
            delta=plan.delta,
            relation=RELATION_REPLACE_ONE,
            params_hash=params_hash(plan.public_params()),
        )
    try:
        cell_weights = np.concatenate([
            np.full(stats.marginals.size, plan.marginal_weight), np.full(stats.pairs.size, plan.pair_weight)
        ])
        noisy_moments, noisy_histograms = privacy.add_noise_joint(
            stats.moments, np.concatenate([stats.marginals, stats.pairs]), cell_weights, calibration.sigma
        )
    except BaseException:
        if ledger is not None and entry_id is not None:
            ledger.abort(entry_id)
        raise
    measurement = measurement_of(
        plan, calibration, stats.d, noisy_moments, noisy_histograms[: stats.marginals.size],
        noisy_histograms[stats.marginals.size :], entry_id,
    )
    if on_noisy is not None:
        on_noisy(measurement)
    if ledger is not None and entry_id is not None:
        ledger.commit(entry_id)
    return measurement


def measurement_of(
    plan: MeasurementPlan,
    calibration: privacy.Calibration,
    d: int,
    moments: np.ndarray,
    marginals: np.ndarray,
    pairs: np.ndarray,
    ledger_entry_id: str | None = None,
) -> Measurement:
    """The ``Measurement`` of ``plan`` holding these (already noisy) statistics and the plan's public facts."""
    return Measurement(
        dataset=plan.dataset,
        schema_version=plan.schema_version,
        seed=plan.seed,
        n_directions=plan.n_directions,
        k=plan.k,
        n=plan.n,
        d=d,
        scaling=plan.scaling,
        noisy_moments=moments,
        sigma=calibration.sigma,
        sensitivity=calibration.sensitivity,
        epsilon=plan.epsilon,
        delta=plan.delta,
        relation=RELATION_REPLACE_ONE,
        ledger_entry_id=ledger_entry_id,
        noisy_marginals=marginals,
        marginal_sizes=plan.marginal_sizes,
        marginal_weight=plan.marginal_weight,
        numeric_bins=plan.numeric_bins,
        noisy_pairs=pairs,
        pairs=plan.pairs,
        pair_sizes=plan.pair_sizes,
        pair_weight=plan.pair_weight,
    )


def fit(measurement: Measurement, schema: TableSchema, config: FitConfig) -> FittedMixture:
    """Post-processing only: the fit sees the measurement and the public schema, never rows.

    The mixture is fitted first. With measured 2-way tables, near-functional pairs are then read from them
    (``links``, ``config.link_lambda > 0``), and with ``config.tilt_chi2 > 0`` a cell tilt toward the noisy tables
    is fitted on a pool drawn from the linked mixture and stopped on a second one (``tilt``).
    """
    check_post_processing(config)
    layout = layout_for(schema)
    model = fit_measurement(measurement, layout, config)
    if not measurement.pairs or not measurement.marginal_sizes:
        return model
    if config.link_lambda > 0:
        links = choose_links(
            measurement.noisy_pairs, measurement.pairs, layout, measurement.numeric_bins, config.link_lambda
        )
        model = replace(model, links=links)
    if config.tilt_chi2 == 0:
        return model
    rng = np.random.default_rng(np.random.SeedSequence([int(config.seed), _TAG_TILT_POOL]))
    # A fit pool and a holdout pool, together as large as one sampling chunk's pool.
    pool_rows = max(1, config.tilt_pool_factor * min(measurement.n, TILT_CHUNK_ROWS) // 2)
    integer_bounds = integer_coordinates(schema)
    pool, holdout = (  # row-major, as fit_tilt's incidence matrices read them (one copy at a time)
        np.ascontiguousarray(table_cells(
            mixture_draws(model, pool_rows, rng, True, integer_bounds), layout, measurement.numeric_bins,
            measurement.pairs,
        ))
        for _ in range(2)
    )
    potentials, chi2_start, chi2_end, iterations = fit_tilt(
        pool, holdout, measurement.noisy_marginals, measurement.marginal_noise_std(),
        measurement.noisy_pairs, measurement.pair_noise_std(), config.tilt_chi2, config.tilt_max_iterations,
    )
    tilt = CellTilt(
        measurement.numeric_bins, measurement.pairs, potentials, config.tilt_pool_factor, chi2_start, chi2_end,
        iterations,
    )
    return replace(model, tilt=tilt)


def check_post_processing(config: FitConfig) -> None:
    """The tilt and link settings, checked before any fitting (and where a release config enters); messages quote
    the bad value."""
    chi2, strength = config.tilt_chi2, config.link_lambda
    if isinstance(chi2, bool) or not isinstance(chi2, (int, float)) or not math.isfinite(chi2) or chi2 < 0:
        raise ValueError(f"tilt_chi2 must be a finite number >= 0, got {chi2!r}")
    if isinstance(strength, bool) or not isinstance(strength, (int, float)) or not 0 <= strength <= 1:
        raise ValueError(f"link_lambda must be a number in [0, 1] (0 = no links), got {strength!r}")
    for name, least in (("tilt_pool_factor", 1), ("tilt_max_iterations", 0)):
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")


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
) -> SynthesisResult:
    """encode -> measure -> fit -> sample, for a table already passed through ``validation.validate``."""
    seconds: dict[str, float] = {}
    start = time.perf_counter()
    x = encode(table, schema)
    seconds["encode"] = time.perf_counter() - start
    plan, calibration = make_plan(
        schema, len(table), epsilon, delta, n_directions, k, seed, marginal_share=marginal_share,
        pair_share=pair_share,
    )
    start = time.perf_counter()
    measurement = measure(x, schema, plan, calibration, ledger, release_id)
    seconds["measure"] = time.perf_counter() - start
    start = time.perf_counter()
    model = fit(measurement, schema, fit_config or FitConfig(seed=seed))
    seconds["fit"] = time.perf_counter() - start
    start = time.perf_counter()
    synthetic = sample_table(model, schema, n_rows or len(table), seed)
    seconds["sample"] = time.perf_counter() - start
    return SynthesisResult(measurement, model, synthetic, seconds)
