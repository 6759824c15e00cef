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
from .privacy import DEFAULT_COUNT_SHARE, DEFAULT_K, DEFAULT_MARGINAL_SHARE, DEFAULT_N_DIRECTIONS, DEFAULT_PAIR_SHARE
from .encoding import EncodingLayout, ScalingMode, encode, layout_for
from .field import fit_field
from .fit import FitConfig, FittedMixture, fit_measurement
from .ledger import params_hash
from .measurement import RELATION_ADD_REMOVE, RELATION_REPLACE_ONE, Measurement, pooled_row_count
from .moments import (
    DEFAULT_NUMERIC_BINS, coordinate_pairs, draw_directions, marginal_cells, marginal_counts, marginal_sizes,
    moment_sums,
    pair_counts, pair_sizes,
)
from .sampling import TILT_CHUNK_ROWS, integer_coordinates, matched_rows, proposal_rows, sample_table
from .schema import TableSchema
from .links import choose_links
from .tilt import CellTilt, fit_tilt, table_cells, table_starts

# Streams of the public-seed pool the cell tilt is fitted on and of the pairwise field's sample and chains
# (distinct from sampling's stream).
_TAG_TILT_POOL = 0x7117_B001
_TAG_FIELD = 0xF1E1_D001


class MomentsOutOfRange(RuntimeError):
    """Exact statistics were not finite or out of range: a bug upstream. Raised before any budget is reserved."""


@dataclass(frozen=True)
class MeasurementPlan:
    """Public parameters of one measurement (validated where it is built); ``n`` is None under add-remove."""

    dataset: str
    schema_version: int
    n: int | None
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
    relation: str = RELATION_REPLACE_ONE
    count_weight: float = 0.0

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
            "relation": self.relation,
            "marginal_share": self.marginal_share,
            "numeric_bins": self.numeric_bins,
            "pair_share": self.pair_share,
        }


def make_plan(
    schema: TableSchema,
    n: int | None,
    epsilon: float,
    delta: float,
    n_directions: int = DEFAULT_N_DIRECTIONS,
    k: int = DEFAULT_K,
    seed: int = 0,
    scaling: ScalingMode = "ball",
    marginal_share: float = DEFAULT_MARGINAL_SHARE,
    numeric_bins: int = DEFAULT_NUMERIC_BINS,
    pair_share: float = DEFAULT_PAIR_SHARE,
    relation: str = RELATION_REPLACE_ONE,
) -> tuple[MeasurementPlan, privacy.Calibration]:
    """Validate the parameters against the schema's public n_min and calibrate the one Gaussian mechanism.

    ``marginal_share`` of Delta^2 goes to every coordinate's 1-way histogram, ``pair_share`` to the 2-way
    histograms of every pair of coordinates from different columns (both 0 = the paper's moments only). The row
    count ``n`` enters the plan under replace-one only; under add-remove it is private, so it is not read, and
    ``DEFAULT_COUNT_SHARE`` of Delta^2 buys a noisy count instead.
    """
    privacy.validate_parameters(epsilon, delta, k, n_directions, schema.n_min)
    public_n = n if relation == RELATION_REPLACE_ONE else None
    count_share = DEFAULT_COUNT_SHARE if relation == RELATION_ADD_REMOVE else 0.0
    if scaling != "ball":
        # The model's tail control relies on |theta^T x| / sqrt(d) <= max_i |x_i|; see model.py.
        raise ValueError(f"scaling mode {scaling!r} is not supported for releases yet; use 'ball'")
    layout = layout_for(schema)
    sizes = marginal_sizes(layout, numeric_bins) if marginal_share > 0 else ()
    pairs = coordinate_pairs(layout) if pair_share > 0 else ()
    cells = pair_sizes(layout, pairs, numeric_bins)
    weight, pair_weight, count_weight = privacy.query_weights(
        marginal_share, pair_share, n_directions, k, len(sizes), len(pairs), relation, count_share
    )
    plan = MeasurementPlan(
        schema.name, schema.version, public_n, epsilon, delta, n_directions, k, seed, scaling,
        marginal_share, numeric_bins, sizes, weight, pair_share, pairs, cells, pair_weight, relation, count_weight,
    )
    calibration = privacy.calibrate(
        epsilon, delta, public_n, n_directions, k, relation,
        marginal_coordinates=len(sizes), marginal_cells=int(sum(sizes)), marginal_weight=weight,
        pair_count=len(pairs), pair_cells=int(sum(cells)), pair_weight=pair_weight, count_weight=count_weight,
    )
    return plan, calibration


