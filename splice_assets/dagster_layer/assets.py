"""The release chain as Dagster assets. Each asset wraps library calls and nothing more.

validated_table -> unit_ball_encoding -> private_moments -> mixture_model -> synthetic_table ->
fidelity_report -> release. Asset metadata (Dagster's event log, outside the internal release folder) holds
public facts only; what is computed from real rows goes to the release's internal folder, and the step outputs
themselves to ``ReleaseStepStorage`` in that folder.

The steps pass explicit, immutable values, never a synthesizer: the settings, the resolved schema and the DP
estimate's record, the reservation's entry ids, then the measurement and the model. Each step builds the
synthesizer it needs from them (``Synthesizer.from_parts``); no step changes what an earlier one output.
"""


import dataclasses
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import dagster as dg
import numpy as np
import pandas as pd

from splice_assets.api import MomentsOutOfRange, SourceScan, StreamedInput, Synthesizer
from splice_assets.dagster_layer.config import ReleaseConfig, ReleaseSettings, release_config_in
from splice_assets.dagster_layer.resources import (
    ArtifactStore,
    EngineResource,
    LedgerResource,
    MlflowResource,
    release_id_of_run,
)
from splice_assets.evaluation.report import ReportResult, build_report
from splice_assets.layout import layout_for
from splice_assets.limits import Relation
from splice_assets.measurement import Measurement
from splice_assets.postprocess.links import describe as describe_links
from splice_assets.private.bounds import BoundsEstimate
from splice_assets.private.validation import (
    ValidationReport,
    read_table,
)
from splice_assets.release import bundle as release_lib
from splice_assets.release import resume
from splice_assets.release.locations import ReleaseLocation
from splice_assets.schema import TableSchema, load_schema
from splice_assets.synthetic import SyntheticModel

GROUP = "splice_release"
# Asset keys live under "splice/" so the final `release` asset does not clash with the `release` job.
PREFIX = "splice"


def op_name(asset: str) -> str:
    """The op (and step key) Dagster derives from a prefixed asset key."""
    return f"{PREFIX}__{asset}"


CONFIG_OP = op_name("validated_table")  # the one op that takes run config

OWNERS = ["team:data-platform"]
# Every asset of the chain shares its key prefix, group and owners.
splice_asset = functools.partial(dg.asset, key_prefix=PREFIX, group_name=GROUP, owners=OWNERS)
INTERNAL = "internal (computed from real rows; never release)"


def release_id_of(context: dg.AssetExecutionContext) -> str:
    """A release is identified by the root run: re-executions of a failed run keep the same id."""
    return release_id_of_run(context.run)


def synthesizer_of(settings: ReleaseSettings, schema: TableSchema, bounds: BoundsEstimate | None, *,
                   reservation: tuple[tuple[str, str], ...] = (), measurement: Measurement | None = None,
                   model: SyntheticModel | None = None) -> Synthesizer:
    """A new synthesizer for one step, from the values earlier steps output (``Synthesizer.from_parts``)."""
    return Synthesizer.from_parts(schema, settings.synthesizer_settings(), bounds=bounds, measurement=measurement,
                                  model=model, reservation=dict(reservation))


@dataclass(frozen=True)
class ValidatedInput:
    """A whole table (``train``, ``holdout``, ``report``) or, streamed, a scanned source whose rows are read again
    where they are measured (``scan``; the report's rows then come from ``MeasuredMoments.streamed``). ``schema``
    is the schema resolved by any DP estimate (``bounds``, its public record); ``reservation`` the release's ledger
    entry id of each part, by name."""

    settings: ReleaseSettings
    schema: TableSchema
    bounds: BoundsEstimate | None
    reservation: tuple[tuple[str, str], ...]
    train: pd.DataFrame | None
    holdout: pd.DataFrame | None
    report: ValidationReport | None
    source_uri: str
    scan: SourceScan | None = None


