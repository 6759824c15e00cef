"""The Gaussian measurement: plan from public parameters, exact statistics, ledger reservation, noise.

The privacy-relevant order is written once here: exact statistics (private, never stored) -> range check ->
ledger reservation -> noise -> persist -> commit. Everything after it reads only the ``Measurement``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, cast

import numpy as np

from splice_assets.defaults import DEFAULT_LEVEL_UNITS, default_pair_share
from splice_assets.fine_cells import (
    DEFAULT_FINE_BINS,
    DEFAULT_GRID_WEIGHT,
    DEFAULT_INTERVAL_WEIGHT,
    FineCells,
    fine_cells,
)
from splice_assets.layout import (
    DEFAULT_NUMERIC_BINS,
    DEFAULT_TARGET_TRIPLES,
    WORKLOAD_UNITS,
    EncodingLayout,
    ScalingMode,
    coordinate_pairs,
    draw_directions,
    layout_for,
    marginal_sizes,
    pair_sizes,
    triple_sizes,
    triples_with_target,
    workload_triples,
)
from splice_assets.limits import Relation
from splice_assets.measurement import (
    Measurement,
    pooled_row_count,
    units_or_ones,
)
from splice_assets.measurement import level_units as measured_level_units
from splice_assets.private import mechanism as privacy
from splice_assets.private.ledger import params_hash
from splice_assets.private.mechanism import (
    DEFAULT_COUNT_SHARE,
    DEFAULT_K,
    DEFAULT_MARGINAL_SHARE,
    DEFAULT_N_DIRECTIONS,
    DEFAULT_PAIR_SHARE,
)
from splice_assets.schema import TableSchema


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
    #: How many 1-way tables each coarse table counts as in Delta^2 (``level_units``; empty: one each).
    marginal_units: tuple[int, ...] = ()
    pair_share: float = DEFAULT_PAIR_SHARE
    pairs: tuple[tuple[int, int], ...] = ()
    pair_sizes: tuple[int, ...] = ()
    pair_weight: float = 0.0
    relation: Relation = Relation.REPLACE_ONE
    count_weight: float = 0.0
    fine_bins: int = 0
    fine: tuple[FineCells, ...] = ()
    #: A per-value fine table counts as this many 1-way tables in Delta^2, a fine table of intervals as
    #: ``interval_weight`` (``FineCells.weight_units``).
    grid_weight: int = 1
    interval_weight: int = 1
    # The target's 3-way tables (``layout.triples_with_target``), measured at the pair weight beside the pairs, then
    # the workload's (``layout.workload_triples``).
    triples: tuple[tuple[int, int, int], ...] = ()
    triple_sizes: tuple[int, ...] = ()
    #: How many pair-family tables each 3-way table counts as in Delta^2 (empty: one each; a workload's count
    #: ``layout.WORKLOAD_UNITS``): its cells are weighted sqrt(u) w2.
    triple_units: tuple[int, ...] = ()

    @property
    def fine_sizes(self) -> tuple[int, ...]:
        return tuple(c.size for c in self.fine)

    @property
    def one_way_share(self) -> float:
        """The 1-way family's share of Delta^2 (``one_way_share``)."""
        return one_way_share(self.marginal_share, len(self.marginal_sizes), self.fine, self.grid_weight,
                             self.interval_weight)

    @property
    def coarse_units(self) -> int:
        """How many 1-way tables the coarse tables count as in Delta^2 (``marginal_units``)."""
        return sum(units_or_ones(self.marginal_units, len(self.marginal_sizes)))

    def coarse_table_weights(self) -> np.ndarray:
        """The weight of every coarse 1-way cell: sqrt(u) w, u its table's ``marginal_units``."""
        units = np.asarray(units_or_ones(self.marginal_units, len(self.marginal_sizes)), dtype=np.float64)
        return np.repeat(np.sqrt(units) * self.marginal_weight, self.marginal_sizes)

    @property
    def workload_cells(self) -> int:
        """How many of the 3-way cells, at the end, are the workload's (its tables count more than once)."""
        return int(sum(size for size, units in zip(self.triple_sizes, self.triple_units) if units > 1))

    def triple_table_weights(self) -> np.ndarray:
        """The weight of every 3-way cell: sqrt(u) w2, u its table's ``triple_units``."""
        units = np.asarray(units_or_ones(self.triple_units, len(self.triples)), dtype=np.float64)
        return np.repeat(np.sqrt(units) * self.pair_weight, self.triple_sizes)

    def fine_table_weight(self, column: FineCells) -> float:
        """The weight of a fine table's cells: sqrt(units) w, with units = ``column.weight_units``."""
        return math.sqrt(column.weight_units(self.grid_weight, self.interval_weight)) * self.marginal_weight

    @property
    def mechanism(self) -> str:
        families = ["sliced-chebyshev"] + ["marginals"] * bool(self.marginal_sizes) + ["pairs"] * bool(self.pairs)
        workload = sum(units > 1 for units in self.triple_units)
        families += ["target-triples"] * (len(self.triples) > workload) + ["workload"] * bool(workload)
        return "gaussian/" + "+".join(families + ["fine"] * bool(self.fine))

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
            "relation": str(self.relation),  # hashed as the plain string
            "marginal_share": self.marginal_share,
            "numeric_bins": self.numeric_bins,
            "pair_share": self.pair_share,
            # "fine_split" (the second fine table, removed in issue 66) stays 0 in the hashed parameters, so a
            # plan's hash is the one it had before.
            **({"fine_bins": self.fine_bins, "fine_split": 0} if self.fine else {}),
            **({"grid_weight": self.grid_weight, "interval_weight": self.interval_weight,
                "one_way_share": self.one_way_share}
               if self.fine and (self.grid_weight, self.interval_weight) != (1, 1) else {}),
            **({"marginal_units": list(self.marginal_units), "one_way_share": self.one_way_share}
               if self.coarse_units != len(self.marginal_sizes) else {}),
            **({"target_triples": len(self.triples)} if self.triples else {}),
            **({"triples": [list(t) for t in self.triples], "triple_units": list(self.triple_units)}
               if self.triple_units else {}),
        }


