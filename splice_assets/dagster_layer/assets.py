"""The release chain as Dagster assets. Each asset wraps library calls and nothing more.

validated_table -> unit_ball_encoding -> private_moments -> mixture_model -> synthetic_table ->
fidelity_report -> release. Asset metadata (Dagster's event log, outside the internal release folder) holds
public facts only; what is computed from real rows goes to the release's internal folder, and the step outputs
themselves to ``ReleaseStepStorage`` in that folder.
"""


import dataclasses
import functools
from dataclasses import dataclass

import dagster as dg
import numpy as np
import pandas as pd

from splice_assets.dagster_layer.config import ReleaseConfig, ReleaseSettings
from splice_assets.dagster_layer.resources import (
    ArtifactStore,
    LedgerResource,
    MlflowResource,
    release_id_of_run,
)
from splice_assets.datasets import schema_path
from splice_assets.evaluation.report import ReportResult, build_report
from splice_assets.layout import layout_for
from splice_assets.measurement import RELATION_REPLACE_ONE, Measurement
from splice_assets.model.fit import FitConfig, FittedMixture
from splice_assets.postprocess import chain
from splice_assets.postprocess.links import describe as describe_links
from splice_assets.private import holdout_split, measuring, preflight
from splice_assets.private.bounds import BoundsEstimate, auto_columns, estimate_bounds
from splice_assets.private.encoding import encode
from splice_assets.private.validation import (
    ValidationReport,
    check_structure,
    read_table,
    validate,
)
from splice_assets.release import bundle as release_lib
from splice_assets.sampling import sample_table
from splice_assets.schema import TableSchema, load_schema

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


@dataclass(frozen=True)
class ValidatedInput:
    settings: ReleaseSettings
    schema: TableSchema
    train: pd.DataFrame
    holdout: pd.DataFrame
    report: ValidationReport
    source_uri: str
    bounds: BoundsEstimate | None = None


@dataclass(frozen=True)
class EncodedInput:
    settings: ReleaseSettings
    schema: TableSchema
    x: np.ndarray


@dataclass(frozen=True)
class MeasuredMoments:
    settings: ReleaseSettings
    schema: TableSchema
    measurement: Measurement
    reused: bool


@dataclass(frozen=True)
class FittedModel:
    settings: ReleaseSettings
    schema: TableSchema
    measurement: Measurement
    model: FittedMixture


@dataclass(frozen=True)
class SyntheticTable:
    settings: ReleaseSettings
    schema: TableSchema
    table: pd.DataFrame


@dataclass(frozen=True)
class FidelityReport:
    """INTERNAL: the report on real rows (its files are in the release's internal folder)."""

    settings: ReleaseSettings
    result: ReportResult


def row_count_metadata(n: int, relation: str) -> dict[str, object]:
    """The measured row count for the UI: public under replace-one. Under add-remove it is private, so it is not
    shown at all (Dagster's event log lives outside the internal release folder); the noisy n of the measurement
    is the public one."""
    return {"n (public)": n} if relation == RELATION_REPLACE_ONE else {}


def measurement_plan(settings: ReleaseSettings, schema: TableSchema, n_measured: int):
    """The plan and calibration of this release's measurement (n enters under replace-one only)."""
    s = settings
    return measuring.make_plan(
        schema, n_measured, s.epsilon, s.delta, s.n_directions, s.k, s.seed,
        marginal_share=s.marginal_share, pair_share=s.pair_share, relation=s.relation,
    )


def preflight_release(settings: ReleaseSettings, schema: TableSchema, n_rows: int, book) -> None:
    """Everything that can fail, checked before the first charge (``preflight.check_release``)."""
    s = settings
    bounds_epsilon = s.epsilon * s.bounds_epsilon_share if auto_columns(schema) else 0.0
    measured = s.epsilon - bounds_epsilon
    n_measured = n_rows - int(round(s.holdout_fraction * n_rows))
    plan, calibration = measurement_plan(dataclasses.replace(s, epsilon=measured), schema, max(n_measured, 1))
    cells = int(sum(plan.marginal_sizes) + sum(plan.pair_sizes))
    preflight.check_release(
        schema, s.relation, s.delta, n_measured, layout_for(schema).d, s.n_directions, s.k, s.components, cells,
        book, preflight.ReleaseCost(calibration.noise_multiplier, (bounds_epsilon,) if bounds_epsilon else ()),
    )