@dataclass(frozen=True)
class EncodedInput:
    settings: ReleaseSettings
    schema: TableSchema
    bounds: BoundsEstimate | None
    reservation: tuple[tuple[str, str], ...]
    x: np.ndarray | None
    scan: SourceScan | None = None

    def synthesizer(self) -> Synthesizer:
        """A new synthesizer ready to measure: the release's reservation, no measurement yet."""
        return synthesizer_of(self.settings, self.schema, self.bounds, reservation=self.reservation)


@dataclass(frozen=True)
class MeasuredMoments:
    settings: ReleaseSettings
    schema: TableSchema
    bounds: BoundsEstimate | None
    measurement: Measurement
    reused: bool
    streamed: StreamedInput | None = None

    def synthesizer(self) -> Synthesizer:
        """A new synthesizer holding the measurement, ready to fit its model (post-processing)."""
        return synthesizer_of(self.settings, self.schema, self.bounds, measurement=self.measurement)

    def real_rows(self, validated: ValidatedInput) -> tuple[pd.DataFrame, pd.DataFrame, ValidationReport]:
        """(measured rows, held-out rows, repair report) for the internal report: the whole table's, or the
        streamed input's bounded samples."""
        if self.streamed is not None:
            return self.streamed.train_sample, self.streamed.holdout_sample, self.streamed.report
        return (cast(pd.DataFrame, validated.train), cast(pd.DataFrame, validated.holdout),
                cast(ValidationReport, validated.report))

    def measured_rows(self, validated: ValidatedInput) -> int:
        """INTERNAL: the exact count of the rows measured (private under add-remove)."""
        if self.streamed is not None:
            return self.streamed.sums.rows
        return len(cast(pd.DataFrame, validated.train))


@dataclass(frozen=True)
class FittedModel:
    settings: ReleaseSettings
    schema: TableSchema
    bounds: BoundsEstimate | None
    measurement: Measurement
    model: SyntheticModel
    streamed: bool = False

    def synthesizer(self) -> Synthesizer:
        """A new fitted synthesizer, ready to sample (post-processing)."""
        return synthesizer_of(self.settings, self.schema, self.bounds, measurement=self.measurement,
                              model=self.model)


@dataclass(frozen=True)
class SyntheticTable:
    """The synthetic rows, or for a streamed release the first of the Parquet ``files`` it wrote (for the checks)."""

    settings: ReleaseSettings
    schema: TableSchema
    table: pd.DataFrame
    files: tuple[str, ...] = ()


@dataclass(frozen=True)
class FidelityReport:
    """INTERNAL: the report on real rows (its files are in the release's internal folder)."""

    settings: ReleaseSettings
    result: ReportResult


def privacy_parts(estimate_multiplier: float | None, measurement_epsilon: float, delta: float) -> dict[str, float]:
    """The parts of a release's guarantee, each alone at ``delta``, under their own names (they compose to the
    release's epsilon, they do not add up to it)."""
    from splice_assets.private.mechanism import epsilon_of

    estimate = {} if estimate_multiplier is None else {"epsilon_estimate": epsilon_of(estimate_multiplier, delta)}
    return {**estimate, "epsilon_measurement": measurement_epsilon}


def row_count_metadata(n: int, relation: Relation) -> dict[str, int]:
    """The measured row count for the UI: public under replace-one. Under add-remove it is private, so it is not
    shown at all (Dagster's event log lives outside the internal release folder); the noisy n of the measurement
    is the public one."""
    return {"n (public)": n} if relation == Relation.REPLACE_ONE else {}


