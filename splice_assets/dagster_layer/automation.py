"""The release job, its run config, the refresh schedule and the new-file sensor.

The job takes one job-level settings block (``settings:``, the fields of ``ReleaseConfig``) through a config
mapping that validates it when a run is launched: Dagster's config schema checks types only (pydantic constraints
such as ``gt=0`` are not part of it), so without the mapping an epsilon of -1 would start a run and fail in its
first step. The launchpad's ERRORS pane shows only what that schema says, checked by the webserver against the
schema's snapshot without user code (its only query, ``isPipelineConfigValid``, is ``validate_config_from_snap``;
a scalar is checked for its type, never a range): so ``dataset`` is an Enum of the datasets with a schema file,
read when the definitions load (an unknown dataset is flagged while typing and Launch stays disabled); every other
refusal (delta >= 1/n_min, a missing input file, a limit) comes from the mapping when Launch is pressed, before any
run exists, as a dialog holding the validator's message alone (``ReleaseSettingsRefused``). ``run_config_for`` is
the one mapping from a ``ReleaseConfig`` to that run config.

A failed step ends a release's run and removes its private step files (``remove_steps_on_failure``): a release
charged before it failed is finished by `splice release --resume` from its stored measurement, not by re-executing
the run. Every scheduled refresh is a new spend. A refresh that would exceed the dataset's lifetime budget is
skipped with a reason (visible in the UI) instead of failing later; the sensor launches one release per
new file (run key = file name + modification time).
"""


import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dagster as dg
from dagster._core.errors import DagsterUserCodeProcessError  # not exported by dagster; why: ReleaseSettingsRefused
from dagster_shared.error import SerializableErrorInfo
from pydantic import ValidationError

from splice_assets.dagster_layer.assets import ALL_ASSETS, CONFIG_OP
from splice_assets.dagster_layer.config import ReleaseConfig, release_config_in, settings_error
from splice_assets.dagster_layer.resources import LedgerResource, ReleaseStepStorage, release_id_of_run
from splice_assets.datasets import DEMO_DATASET, schema_dir, schema_path
from splice_assets.private.ledger import BUDGET_TOLERANCE
from splice_assets.release.locations import ReleaseLocation, dagster_home
from splice_assets.release.resume import stopped_text
from splice_assets.schema import load_schema

if TYPE_CHECKING:  # not exported by dagster; the type ``dg.define_asset_job`` returns
    from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition

SETTINGS = "settings"  # the job-level settings block of the launchpad
#: Tag of a run whose caller (`splice release`, `make demo`) reports a stopped run itself (``inprocess``).
IN_PROCESS_TAG = "splice/in_process"


class ReleaseSettingsRefused(DagsterUserCodeProcessError):
    """A launch whose settings the validator refuses: raised before the run exists, with the validator's message.

    A ``DagsterError`` passes Dagster's user-code boundary unwrapped (no "config mapping function has thrown an
    unexpected error" wrapper). It is a ``DagsterUserCodeProcessError`` carrying the refusal as an error without a
    stack because that is the one form in which a user-code error reaches the launchpad as its message alone: the
    code server and the webserver both serialize an error of this type as the one error it carries
    (``serializable_error_info_from_exc_info``), so the launch answers a PythonError with no stack and the dialog
    shows no traceback (a refusal is not a crash: its frames would say nothing to the user)."""

    def __init__(self, message: str) -> None:
        # As Dagster's own ``SerializableErrorInfo.to_exception_message_only``: the message, no stack, no chain.
        refusal = SerializableErrorInfo(message=message, stack=[], cls_name=type(self).__name__)
        super().__init__(message, user_code_process_error_infos=[refusal])


def _op_config(outer: dict[str, Any], config_type: type[ReleaseConfig] = ReleaseConfig) -> dict[str, Any]:
    """The job-level run config -> the op config of the chain's first asset, refusing invalid settings."""
    settings = outer.get(SETTINGS) or {}
    try:
        config_type(**settings)  # every validator of the release, as the first step would run them
    except ValidationError as exc:
        raise ReleaseSettingsRefused(f"{settings_error(exc)} (launch refused; no run was started)") from None
    mapped: dict[str, Any] = {"ops": {CONFIG_OP: {"config": settings}}}
    if outer.get("loggers"):
        mapped["loggers"] = outer["loggers"]
    return mapped


#: The Enum of ``dataset`` in the launchpad: its name is what Dagster's message for an unknown value shows.
DATASET_ENUM = "dataset_with_a_schema_file"


def known_datasets(schema_folder: Path | None = None) -> list[str]:
    """The datasets with a public schema file in ``schema_folder`` (default ``schema_dir()``), as the definitions
    load."""
    return sorted(path.stem for path in (schema_folder or schema_dir()).glob("*.yaml"))