#: Streams of the public seed that key the holdout split's row hashes (the second breaks ties of the first).
_TAG_HOLDOUT = 0x401D


def _row_keys(table: pd.DataFrame, seed: int, stream: int) -> np.ndarray:
    """A keyed 64-bit hash of each row's own values (SipHash keyed by the public seed): no other row enters it."""
    state = np.random.SeedSequence([int(seed), _TAG_HOLDOUT, stream]).generate_state(2, np.uint64)
    key = f"{int(state[0]) & 0xFFFF_FFFF:08x}{int(state[1]) & 0xFFFF_FFFF:08x}"
    return pd.util.hash_pandas_object(table, index=False, hash_key=key).to_numpy(dtype=np.uint64)


def split_holdout(
    table: pd.DataFrame, fraction: float, seed: int, relation: str = RELATION_REPLACE_ONE
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(measured rows, held-out rows) of a validated table. The holdout is never measured; it serves the internal
    report only.

    Sensitivity: the split must turn neighbouring inputs into neighbouring measured parts, whatever the row order.
    Every row gets a keyed hash of its own values under the public seed.
    - add-remove: a row is held out iff its hash falls below ``fraction`` of the hash range. Membership depends on
      that row alone, so adding or removing one input row adds or removes at most that row from the measured part.
    - replace-one: the measured part is the n - round(fraction * n) rows with the smallest hashes, a size fixed by
      the public n. Replacing one row removes one key from the order and inserts one, so the measured set loses at
      most one row and gains at most one: a replace-one neighbour with the same public size.
    Neither depends on the row order (a positional permutation would: under add-remove one row more re-shuffles
    every row, which moved the released statistics by 3 to 24 Delta). Identical rows hash alike, so which copy is
    held out does not change the measured multiset.
    """
    n = len(table)
    if fraction == 0 or n == 0:
        return table.reset_index(drop=True), table.iloc[:0].reset_index(drop=True)
    keys = _row_keys(table, seed, 0)
    if relation == RELATION_ADD_REMOVE:
        held = keys < np.uint64(min(int(fraction * 2.0**64), 2**64 - 1))
    else:
        order = np.lexsort((_row_keys(table, seed, 1), keys))  # the second hash breaks (rare) ties of the first
        held = np.zeros(n, dtype=bool)
        held[order[n - int(round(fraction * n)):]] = True
    return table[~held].reset_index(drop=True), table[held].reset_index(drop=True)


class SpendRecorder(Protocol):
    """What ``measure`` needs from a budget ledger."""

    def reserve(self, **entry: object) -> str: ...

    def commit(self, entry_id: str) -> None: ...

    def abort(self, entry_id: str) -> None: ...


@dataclass(frozen=True)
class ExactStatistics:
    """PRIVATE exact statistics of the measured rows; never store, log or return them past ``measure``.

    Frequencies under replace-one; under add-remove sums and counts, with the row ``count``."""

    moments: np.ndarray
    marginals: np.ndarray
    d: int
    pairs: np.ndarray = field(default_factory=lambda: np.zeros(0))
    count: int | None = None


def exact_statistics(x: np.ndarray, plan: MeasurementPlan, layout: EncodingLayout) -> ExactStatistics:
    """Exact moments (k, L) and, if planned, 1-way and 2-way histograms of cube-encoded rows: divided by the public n
    under replace-one, left as sums and counts (with the row count) under add-remove."""
    if plan.relation == RELATION_REPLACE_ONE and x.shape[0] != plan.n:
        raise ValueError(f"the plan says n={plan.n} rows but the table has a different row count")
    divisor = plan.n if plan.relation == RELATION_REPLACE_ONE else 1
    directions = draw_directions(plan.seed, plan.n_directions, x.shape[1])
    moments = moment_sums(x, directions, plan.k, plan.scaling).moments(divisor)
    marginals = (
        marginal_counts(x, layout, plan.numeric_bins).frequencies(divisor) if plan.marginal_sizes else np.zeros(0)
    )
    pairs = (
        pair_counts(x, layout, plan.pairs, plan.numeric_bins).frequencies(divisor) if plan.pairs else np.zeros(0)
    )
    count = x.shape[0] if plan.relation == RELATION_ADD_REMOVE else None
    return ExactStatistics(moments, marginals, x.shape[1], pairs, count)


def statistics_in_range(stats: ExactStatistics) -> bool:
    """Moments finite in [-N, N], histogram cells finite in [0, N] (N = 1 for frequencies, the row count for sums):
    the pre-noise sanity check."""
    bound = 1.0 if stats.count is None else float(stats.count)
    moments_ok = bool(np.all(np.isfinite(stats.moments)) and np.max(np.abs(stats.moments), initial=0.0) <= bound)
    cells = np.concatenate([stats.marginals, stats.pairs])
    return moments_ok and bool(np.all(np.isfinite(cells)) and np.all((cells >= 0.0) & (cells <= bound)))


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
    sqrt(4 L H_k + 2 w^2 C + 2 w2^2 P)/n. Under add-remove the vector is [S_j/sqrt(j), w * c1, w2 * c2, wn * n] of
    sums and counts, and one row moves it by at most sqrt(L H_k + w^2 C + w2^2 P + wn^2). Either is
    calibration.sensitivity (float slack included). A failure before the noise is drawn aborts the reservation;
    after it, the spend stays counted.
    """
    if not statistics_in_range(stats):
        raise MomentsOutOfRange("exact statistics are not finite or out of range; nothing was charged")
    if (stats.count is None) != (plan.relation == RELATION_REPLACE_ONE):
        raise ValueError(
            f"the exact statistics do not match the plan's relation {plan.relation!r}; nothing was charged"
        )
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
            relation=plan.relation,
            params_hash=params_hash(plan.public_params()),
        )
    try:
        counted = [] if stats.count is None else [float(stats.count)]
        cell_weights = np.concatenate([
            np.full(stats.marginals.size, plan.marginal_weight), np.full(stats.pairs.size, plan.pair_weight),
            np.full(len(counted), plan.count_weight),
        ])
        noisy_moments, noisy_cells = privacy.add_noise_joint(
            stats.moments, np.concatenate([stats.marginals, stats.pairs, counted]), cell_weights, calibration.sigma
        )
    except BaseException:
        if ledger is not None and entry_id is not None:
            ledger.abort(entry_id)
        raise
    marginals, rest = np.split(noisy_cells, [int(sum(plan.marginal_sizes))])
    pairs, noisy_count = np.split(rest, [int(sum(plan.pair_sizes))])
    if plan.relation == RELATION_REPLACE_ONE:
        measurement = measurement_of(plan, calibration, stats.d, noisy_moments, marginals, pairs, entry_id)
    else:
        # Post-processing: pool the noisy count with the histograms' totals, then divide every sum by that n.
        n_hat = pooled_row_count(
            float(noisy_count[0]), calibration.count_noise_std(), marginals, plan.marginal_sizes,
            calibration.marginal_noise_std(), pairs, plan.pair_sizes, calibration.pair_noise_std(),
        )
        measurement = measurement_of(
            plan, calibration, stats.d, noisy_moments / n_hat, marginals / n_hat, pairs / n_hat, entry_id,
            n=max(1, round(n_hat)), sigma=calibration.sigma / n_hat,
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
    n: int | None = None,
    sigma: float | None = None,
) -> Measurement:
    """The ``Measurement`` of ``plan`` holding these (already noisy) frequencies and the plan's public facts.

    ``n`` and ``sigma`` default to the plan's public n and the mechanism's sigma (replace-one); under add-remove
    they are the noisy n and sigma over it."""
    return Measurement(
        dataset=plan.dataset,
        schema_version=plan.schema_version,
        seed=plan.seed,
        n_directions=plan.n_directions,
        k=plan.k,
        n=plan.n if n is None else int(n),
        d=d,
        scaling=plan.scaling,
        noisy_moments=moments,
        sigma=calibration.sigma if sigma is None else float(sigma),
        sensitivity=calibration.sensitivity,
        epsilon=plan.epsilon,
        delta=plan.delta,
        relation=plan.relation,
        ledger_entry_id=ledger_entry_id,
        noisy_marginals=marginals,
        marginal_sizes=plan.marginal_sizes,
        marginal_weight=plan.marginal_weight,
        numeric_bins=plan.numeric_bins,
        noisy_pairs=pairs,
        pairs=plan.pairs,
        pair_sizes=plan.pair_sizes,
        pair_weight=plan.pair_weight,
        noise_multiplier=calibration.noise_multiplier,
    )