def one_way_units(coarse_units: int, fine: tuple[FineCells, ...], grid_weight: int, interval_weight: int) -> int:
    """How many 1-way tables the coarse tables (``coarse_units``, ``level_units``) and the fine tables count as in
    Delta^2 (a per-value fine table as ``grid_weight``, one of intervals as ``interval_weight``,
    ``FineCells.weight_units``)."""
    return coarse_units + sum(c.weight_units(grid_weight, interval_weight) for c in fine)


def one_way_share(marginal_share: float, coarse_tables: int, fine: tuple[FineCells, ...], grid_weight: int,
                  interval_weight: int) -> float:
    """The 1-way family's share of Delta^2: ``marginal_share`` times the tables' units over their number, so the
    extra units of the fine tables come out of the moments' share (docs/decisions/0050, 0052). The extra units of
    the coarse tables of many cells (``level_units``) do not raise it: they are paid by the other 1-way tables,
    whose weight falls with the units' total (0066)."""
    plain = one_way_units(coarse_tables, fine, 1, 1)
    units = one_way_units(coarse_tables, fine, grid_weight, interval_weight)
    return marginal_share * units / plain if plain else marginal_share


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
    pair_share: float | None = None,
    relation: Relation = Relation.REPLACE_ONE,
    fine_bins: int = DEFAULT_FINE_BINS,
    grid_weight: int = DEFAULT_GRID_WEIGHT,
    interval_weight: int = DEFAULT_INTERVAL_WEIGHT,
    target_triples: int = DEFAULT_TARGET_TRIPLES,
    level_units: bool = DEFAULT_LEVEL_UNITS,
    workload: Sequence[Sequence[str]] = (),
) -> tuple[MeasurementPlan, privacy.Calibration]:
    """Validate the parameters against the schema's public n_min and calibrate the one Gaussian mechanism.

    ``marginal_share`` of Delta^2 goes to the 1-way histograms: every coordinate's, on its levels or the
    ``numeric_bins`` coarse bins, and with ``fine_bins`` > 0 every numeric column's fine table (``fine_cells``); the
    fine table of a column
    with one cell per grid value counts as ``grid_weight`` tables (its cells weighted sqrt(grid_weight) times a
    coarse table's), that of a column with intervals as ``interval_weight``, and with ``level_units`` a coarse table
    of many cells as ``measurement.level_units`` of them (every other table as one).
    ``pair_share`` goes to the 2-way histograms of every pair of coordinates from different columns (None: by the
    schema, ``defaults.default_pair_share``; both 0 = the paper's moments only). The schema's target and every pair
    of other columns with a small table get a 3-way table when they number at most ``target_triples``
    (``layout.triples_with_target``), one more table at the pair weight each; so does every 3-way marginal of the
    ``workload`` (column names, three each; ``layout.workload_triples``) that the target's do not hold. The row
    count ``n`` enters the plan under replace-one only; under add-remove it is private, so it is not read, and
    ``DEFAULT_COUNT_SHARE`` of Delta^2 buys a noisy count instead.
    """
    privacy.validate_parameters(epsilon, delta, k, n_directions, schema.n_min)
    pair_share = default_pair_share(schema) if pair_share is None else pair_share
    public_n = n if relation == Relation.REPLACE_ONE else None
    count_share = DEFAULT_COUNT_SHARE if relation == Relation.ADD_REMOVE else 0.0
    if scaling != "ball":
        # The model's tail control relies on |theta^T x| / sqrt(d) <= max_i |x_i|; see model.py.
        raise ValueError(f"scaling mode {scaling!r} is not supported for releases yet; use 'ball'")
    layout = layout_for(schema)
    sizes = marginal_sizes(layout, numeric_bins) if marginal_share > 0 else ()
    units = measured_level_units(sizes, numeric_bins) if level_units else (1,) * len(sizes)
    fine = fine_cells(schema, fine_bins, numeric_bins) if marginal_share > 0 else ()
    pairs = coordinate_pairs(layout) if pair_share > 0 else ()
    cells = pair_sizes(layout, pairs, numeric_bins)
    triples = () if not pairs else triples_with_target(layout, schema.target, target_triples, numeric_bins)
    favoured = () if not pairs else workload_triples(layout, workload, triples)
    triple_units = (1,) * len(triples) + (WORKLOAD_UNITS,) * len(favoured) if favoured else ()
    triples += favoured
    three_way = triple_sizes(layout, triples, numeric_bins)
    triple_tables = sum(units_or_ones(triple_units, len(triples)))
    # A coarse or fine table weighted sqrt(u) w (u its units) moves by as much as u tables at w: it counts u
    # times; a 3-way table is one more table at the pair weight (each row adds 1 to one of its cells, as to a pair's).
    tables = one_way_units(sum(units), fine, grid_weight, interval_weight)
    table_cells = int(np.dot(units, sizes)) + sum(c.weight_units(grid_weight, interval_weight) * c.size for c in fine)
    share1 = one_way_share(marginal_share, len(sizes), fine, grid_weight, interval_weight)
    if share1 + pair_share + count_share >= 1.0:
        raise ValueError(
            f"with grid_weight {grid_weight!r} and interval_weight {interval_weight!r} the fine tables raise the "
            f"1-way share from marginal_share {marginal_share!r} to {share1:.4g}, which with pair_share "
            f"{pair_share!r} (+ the count's {count_share!r}) leaves the moments nothing: lower marginal_share, "
            "pair_share, grid_weight or interval_weight"
        )
    weights = privacy.query_weights(
        share1, pair_share, n_directions, k, tables, len(pairs) + triple_tables, relation, count_share,
    )
    plan = MeasurementPlan(
        schema.name, schema.version, public_n, epsilon, delta, n_directions, k, seed, scaling,
        # () where every table has one unit: the plan, its public parameters and the measurement read as before
        marginal_share, numeric_bins, sizes, weights.marginal, units if sum(units) != len(units) else (), pair_share,
        pairs, cells, weights.pair, relation,
        weights.row_count, fine_bins if fine else 0, fine, grid_weight, interval_weight, triples=triples,
        triple_sizes=three_way, triple_units=triple_units,
    )
    calibration = privacy.calibrate(
        epsilon, delta, public_n, n_directions, k, relation,
        marginal_coordinates=tables, marginal_cells=table_cells, marginal_weight=weights.marginal,
        pair_count=len(pairs) + triple_tables,
        pair_cells=int(sum(cells)) + int(np.dot(units_or_ones(triple_units, len(triples)), three_way)),
        pair_weight=weights.pair,
        count_weight=weights.row_count,
    )
    return plan, calibration


