"""The public library call: ``Synthesizer(schema, epsilon=..., delta=...).fit(table, ledger=...).sample(n)``.

The stages, in the one order every caller uses (``fit`` runs them all; the Dagster assets run them one per
asset; the CLI and the bench go through Dagster or ``fit``):

1. ``prepare``: structure and unparseable shares, pre-flight against the ledger (nothing charged yet), one
   reservation of everything the release spends (``reserve``), the DP estimate of the schema's ``auto`` entries
   (its part of the reservation), record-level cleaning;
2. ``encode``: the cleaned rows into [-1, 1]^d by the public layout;
3. ``measure``: the exact statistics, then the measurement's part of the reservation, noise, commit;
4. ``fit_model``: post-processing of the measurement (mixture, links, tilt, field): no rows, no cost;
5. ``sample``: synthetic rows from the fitted model.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from splice_assets import progress
from splice_assets.conditions import Conditions, parse_where
from splice_assets.config import (
    MeasurementSettings,
    ModelSettings,
    PostProcessingSettings,
    Relation,
    SynthesizerSettings,
    fit_config,
)
from splice_assets.engine import Engine
from splice_assets.layout import layout_for
from splice_assets.limits import HOLDOUT_FRACTION
from splice_assets.lowering import lower_input
from splice_assets.measurement import Measurement
from splice_assets.model.settings import FitConfig
from splice_assets.planning import ESTIMATE, MEASUREMENT, ReleasePlanner
from splice_assets.private.bounds import DEFAULT_BOUNDS_SHARE, BoundsEstimate, estimate_bounds, needs_estimate
from splice_assets.private.encoding import encode
from splice_assets.private.holdout_split import measured_size, split_holdout
from splice_assets.private.ledger import BudgetLedger, Part, ReservedSpend
from splice_assets.private.measuring import (
    MeasurementPlan,
    SpendRecorder,
    exact_statistics,
    measure_exact,
)
from splice_assets.private.measuring import MomentsOutOfRange as MomentsOutOfRange  # re-exported for the thin layers
from splice_assets.private.mechanism import Calibration, compose_epsilon
from splice_assets.private.partitions import Partition
from splice_assets.private.partitions import StreamedInput as StreamedInput  # re-exported for the thin layers
from splice_assets.private.validation import (
    ValidatedTable,
    ValidationReport,
    check_row_count,
    check_structure,
    validate,
)
from splice_assets.queries import DEFAULT_REPLICATES, Answer, Query, QueryAnswerer, QueryBasis
from splice_assets.schema import TableSchema, load_schema, schema_to_dict
from splice_assets.synthetic import SyntheticModel

SETTINGS_FILE = "settings.json"


def release_epsilon(measurement: Measurement, bounds_noise_multiplier: float | None) -> float:
    """A release's whole epsilon at its delta: the measurement's, composed exactly with any DP bounds' Gaussian."""
    if bounds_noise_multiplier is None:
        return measurement.epsilon
    return compose_epsilon([measurement.noise_multiplier, bounds_noise_multiplier], measurement.delta)


def bounds_from_dict(saved: dict[str, Any]) -> BoundsEstimate:
    """A DP bounds estimate from its ``dataclasses.asdict`` read back from JSON (tuples came back as lists)."""
    bounds = dict(saved)
    bounds["columns"] = {k: tuple(v) for k, v in bounds["columns"].items()}
    bounds["exact_zero"] = tuple(bounds.get("exact_zero", ()))
    bounds["found_values"] = {k: tuple(v) for k, v in bounds.get("found_values", {}).items()}
    bounds["found_decimals"] = dict(bounds.get("found_decimals", {}))
    bounds["found_steps"] = dict(bounds.get("found_steps", {}))
    bounds["found_knots"] = {k: tuple(v) for k, v in bounds.get("found_knots", {}).items()}
    bounds["clipped"] = dict(bounds.get("clipped", {}))
    return BoundsEstimate(**bounds)


@dataclass(frozen=True)
class SourceScan:
    """A partitioned input after its first pass: its partitions, its row count (public under replace-one; under
    add-remove used only to plan the split and the report samples) and the rows the release measures."""

    source: str
    partitions: tuple[Partition, ...]
    n_rows: int
    n_measured: int
    holdout_fraction: float


