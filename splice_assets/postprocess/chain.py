"""Post-processing of a Measurement into a fitted model: mixture fit -> links -> tilt -> field -> tilt.

Reads only the Measurement and the public schema, never rows; costs no privacy.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from splice_assets import progress
from splice_assets.fine_cells import FineCells, fine_cells
from splice_assets.layout import (
    layout_for,
    marginal_cells,
    marginal_sizes,
    pair_tables,
)
from splice_assets.measurement import (
    Measurement,
)
from splice_assets.model.fit import FitConfig
from splice_assets.model.settings import check_post_processing
from splice_assets.postprocess.draws import TILT_CHUNK_ROWS, integer_coordinates, matched_rows, proposal_rows
from splice_assets.postprocess.field import FieldChoice, fit_field
from splice_assets.postprocess.fine_tables import FineTables, choose_couplings
from splice_assets.postprocess.links import balanced, choose_links
from splice_assets.postprocess.synthetic_model import SyntheticModel
from splice_assets.postprocess.targets import fit_denoised, fit_targets
from splice_assets.postprocess.tilt import CellTilt, fit_tilt, table_cells, table_starts
from splice_assets.schema import TableSchema

# Streams of the public-seed pool the cell tilt is fitted on and of the pairwise field's sample and chains
# (distinct from sampling's stream).
_TAG_TILT_POOL = 0x7117_B001


_TAG_FIELD = 0xF1E1_D001
_TAG_TARGET_TILT = 0x7117_B003
_TAG_FOLLOW = 0xF011_0001
#: The field replaces the tilted mixture only if, tilted in turn, its holdout chi^2 per cell against the noisy tables
#: is at most this factor times the mixture's (docs/decisions/0029), and on wide tables within the noise of a chi^2
#: per cell (``field_tolerance``, docs/decisions/0065).
FIELD_CHI2_TOLERANCE = 1.05
#: How many noise sd of a chi^2 per cell, sqrt(2 / cells), the field's may exceed the mixture's (``field_tolerance``).
FIELD_CHI2_Z = 3.0
#: The field is fitted only when the tilted mixture's holdout chi^2 per cell reaches this factor times ``tilt_chi2``
#: (the noise level): above it the field, fitted to the mixture's sample, cost 2-way TVD and TSTR, and on very
#: large tables it was fitted only to be dropped (docs/decisions/0034).
FIELD_NEEDS_CHI2 = 1.05
#: The 3-way tilt fits a workload's tables to this chi^2 per cell (the noise level) while the target's go to
#: ``target_tilt_chi2``: their noise is scaled by sqrt(WORKLOAD_TILT_CHI2 / target_tilt_chi2) (docs/decisions/0073).
WORKLOAD_TILT_CHI2 = 1.0


def field_tolerance(cells: int) -> float:
    """The largest ratio of the tilted field's holdout chi^2 per cell to the tilted mixture's that keeps the field:
    1 + ``FIELD_CHI2_Z`` noise sd of a chi^2 per cell over ``cells`` cells (sqrt(2 / cells)), at most
    ``FIELD_CHI2_TOLERANCE``. On the widest tables the flat 5% is many such sd, and a field just under it passed
    and cost much of the 2-way error (docs/decisions/0065); below 7,200 cells the flat 5% is the tighter."""
    if cells < 1:
        raise ValueError(f"cells must be >= 1, got {cells!r}")
    return min(FIELD_CHI2_TOLERANCE, 1.0 + FIELD_CHI2_Z * math.sqrt(2.0 / cells))


def fit(measurement: Measurement, schema: TableSchema, config: FitConfig) -> SyntheticModel:
    """Post-processing only: the fit sees the measurement and the public schema, never rows (``fit_tables``); the
    model then carries the measurement's noisy fine tables, if it has any, for sampling inside the bins, with their
    couplings and followers (``choose_followers``)."""
    model = fit_tables(measurement, schema, config)
    if not measurement.fine_sizes:
        return model
    columns = fine_columns(measurement, schema)
    layout = layout_for(schema)
    targets = fit_targets(measurement, layout, config, columns)
    couplings = choose_couplings(
        measurement.noisy_pairs, measurement.pairs, marginal_sizes(layout, measurement.numeric_bins),
        columns, config.fine_coupling, measurement.pair_noise_std(),
        margins=targets.per_coordinate(layout) if targets is not None else None,
    )
    fine = FineTables(measurement.noisy_fine, measurement.marginal_noise_std(), measurement.fine_bins,
                      config.fine_threshold, couplings,
                      level_first=config.fine_level_first, exponential_tails=config.fine_exponential_tails,
                      knot_shapes=config.fine_knot_shapes, stratified=config.fine_stratified,
                      grid_weight=measurement.grid_weight,
                      interval_weight=measurement.interval_weight, capacity_shapes=config.fine_capacity_shapes,
                      corrected_spikes=config.fine_corrected_spikes)
    model = replace(model, fine=fine)
    if config.fine_follow_z is None or not couplings or not measurement.pairs or model.marginal_targets is None:
        return model
    with progress.stage("coupled columns between their bins"):
        followers = choose_followers(model, measurement, schema, columns, config)
    return replace(model, fine=replace(fine, followers=followers))


def choose_followers(
    model: SyntheticModel, measurement: Measurement, schema: TableSchema, columns: tuple[FineCells, ...],
    config: FitConfig,
) -> tuple[int, ...]:
    """The couplings whose follower's bins the copula corrects too (``FineTables.followers``: a row whose bin lies
    far outside the copula's band given its leader takes its bin from the copula), one at a time in the couplings'
    order (leaders first). A follower is taken if, with it, the chi^2 per cell of the noisy 1-/2-way tables that
    hold its coordinate stays within ``config.fine_follow_z`` noise sd (sqrt(2 / cells)) of the larger of the noise
    level (1) and the chi^2 without it. The tables are read on a pool of the model's rows (``tilt_pool_factor`` per
    measured row, at most ``TILT_CHUNK_ROWS``), the pool's own sampling variance taken out.

    Between its bins the mixture blurs a near-identical pair (California's ``total_bedrooms`` ~ ``households``:
    4.9% of the rows two or more coarse bins off the diagonal, against 0.9% in the data): single off-diagonal cells
    hold a few rows, far below the noise, so the tilt can not see them, but the copula, fitted to the whole table,
    can. It is a model of the pair alone, though, and a pair it does not describe (a second line of rows, a curved
    band) would be pulled onto its diagonal; the noisy tables then show it. Post-processing: the measurement's noisy
    tables and draws under the public seed."""
    assert model.fine is not None and model.marginal_targets is not None and config.fine_follow_z is not None
    tables, layout, bins, z = model.fine, layout_for(schema), measurement.numeric_bins, config.fine_follow_z
    sizes = marginal_sizes(layout, bins)
    rng = np.random.default_rng(np.random.SeedSequence([int(config.seed), _TAG_FOLLOW]))
    pool = matched_rows(model, config.tilt_pool_factor * min(measurement.n, TILT_CHUNK_ROWS), rng,
                        integer_coordinates(schema))
    targets = model.marginal_targets.per_coordinate(model.layout)
    coarse = [np.clip(targets[column.coordinate], 0.0, None) for column in columns]
    one_way = np.split(measurement.noisy_marginals, np.cumsum(sizes)[:-1])
    two_way = [table.ravel() for table in pair_tables(measurement.noisy_pairs, measurement.pairs, sizes)]
    std1, std2 = measurement.table_noise_stds(), measurement.pair_noise_std()

    def refined_with(followers: tuple[int, ...]) -> np.ndarray:
        refine_rng = np.random.default_rng(np.random.SeedSequence([int(config.seed), _TAG_FOLLOW, 1]))
        return replace(tables, followers=followers).refine(pool, columns, refine_rng, coarse, bins)

    def chi2(rows: np.ndarray, coordinate: int) -> tuple[float, int]:
        held = [i for i, pair in enumerate(measurement.pairs) if coordinate in pair]
        cells = table_cells(rows, layout, bins, [measurement.pairs[i] for i in held], local=True)
        observed = [(cells[:, coordinate], one_way[coordinate], float(std1[coordinate]))] + [
            (cells[:, layout.d + j], two_way[i], std2) for j, i in enumerate(held)
        ]
        total, count = 0.0, 0
        for index, noisy, std in observed:
            p = np.bincount(index, minlength=noisy.size) / len(rows)
            total += float(np.sum((p - noisy) ** 2 - p * (1.0 - p) / len(rows))) / std**2
            count += noisy.size
        return total / count, count

    followers: tuple[int, ...] = ()
    current = refined_with(followers)
    for follower, _, _ in tables.couplings:
        coordinate = columns[follower].coordinate
        trial = refined_with(followers + (follower,))
        without, count = chi2(current, coordinate)
        if chi2(trial, coordinate)[0] <= max(without, 1.0) + z * math.sqrt(2.0 / count):
            followers, current = followers + (follower,), trial
    return followers


def fine_columns(measurement: Measurement, schema: TableSchema) -> tuple[FineCells, ...]:
    """The public fine cells of the measurement's fine tables (none if it has none)."""
    if not measurement.fine_sizes:
        return ()
    return fine_cells(schema, measurement.fine_bins, measurement.numeric_bins)