def validated_table_asset(config_type: type[ReleaseConfig] = ReleaseConfig) -> dg.AssetsDefinition:
    """The chain's first asset, its run config a ``config_type`` (``config.release_config_in``: the schemas of the
    deployment's folder)."""

    def validated_table(context: dg.AssetExecutionContext, config: ReleaseConfig, ledger: LedgerResource,
                        engine: EngineResource, store: ArtifactStore):
        yield from _validate(context, config, ledger, engine, store)

    validated_table.__annotations__["config"] = config_type  # what Dagster builds the op's config schema from
    return splice_asset(
        kinds={"pandas", "pandera"},
        description="Structural validation and pre-flight (fail fast, before any charge), DP bounds where the schema "
        "asks, record-level cleaning, and the split into measured and held-out rows.",
        check_specs=[dg.AssetCheckSpec("structure", asset=dg.AssetKey([PREFIX, "validated_table"]), blocking=True)],
    )(validated_table)


def _validate(context: dg.AssetExecutionContext, config: ReleaseConfig, ledger: LedgerResource,
              engine: EngineResource, store: ArtifactStore):
    settings = config.settings()
    synth = settings.synthesizer(load_schema(config.schema_file()))
    # The release records the pair share the synthesizer resolved for the schema, the one it measures with.
    settings = dataclasses.replace(settings, pair_share=synth.settings.measurement.pair_share)
    source = settings.resolved_input()
    release_id = release_id_of(context)
    public_dir = store.public_dir(settings.dataset, release_id)

    def on_estimate(estimate: BoundsEstimate) -> None:  # kept before its entry is committed, as the measurement
        release_lib.save_estimate(estimate, public_dir)

    # The measured part's size is checked against n_min before anything is charged, and under replace-one only
    # (``Synthesizer.check``, from ``scan_source`` and ``prepare_split``): under add-remove a refusal on it would
    # publish a bit of the private n.
    if engine.streams(source):
        # A partitioned input: one streamed pass now (checks, row count, DP bounds), the rows again at measurement.
        with ledger.open() as book, engine.open() as workers:
            scan = synth.scan_source(source, book, release_id, settings.holdout_fraction, workers,
                                     settings.schema_version, on_estimate)
        train, holdout, report, n_measured = None, None, None, scan.n_measured
    else:
        with ledger.open() as book:
            split = synth.prepare_split(read_table(source), book, release_id, settings.holdout_fraction,
                                        settings.schema_version, on_estimate)
        scan, train, holdout, report, n_measured = None, split.train, split.holdout, split.report, len(split.train)
    # What the later steps build their synthesizers from: the synthesizer of this step stays here.
    validated = ValidatedInput(settings, synth.schema, synth.bounds, tuple(synth.reservation.items()), train, holdout,
                               report, source, scan)
    if synth.bounds is not None and synth.bounds.spent:
        context.log.info(f"auto bounds, values, decimals, steps and knots (public DP estimates, noise multiplier "
                         f"{synth.bounds.noise_multiplier:.4g}): {synth.bounds.columns} {synth.bounds.found_values} "
                         f"{synth.bounds.found_decimals} {synth.bounds.found_steps} {synth.bounds.found_knots}")
        if synth.bounds.clipped:
            context.log.warning(
                "the DP bounds of these columns probably clip a tail onto themselves (noisy share of the rows beyond "
                f"them): {synth.bounds.clipped}; declare their ranges in the schema")
    yield dg.AssetCheckResult(
        check_name="structure",
        passed=True,
        metadata={"columns": len(synth.schema.columns), "schema_version": synth.schema.version},
    )
    yield dg.Output(
        validated,
        metadata={
            "dataset": synth.schema.name,
            "auto bounds (DP estimates)": dg.MetadataValue.json(
                {} if synth.bounds is None else {"bounds": synth.bounds.columns,
                                                 "values": synth.bounds.found_values,
                                                 "decimals": synth.bounds.found_decimals,
                                                 "steps": synth.bounds.found_steps,
                                                 "knots": synth.bounds.found_knots}
            ),
            # The release's parts, each alone at its delta; the whole release's epsilon is on private_moments.
            **privacy_parts(synth.privacy_split()[1], synth.measurement_epsilon, settings.delta),
            "schema_version": synth.schema.version,
            "engine": engine.engine if validated.scan else "whole table in memory",
            # Row groups grow with n, so their count is shown only where n is public (replace-one).
            **({"partitions": len(validated.scan.partitions)}
               if validated.scan and settings.relation == Relation.REPLACE_ONE else {}),
            **row_count_metadata(n_measured, settings.relation),
        },
    )