@dataclass(frozen=True)
class PreparedInput:
    """A whole table after ``Synthesizer.prepare_split``: the cleaned rows split into the measured part (``train``)
    and the held-out rows, and the INTERNAL repair report (all PRIVATE: in memory or the internal folder)."""

    train: pd.DataFrame
    holdout: pd.DataFrame
    report: ValidationReport


class NotFitted(RuntimeError):
    """A stage that needs a measurement or a model ran before ``measure`` / ``fit_model``."""


@dataclass(frozen=True)
class PrivacyFacts:
    """The public privacy facts of a fitted synthesizer. ``epsilon`` is the whole guarantee at ``delta``, what the
    release charged: the measurement's Gaussian composed with that of any DP estimate (``bounds_noise_multiplier``,
    None without one). Its parts, each alone at ``delta``: ``epsilon_measurement`` and ``epsilon_estimate`` (None
    without an estimate); they compose to ``epsilon``, they do not add up to it. ``n`` is public under replace-one
    and the noisy estimate under add-remove."""

    epsilon: float
    delta: float
    relation: Relation
    epsilon_measurement: float
    epsilon_estimate: float | None
    bounds_noise_multiplier: float | None
    sigma: float
    sensitivity: float
    noise_multiplier: float
    n: int
    ledger_entry_id: str | None