class SpendRecorder(Protocol):
    """What ``measure`` needs from a budget ledger."""

    def reserve(
        self,
        *,
        dataset: str,
        release_id: str,
        mechanism: str,
        noise_multiplier: float,
        sigma: float,
        sensitivity: float,
        epsilon: float,
        delta: float,
        relation: Relation | str,  # bounds.GaussianSpendRecorder's callers pass the value
        params_hash: str,
        selection_delta: float = 0.0,  # the delta a draw's thresholds spend beside it (categories: auto)
    ) -> str: ...

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
    fine: np.ndarray = field(default_factory=lambda: np.zeros(0))
    triples: np.ndarray = field(default_factory=lambda: np.zeros(0))


@dataclass(frozen=True)
class ExactSums:
    """PRIVATE exact integer sums over a set of measured rows: fixed-point moment sums (k, L) and the 1-way, 2-way,
    fine and 3-way cell counts (int64), with the row count. Sums of disjoint row sets (chunks, partitions, workers) add
    up to exactly the sums of their union, in any order; never store, log or return them past ``measure``."""

    moments: np.ndarray
    marginals: np.ndarray
    pairs: np.ndarray
    fine: np.ndarray
    rows: int
    d: int
    triples: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    def __add__(self, other: ExactSums) -> ExactSums:
        if self.d != other.d or self.moments.shape != other.moments.shape:
            raise ValueError(f"cannot add exact sums of d={self.d} and d={other.d}")
        return ExactSums(self.moments + other.moments, self.marginals + other.marginals, self.pairs + other.pairs,
                         self.fine + other.fine, self.rows + other.rows, self.d, self.triples + other.triples)


