"""No run config moves the resources that decide the budget, where private data goes, where rows are sent or where
the release is tracked (issue 65): every job Dagster exposes, launched in process or through the UI's GraphQL
mutation, refuses each override before a run exists; the real ledger records nothing and no folder appears where
the override pointed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from helpers import FAST, REPO, ledger_url, release_resources, set_budget

from splice_assets.dagster_layer.assets import CONFIG_OP
from splice_assets.dagster_layer.automation import SETTINGS, run_config_for
from splice_assets.dagster_layer.checks import ALL_CHECKS
from splice_assets.dagster_layer.config import ReleaseConfig
from splice_assets.dagster_layer.definitions import build_definitions
from splice_assets.private.ledger import BudgetLedger

DATASET = "fair_affairs"


# (resource, field, value) of each redirection the audit found; "{elsewhere}" is a folder beside the real stores.
OVERRIDES = [
    ("ledger", "url", "sqlite:///{elsewhere}/ledger.sqlite"),
    ("io_manager", "base_dir", "{elsewhere}/steps"),
    ("store", "base_dir", "{elsewhere}/releases"),
    ("engine", "engine", "dask"),
    ("engine", "scheduler", "tcp://127.0.0.1:9"),
    ("engine", "workers", 64),
    ("mlflow", "tracking_uri", "sqlite:///{elsewhere}/mlflow.db"),
    ("mlflow", "artifact_root", "{elsewhere}/mlartifacts"),
]


def base_run_config(job: dg.JobDefinition) -> dict[str, Any]:
    """A run config the job accepts: the release's settings block, or the first asset's op config."""
    config = ReleaseConfig(**FAST)
    fields = job.run_config_schema.config_type.fields
    if SETTINGS in fields:
        return run_config_for(config)
    if "ops" in fields and CONFIG_OP in fields["ops"].config_type.fields:
        return {"ops": {CONFIG_OP: {"config": config.model_dump()}}}
    return {}


def resources_of(job: dg.JobDefinition) -> set[str] | None:
    """The resources a launch of ``job`` builds (None: none is in its run config, which then refuses all)."""
    resources = job.run_config_schema.config_type.fields.get("resources")
    return set(resources.config_type.fields) if resources else None


def with_override(run_config: dict[str, Any], tmp: Path, resource: str, field: str, value: object) -> dict[str, Any]:
    if isinstance(value, str):
        value = value.format(elsewhere=tmp / "elsewhere")
    return {**run_config, "resources": {resource: {"config": {field: value}}}}


@pytest.fixture
def stores(tmp_path):
    """The real ledger with a budget too small for a release, and a generous second ledger at the override's URL."""
    set_budget(tmp_path, DATASET, epsilon=0.001)
    (tmp_path / "elsewhere").mkdir()
    with BudgetLedger(f"sqlite:///{tmp_path / 'elsewhere' / 'ledger.sqlite'}") as other:
        other.set_budget(DATASET, 100.0, 1e-6, "replace-one")
    return tmp_path


def assert_nothing_recorded(tmp: Path) -> None:
    for url in (ledger_url(tmp), f"sqlite:///{tmp / 'elsewhere' / 'ledger.sqlite'}"):
        with BudgetLedger(url) as book:
            assert book.entries(DATASET) == [], url
    assert sorted(p.name for p in (tmp / "elsewhere").iterdir()) == ["ledger.sqlite"]
    assert not (tmp / "releases").exists()


def test_every_job_takes_no_resource_config():
    """Structural: whatever job is added later, no resource of it has a config field a run could set."""
    defs = build_definitions()
    jobs = defs.resolve_all_job_defs()
    assert {job.name for job in jobs} >= {"release", defs.resolve_implicit_global_asset_job_def().name}
    for job in jobs:
        resources = job.run_config_schema.config_type.fields.get("resources")
        for key, field in (resources.config_type.fields if resources else {}).items():
            assert not field.config_type.fields["config"].config_type.fields, (job.name, key)
    # Schedules and sensors launch jobs of this list, so their runs are validated the same way.
    for instigator in (*defs.schedules, *defs.sensors):
        assert instigator.job_name in {job.name for job in jobs}, instigator.name


@pytest.mark.parametrize(("resource", "field", "value"), OVERRIDES, ids=[f"{r}.{f}" for r, f, _ in OVERRIDES])
def test_each_job_refuses_each_resource_override_at_launch(stores, resource, field, value):
    defs = build_definitions(release_resources(stores))
    for job in defs.resolve_all_job_defs():
        base = base_run_config(job)
        dg.validate_run_config(job, base)  # the launch is refused for the override, not for the rest
        with dg.DagsterInstance.ephemeral() as instance:
            with pytest.raises(dg.DagsterInvalidConfigError, match="resources|" + field):
                job.execute_in_process(run_config=with_override(base, stores, resource, field, value),
                                     instance=instance)
            assert instance.get_runs() == [], job.name
    assert_nothing_recorded(stores)