@splice_asset(
    kinds={"numpy"},
    description="Public min-max / grid encoding of the measured part into [-1, 1]^d (ball scaling at measurement).",
)
def unit_ball_encoding(validated_table: ValidatedInput) -> dg.Output[EncodedInput]:
    v = validated_table
    if v.scan is not None:  # streamed: each partition is encoded where it is measured
        d = layout_for(v.schema).d
        return dg.Output(EncodedInput(v.settings, v.schema, v.bounds, v.reservation, None, v.scan),
                         metadata={"d": d, "scaling": "ball (1/sqrt(d))", "encoded": "per partition, at measurement"})
    x = synthesizer_of(v.settings, v.schema, v.bounds).encode(cast(pd.DataFrame, v.train))
    return dg.Output(
        EncodedInput(v.settings, v.schema, v.bounds, v.reservation, x),
        metadata={"d": x.shape[1], **row_count_metadata(x.shape[0], v.settings.relation),
                  "scaling": "ball (1/sqrt(d))"},
    )


@splice_asset(
    kinds={"numpy"},
    description="Noisy sliced Chebyshev moments and 1-/2-way tables under a ledger-recorded (epsilon, delta) spend.",
    check_specs=[dg.AssetCheckSpec(
        "moments_in_range_before_noise", asset=dg.AssetKey([PREFIX, "private_moments"]), blocking=True
    )],
)
def private_moments(
    context: dg.AssetExecutionContext,
    unit_ball_encoding: EncodedInput,
    ledger: LedgerResource,
    store: ArtifactStore,
    engine: EngineResource,
):
    e = unit_ball_encoding
    synth, s = e.synthesizer(), e.settings  # this step's own, to measure with
    stem = store.public_dir(s.dataset, release_id_of(context)) / "measurement"
    streamed = None

    def keep(measurement: Measurement) -> None:
        # What `splice release --resume` needs besides the measurement, stored first: the measurement's file is
        # what marks the release as charged.
        release_id = release_id_of(context)
        location = ReleaseLocation(release_id, s.dataset, store.release_dir(s.dataset, release_id))
        resume.record_charge(location, s, e.schema, e.bounds, e.scan is not None, context.run.run_id)
        measurement.save(stem)

    if stem.with_suffix(".json").exists():
        # A retry of this step: reuse the stored noisy moments, never draw (and pay for) fresh noise.
        measurement, reused = Measurement.load(stem), True
        if e.scan is not None:  # the report's rows again, without a measurement
            with engine.open() as workers:
                streamed = synth.stream(e.scan, workers)
        yield dg.AssetCheckResult(check_name="moments_in_range_before_noise", passed=True,
                                  metadata={"note": "reused stored measurement"})
    else:
        with ledger.open() as book:
            try:
                if e.scan is not None:
                    with engine.open() as workers:
                        streamed = synth.measure_source(e.scan, book, release_id_of(context), workers,
                                                        on_noisy=keep)
                    measurement = cast(Measurement, synth.measurement)
                else:
                    measurement = synth.measure(cast(np.ndarray, e.x), book, release_id_of(context), on_noisy=keep)
            except MomentsOutOfRange:
                yield dg.AssetCheckResult(check_name="moments_in_range_before_noise", passed=False)
                raise dg.Failure("exact statistics not finite or out of range; nothing was charged") from None
        yield dg.AssetCheckResult(check_name="moments_in_range_before_noise", passed=True)
        reused = False
    measured = MeasuredMoments(s, e.schema, e.bounds, measurement, reused, streamed)
    privacy = measured.synthesizer().privacy
    yield dg.Output(
        measured,
        metadata={
            # One headline: the whole release's guarantee, what it charged; its parts beside it.
            "epsilon": privacy.epsilon,
            "delta": privacy.delta,
            **privacy_parts(privacy.bounds_noise_multiplier, privacy.epsilon_measurement, privacy.delta),
            "sigma": measurement.sigma,
            "sensitivity": measurement.sensitivity,
            "L": measurement.n_directions,
            "k": measurement.k,
            "directions_seed": measurement.seed,
            "relation": measurement.relation.value,
            "n (public; noisy under add-remove)": measurement.n,
            "marginal_noise_std": measurement.marginal_noise_std(),
            "ledger_entry_id": measurement.ledger_entry_id or "",
            "reused_stored_measurement": reused,
        },
    )