def exact_sums(
    x: np.ndarray, plan: MeasurementPlan, layout: EncodingLayout, directions: np.ndarray | None = None
) -> ExactSums:
    """The exact integer sums of cube-encoded rows ``x`` (n, d) under ``plan`` (``directions``: the plan's, if
    the caller drew them once for many chunks)."""
    from splice_assets.private.statistics import fine_counts, moment_sums, table_counts  # numba: not for planning

    if directions is None:
        directions = draw_directions(plan.seed, plan.n_directions, x.shape[1])
    empty = np.zeros(0, dtype=np.int64)
    ones, twos, threes = table_counts(x, layout, plan.pairs, plan.numeric_bins,
                                      marginals=bool(plan.marginal_sizes), triples=plan.triples)
    return ExactSums(
        moment_sums(x, directions, plan.k, plan.scaling).sums,
        ones.counts if plan.marginal_sizes else empty,
        twos.counts if plan.pairs else empty,
        fine_counts(x, plan.fine).counts if plan.fine else empty,
        int(x.shape[0]),
        int(x.shape[1]),
        threes.counts,
    )


def statistics_of(sums: ExactSums, plan: MeasurementPlan) -> ExactStatistics:
    """Exact moments (k, L) and, if planned, 1-way and 2-way histograms from their sums: divided by the public n
    under replace-one, left as sums and counts (with the row count) under add-remove."""
    from splice_assets.private.statistics import MarginalCounts, MomentSums

    if plan.relation == Relation.REPLACE_ONE and sums.rows != plan.n:
        raise ValueError(f"the plan says n={plan.n} rows but the table has a different row count")
    # Under replace-one the check above has made plan.n the (int) row count.
    divisor = plan.n if plan.relation == Relation.REPLACE_ONE and plan.n is not None else 1
    moments = MomentSums(sums.moments, sums.rows).moments(divisor)
    marginals, pairs, fine, triples = (
        MarginalCounts(c, sums.rows).frequencies(divisor) if c.size else np.zeros(0)
        for c in (sums.marginals, sums.pairs, sums.fine, sums.triples)
    )
    count = sums.rows if plan.relation == Relation.ADD_REMOVE else None
    return ExactStatistics(moments, marginals, sums.d, pairs, count, fine, triples)