def fit(measurement: Measurement, schema: TableSchema, config: FitConfig) -> FittedMixture:
    """Post-processing only: the fit sees the measurement and the public schema, never rows.

    The mixture is fitted first. With measured 2-way tables, near-functional pairs are then read from them
    (``links``, ``config.link_lambda > 0``), and with ``config.tilt_chi2 > 0`` a cell tilt toward the noisy tables
    is fitted on a pool drawn from the linked mixture and stopped on a second one (``tilt``); if that holdout stops
    it short of ``tilt_chi2``, it is refitted from there on ``config.tilt_wide_pool_factor`` times wider pools.
    With ``config.field_iterations > 0`` (and histogram numerics), a pairwise field is then fitted to a sample of
    the tilted mixture (``field``), and the tilt is fitted again, the same way, on pools drawn from the field.
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
    integer_bounds = integer_coordinates(schema)

    def fit_on_pools(
        proposal: FittedMixture, pool_factor: int, sampling_factor: int, initial: np.ndarray | None = None
    ) -> CellTilt:
        """The tilt fitted (from ``initial`` potentials, or none) on a pool and stopped on a holdout pool of
        pool_factor * min(n, chunk) / 2 rows each, drawn from the proposal (``sampling.proposal_rows``); sampled
        later with ``sampling_factor`` pool rows per output row."""
        pool_rows = max(1, pool_factor * min(measurement.n, TILT_CHUNK_ROWS) // 2)
        bins, pairs = measurement.numeric_bins, measurement.pairs
        pool, holdout = (  # row-major per-table cells (uint16), as fit_tilt's kernels read them
            table_cells(proposal_rows(proposal, pool_rows, rng, integer_bounds), layout, bins, pairs, "C", True)
            for _ in range(2)
        )
        potentials, chi2_start, chi2_end, iterations = fit_tilt(
            pool, holdout, measurement.noisy_marginals, measurement.marginal_noise_std(),
            measurement.noisy_pairs, measurement.pair_noise_std(), config.tilt_chi2, config.tilt_max_iterations,
            initial=initial, starts=table_starts(layout, bins, pairs),
        )
        return CellTilt(bins, pairs, potentials, sampling_factor, chi2_start, chi2_end, iterations)

    def tilted(proposal: FittedMixture) -> FittedMixture:
        tilt = fit_on_pools(proposal, config.tilt_pool_factor, config.tilt_pool_factor)
        wide = config.tilt_wide_pool_factor
        if tilt.chi2_end > config.tilt_chi2 and wide > config.tilt_pool_factor:
            # The holdout stopped the tilt short of the noise level: the pool's support, not the noise, was the
            # limit. Refit on wider pools from where it stopped (about half the iterations of a fresh start).
            wider = fit_on_pools(proposal, wide, max(config.tilt_pool_factor, wide // 2), tilt.potentials)
            tilt = replace(wider, chi2_start=tilt.chi2_start, iterations=tilt.iterations + wider.iterations)
        return replace(proposal, tilt=tilt)

    model = tilted(model)
    if config.field_iterations == 0 or len(model.layout.continuous_index):  # the field needs histogram numerics
        return model
    # The field is fitted to the tilted mixture's own sample (its denoised tables), under the public seed; then it
    # replaces the mixture as the proposal, and the tilt is fitted again on its pools.
    field_rng = np.random.default_rng(np.random.SeedSequence([int(config.seed), _TAG_FIELD]))
    cells = marginal_cells(matched_rows(model, config.field_chains, field_rng, integer_bounds), layout,
                           measurement.numeric_bins)
    pairwise = fit_field(cells, layout, measurement.numeric_bins, field_rng, config.field_iterations,
                         sweeps=config.field_sweeps)
    return tilted(replace(model, field=pairwise, tilt=None))


def check_post_processing(config: FitConfig) -> None:
    """The tilt and link settings, checked before any fitting (and where a release config enters); messages quote
    the bad value."""
    chi2, strength = config.tilt_chi2, config.link_lambda
    if isinstance(chi2, bool) or not isinstance(chi2, (int, float)) or not math.isfinite(chi2) or chi2 < 0:
        raise ValueError(f"tilt_chi2 must be a finite number >= 0, got {chi2!r}")
    if isinstance(strength, bool) or not isinstance(strength, (int, float)) or not 0 <= strength <= 1:
        raise ValueError(f"link_lambda must be a number in [0, 1] (0 = no links), got {strength!r}")
    for name, least in (("tilt_pool_factor", 1), ("tilt_wide_pool_factor", 0), ("tilt_max_iterations", 0),
                        ("field_iterations", 0), ("field_chains", 1), ("field_sweeps", 1)):
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