@splice_asset(
    kinds={"torch"},
    description="Mixture fitted to the noisy moments by gradient descent (post-processing, no privacy cost).",
)
def mixture_model(private_moments: MeasuredMoments) -> dg.Output[FittedModel]:
    p = private_moments
    model = p.synthesizer().fit_model()
    curve = [float(v) for v in model.loss_curve]
    return dg.Output(
        FittedModel(p.settings, p.schema, p.bounds, p.measurement, model, p.streamed is not None),
        metadata={
            "K": model.params.K,
            "steps": model.steps,
            "converged": bool(model.converged),
            "final_loss": curve[-1] if curve else float("nan"),
            "loss_curve (every 10th step)": dg.MetadataValue.json(curve[::10]),
            "fit_seconds": float(model.seconds),
            "tilt (chi2 per cell before, after; iterations)": dg.MetadataValue.json(
                None if model.tilt is None else model.tilt.summary()  # type: ignore[arg-type]  # None is accepted
            ),
            "target tilt (3-way tables with the target: chi2 per cell before, after)": dg.MetadataValue.json(
                None if model.target_tilt is None else model.target_tilt.summary()  # type: ignore[arg-type]
            ),
            "pairwise field (iterations, residual, chains, sweeps)": dg.MetadataValue.json(
                None if model.field is None else model.field.summary()  # type: ignore[arg-type]  # None is accepted
            ),
            "field choice (chi2 per cell of the mixture and the field, tolerance, kept)": dg.MetadataValue.json(
                None if model.field_choice is None else model.field_choice.summary()  # type: ignore[arg-type]
            ),
            "links (source, target, lambda)": dg.MetadataValue.json(describe_links(model.links, model.layout)),
            "joint parts (column pairs)": dg.MetadataValue.json(model.params.describe_joint(model.layout)),
        },
    )


@splice_asset(
    kinds={"pandas"},
    description="Rows sampled from the fitted mixture, clipped to [-1, 1] and decoded to the schema.",
)
def synthetic_table(context: dg.AssetExecutionContext, mixture_model: FittedModel, store: ArtifactStore,
                    engine: EngineResource) -> dg.Output[SyntheticTable]:
    m = mixture_model
    s = m.settings
    n = s.n_synthetic or m.measurement.n  # the public n, or the noisy one (add-remove)
    synth = m.synthesizer()
    files: tuple[str, ...] = ()
    if m.streamed:  # a partitioned input gets partitioned output, written in parallel on the engine
        folder = store.public_dir(s.dataset, release_id_of(context)) / "synthetic"
        with engine.open() as workers:
            files = tuple(synth.write_partitions(str(folder), n, s.seed, engine=workers))
        table = pd.read_parquet(files[0])
    else:
        table = synth.sample(n, s.seed)
    return dg.Output(
        SyntheticTable(s, m.schema, table, files),
        metadata={
            "rows": n,
            "sampling_seed": s.seed,
            **({"files": len(files)} if files else {}),
            "output schema": dg.MetadataValue.table_schema(
                dg.TableSchema(columns=[dg.TableColumn(c, str(t)) for c, t in table.dtypes.items()])
            ),
        },
    )


