"""Release bundles and their MLflow record.

Two bundles, kept apart:
- the PUBLIC bundle holds only mechanism outputs and public metadata (synthetic rows, noisy moments,
  fitted model, schema, a ``release.json`` manifest, and ``quality.json``: the quality summary computed from the
  noisy statistics and the synthetic rows alone, ``release.quality``);
- the INTERNAL audit record holds what touched the real rows (validation counts, fidelity report, source
  URI and content fingerprint).
Only the public bundle is logged to MLflow (one run per release, beside the registered model); the internal
record stays in the release's internal folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from splice_assets import progress
from splice_assets.defaults import ESTIMATE_FILE
from splice_assets.limits import Relation
from splice_assets.measurement import Measurement
from splice_assets.postprocess.links import describe as describe_links
from splice_assets.private.ledger import BudgetLedger
from splice_assets.private.validation import ValidationReport
from splice_assets.release.locations import package_version, private_dir
from splice_assets.schema import TableSchema, schema_to_dict
from splice_assets.synthetic import SyntheticModel

FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")


def code_version() -> dict[str, str]:
    """Package version and, when available, the git commit of the working tree."""
    out = {"package_version": package_version()}
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent, capture_output=True, text=True,
            timeout=5, check=True,
        ).stdout.strip()
        out["git_sha"] = sha
    except (OSError, subprocess.SubprocessError):
        pass
    return out


@contextmanager
def _tracking_uri_set(uri: str) -> Iterator[None]:
    """MLflow's tracking URI set for one block. ``mlflow.set_tracking_uri`` also writes $MLFLOW_TRACKING_URI (MLflow
    3), which ``locations.tracking_uri`` reads first: left behind, it sent the next in-process release under another
    $DAGSTER_HOME to this one's store. The variable is restored on exit."""
    import mlflow

    before = os.environ.get("MLFLOW_TRACKING_URI")
    mlflow.set_tracking_uri(uri)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = before


def escape_formula(value: object) -> object:
    """CSV formula-injection escaping: a text cell starting with = + - @ TAB CR gets a leading quote."""
    if isinstance(value, str) and value.startswith(FORMULA_PREFIXES):
        return "'" + value
    return value


def whole_number_columns(schema: TableSchema | None) -> tuple[str, ...]:
    """The continuous columns (derived ones too) whose public precision is 0 decimals, declared or resolved from
    ``decimals: auto``: their synthetic values are whole numbers."""
    if schema is None:
        return ()
    return (*(c.name for c in schema.columns if c.decimals == 0), *(d.name for d in schema.derived if d.decimals == 0))


def _as_whole(series: pd.Series) -> pd.Series:
    """A float column of whole numbers as nullable integers (written '24', not '24.0'); any other unchanged."""
    if not pd.api.types.is_float_dtype(series.dtype):
        return series
    values = series.to_numpy(dtype=np.float64, na_value=np.nan)
    finite = values[~np.isnan(values)]
    if not np.isfinite(finite).all() or (np.abs(finite) >= 2.0**53).any() or (finite != np.round(finite)).any():
        return series
    return series.astype("Int64")


def write_csv_escaped(table: pd.DataFrame, path: Path, schema: TableSchema | None = None) -> None:
    """``table`` as CSV, text cells formula-escaped; with its ``schema``, a continuous column at 0 decimals is written
    as whole numbers (the data's '24', not '24.0'). Only the text changes: the table's dtypes are the kinds'."""
    escaped = table.copy()
    for name in escaped.columns:
        if not pd.api.types.is_numeric_dtype(escaped[name].dtype):
            escaped[name] = escaped[name].astype(object).map(escape_formula)
    for name in whole_number_columns(schema):
        if name in escaped.columns:
            escaped[name] = _as_whole(escaped[name])
    escaped.to_csv(path, index=False)