@splice_asset(
    kinds={"pandas", "pandera"},
    description="Structural validation and pre-flight (fail fast, before any charge), total record-level cleaning "
    "against the public schema, and the split into measured and held-out rows.",
    check_specs=[dg.AssetCheckSpec("structure", asset=dg.AssetKey([PREFIX, "validated_table"]), blocking=True)],
)
def validated_table(context: dg.AssetExecutionContext, config: ReleaseConfig, ledger: LedgerResource):
    settings = config.settings()
    schema = load_schema(schema_path(settings.dataset))
    raw = read_table(settings.resolved_input())
    # Structure and unparseable shares first: bad input is refused before anything is charged.
    share = settings.max_unparseable_share
    check_structure(raw, schema, settings.schema_version, require_bounds=False, max_unparseable_share=share)
    with ledger.open() as book:
        preflight_release(settings, schema, len(raw), book)
        estimate = None
        if auto_columns(schema):
            # `bounds: auto`: an explicit share of epsilon buys DP bounds, charged as its own ledger entry.
            bounds_epsilon = settings.epsilon * settings.bounds_epsilon_share
            schema, estimate = estimate_bounds(
                raw, schema, bounds_epsilon, book, release_id_of(context), settings.relation
            )
            settings = dataclasses.replace(settings, epsilon=settings.epsilon - bounds_epsilon)
            context.log.info(f"auto bounds at epsilon={bounds_epsilon:g} (public DP estimates): {estimate.columns}")
    checked = validate(raw, schema, settings.schema_version, max_unparseable_share=share)
    train, holdout = holdout_split.split_holdout(checked.table, settings.holdout_fraction, settings.seed, settings.relation)
    if len(train) < schema.n_min:
        raise dg.Failure(
            f"after holding out {settings.holdout_fraction:.0%} for evaluation the measured part is below the "
            f"schema's public n_min={schema.n_min}; lower holdout_fraction"
        )
    yield dg.AssetCheckResult(
        check_name="structure",
        passed=True,
        metadata={"columns": len(schema.columns), "schema_version": schema.version},
    )
    yield dg.Output(
        ValidatedInput(settings, schema, train, holdout, checked.report, settings.resolved_input(), estimate),
        metadata={
            "dataset": schema.name,
            "auto bounds (DP estimates)": dg.MetadataValue.json(
                {} if estimate is None else {"epsilon": estimate.epsilon, "bounds": estimate.columns}
            ),
            "measurement epsilon": settings.epsilon,
            "schema_version": schema.version,
            **row_count_metadata(len(train), settings.relation),
        },
    )


@splice_asset(
    kinds={"numpy"},
    description="Public min-max / grid encoding of the measured part into [-1, 1]^d (ball scaling at measurement).",
)
def unit_ball_encoding(validated_table: ValidatedInput) -> dg.Output[EncodedInput]:
    v = validated_table
    x = encode(v.train, v.schema)
    layout = layout_for(v.schema)
    return dg.Output(
        EncodedInput(v.settings, v.schema, x),
        metadata={"d": layout.d, **row_count_metadata(x.shape[0], v.settings.relation), "scaling": "ball (1/sqrt(d))"},
    )