def test_without_an_override_the_real_ledger_refuses(stores):
    """The control: the same launch of the asset job, without the override, meets the real ledger's budget."""
    job = build_definitions(release_resources(stores)).resolve_implicit_global_asset_job_def()
    with dg.DagsterInstance.ephemeral() as instance:
        result = job.execute_in_process(run_config=base_run_config(job), instance=instance, raise_on_error=False)
    assert not result.success
    failure = next(e for e in result.all_events if e.is_step_failure)
    assert "lifetime epsilon" in failure.event_specific_data.error.cause.message
    assert_nothing_recorded(stores)


def test_the_dataset_setting_names_a_schema_not_a_folder(stores):
    """The op config reachable from the asset job: ``dataset`` picks the schema and the release folder, so a path
    there (a copy of the schema elsewhere) would put the release, private step outputs included, outside the store."""
    target = stores / "elsewhere" / DATASET
    target.with_suffix(".yaml").write_text((REPO / "schemas" / f"{DATASET}.yaml").read_text())
    for name in (str(target), f"../elsewhere/{DATASET}", ".."):
        with pytest.raises(ValueError, match="not a path"):
            ReleaseConfig(dataset=name)
    defs = build_definitions(release_resources(stores))
    settings = {**FAST, "dataset": str(target)}
    with dg.DagsterInstance.ephemeral() as instance:
        # Not even a value of the launchpad's Enum of datasets (``automation.build_release_job``).
        with pytest.raises(dg.DagsterInvalidConfigError, match="not in enum type"):
            defs.resolve_job_def("release").execute_in_process(run_config={SETTINGS: settings}, instance=instance)
        result = defs.resolve_implicit_global_asset_job_def().execute_in_process(
            run_config={"ops": {CONFIG_OP: {"config": settings}}}, instance=instance, raise_on_error=False)
    failure = next(e for e in result.all_events if e.is_step_failure)  # the first step, before its body
    assert "not a path" in str(failure.event_specific_data.error.to_string())
    assert not target.exists()
    target.with_suffix(".yaml").unlink()
    assert_nothing_recorded(stores)


LAUNCH = """mutation($params: ExecutionParams!) { launchRun(executionParams: $params) { __typename
  ... on RunConfigValidationInvalid { errors { message } } ... on PythonError { message } } }"""
JOBS = """query($selector: RepositorySelector!) { repositoryOrError(repositorySelector: $selector) {
  ... on Repository { jobs { name } } } }"""


def test_the_launchpad_refuses_each_override(stores, monkeypatch):
    """As the UI launches: the deployment's definitions (definitions.py, stores from the environment) in a code
    server, every job it lists and the asset checks alone, through GraphQL's ``launchRun``."""
    from dagster_graphql.test.utils import define_out_of_process_context, execute_dagster_graphql

    monkeypatch.setenv("SPLICE_LEDGER_URL", ledger_url(stores))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{stores / 'mlflow.db'}")
    monkeypatch.setenv("SPLICE_ARTIFACT_DIR", str(stores / "releases"))
    (stores / "home").mkdir()
    with (
        dg.instance_for_test(temp_dir=str(stores / "home")) as instance,
        define_out_of_process_context(str(REPO / "definitions.py"), "defs", instance) as context,
    ):
        location = context.code_locations[0]
        repository = {"repositoryLocationName": location.name, "repositoryName": "__repository__"}
        answer = execute_dagster_graphql(context, JOBS, {"selector": repository})
        jobs = [j["name"] for j in answer.data["repositoryOrError"]["jobs"]]
        assert "release" in jobs and "__ASSET_JOB" in jobs
        defs = build_definitions()
        asset_job = defs.resolve_implicit_global_asset_job_def()
        # "Execute checks" in the UI: the asset job with the checks alone.
        check_keys = {key for check in ALL_CHECKS for key in check.check_keys}
        checks_only = {"assetSelection": [], "assetCheckSelection": [
            {"assetKey": {"path": list(key.asset_key.path)}, "name": key.name} for key in check_keys]}
        launches = [({}, defs.resolve_job_def(name), name) for name in jobs]
        launches.append((checks_only, asset_job.get_subset(asset_selection=set(), asset_check_selection=check_keys),
                         asset_job.name))
        for selection, job, name in launches:
            built = resources_of(job)
            assert built is None or "ledger" in built, name  # the budget's resource is always among those tried
            for resource, field, value in OVERRIDES:
                if built is not None and resource not in built:
                    continue  # a resource this launch does not build: Dagster ignores config for it
                params = {"selector": {**repository, "jobName": name, **selection},
                          "runConfigData": with_override(base_run_config(job), stores, resource, field, value)}
                launched = execute_dagster_graphql(context, LAUNCH, {"params": params}).data["launchRun"]
                assert launched["__typename"] == "RunConfigValidationInvalid", (name, resource, field, launched)
                assert any(field in e["message"] or "resources" in e["message"] for e in launched["errors"])
        assert instance.get_runs() == []
    assert_nothing_recorded(stores)