def _settings_type(datasets: list[str], schema_folder: Path | None = None) -> dg.Shape:
    """``ReleaseConfig``'s config schema with ``dataset`` as an Enum of ``datasets`` (a string if there are none)."""
    shape = ReleaseConfig.to_config_schema().as_field().config_type
    assert isinstance(shape, dg.Shape)  # a pydantic Config's schema is a Shape of its fields
    fields = dict(shape.fields)
    if datasets:
        folder = str(schema_folder or schema_dir())
        enum = dg.Enum(DATASET_ENUM, [dg.EnumValue(name, description=f"{folder}/{name}.yaml") for name in datasets])
        description = (f"Schema name: one of {folder}/*.yaml (a schema added later shows after the code location "
                       "is reloaded).")
        fields["dataset"] = (dg.Field(enum, default_value=DEMO_DATASET, description=description)
                             if DEMO_DATASET in datasets else dg.Field(enum, description=description))
    return dg.Shape(fields)


def release_run_config(datasets: list[str] | None = None, schema_folder: Path | None = None) -> dg.ConfigMapping:
    """The job-level run config: the settings block (``dataset`` an Enum of ``datasets``, default: the schema
    folder's now) and the loggers, mapped to the first asset's op config by ``_op_config``. ``schema_folder``: the
    deployment's schema folder (default ``schema_dir()``)."""
    config_type = release_config_in(schema_folder)

    def op_config(outer: dict[str, Any]) -> dict[str, Any]:
        return _op_config(outer, config_type)

    return dg.ConfigMapping(
        config_fn=op_config,
        config_schema={
            SETTINGS: dg.Field(
                _settings_type(known_datasets(schema_folder) if datasets is None else datasets, schema_folder),
                is_required=False,
                description="Release settings (validated at launch; an invalid value refuses the launch).",
            ),
            "loggers": dg.Field(
                dg.Permissive(), is_required=False,
                description="Dagster loggers, e.g. {console: {config: {log_level: INFO}}}.",
            ),
        },
    )


@dg.failure_hook(required_resource_keys={"io_manager"})
def remove_steps_on_failure(context: dg.HookContext) -> None:
    """A failed step: the release's private step files go; if it was charged, the log says what it spent and how
    to finish it (the CLI and the demo say so themselves, in their one line)."""
    run = context.instance.get_run_by_id(context.run_id)
    if run is None:
        return
    release_id = release_id_of_run(run)
    storage: ReleaseStepStorage = context.resources.io_manager
    storage.remove(release_id)
    if run.tags.get(IN_PROCESS_TAG):
        return
    for root in storage.base().glob(f"*/{release_id}"):
        if ReleaseLocation(release_id, root.parent.name, root).charged:
            context.log.warning(stopped_text(root.parent.name, release_id, base=storage.base()))


RELEASE_JOB = "release"


def build_release_job(datasets: list[str] | None = None,
                      schema_folder: Path | None = None) -> "UnresolvedAssetJobDefinition":
    """The release job, its ``dataset`` an Enum of the schema folder's datasets as the definitions load
    (``schema_folder``: the deployment's, default ``schema_dir()``; the assets read it, ``assets.release_assets``)."""
    return dg.define_asset_job(
        RELEASE_JOB,
        selection=dg.AssetSelection.assets(*ALL_ASSETS),
        description="Validate -> encode -> measure (charged) -> fit -> sample -> report -> release.",
        config=release_run_config(datasets, schema_folder),
        # The chain is linear, so one process loses no parallelism and keeps torch's thread setting in force.
        executor_def=dg.in_process_executor,
        hooks={remove_steps_on_failure},
    )

INPUT_SUFFIXES = (".csv", ".csv.gz", ".parquet")


def run_config_for(config: ReleaseConfig) -> dict[str, Any]:
    """The release job's run config for these settings (``console.with_console_level`` adds the log level)."""
    return {SETTINGS: config.model_dump()}


def refresh_skip_reason(config: ReleaseConfig, ledger: LedgerResource) -> str | None:
    """Why a refresh must not run (budget), or None. Uses only public facts: n_min as the planning n."""
    try:
        schema = load_schema(schema_path(config.dataset))
    except FileNotFoundError as exc:
        return str(exc)
    # The one planner (``Synthesizer.plan``): the release's parts (the measurement and any DP estimate), priced
    # from public settings. Their cost is sigma/Delta, which depends on (epsilon, delta) only, so n_min serves.
    parts = config.settings().synthesizer(schema).release_parts(schema.n_min)
    with ledger.open() as book:
        budget = book.budget(config.dataset)
        if budget is None:
            return f"refresh skipped: no lifetime budget is set for dataset {config.dataset!r} (`splice budget set`)"
        after = book.projected(config.dataset, [part.noise_multiplier for part in parts],
                               sum(part.selection_delta for part in parts))
    if after > budget.epsilon_total + BUDGET_TOLERANCE:
        return (
            f"refresh skipped: dataset {config.dataset!r} would reach epsilon={after:.4f} "
            f"(budget {budget.epsilon_total:g} at delta={budget.delta_total:g})"
        )
    return None