@splice_asset(
    kinds={"numpy"},
    description="Noisy sliced Chebyshev moments under a ledger-recorded (epsilon, delta) spend.",
    check_specs=[dg.AssetCheckSpec(
        "moments_in_range_before_noise", asset=dg.AssetKey([PREFIX, "private_moments"]), blocking=True
    )],
)
def private_moments(
    context: dg.AssetExecutionContext,
    unit_ball_encoding: EncodedInput,
    ledger: LedgerResource,
    store: ArtifactStore,
):
    e = unit_ball_encoding
    s = e.settings
    release_id = release_id_of(context)
    stem = store.public_dir(s.dataset, release_id) / "measurement"
    if stem.with_suffix(".json").exists():
        # A retry of this step: reuse the stored noisy moments, never draw (and pay for) fresh noise.
        measurement, reused = Measurement.load(stem), True
        yield dg.AssetCheckResult(check_name="moments_in_range_before_noise", passed=True,
                                  metadata={"note": "reused stored measurement"})
    else:
        plan, calibration = measurement_plan(s, e.schema, e.x.shape[0])
        exact = measuring.exact_statistics(e.x, plan, layout_for(e.schema))
        in_range = measuring.statistics_in_range(exact)
        yield dg.AssetCheckResult(check_name="moments_in_range_before_noise", passed=in_range)
        if not in_range:
            raise dg.Failure("exact statistics not finite or out of range; nothing was charged")
        with ledger.open() as book:
            measurement = measuring.measure_exact(
                exact, plan, calibration, book, release_id, on_noisy=lambda m: m.save(stem)
            )
        del exact
        reused = False
    yield dg.Output(
        MeasuredMoments(s, e.schema, measurement, reused),
        metadata={
            "epsilon": measurement.epsilon,
            "delta": measurement.delta,
            "sigma": measurement.sigma,
            "sensitivity": measurement.sensitivity,
            "L": measurement.n_directions,
            "k": measurement.k,
            "directions_seed": measurement.seed,
            "relation": measurement.relation,
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
    s = p.settings
    config = FitConfig(
        K=s.components, R=s.rank, numeric_model=s.numeric_model, max_steps=s.max_steps, seed=s.seed,
        tilt_chi2=s.tilt_chi2, link_lambda=s.link_lambda, joint_pairs=s.joint_pairs,
        field_iterations=s.field_iterations,
    )
    model = chain.fit(p.measurement, p.schema, config)
    curve = [float(v) for v in model.loss_curve]
    return dg.Output(
        FittedModel(s, p.schema, p.measurement, model),
        metadata={
            "K": s.components,
            "R": s.rank,
            "steps": model.steps,
            "converged": bool(model.converged),
            "final_loss": curve[-1] if curve else float("nan"),
            "loss_curve (every 10th step)": dg.MetadataValue.json(curve[::10]),
            "fit_seconds": float(model.seconds),
            "tilt (chi2 per cell before, after; iterations)": dg.MetadataValue.json(
                None if model.tilt is None else model.tilt.summary()
            ),
            "pairwise field (iterations, residual, chains, sweeps)": dg.MetadataValue.json(
                None if model.field is None else model.field.summary()
            ),
            "links (source, target, lambda)": dg.MetadataValue.json(describe_links(model.links, model.layout)),
            "joint parts (column pairs)": dg.MetadataValue.json(model.params.describe_joint(model.layout)),
        },
    )


@splice_asset(
    kinds={"pandas"},
    description="Rows sampled from the fitted mixture, clipped to [-1, 1] and decoded to the schema.",
)
def synthetic_table(mixture_model: FittedModel) -> dg.Output[SyntheticTable]:
    m = mixture_model
    s = m.settings
    n_rows = s.n_synthetic or m.measurement.n  # the public n, or the noisy one under add-remove
    table = sample_table(m.model, m.schema, n_rows, s.seed, match_marginals=s.match_marginals)
    return dg.Output(
        SyntheticTable(s, m.schema, table),
        metadata={
            "rows": n_rows,
            "sampling_seed": s.seed,
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
    with ledger.open() as book:
        facts = release_lib.public_facts(private_moments.measurement, book, release_id)
    result = build_report(
        v.train, v.holdout, synthetic_table.table, v.schema, facts, s.seed, store.internal_dir(s.dataset, release_id)
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
    release_id = release_id_of(context)
    with ledger.open() as book:
        record = release_lib.write_release(
            release_id=release_id,
            settings=s.__dict__,
            schema=validated_table.schema,
            measurement=private_moments.measurement,
            model=mixture_model.model,
            synthetic=synthetic_table.table,
            report=fidelity_report.result,
            validation=validated_table.report,
            source_uri=validated_table.source_uri,
            ledger=book,
            public_dir=store.public_dir(s.dataset, release_id),
            internal_dir=store.internal_dir(s.dataset, release_id),
            tracking_uri=mlflow.uri(),
            artifact_location=mlflow.artifact_location(),
            dagster_run_id=context.run_id,
            bounds_estimate=validated_table.bounds,
        )
    context.log.info(f"release {release_id}: public bundle at {record['public_dir']}")
    return dg.Output(
        record,
        metadata={
            "release_id": release_id,
            "public_bundle": dg.MetadataValue.path(record["public_dir"]),
            "mlflow_run_id": record.get("mlflow_run_id", ""),
            "epsilon_spent_lifetime": record.get("epsilon_spent", float("nan")),
            "epsilon_remaining": record.get("epsilon_remaining", float("nan")),
        },
    )


ALL_ASSETS = [
    validated_table,
    unit_ball_encoding,
    private_moments,
    mixture_model,
    synthetic_table,
    fidelity_report,
    release,
]