def fit_tables(measurement: Measurement, schema: TableSchema, config: FitConfig) -> SyntheticModel:
    """The mixture and its post-processing toward the noisy tables: 1-/2-way (``fit_pairwise``), then the target's
    3-way tables (``fit_target_tilt``)."""
    return fit_target_tilt(fit_pairwise(measurement, schema, config), measurement, schema, config)


def fit_pairwise(measurement: Measurement, schema: TableSchema, config: FitConfig) -> SyntheticModel:
    """The mixture and its post-processing toward the noisy 1-/2-way tables.

    The mixture is fitted first. With measured 2-way tables, near-functional pairs are then read from them
    (``links``, ``config.link_lambda > 0``), and with ``config.tilt_chi2 > 0`` a cell tilt toward the noisy tables
    is fitted on a pool drawn from the linked mixture and stopped on a second one (``tilt``); if that holdout stops
    it short of ``tilt_chi2``, it is refitted from there on ``config.tilt_wide_pool_factor`` times wider pools.
    With ``config.field_iterations > 0`` (and histogram numerics), and where the tilted mixture reaches the noise
    level (``FIELD_NEEDS_CHI2``), a pairwise field is then fitted to a sample of the tilted mixture (``field``), and
    the tilt is fitted again, the same way, on pools drawn from the field. The field is kept only if that tilt ends
    within ``field_tolerance`` of the mixture's holdout chi^2 against the noisy tables: a choice between two
    post-processings by the noisy statistics alone, recorded in ``field_choice``.
    """
    check_post_processing(config)
    layout = layout_for(schema)
    fine = fine_columns(measurement, schema)
    model = SyntheticModel.of(fit_denoised(measurement, layout, config, fine))
    if not measurement.pairs or not measurement.marginal_sizes:
        return model
    if config.link_lambda > 0:
        links = choose_links(
            measurement.noisy_pairs, measurement.pairs, layout, measurement.numeric_bins, config.link_lambda,
            cell_noise=measurement.pair_noise_std(), cell_z=config.link_cell_z,
        )
        if config.link_balance and model.marginal_targets is not None:
            links = balanced(links, model.marginal_targets, layout)
        model = replace(model, links=links)
    if config.tilt_chi2 == 0:
        return model
    rng = np.random.default_rng(np.random.SeedSequence([int(config.seed), _TAG_TILT_POOL]))
    integer_bounds = integer_coordinates(schema)

    def fit_on_pools(
        proposal: SyntheticModel, pool_factor: int, sampling_factor: int, initial: np.ndarray | None = None
    ) -> CellTilt:
        """The tilt fitted (from ``initial`` potentials, or none) on a pool and stopped on a holdout pool of
        pool_factor * min(n, chunk) / 2 rows each, drawn from the proposal (``draws.proposal_rows``); sampled
        later with ``sampling_factor`` pool rows per output row."""
        pool_rows = max(1, pool_factor * min(measurement.n, TILT_CHUNK_ROWS) // 2)
        bins, pairs = measurement.numeric_bins, measurement.pairs
        pool, holdout = (  # row-major per-table cells (uint16), as fit_tilt's kernels read them
            table_cells(proposal_rows(proposal, pool_rows, rng, integer_bounds), layout, bins, pairs, "C", True)
            for _ in range(2)
        )
        potentials, chi2_start, chi2_end, iterations = fit_tilt(
            pool, holdout, measurement.noisy_marginals, measurement.marginal_cell_noise_stds(),
            measurement.noisy_pairs, measurement.pair_noise_std(), config.tilt_chi2, config.tilt_max_iterations,
            initial=initial, starts=table_starts(layout, bins, pairs),
        )
        return CellTilt(bins, pairs, potentials, sampling_factor, chi2_start, chi2_end, iterations)

    def tilted(proposal: SyntheticModel) -> SyntheticModel:
        with progress.stage("cell tilt toward the noisy tables"):
            tilt = fit_on_pools(proposal, config.tilt_pool_factor, config.tilt_pool_factor)
            wide = config.tilt_wide_pool_factor
            if tilt.chi2_end > config.tilt_chi2 and wide > config.tilt_pool_factor:
                # The holdout stopped the tilt short of the noise level: the pool's support, not the noise, was
                # the limit. Refit on wider pools from where it stopped (about half the iterations of a fresh start).
                wider = fit_on_pools(proposal, wide, max(config.tilt_pool_factor, wide // 2), tilt.potentials)
                tilt = replace(wider, chi2_start=tilt.chi2_start, iterations=tilt.iterations + wider.iterations)
        return replace(proposal, tilt=tilt)

    model = tilted(model)
    if config.field_iterations == 0 or len(model.layout.continuous_index):  # the field needs histogram numerics
        return model
    assert model.tilt is not None
    if model.tilt.chi2_end > FIELD_NEEDS_CHI2 * config.tilt_chi2:
        return model
    # The field is fitted to the tilted mixture's own sample (its denoised tables), under the public seed; then it
    # replaces the mixture as the proposal, and the tilt is fitted again on its pools.
    field_rng = np.random.default_rng(np.random.SeedSequence([int(config.seed), _TAG_FIELD]))
    with progress.stage("pairwise field"):
        cells = marginal_cells(matched_rows(model, config.field_chains, field_rng, integer_bounds), layout,
                               measurement.numeric_bins)
        pairwise = fit_field(cells, layout, measurement.numeric_bins, field_rng, config.field_iterations,
                             sweeps=config.field_sweeps)
    with_field = tilted(replace(model, field=pairwise, tilt=None))
    assert with_field.tilt is not None and model.tilt is not None
    # On wide tables the field, tilted, stayed well above the noise level where the mixture reached it, and every
    # score fell with it; elsewhere it lowers the 3-way error at the same chi^2 (docs/decisions/0029).
    tolerance = field_tolerance(measurement.noisy_marginals.size + measurement.noisy_pairs.size)
    kept = with_field.tilt.chi2_end <= tolerance * model.tilt.chi2_end
    choice = FieldChoice(model.tilt.chi2_end, with_field.tilt.chi2_end, tolerance, kept)
    return replace(with_field if kept else model, field_choice=choice)


def fit_target_tilt(
    model: SyntheticModel, measurement: Measurement, schema: TableSchema, config: FitConfig
) -> SyntheticModel:
    """The tilted model tilted once more, toward the target's noisy 3-way tables (``measurement.triples``) while it
    holds the noisy 1-way and 2-way tables (toward the triples alone, the pairs' margins drifted; docs/decisions/0049):
    ``fit_tilt`` on two pools of the rows the model samples (``matched_rows``, its
    field or its tilted mixture), ``config.tilt_pool_factor`` per measured row each (at most ``TILT_CHUNK_ROWS``),
    stopped at ``config.target_tilt_chi2`` on the second. Sampling then draws that many rows per output row and
    resamples them by these potentials. The model is returned as it is without triples, a tilt or a target tilt
    (``target_tilt_chi2`` = 0). A workload's 3-way tables join the target's, fitted to ``WORKLOAD_TILT_CHI2``.

    The pairwise steps can not hold a 3-way table: the field is the maximum-entropy joint of the 2-way tables, and
    the mixture's components carry little of a target that is a function of several columns (docs/decisions/0049).
    """
    if not measurement.triples or config.target_tilt_chi2 == 0 or model.tilt is None or model.marginal_targets is None:
        return model
    layout, bins, triples = layout_for(schema), measurement.numeric_bins, measurement.triples
    rng = np.random.default_rng(np.random.SeedSequence([int(config.seed), _TAG_TARGET_TILT]))
    integer_bounds = integer_coordinates(schema)
    pool_rows = config.tilt_pool_factor * min(measurement.n, TILT_CHUNK_ROWS)
    pairs = measurement.pairs
    with progress.stage("tilt toward the target's 3-way tables"):
        pool, holdout = (
            table_cells(matched_rows(model, pool_rows, rng, integer_bounds), layout, bins, pairs, "C", True, triples)
            for _ in range(2)
        )
        # A workload table is fitted to WORKLOAD_TILT_CHI2, not below its noise level as the target's class boundary.
        units = np.asarray(measurement.triple_units or (1,) * len(triples))
        scale = np.where(units > 1, math.sqrt(WORKLOAD_TILT_CHI2 / config.target_tilt_chi2), 1.0)
        potentials, chi2_start, chi2_end, iterations = fit_tilt(
            pool, holdout, measurement.noisy_marginals, measurement.marginal_cell_noise_stds(),
            np.concatenate([measurement.noisy_pairs, measurement.noisy_triples]),
            np.concatenate([np.full(measurement.noisy_pairs.size, measurement.pair_noise_std()),
                            np.repeat(measurement.triple_noise_stds() * scale, measurement.triple_sizes)]),
            config.target_tilt_chi2, config.tilt_max_iterations, starts=table_starts(layout, bins, pairs, triples),
        )
    target_tilt = CellTilt(bins, pairs, potentials, config.tilt_pool_factor, chi2_start, chi2_end, iterations, triples)
    return replace(model, target_tilt=target_tilt)