def refresh_config_from_env() -> ReleaseConfig:
    return ReleaseConfig(
        dataset=os.environ.get("SPLICE_REFRESH_DATASET", DEMO_DATASET),
        input_path=os.environ.get("SPLICE_REFRESH_INPUT", ""),
        epsilon=float(os.environ.get("SPLICE_REFRESH_EPSILON", "1.0")),
    )


@dg.schedule(
    job_name=RELEASE_JOB,
    cron_schedule=os.environ.get("SPLICE_REFRESH_CRON", "0 3 * * 1"),
    default_status=dg.DefaultScheduleStatus.STOPPED,
    description="Weekly synthetic-data refresh (cron via SPLICE_REFRESH_CRON); each refresh is a new spend.",
)
def refresh_schedule(context: dg.ScheduleEvaluationContext, ledger: LedgerResource):
    try:
        config = refresh_config_from_env()
    except ValidationError as exc:  # e.g. SPLICE_REFRESH_INPUT names no file
        return dg.SkipReason(f"refresh skipped: {settings_error(exc)}")
    reason = refresh_skip_reason(config, ledger)
    if reason is not None:
        return dg.SkipReason(reason)
    tick = context.scheduled_execution_time.isoformat()
    return dg.RunRequest(run_key=f"refresh-{config.dataset}-{tick}", run_config=run_config_for(config),
                         tags={"splice/trigger": "schedule", "splice/dataset": config.dataset})


def landing_dir() -> Path:
    """``$SPLICE_LANDING_DIR``, else ``$DAGSTER_HOME/landing``: beside the other private state, never inside the
    repository's tracked files (``dagster_home/`` is git-ignored)."""
    configured = os.environ.get("SPLICE_LANDING_DIR")
    return Path(configured) if configured else dagster_home() / "landing"


def _landing_entries(root: Path) -> tuple[list[tuple[str, Path]], list[str]]:
    """(dataset, file) candidates under ``root/<dataset>/``, and one line per entry skipped, with its reason."""
    candidates: list[tuple[str, Path]] = []
    skipped: list[str] = []
    for entry in sorted(root.iterdir()):
        if not entry.is_dir():
            skipped.append(f"{entry.name}: not in a dataset folder (put it in {root.name}/<dataset>/)")
            continue
        for path in sorted(entry.iterdir()):
            shown = f"{entry.name}/{path.name}"
            if not path.is_file():
                skipped.append(f"{shown}: not a file (a dataset folder holds input files only)")
            elif not path.name.lower().endswith(INPUT_SUFFIXES):
                skipped.append(f"{shown}: not a {', '.join(INPUT_SUFFIXES)} file")
            else:
                candidates.append((entry.name, path))
    return candidates, skipped


@dg.sensor(
    job_name=RELEASE_JOB,
    minimum_interval_seconds=60,
    default_status=dg.DefaultSensorStatus.STOPPED,
    description="Launch a release when a new file lands in SPLICE_LANDING_DIR/<dataset>/ (default "
    "$DAGSTER_HOME/landing; one run per file); every file it skips is named in the tick with its reason.",
)
def new_file_sensor(context: dg.SensorEvaluationContext, ledger: LedgerResource):
    """One release per input file. Every skipped file is reported with its reason: in the skip message when the
    tick launches nothing, else as a warning in the tick's log (Dagster takes no skip reason beside run requests)."""
    root = landing_dir()
    if not root.is_dir():
        return dg.SkipReason(f"landing folder {str(root)!r} does not exist (SPLICE_LANDING_DIR)")
    requests = []
    candidates, skipped = _landing_entries(root)
    for dataset, path in candidates:
        shown = f"{dataset}/{path.name}"
        try:
            config = ReleaseConfig(dataset=dataset, input_path=str(path.resolve()))
        except ValidationError as exc:
            skipped.append(f"{shown}: {settings_error(exc)}")
            continue
        reason = refresh_skip_reason(config, ledger)
        if reason is not None:
            skipped.append(f"{shown}: {reason}")
            continue
        run_key = f"{dataset}/{path.name}@{path.stat().st_mtime_ns}"
        requests.append(dg.RunRequest(run_key=run_key, run_config=run_config_for(config),
                                      tags={"splice/trigger": "sensor", "splice/dataset": dataset}))
    if not requests:
        if not skipped:
            return dg.SkipReason(f"no input files in {str(root)!r}")
        return dg.SkipReason(f"{len(skipped)} file(s) skipped: " + "; ".join(skipped))
    for line in skipped:
        context.log.warning(f"skipped {line}")
    return dg.SensorResult(run_requests=requests)