def exact_statistics(x: np.ndarray, plan: MeasurementPlan, layout: EncodingLayout) -> ExactStatistics:
    """``statistics_of`` the exact sums of cube-encoded rows ``x``."""
    return statistics_of(exact_sums(x, plan, layout), plan)


def statistics_in_range(stats: ExactStatistics) -> bool:
    """Moments finite in [-N, N], histogram cells finite in [0, N] (N = 1 for frequencies, the row count for sums):
    the pre-noise sanity check."""
    bound = 1.0 if stats.count is None else float(stats.count)
    moments_ok = bool(np.all(np.isfinite(stats.moments)) and np.max(np.abs(stats.moments), initial=0.0) <= bound)
    cells = np.concatenate([stats.marginals, stats.pairs, stats.fine, stats.triples])
    return moments_ok and bool(np.all(np.isfinite(cells)) and np.all((cells >= 0.0) & (cells <= bound)))


def measure(
    x: np.ndarray,
    schema: TableSchema,
    plan: MeasurementPlan,
    calibration: privacy.Calibration,
    ledger: SpendRecorder | None = None,
    release_id: str = "adhoc",
    on_noisy: Callable[[Measurement], object] | None = None,
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
    on_noisy: Callable[[Measurement], object] | None = None,
) -> Measurement:
    """Check the exact statistics -> reserve the spend -> add noise -> ``on_noisy`` (persist) -> commit.

    Sensitivity: each row adds T_j(z)/n with |T_j| <= 1 to moment (j, l), 1/n to one cell of each 1-way histogram
    (every coordinate's at sqrt(u) w, u its ``level_units``, and every numeric column's fine table at sqrt(u) w,
    where a missing value adds to no cell; u = grid_weight for a per-value table, interval_weight for one of
    intervals; C counts each table u times) and of each pair's and
    each 3-way table's (the target's at w2, a workload's at sqrt(u) w2, u = ``WORKLOAD_UNITS``; P counts each
    table u times, the pairs and the target's once); replacing one row moves
    [m_j/sqrt(j), w * h1, w2 * h2] by at most sqrt(4 L H_k + 2 w^2 C + 2 w2^2 P)/n. Under add-remove the vector is
    [S_j/sqrt(j), w * c1, w2 * c2, wn * n] of sums and counts, and one row moves it by at most
    sqrt(L H_k + w^2 C + w2^2 P + wn^2). Either is calibration.sensitivity (float slack included). A failure before
    the first noise is drawn aborts the reservation; after it, the spend stays counted.
    """
    if not statistics_in_range(stats):
        raise MomentsOutOfRange("exact statistics are not finite or out of range; nothing was charged")
    if (stats.count is None) != (plan.relation == Relation.REPLACE_ONE):
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
    # The target's 3-way tables follow the pairs at their weight; the workload's come last, at theirs (so the cells
    # before them are noised in the same order with a workload as without).
    split = stats.triples.size - plan.workload_cells
    first_pairs = np.concatenate([stats.pairs, stats.triples[:split]])
    counted = [] if stats.count is None else [float(stats.count)]
    triple_weights = plan.triple_table_weights()
    try:
        cell_weights = np.concatenate([
            plan.coarse_table_weights(), np.full(stats.pairs.size, plan.pair_weight), triple_weights[:split],
            np.full(len(counted), plan.count_weight),
            *(np.full(column.size, plan.fine_table_weight(column)) for column in plan.fine), triple_weights[split:],
        ])
        noisy_moments, noisy_cells = privacy.add_noise_joint(
            stats.moments, np.concatenate([stats.marginals, first_pairs, counted, stats.fine, stats.triples[split:]]),
            cell_weights, calibration.sigma,
        )
    except BaseException:
        if ledger is not None and entry_id is not None:
            ledger.abort(entry_id)
        raise
    # From here on noise has been drawn: a failure leaves the spend counted.
    marginals, rest = np.split(noisy_cells, [int(sum(plan.marginal_sizes))])
    rest, workload = np.split(rest, [rest.size - plan.workload_cells])
    pairs, noisy_count, fine = np.split(rest, [first_pairs.size, first_pairs.size + len(counted)])
    pairs, triples = np.split(pairs, [stats.pairs.size])
    triples = np.concatenate([triples, workload])
    if plan.relation == Relation.REPLACE_ONE:
        measurement = measurement_of(plan, calibration, stats.d, noisy_moments, marginals, pairs, entry_id, fine=fine,
                                     triples=triples)
    else:
        # Post-processing: pool the noisy count with the histograms' totals, then divide every sum by that n.
        n_hat = pooled_row_count(
            float(noisy_count[0]), calibration.count_noise_std(), marginals, plan.marginal_sizes,
            calibration.marginal_noise_std(), pairs, plan.pair_sizes, calibration.pair_noise_std(), plan.marginal_units,
        )
        measurement = measurement_of(
            plan, calibration, stats.d, noisy_moments / n_hat, marginals / n_hat, pairs / n_hat, entry_id,
            n=max(1, round(n_hat)), sigma=calibration.sigma / n_hat, fine=fine / n_hat, triples=triples / n_hat,
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
    fine: np.ndarray | None = None,
    triples: np.ndarray | None = None,
) -> Measurement:
    """The ``Measurement`` of ``plan`` holding these (already noisy) frequencies and the plan's public facts.

    ``n`` and ``sigma`` default to the plan's public n and the mechanism's sigma (replace-one); under add-remove
    they are the noisy n and sigma over it. Without ``triples`` the measurement has no 3-way tables."""
    return Measurement(
        dataset=plan.dataset,
        schema_version=plan.schema_version,
        seed=plan.seed,
        n_directions=plan.n_directions,
        k=plan.k,
        n=cast(int, plan.n) if n is None else int(n),
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
        marginal_units=plan.marginal_units,
        numeric_bins=plan.numeric_bins,
        noisy_pairs=pairs,
        pairs=plan.pairs,
        pair_sizes=plan.pair_sizes,
        pair_weight=plan.pair_weight,
        noise_multiplier=calibration.noise_multiplier,
        # Without ``fine`` the measurement has no fine tables (tests that build one from bare statistics).
        noisy_fine=np.zeros(0) if fine is None else fine,
        fine_sizes=() if fine is None else plan.fine_sizes,
        fine_bins=0 if fine is None else plan.fine_bins,
        grid_weight=1 if fine is None else plan.grid_weight,
        interval_weight=1 if fine is None else plan.interval_weight,
        noisy_triples=np.zeros(0) if triples is None else triples,
        triples=() if triples is None else plan.triples,
        triple_sizes=() if triples is None else plan.triple_sizes,
        triple_units=() if triples is None else plan.triple_units,
    )