class Synthesizer:
    """A differentially private synthesizer of one table under a public schema.

    ``fit`` reserves the whole release once (``reserve``: the measurement and, when the schema has ``auto``
    entries, the DP estimate, each its own ledger entry); ``sample``, ``refit``, ``save`` and ``load`` are
    post-processing and cost nothing.
    """

    def __init__(
        self,
        schema: TableSchema,
        epsilon: float,
        delta: float,
        relation: Relation | str = Relation.REPLACE_ONE,
        seed: int = 0,
        measurement: MeasurementSettings | None = None,
        model: ModelSettings | None = None,
        postprocessing: PostProcessingSettings | None = None,
        bounds_share: float = DEFAULT_BOUNDS_SHARE,
        max_unparseable_share: float | None = None,
    ) -> None:
        extra = {} if max_unparseable_share is None else {"max_unparseable_share": max_unparseable_share}
        # The one settings model (``config``): every limit checked here, as by every other entry point.
        self.settings = SynthesizerSettings(
            epsilon=epsilon, delta=delta, relation=Relation.parse(relation), seed=seed,
            measurement=(measurement or MeasurementSettings()).for_schema(schema), model=model or ModelSettings(),
            postprocessing=postprocessing or PostProcessingSettings(), bounds_share=bounds_share, **extra,
        )
        self.settings.check_schema(schema)
        self.schema = schema
        self.bounds: BoundsEstimate | None = None
        self.measurement: Measurement | None = None
        self.model: SyntheticModel | None = None
        #: This release's reservation (``reserve``): the ledger entry id of each part, by name.
        self.reservation: dict[str, str] = {}
        self._basis: QueryBasis | None = None
        self._answerer: QueryAnswerer | None = None

    @classmethod
    def from_settings(cls, schema: TableSchema, settings: SynthesizerSettings) -> Synthesizer:
        s = settings
        return cls(schema, s.epsilon, s.delta, s.relation, s.seed, s.measurement, s.model, s.postprocessing,
                   s.bounds_share, s.max_unparseable_share)

    @classmethod
    def from_parts(cls, schema: TableSchema, settings: SynthesizerSettings, *, bounds: BoundsEstimate | None = None,
                   measurement: Measurement | None = None, model: SyntheticModel | None = None,
                   reservation: Mapping[str, str] | None = None) -> Synthesizer:
        """A new synthesizer at the stage these values reach: the (resolved) schema, the DP estimate's record, the
        reservation's entry ids, the measurement and the model, as earlier stages returned them. The thin layers
        pass these values between their steps and build the synthesizer each step needs, never sharing one."""
        synth = cls.from_settings(schema, settings)
        synth.bounds, synth.measurement, synth.model = bounds, measurement, model
        synth.reservation = dict(reservation or {})
        return synth

    # -- the stages ----------------------------------------------------------------------------------------------

    @property
    def planner(self) -> ReleasePlanner:
        """This release's planner (``planning.ReleasePlanner``), the one every entry point plans with."""
        return ReleasePlanner(self.schema, self.settings, self.bounds is not None and self.bounds.spent)

    def privacy_split(self) -> tuple[float, float | None]:
        """(the measurement's epsilon, the DP estimate's noise multiplier): ``ReleasePlanner.privacy_split``."""
        return self.planner.privacy_split()

    @property
    def measurement_epsilon(self) -> float:
        return self.privacy_split()[0]

    def plan(self, n_measured: int) -> tuple[MeasurementPlan, Calibration]:
        """The measurement's public plan and calibration for ``n_measured`` rows (``ReleasePlanner.plan``)."""
        return self.planner.plan(n_measured)

    def check(self, raw: pd.DataFrame, ledger: BudgetLedger | None, n_measured: int | None = None,
              expected_version: int | None = None) -> None:
        """Everything that can fail, before any charge: structure, unparseable shares, the measured rows against
        n_min (replace-one only: ``check_row_count``) and (with a ledger) the pre-flight of
        ``preflight.check_release``. ``n_measured`` defaults to every row of ``raw``."""
        s = self.settings
        n_measured = len(raw) if n_measured is None else n_measured
        raw = lower_input(raw, self.schema)
        check_structure(raw, self.schema, expected_version, require_bounds=False,
                        max_unparseable_share=s.max_unparseable_share, relation=s.relation)
        check_row_count(n_measured, self.schema, s.relation, "after the holdout (lower it) the measured part has")
        if ledger is not None:
            self._preflight(n_measured, ledger)

    def release_parts(self, n_measured: int) -> list[Part]:
        """What this release will spend, priced before anything is drawn (``ReleasePlanner.release_parts``)."""
        return self.planner.release_parts(n_measured)

    def reserve(self, ledger: BudgetLedger, release_id: str, n_measured: int) -> dict[str, str]:
        """Reserve everything this release will spend in one ledger transaction, before any of its noise is drawn
        (``BudgetLedger.reserve_release``): a release refused for budget spends nothing, and racing releases never
        spend an estimate for a release that cannot measure. Each draw then claims its part (``_spend``)."""
        self.reservation = ledger.reserve_release(
            self.schema.name, release_id, self.settings.relation, self.release_parts(n_measured))
        return self.reservation

    def _spend(self, ledger: SpendRecorder | None, part: str) -> SpendRecorder | None:
        """What the draw of ``part`` charges: its part of this release's reservation, or the ledger itself when
        nothing was reserved for it (the draw then reserves on its own)."""
        entry_id = self.reservation.get(part)
        if entry_id is None or not isinstance(ledger, BudgetLedger):
            return ledger
        return ReservedSpend(ledger, entry_id)

    @contextmanager
    def _withdrawn_on_failure(self, ledger: SpendRecorder | None) -> Iterator[None]:
        """On a failure, abort the parts of this release's reservation that no draw claimed: no noise was drawn
        for them, so they need not count (``BudgetLedger.withdraw``); a claimed part stays counted."""
        try:
            yield
        except BaseException:
            if isinstance(ledger, BudgetLedger):
                for entry_id in self.reservation.values():
                    ledger.withdraw(entry_id)
            raise

    def _preflight(self, n_measured: int, ledger: BudgetLedger, rows_in_memory: int | None = None) -> None:
        """``preflight.check_release`` for this release measuring ``n_measured`` rows (nothing charged)."""
        from splice_assets.private import preflight

        plan, calibration = self.plan(max(n_measured, 1))
        cells = int(sum(plan.marginal_sizes) + sum(plan.pair_sizes))
        m = self.settings.measurement
        preflight.check_release(
            self.schema, self.settings.relation, self.settings.delta, n_measured, layout_for(self.schema).d,
            m.n_directions, m.k, self.settings.model.components, cells, ledger,
            preflight.ReleaseCost(tuple(p.noise_multiplier for p in self.planner.parts(plan, calibration))),
            rows_in_memory=rows_in_memory,
        )

    def prepare(self, raw: pd.DataFrame, ledger: BudgetLedger | None, release_id: str = "adhoc",
                n_measured: int | None = None, expected_version: int | None = None,
                on_estimate: Callable[[BoundsEstimate], object] | None = None) -> ValidatedTable:
        """``check``, then (with a ledger) one reservation of the whole release, then the DP estimate of the
        schema's ``auto`` entries (its part of the reservation; the schema takes the estimates; ``on_estimate``
        persists their public record before its entry is committed), then record-level cleaning. Returns the
        cleaned table and its INTERNAL repair report."""
        with progress.stage("validate and clean the input"):
            n_measured = len(raw) if n_measured is None else n_measured
            source, raw = raw, lower_input(raw, self.schema)  # once: each step below reads the parts
            self.check(raw, ledger, n_measured, expected_version)
            if ledger is not None:
                self.reserve(ledger, release_id, n_measured)
            with self._withdrawn_on_failure(ledger):
                bounds_multiplier = self.privacy_split()[1]
                if bounds_multiplier is not None and needs_estimate(self.schema):
                    self.schema, self.bounds = estimate_bounds(
                        raw, self.schema, bounds_multiplier, self.settings.delta, self._spend(ledger, ESTIMATE),
                        release_id, self.settings.relation, on_estimate,
                    )
                    if self.bounds.found_resolutions and source is not raw:  # resolution: auto re-laid the parts out
                        raw = lower_input(source, self.schema)
                return validate(raw, self.schema, expected_version,
                                max_unparseable_share=self.settings.max_unparseable_share,
                                relation=self.settings.relation)

    def prepare_split(self, raw: pd.DataFrame, ledger: BudgetLedger | None, release_id: str = "adhoc",
                      holdout_fraction: float = 0.0, expected_version: int | None = None,
                      on_estimate: Callable[[BoundsEstimate], object] | None = None) -> PreparedInput:
        """``prepare`` for a release that holds rows out: the measured part's size (``holdout_split.measured_size``)
        is what ``check`` holds against n_min (under replace-one only) and what the pre-flight and the reservation
        price; then the cleaned table is split by the public seed (``holdout_split.split_holdout``). The held-out
        rows are never measured: they serve the internal report."""
        HOLDOUT_FRACTION.check(holdout_fraction)
        checked = self.prepare(raw, ledger, release_id, measured_size(len(raw), holdout_fraction), expected_version,
                               on_estimate)
        train, holdout = split_holdout(checked.table, holdout_fraction, self.settings.seed, self.settings.relation)
        return PreparedInput(train, holdout, checked.report)

    def encode(self, table: pd.DataFrame) -> np.ndarray:
        """Cleaned rows into [-1, 1]^d (PRIVATE: the caller keeps the result in memory or the internal folder)."""
        return encode(table, self.schema)

    def measure(
        self,
        x: np.ndarray,
        ledger: SpendRecorder | None,
        release_id: str = "adhoc",
        on_noisy: Callable[[Measurement], object] | None = None,
    ) -> Measurement:
        """The one Gaussian measurement of encoded rows: exact statistics -> its part of the release's reservation
        (claimed; reserved here if ``prepare`` reserved none) -> noise -> ``on_noisy`` (persist) -> commit
        (``measuring.measure_exact``). ``ledger=None`` accounts nothing: public data only."""
        with progress.stage("measure the noisy statistics (charged)"), self._withdrawn_on_failure(ledger):
            plan, calibration = self.plan(x.shape[0])
            stats = exact_statistics(x, plan, layout_for(self.schema))
            self.measurement = measure_exact(stats, plan, calibration, self._spend(ledger, MEASUREMENT), release_id,
                                             on_noisy)
        return self.measurement

    def fit_model(self, threads: int | None = 1) -> SyntheticModel:
        """Post-processing of the measurement into the fitted model (``postprocess.chain.fit``)."""
        from splice_assets.postprocess import chain

        if self.measurement is None:
            raise NotFitted("measure (or load) a synthesizer before fitting its model")
        with progress.stage("fit the model (post-processing)"):
            self.model = chain.fit(self.measurement, self.schema, self._fit_config(threads))
        return self.model

    def _fit_config(self, threads: int | None) -> FitConfig:
        """The fitter's configuration: the one mapping from the settings (``config.fit_config``)."""
        return fit_config(self.settings, threads)

    def fit(self, table: pd.DataFrame, *, ledger: BudgetLedger | None, release_id: str | None = None,
            threads: int | None = 1) -> Synthesizer:
        """Every stage on a raw table: check, bounds, clean, encode, measure (charged), fit. ``ledger`` is
        required; ``None`` draws the noise without accounting, for public data such as benchmarks only. Each fit
        is its own release in the ledger: ``release_id`` defaults to a fresh uuid."""
        release_id = release_id or str(uuid.uuid4())
        cleaned = self.prepare(table, ledger, release_id)
        self.measure(self.encode(cleaned.table), ledger, release_id)
        self.fit_model(threads)
        return self

    # -- a partitioned input (streamed in bounded batches, on this machine or a Dask cluster) -------------------

    def scan_source(
        self,
        source: str,
        ledger: BudgetLedger | None,
        release_id: str = "adhoc",
        holdout_fraction: float = 0.0,
        engine: Engine | None = None,
        expected_version: int | None = None,
        on_estimate: Callable[[BoundsEstimate], object] | None = None,
    ) -> SourceScan:
        """``prepare`` for a file, directory or glob of Parquet/CSV files (any fsspec URL), streamed: the first
        pass checks the header, counts rows and unparseable cells and the ``bounds: auto`` histograms on the
        ``engine``'s workers; then the same refusals and pre-flight as ``check``, the release's one reservation,
        then the DP estimate (its part of it)."""
        from splice_assets.private.bounds import estimate_bounds_from_counts, exact_knot_counts
        from splice_assets.private.partitions import (
            DEFAULT_BATCH_ROWS,
            DEFAULT_REPORT_ROWS,
            list_partitions,
            scan_source,
            value_counts_source,
        )
        from splice_assets.private.validation import check_columns, check_row_count, refuse_unparseable

        HOLDOUT_FRACTION.check(holdout_fraction)
        with progress.stage("validate the partitioned input"):
            check_columns(self.schema.input_names, self.schema, expected_version, require_bounds=False)
            partitions = tuple(list_partitions(source))
            scan = scan_source(partitions, self.schema, engine)
            relation = self.settings.relation
            check_row_count(scan.rows, self.schema, relation)
            refuse_unparseable(self.schema, scan.tallies, self.settings.max_unparseable_share)
            n_measured = measured_size(scan.rows, holdout_fraction)
            check_row_count(n_measured, self.schema, relation, "after the holdout (lower it) the measured part has")
            if ledger is not None:  # memory: one batch and the report's two samples at a time, whatever n
                self._preflight(n_measured, ledger, DEFAULT_BATCH_ROWS + 2 * DEFAULT_REPORT_ROWS)
                self.reserve(ledger, release_id, n_measured)
            with self._withdrawn_on_failure(ledger):
                bounds_multiplier = self.privacy_split()[1]
                if bounds_multiplier is not None and needs_estimate(self.schema):
                    self.schema, self.bounds = estimate_bounds_from_counts(
                        scan.bounds_counts, self.schema, bounds_multiplier, self.settings.delta,
                        self._spend(ledger, ESTIMATE), release_id, relation,
                        lambda resolved, columns: value_counts_source(partitions, resolved, columns, engine),
                        scan.decimals_counts, scan.steps_counts,
                        lambda resolved, columns: value_counts_source(partitions, resolved, columns, engine,
                                                                      counter=exact_knot_counts),
                        on_estimate,
                        # categories: auto: the key counts the scan added up over the partitions
                        categories=list(scan.category_counts),
                        months=scan.months_counts, units=scan.units_counts,
                    )
        return SourceScan(source, partitions, scan.rows, n_measured, holdout_fraction)

    def measure_source(
        self,
        scan: SourceScan,
        ledger: SpendRecorder | None,
        release_id: str = "adhoc",
        engine: Engine | None = None,
        on_noisy: Callable[[Measurement], object] | None = None,
        report_rows: int | None = None,
    ) -> StreamedInput:
        """``measure`` for a scanned source: the exact sums of the measured rows, added up on the driver from the
        workers' partial sums, then the one reservation and noise on the driver. Returns the PRIVATE streamed input
        (its repair report and the report's bounded samples of real rows: keep them in the internal folder)."""
        from splice_assets.private.measuring import statistics_of

        with progress.stage("measure the noisy statistics (charged)"), self._withdrawn_on_failure(ledger):
            plan, calibration = self.plan(scan.n_measured)
            streamed = self.stream(scan, engine, report_rows, plan)
            # No n_min check on the measured rows here: under replace-one ``scan_source`` checked their public
            # count; under add-remove it is private and is not refused on (``check_row_count``).
            self.measurement = measure_exact(statistics_of(streamed.sums, plan), plan, calibration,
                                             self._spend(ledger, MEASUREMENT), release_id, on_noisy)
        return streamed

    def stream(self, scan: SourceScan, engine: Engine | None = None, report_rows: int | None = None,
               plan: MeasurementPlan | None = None) -> StreamedInput:
        """The passes after the scan without the measurement: exact sums, repair report and report samples of a
        scanned source (PRIVATE; nothing charged, no noise). ``measure_source`` measures them."""
        from splice_assets.private import partitions

        plan = plan or self.plan(scan.n_measured)[0]
        return partitions.measure_source(
            scan.partitions, self.schema, plan, scan.n_rows, scan.holdout_fraction, self.settings.relation,
            engine, report_rows or partitions.DEFAULT_REPORT_ROWS,
        )

    def fit_source(self, source: str, *, ledger: BudgetLedger | None, engine: Engine | None = None,
                   release_id: str | None = None, threads: int | None = 1) -> Synthesizer:
        """``fit`` for a partitioned source, streamed (memory bounded by a batch, not by n): every row measured."""
        release_id = release_id or str(uuid.uuid4())
        self.measure_source(self.scan_source(source, ledger, release_id, engine=engine), ledger, release_id, engine)
        self.fit_model(threads)
        return self

    def sample(self, n_rows: int | None = None, seed: int | None = None,
               where: Mapping[str, Any] | str | None = None) -> pd.DataFrame:
        """Synthetic rows (default: as many as measured, the noisy n under add-remove; the settings' seed).

        ``where`` draws them from the model's conditional law instead: ``{"status": "paid", "amount": (10, 100)}``
        (a category or a list of them, a closed range with ``None`` for an open end) or its text form
        ``"status == 'paid' and amount between 10 and 100"`` (``conditions.parse_where``, which refuses a bad one
        naming the column and quoting the value). A condition the model gives (near) zero probability raises
        ``conditions.ConditionProbabilityError``. The frame's ``attrs["condition"]`` reports the condition's
        probability under the model and the share of drawn rows its final check rejected."""
        from splice_assets.sampling import sample_table

        if self.model is None or self.measurement is None:
            raise NotFitted("fit (or load) a synthesizer before sampling")
        n = self.measurement.n if n_rows is None else int(n_rows)
        conditions = self._conditions(where)
        with progress.stage(f"sample {n:,} rows" + (f" where {conditions.describe()}" if conditions else "")):
            return sample_table(self.model, self.schema, n, self.settings.seed if seed is None else int(seed),
                                match_marginals=self.settings.postprocessing.match_marginals, where=conditions)

    def answer(self, query: Query | str, replicates: int = DEFAULT_REPLICATES) -> Answer:
        """The release's answer to ``query`` with a 95% interval (``queries``): ``"count where status == 'paid'
        and amount >= 100"``, ``"share where ..."``, ``"mean(amount) where ..."``, ``"sum(amount)"``. Zero cost. The
        first answer that needs the model's bootstrap refits the re-noised measurement ``replicates`` times (each
        a fit); later answers reuse them (``query_basis``)."""
        if self.measurement is None or self.model is None:
            raise NotFitted("fit (or load) a synthesizer before asking it questions")
        if self._answerer is None or self._answerer.measurement is not self.measurement:  # a new fit: a new basis
            self._answerer, self._basis = QueryAnswerer(self.measurement, self.schema), None  # exact: no refits
        exact = self._answerer.exact(query)
        if exact is not None:
            return exact
        if self._answerer.basis is None or len(self._answerer.basis.replicates) != replicates:
            self._answerer = QueryAnswerer(self.measurement, self.schema, self.query_basis(replicates))
        return self._answerer.answer(query)

    def query_basis(self, replicates: int = DEFAULT_REPLICATES) -> QueryBasis:
        """The samples ``answer`` reads (``queries.QueryBasis``), built once per synthesizer; public (post-processing),
        so ``QueryBasis.save`` may keep them beside the release, as ``splice query`` does."""
        if self._basis is None or len(self._basis.replicates) != replicates:
            self._basis = QueryBasis.build(self, replicates)
        return self._basis

    def _conditions(self, where: Mapping[str, Any] | str | None) -> Conditions:
        """A user's ``where`` checked against the schema (``conditions.parse_where``)."""
        return parse_where(where, self.schema)

    def write_partitions(self, folder: str, n_rows: int | None = None, seed: int | None = None,
                         rows_per_partition: int | None = None, engine: Engine | None = None,
                         where: Mapping[str, Any] | str | None = None) -> list[str]:
        """Synthetic rows as Parquet partitions in ``folder`` (any fsspec URL), written in parallel on the
        ``engine``, each from its own stream of the public seed (``sampling.write_partitions``); ``where`` as in
        ``sample``."""
        from splice_assets.sampling import DEFAULT_PARTITION_ROWS, write_partitions

        if self.model is None or self.measurement is None:
            raise NotFitted("fit (or load) a synthesizer before sampling")
        n = self.measurement.n if n_rows is None else int(n_rows)
        conditions = self._conditions(where)
        with progress.stage(f"sample {n:,} rows into Parquet partitions"):
            return write_partitions(self.model, self.schema, n, self.settings.seed if seed is None else int(seed),
                                    folder, rows_per_partition or DEFAULT_PARTITION_ROWS, engine,
                                    self.settings.postprocessing.match_marginals, where=conditions)

    def refit(self, model: ModelSettings | None = None, postprocessing: PostProcessingSettings | None = None,
              seed: int | None = None, threads: int | None = 1) -> Synthesizer:
        """A new synthesizer fitted to the same noisy measurement with other settings: zero privacy cost."""
        if self.measurement is None:
            raise NotFitted("fit (or load) a synthesizer before refitting it")
        settings = dataclasses.replace(
            self.settings, model=model or self.settings.model,
            postprocessing=postprocessing or self.settings.postprocessing,
            seed=self.settings.seed if seed is None else seed,
        )
        child = Synthesizer.from_settings(self.schema, settings)
        child.measurement, child.bounds = self.measurement, self.bounds
        child.fit_model(threads)
        return child

    # -- public facts and persistence ------------------------------------------------------------------------

    @property
    def privacy(self) -> PrivacyFacts:
        m = self.measurement
        if m is None:
            raise NotFitted("a synthesizer has privacy facts once it is measured")
        estimate = self.bounds if self.bounds is not None and self.bounds.spent else None
        bounds = None if estimate is None else estimate.noise_multiplier
        return PrivacyFacts(release_epsilon(m, bounds), m.delta, Relation.parse(m.relation), m.epsilon,
                            None if estimate is None else estimate.epsilon, bounds, m.sigma, m.sensitivity,
                            m.noise_multiplier, m.n, m.ledger_entry_id)

    def save(self, folder: str | Path) -> Path:
        """Write the public artifacts: noisy measurement, model, schema (with any DP bounds) and settings."""
        from splice_assets.sampling import save_model

        if self.model is None or self.measurement is None:
            raise NotFitted("fit a synthesizer before saving it")
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.measurement.save(folder / "measurement")
        save_model(self.model, folder / "model")
        (folder / "schema.yaml").write_text(yaml.safe_dump(schema_to_dict(self.schema), sort_keys=False))
        bounds = None if self.bounds is None else dataclasses.asdict(self.bounds)
        (folder / SETTINGS_FILE).write_text(json.dumps(
            {"settings": self.settings.to_dict(), "bounds": bounds}, indent=2, default=list
        ))
        return folder

    @classmethod
    def load(cls, folder: str | Path) -> Synthesizer:
        """Inverse of ``save``: a fitted synthesizer that can sample and refit (no rows, no cost)."""
        from splice_assets.sampling import load_model

        folder = Path(folder)
        saved = json.loads((folder / SETTINGS_FILE).read_text())
        synth = cls.from_settings(load_schema(folder / "schema.yaml"), SynthesizerSettings.from_dict(saved["settings"]))
        if saved.get("bounds"):
            if "noise_multiplier" not in saved["bounds"]:
                raise ValueError(f"{folder}: saved by a splice whose DP bounds were pure-epsilon quantiles; load it "
                                 "with that version")
            synth.bounds = bounds_from_dict(saved["bounds"])
        synth.measurement = Measurement.load(folder / "measurement")
        synth.model = load_model(folder / "model")
        return synth