@splice_asset(
    kinds={"html"},
    description="INTERNAL fidelity report: synthetic vs the real holdout (reads real rows; never release).",
)
def fidelity_report(
    context: dg.AssetExecutionContext,
    validated_table: ValidatedInput,
    synthetic_table: SyntheticTable,
    private_moments: MeasuredMoments,
    ledger: LedgerResource,
    store: ArtifactStore,
):
    v = validated_table
    s = v.settings
    release_id = release_id_of(context)
    p = private_moments
    with ledger.open() as book:
        facts = release_lib.public_facts(
            p.measurement, book, release_id,
            bounds_noise_multiplier=p.synthesizer().privacy.bounds_noise_multiplier,
        )
    train, holdout, repairs = p.real_rows(v)
    result = build_report(
        train,
        holdout,
        synthetic_table.table,
        p.schema,
        facts,
        s.seed,
        store.internal_dir(s.dataset, release_id),
        clipped_shares=repairs.shares("out_of_bounds_clipped"),
        measurement=p.measurement,
        measured_count=p.measured_rows(v),
    )
    # Only the report's location goes to Dagster's event log: its numbers are computed from real rows.
    return dg.Output(
        FidelityReport(s, result),
        metadata={"visibility": INTERNAL, "report": dg.MetadataValue.path(str(result.html_path))},
    )


@splice_asset(
    kinds={"mlflow"},
    description="The release: public bundle + internal audit record, tracked as an MLflow run.",
)
def release(
    context: dg.AssetExecutionContext,
    validated_table: ValidatedInput,
    private_moments: MeasuredMoments,
    mixture_model: FittedModel,
    synthetic_table: SyntheticTable,
    fidelity_report: FidelityReport,
    ledger: LedgerResource,
    mlflow: MlflowResource,
    store: ArtifactStore,
) -> dg.Output[dict]:
    s = validated_table.settings
    m = mixture_model
    release_id = release_id_of(context)
    with ledger.open() as book:
        record = release_lib.write_release(
            release_id=release_id,
            settings=s.__dict__,
            schema=m.schema,
            measurement=m.measurement,
            model=m.model,
            synthetic=synthetic_table.table,
            report=fidelity_report.result,
            validation=private_moments.real_rows(validated_table)[2],
            source_uri=validated_table.source_uri,
            ledger=book,
            public_dir=store.public_dir(s.dataset, release_id),
            internal_dir=store.internal_dir(s.dataset, release_id),
            tracking_uri=mlflow.uri(),
            artifact_location=mlflow.artifact_location(),
            dagster_run_id=context.run.run_id,
            bounds_estimate=m.bounds,
            synthetic_files=synthetic_table.files,
            measured_rows=private_moments.measured_rows(validated_table),
        )
    context.log.info(f"release {release_id}: public bundle at {record['public_dir']}")
    return dg.Output(
        record,
        metadata={
            "release_id": release_id,
            "public_bundle": dg.MetadataValue.path(record["public_dir"]),
            "mlflow_run_id": record.get("mlflow_run_id", ""),
            "epsilon": record["epsilon"],
            "epsilon_cost": record["epsilon_cost"],
            "epsilon_spent_lifetime": record.get("epsilon_spent", float("nan")),
            "epsilon_remaining": record.get("epsilon_remaining", float("nan")),
        },
    )


validated_table = validated_table_asset()


def release_assets(schema_folder: Path | None = None) -> list[dg.AssetsDefinition]:
    """The chain's assets; the first reads the schemas of ``schema_folder`` (None: ``datasets.schema_dir()``), a
    deployment setting (``definitions.build_definitions``), never run config."""
    first = validated_table if schema_folder is None else validated_table_asset(release_config_in(schema_folder))
    return [
        first,
        unit_ball_encoding,
        private_moments,
        mixture_model,
        synthetic_table,
        fidelity_report,
        release,
    ]


ALL_ASSETS = release_assets()