def file_fingerprint(path: str) -> str:
    """INTERNAL: sha256 of the input file's bytes (never put it in a public bundle)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def save_estimate(estimate: Any, public_dir: Path) -> Path:
    """The public record of a release's DP estimate (``bounds.BoundsEstimate``: post-processing of its noisy counts)
    in ``public_dir``, written when it is drawn, before its ledger entry is committed, as the measurement is."""
    public_dir.mkdir(parents=True, exist_ok=True)
    path = public_dir / ESTIMATE_FILE
    path.write_text(json.dumps(asdict(estimate), indent=2, default=list))
    return path


def public_facts(
    measurement: Measurement,
    ledger: BudgetLedger,
    release_id: str,
    ledger_entry_id: str | None = None,
    epsilon_cost: float | None = None,
    bounds_noise_multiplier: float | None = None,
) -> dict[str, Any]:
    """Public facts of a release: its guarantee, its own spend and the dataset's lifetime budget after it.

    ``epsilon``/``delta`` are the release's whole guarantee, its one headline: the measurement's Gaussian composed
    exactly with the Gaussian of the DP estimate (``bounds_noise_multiplier``) when the schema had ``auto`` entries.
    Its parts, each alone at ``delta``, are ``epsilon_measurement`` and ``epsilon_estimate`` (None without one):
    they compose to ``epsilon``, they do not add up to it. ``epsilon_cost`` is what this release charged: ``epsilon``,
    or 0 for a zero-cost refit (whose guarantee is its parent's).
    ``ledger_entry_id`` is the release's own ledger entry and ``measurement_ledger_entry_id`` the charged entry of
    the measurement (equal unless the release is a refit).
    """
    from splice_assets.api import release_epsilon
    from splice_assets.private.mechanism import epsilon_of

    epsilon = release_epsilon(measurement, bounds_noise_multiplier)
    spent_eps, budget_delta = ledger.spent(measurement.dataset)
    budget = ledger.budget(measurement.dataset)
    facts: dict[str, Any] = {
        "release_id": release_id,
        "dataset": measurement.dataset,
        "epsilon": epsilon,
        "delta": measurement.delta,
        "epsilon_estimate": None if bounds_noise_multiplier is None
        else epsilon_of(bounds_noise_multiplier, measurement.delta),
        "epsilon_measurement": measurement.epsilon,
        "bounds_noise_multiplier": bounds_noise_multiplier,
        "sigma": measurement.sigma,
        "sensitivity": measurement.sensitivity,
        "relation": measurement.relation.value,
        "noise_multiplier": measurement.noise_multiplier,
        "L": measurement.n_directions,
        "k": measurement.k,
        "n": measurement.n,
        "directions_seed": measurement.seed,
        "epsilon_cost": epsilon if epsilon_cost is None else float(epsilon_cost),
        "ledger_entry_id": ledger_entry_id or measurement.ledger_entry_id,
        "measurement_ledger_entry_id": measurement.ledger_entry_id,
        "lifetime_epsilon_spent": spent_eps,
        "lifetime_delta": budget_delta,
    }
    if budget is not None:
        facts["lifetime_epsilon_budget"] = budget.epsilon_total
        facts["lifetime_epsilon_remaining"] = ledger.remaining(measurement.dataset)
    return facts


def headline_metrics(metrics: Any) -> dict[str, float]:
    """The report's flat headline numbers (INTERNAL: computed against real rows), finite values only."""
    return {k: float(v) for k, v in metrics.headline().items() if isinstance(v, (int, float)) and np.isfinite(v)}


def accuracy_statement(measurement: Measurement) -> str:
    std = measurement.moment_noise_std()
    return (
        f"Each Chebyshev moment of order j (j = 1..{measurement.k}) on each of the {measurement.n_directions} "
        f"directions carries Gaussian noise of standard deviation {measurement.sigma:.3g}*sqrt(j): "
        f"{std[0]:.3g} for j = 1 up to {std[-1]:.3g} for j = {measurement.k}. Moments lie in [-1, 1], so a "
        f"first-order moment is known to about +/-{2 * std[0]:.2g} (95%) per direction."
        + (
            f" Each cell of the {len(measurement.marginal_sizes)} noisy 1-way marginals (frequencies) carries noise of "
            f"standard deviation {measurement.marginal_noise_std():.3g}"
            + (" (a category column of many levels counts as u tables: its cells carry 1/sqrt(u) of that)"
               if any(u > 1 for u in measurement.marginal_units) else "")
            + (f", each cell of a numeric column's per-value table {measurement.fine_noise_std(True):.3g}"
               if measurement.grid_weight != 1 else "")
            + (f", each cell of a numeric column's fine intervals {measurement.fine_noise_std(False):.3g}."
               if measurement.interval_weight != 1 else ".")
            if getattr(measurement, "marginal_sizes", ())
            else ""
        )
        + (
            f" Each cell of the {len(measurement.pairs)} noisy 2-way marginals (frequencies) carries noise of "
            f"standard deviation {measurement.pair_noise_std():.3g}."
            if getattr(measurement, "pairs", ())
            else ""
        )
    )


def privacy_statement(
    measurement: Measurement, parent_release_id: str | None = None, bounds_noise_multiplier: float | None = None
) -> str:
    from splice_assets.api import release_epsilon

    total = release_epsilon(measurement, bounds_noise_multiplier)
    text = (
        f"This release satisfies ({total:g}, {measurement.delta:g})-differential privacy with respect "
        + (
            f"to replacing any one of the {measurement.n} rows of the input table (n is public). "
            if measurement.relation == Relation.REPLACE_ONE
            else "to adding or removing any one row of the input table (n is private; the release carries a noisy "
            f"estimate, {measurement.n}). "
        )
        + "Only noisy moments and histograms drawn from the Gaussian mechanism, the public schema and public seeds "
        "shaped it; the fitted model and the synthetic rows are post-processing and cost no further privacy."
    )
    if bounds_noise_multiplier is not None:
        text += (
            f" That total composes (exactly, as Gaussian mechanisms: not a sum) the measurement's "
            f"({measurement.epsilon:g}, {measurement.delta:g}) with the Gaussian histograms (noise multiplier "
            f"{bounds_noise_multiplier:.3g}) that estimated the numeric bounds and other entries the schema left as "
            "'auto'."
        )
    if parent_release_id:
        text += (
            f" It is a zero-cost refit of the stored noisy moments of release {parent_release_id}: no real row was "
            "read and the ledger charged epsilon = 0 for it."
        )
    return text


#: The public quality summary beside release.json (``release.quality``).
QUALITY_FILE = "quality.json"

#: Settings keys that must never reach a public bundle or MLflow params (they locate the private input).
PRIVATE_SETTINGS = ("input_path", "source_uri")


def public_parameters(settings: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in settings.items() if k not in PRIVATE_SETTINGS}


@progress.staged("write the bundles, log to MLflow")
def write_release(
    release_id: str,
    settings: dict[str, Any],
    schema: TableSchema,
    measurement: Measurement,
    model: SyntheticModel,
    synthetic: pd.DataFrame,
    report: Any,
    validation: ValidationReport | None,
    source_uri: str,
    ledger: BudgetLedger,
    public_dir: Path,
    internal_dir: Path,
    tracking_uri: str,
    artifact_location: str | None = None,
    dagster_run_id: str = "",
    parent_release_id: str | None = None,
    ledger_entry_id: str | None = None,
    register_model: bool = True,
    bounds_estimate: Any = None,
    bounds_noise_multiplier: float | None = None,
    synthetic_files: Sequence[str] = (),
    measured_rows: int | None = None,
    note: str | None = None,
) -> dict[str, Any]:
    """Write both bundles and log the public one to MLflow; returns a summary of public facts.

    ``synthetic_files``: the synthetic rows were written as Parquet partitions in ``public_dir / "synthetic"``
    (a streamed release, ``sampling.write_partitions``) and ``synthetic`` is their first part, for the checks; else
    ``synthetic`` is every row and is written here as ``synthetic.parquet`` and ``synthetic.csv``.

    A refit passes ``parent_release_id``, its zero-cost ``ledger_entry_id`` and the parent's ``bounds_noise_multiplier``
    (its schema holds the parent's DP bounds); it has no report, no validation and no source (it never reads real
    rows). The internal record (source, validation counts, the report's numbers, ``measured_rows``: the exact count
    of rows the measurement read, private under add-remove; ``note``) stays in ``internal_dir``: it is never logged
    to MLflow, where it would sit beside the public model. A release finished from its stored measurement
    (``release.resume``) may have no report.
    """
    if bounds_noise_multiplier is None and bounds_estimate is not None and bounds_estimate.spent:
        bounds_noise_multiplier = bounds_estimate.noise_multiplier
    from splice_assets.postprocess.fine_tables import below_noise
    from splice_assets.release.mlflow_model import registered_model_name
    from splice_assets.release.quality import quality_summary
    from splice_assets.sampling import save_model

    public_dir.mkdir(parents=True, exist_ok=True)
    private_dir(internal_dir)
    if synthetic_files:
        import pyarrow.parquet as pq

        synthetic_rows = sum(pq.read_metadata(f).num_rows for f in synthetic_files)
    else:
        synthetic.to_parquet(public_dir / "synthetic.parquet", index=False)
        write_csv_escaped(synthetic, public_dir / "synthetic.csv", schema)
        synthetic_rows = len(synthetic)
    if not (public_dir / "measurement.json").exists():
        measurement.save(public_dir / "measurement")
    save_model(model, public_dir / "model")
    (public_dir / "schema.yaml").write_text(yaml.safe_dump(schema_to_dict(schema), sort_keys=False))
    # Public: the noisy statistics and the synthetic rows only (the real rows' comparison is the internal report).
    quality = quality_summary(measurement, schema, synthetic)
    (public_dir / QUALITY_FILE).write_text(json.dumps(quality, indent=2))
    refit = parent_release_id is not None
    facts = public_facts(measurement, ledger, release_id, ledger_entry_id, 0.0 if refit else None,
                         bounds_noise_multiplier)
    version = code_version()
    public_params = public_parameters(settings)
    manifest = {
        "release_id": release_id,
        "parent_release_id": parent_release_id,
        "kind": "refit" if refit else "release",
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "dataset": schema.name,
        "schema_version": schema.version,
        "visibility": "public",
        "privacy_statement": privacy_statement(measurement, parent_release_id, bounds_noise_multiplier),
        "accuracy_statement": accuracy_statement(measurement),
        "privacy": facts,
        "below_noise": {
            "statement": "Categories and exact values whose noisy frequency is below twice its noise standard "
            "deviation: the release cannot tell them from absent, so synthetic rows may lack them. Read from the "
            "noisy statistics only.",
            "columns": below_noise(measurement, schema),
        },
        "auto_bounds": None if bounds_estimate is None or not bounds_estimate.spent else {
            "statement": "Bounds the schema left as 'auto' are the outer edges of the outermost buckets of a public "
            "log grid whose Gaussian noisy count clears the threshold; the histograms were charged to the ledger as "
            "their own entry and the values below are post-processing of them. Columns in 'exact_zero' had a noisy "
            "count of exact zeros above the threshold too: 0 is an exact value of theirs, measured in a cell of "
            "its own. 'found_values' are the values a 'values: auto' column's noisy candidate counts selected, in "
            "the same charge (the counts themselves are not released); 'found_decimals' the output precision a "
            "'decimals: auto' column's noisy histogram of decimals gave (null: finer than 6 decimals); 'found_steps' "
            "the grid a 'step: auto' column's noisy histogram of divisors gave (null: none above 1); 'found_knots' the "
            "coarse bins' edges a 'knots: auto' column's noisy histogram placed. 'clipped' lists "
            "the columns whose noisy counts beyond their bounds clear 3.5 noise std, with the noisy share of the "
            "rows there: their bounds probably clip a tail onto themselves, so declare those columns' ranges.",
            "epsilon_alone": bounds_estimate.epsilon,
            "noise_multiplier": bounds_estimate.noise_multiplier,
            "sigma": bounds_estimate.sigma,
            "threshold": bounds_estimate.threshold,
            "bounds": {k: list(v) for k, v in bounds_estimate.columns.items()},
            "exact_zero": list(bounds_estimate.exact_zero),
            "found_values": {k: list(v) for k, v in bounds_estimate.found_values.items()},
            "found_decimals": dict(bounds_estimate.found_decimals),
            "found_steps": dict(bounds_estimate.found_steps),
            "found_knots": {k: list(v) for k, v in bounds_estimate.found_knots.items()},
            "clipped": {k: round(v, 4) for k, v in bounds_estimate.clipped.items()},
            "ledger_entry_id": bounds_estimate.ledger_entry_id,
        },
        "parameters": public_params,
        "fit": {
            "K": model.params.K,
            "R": model.params.R,
            "steps": int(model.steps),
            "converged": bool(model.converged),
            "final_loss": float(model.final_loss),
            "noise_floor": float(model.noise_floor),
            # chi^2 per cell of the noisy tables against the model before / after the cell tilt (post-processing).
            "tilt": None if model.tilt is None else model.tilt.summary(),
            # ... and against the target's noisy 3-way tables before / after the target tilt (post-processing).
            "target_tilt": None if model.target_tilt is None else model.target_tilt.summary(),
            # the pairwise field the tilted model's tables were re-imposed with (post-processing; see field.py).
            "field": None if model.field is None else model.field.summary(),
            # ... and why it was kept or dropped: both tilts' chi^2 per cell and the tolerance (post-processing).
            "field_choice": None if model.field_choice is None else model.field_choice.summary(),
            # near-functional pairs read from the noisy 2-way tables and redrawn from them (post-processing).
            "links": describe_links(model.links, model.layout),
            # column pairs modelled by one joint table per component, chosen from the noisy 2-way tables.
            "joint_parts": model.params.describe_joint(model.layout),
        },
        "quality": {
            "file": QUALITY_FILE,
            "statement": quality["statement"],
            **{k: quality[k] for k in ("model_tvd_1way", "expected_noise_tvd_1way", "model_tvd_2way",
                                       "expected_noise_tvd_2way")},
        },
        "synthetic_rows": synthetic_rows,
        **({"synthetic_files": [f"synthetic/{Path(f).name}" for f in synthetic_files]} if synthetic_files else {}),
        "fidelity_report": (
            "none: a refit never reads real rows, so no fidelity report exists" if refit
            else "internal only (compares against real rows; never released)" if report is not None
            else "none: the release was finished from its stored measurement without its input"
        ),
        "mlflow": {
            "experiment": experiment_name(schema.name),
            "registered_model": registered_model_name(schema.name) if register_model else None,
        },
        "code_version": version,
        "files": sorted([*(p.name for p in public_dir.iterdir()), "release.json"]),
    }
    internal = {
        "release_id": release_id,
        "visibility": "internal",
        "source_uri": source_uri or None,
        "source_sha256": file_fingerprint(source_uri) if source_uri and os.path.isfile(source_uri) else None,
        "validation": asdict(validation) if validation is not None else None,
        "measured_rows": measured_rows,
        "fidelity_headline": None if report is None else headline_metrics(report.metrics),
        "note": "refit of stored noisy moments: no real rows read" if refit else note,
    }
    (internal_dir / "audit.json").write_text(json.dumps(internal, indent=2, default=str))
    logged = log_to_mlflow(
        tracking_uri, artifact_location, schema, measurement, model, synthetic, facts, public_params, version,
        dagster_run_id, release_id, parent_release_id, public_dir, manifest, register_model,
    )
    return {
        "release_id": release_id,
        "parent_release_id": parent_release_id,
        "dataset": schema.name,
        "public_dir": str(public_dir),
        "internal_dir": str(internal_dir),
        "mlflow_run_id": logged["run_id"],
        "model_uri": logged.get("model_uri"),
        "registered_model_name": logged.get("registered_model_name"),
        "registered_model_version": logged.get("registered_model_version"),
        "epsilon": facts["epsilon"],
        "delta": facts["delta"],
        "epsilon_estimate": facts["epsilon_estimate"],
        "epsilon_measurement": facts["epsilon_measurement"],
        "epsilon_cost": facts["epsilon_cost"],
        "epsilon_spent": facts["lifetime_epsilon_spent"],
        "epsilon_remaining": facts.get("lifetime_epsilon_remaining", float("nan")),
    }


def experiment_name(dataset: str) -> str:
    return f"splice/{dataset}"


#: MLflow 3's UI opens an experiment by its kind; without the tag it may guess GenAI and show the traces page.
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"


def ensure_experiment(dataset: str, artifact_location: str | None = None) -> str:
    """The dataset's experiment id, created (typed for classic ML) when missing; the tag is also set on an
    experiment created before it existed. Retires MLflow's empty ``Default`` experiment, so the store lists the
    splice experiments only."""
    import mlflow

    client = mlflow.MlflowClient()
    name = experiment_name(dataset)
    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        experiment_id = client.create_experiment(
            name, artifact_location=artifact_location and f"{artifact_location}/{dataset}",
            tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND},
        )
    else:
        experiment_id = experiment.experiment_id
        if experiment.tags.get(EXPERIMENT_KIND_TAG) != EXPERIMENT_KIND:
            client.set_experiment_tag(experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
    _retire_default_experiment(client)
    return experiment_id


def _retire_default_experiment(client: Any) -> None:
    """Delete (soft: MLflow's SQL store recreates a hard-deleted one) the ``Default`` experiment, which the store
    creates with its tables, when nothing was ever logged to it. Someone else's runs there are left alone."""
    from mlflow.entities import ViewType

    default = client.get_experiment_by_name("Default")
    if default is None or default.lifecycle_stage != "active":
        return
    if client.search_runs([default.experiment_id], run_view_type=ViewType.ALL, max_results=1):
        return
    client.delete_experiment(default.experiment_id)


def _param_value(value: Any) -> Any:
    return "" if value is None else value


def log_to_mlflow(
    tracking_uri: str,
    artifact_location: str | None,
    schema: TableSchema,
    measurement: Measurement,
    model: SyntheticModel,
    synthetic: pd.DataFrame,
    facts: dict[str, Any],
    params: dict[str, Any],
    version: dict[str, str],
    dagster_run_id: str,
    release_id: str,
    parent_release_id: str | None,
    public_dir: Path,
    manifest: dict[str, Any],
    register_model: bool = True,
) -> dict[str, Any]:
    """One MLflow run per release, holding public material only (the run also holds the registered model). The
    manifest (with the run id) is written to the public bundle here."""
    import mlflow
    from mlflow.entities import Metric
    from mlflow.utils.time import get_current_time_millis

    from splice_assets.release.mlflow_model import log_release_model

    with warnings.catch_warnings(), _tracking_uri_set(tracking_uri):
        warnings.simplefilter("ignore")
        mlflow.set_experiment(experiment_id=ensure_experiment(schema.name, artifact_location))
        with mlflow.start_run(run_name=release_id) as run:
            # Params: the public config (never the input path) and every public privacy fact.
            mlflow.log_params({k: _param_value(v) for k, v in params.items()})
            mlflow.log_params({f"privacy.{k}": _param_value(v) for k, v in facts.items()})
            mlflow.set_tags(
                {
                    "dataset": schema.name,
                    "schema_version": schema.version,
                    "release_id": release_id,
                    "release_kind": manifest["kind"],
                    "parent_release_id": parent_release_id or "",
                    "dagster_run_id": dagster_run_id,
                    # The headline is the whole release's guarantee; its parts, each alone, under their own names.
                    "privacy.epsilon": facts["epsilon"],
                    "privacy.delta": facts["delta"],
                    "privacy.epsilon_cost": facts["epsilon_cost"],
                    "privacy.parts.epsilon_measurement": facts["epsilon_measurement"],
                    **({} if facts["epsilon_estimate"] is None
                       else {"privacy.parts.epsilon_estimate": facts["epsilon_estimate"]}),
                    "privacy.sigma": measurement.sigma,
                    "privacy.sensitivity": measurement.sensitivity,
                    "privacy.relation": measurement.relation.value,
                    "privacy.ledger_entry_id": facts.get("ledger_entry_id") or "",
                    "visibility": "public: noisy statistics, the model fitted to them, synthetic rows",
                    "fidelity_report": "none (refit: no real rows read)" if parent_release_id
                    else "internal: in the release's internal folder only, never in MLflow",
                    **{f"code.{k}": v for k, v in version.items()},
                }
            )
            # The loss curve (about 100 points) in one batch: one store transaction instead of one per point.
            curve = list(model.loss_curve)
            now = get_current_time_millis()
            mlflow.MlflowClient().log_batch(run.info.run_id, metrics=[
                Metric("fit_loss", float(curve[step]), now, step, run_id=run.info.run_id)
                for step in range(0, len(curve), max(1, len(curve) // 100))
            ])
            fit_metrics = {
                "fit_final_loss": float(model.final_loss),
                "fit_noise_floor": float(model.noise_floor),
                "fit_loss_over_noise_floor": float(model.loss_over_noise_floor),
                "fit_steps": float(model.steps),
                **({} if model.tilt is None else {f"tilt_{k}": float(v) for k, v in model.tilt.summary().items()}),
                **({} if model.target_tilt is None
                   else {f"target_tilt_{k}": float(v) for k, v in model.target_tilt.summary().items()}),
                **({} if model.field is None else {f"field_{k}": float(v) for k, v in model.field.summary().items()}),
                **({} if model.field_choice is None
                   else {f"field_choice_{k}": float(v) for k, v in model.field_choice.summary().items()}),
                "links": float(len(model.links)),
                "joint_parts": float(len(model.params.joint_pairs)),
            }
            mlflow.log_metrics({k: v for k, v in fit_metrics.items() if np.isfinite(v)})
            dataset = mlflow.data.from_pandas(  # type: ignore[attr-defined]  # registered at import time
                synthetic.astype({c: "object" for c in synthetic.columns if str(synthetic[c].dtype) == "category"}),
                source=str(public_dir / ("synthetic" if (public_dir / "synthetic").is_dir() else "synthetic.parquet")),
                name=f"{schema.name}-synthetic-{release_id}",
            )
            mlflow.log_input(dataset, context="synthetic_output")
            logged: dict[str, Any] = {"run_id": run.info.run_id}
            logged.update(
                log_release_model(
                    public_dir, schema.name, release_id, int(params.get("seed", measurement.seed)),
                    register=register_model, privacy=facts, parameters=params,
                )
            )
            manifest["mlflow"].update(
                {
                    "run_id": run.info.run_id,
                    "model_uri": logged["model_uri"],
                    "registered_model_version": logged["registered_model_version"],
                }
            )
            (public_dir / "release.json").write_text(json.dumps(manifest, indent=2, default=str))
            mlflow.log_artifacts(str(public_dir), artifact_path="public")
            return logged
