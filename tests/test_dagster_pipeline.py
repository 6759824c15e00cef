"""The Dagster layer end to end: definitions, full materialisation, budget gate, automation, a failed run and its
resume, UI."""

from __future__ import annotations

import datetime
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest
from helpers import (
    FAST,
    RELEASE_JOB,
    dagster_ui,
    graphql,
    launch_release,
    ledger_url,
    release_resources,
    run_ids,
    wait_for_run,
)
from helpers import set_budget as shared_set_budget
from pydantic import ValidationError

from splice_assets.dagster_layer import assets as assets_mod
from splice_assets.dagster_layer.assets import op_name
from splice_assets.dagster_layer.automation import (
    SETTINGS,
    ReleaseSettingsRefused,
    landing_dir,
    new_file_sensor,
    refresh_schedule,
    run_config_for,
)
from splice_assets.dagster_layer.config import ReleaseConfig
from splice_assets.dagster_layer.definitions import build_definitions
from splice_assets.dagster_layer.resources import (
    LedgerResource,
)
from splice_assets.private.ledger import BudgetLedger

REPO = Path(__file__).resolve().parents[1]


def resources_in(tmp: Path) -> dict[str, object]:
    return release_resources(tmp)


def set_budget(tmp: Path, epsilon: float = 10.0, relation: str = "replace-one", dataset: str = "fair_affairs") -> None:
    shared_set_budget(tmp, dataset, epsilon, relation=relation)


def run_release(tmp: Path, instance: dg.DagsterInstance, budget_epsilon: float = 10.0, **overrides):
    set_budget(tmp, budget_epsilon, overrides.get("relation", "replace-one"))
    defs = build_definitions(resources_in(tmp))
    job = defs.resolve_job_def("release")
    config = ReleaseConfig(**{**FAST, **overrides})
    return job.execute_in_process(
        run_config=run_config_for(config), instance=instance, raise_on_error=False
    )


def ledger_entries(tmp: Path, dataset: str = "fair_affairs"):
    return BudgetLedger(f"sqlite:///{tmp / 'ledger.sqlite'}").entries(dataset)


def test_definitions_validate_from_the_command_line(tmp_path):
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path)}
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("dagster")), "definitions", "validate", "-f", "definitions.py"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_whole_graph_materialises_and_charges_once(tmp_path):
    with dg.DagsterInstance.ephemeral() as instance:
        result = run_release(tmp_path, instance)
    assert result.success
    materialised = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
    assert materialised == {a.key.to_user_string() for a in assets_mod.ALL_ASSETS}
    checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert checks["structure"] and checks["budget_available"] and checks["moments_in_range_before_noise"]
    assert "synthetic_expectations" in checks
    entries = ledger_entries(tmp_path)
    assert [e.status for e in entries] == ["committed"]
    record = result.output_for_node(op_name("release"))
    public = Path(record["public_dir"])
    assert {"synthetic.parquet", "synthetic.csv", "measurement.npz", "measurement.json", "release.json"} <= {
        p.name for p in public.iterdir()
    }
    manifest = json.loads((public / "release.json").read_text())
    assert manifest["privacy"]["epsilon"] == 1.0 and manifest["visibility"] == "public"
    assert (Path(record["internal_dir"]) / "audit.json").exists()
    # Dagster's event log holds public facts only: nothing computed from real rows, not even labelled internal.
    for event in result.get_asset_materialization_events():
        metadata = event.event_specific_data.materialization.metadata
        for key in metadata:
            assert not key.startswith("internal:") and "tvd" not in key and "count" not in key, key
    # The step outputs (private rows among them) lived in the release's internal folder and are gone.
    assert not (Path(record["internal_dir"]) / "steps").exists()
    assert not (tmp_path / "storage").exists()
    report_meta = result.asset_materializations_for_node(op_name("fidelity_report"))[0].metadata
    assert "internal" in report_meta["visibility"].value


def test_add_remove_release_keeps_the_exact_n_internal(tmp_path):
    with dg.DagsterInstance.ephemeral() as instance:
        result = run_release(tmp_path, instance, relation="add-remove", n_synthetic=0)
        # A second release under the other relation is refused by the ledger before any noise.
        second = run_release(tmp_path, instance, relation="replace-one")
    assert result.success and not second.success
    entries = ledger_entries(tmp_path)
    assert [(e.relation, e.status) for e in entries] == [("add-remove", "committed")]
    measured = result.output_for_node(op_name("validated_table")).train
    record = result.output_for_node(op_name("release"))
    manifest = json.loads((Path(record["public_dir"]) / "release.json").read_text())
    noisy_n = manifest["privacy"]["n"]
    assert manifest["privacy"]["relation"] == "add-remove" and abs(noisy_n - len(measured)) < 200
    assert len(result.output_for_node(op_name("synthetic_table")).table) == noisy_n  # the default row count
    for event in result.get_asset_materialization_events():
        metadata = event.event_specific_data.materialization.metadata
        assert "n (public)" not in metadata
    for event in result.get_asset_materialization_events():  # the exact n is in no event
        metadata = event.event_specific_data.materialization.metadata
        assert not any(key.startswith("internal") for key in metadata)


def test_budget_check_blocks_before_any_noise(tmp_path):
    with dg.DagsterInstance.ephemeral() as instance:
        result = run_release(tmp_path, instance, budget_epsilon=0.5, epsilon=1.0)
    assert not result.success
    done = {e.step_key for e in result.all_events if e.is_step_success}
    assert op_name("validated_table") not in done  # refused at pre-flight, before any reservation
    failure = next(e for e in result.all_events if e.is_step_failure)
    assert "lifetime epsilon" in failure.event_specific_data.error.cause.message
    assert ledger_entries(tmp_path) == []
    assert not (tmp_path / "releases").exists()


def test_a_dataset_without_a_budget_is_refused_and_a_run_cannot_set_one(tmp_path):
    defs = build_definitions(resources_in(tmp_path))
    with dg.DagsterInstance.ephemeral() as instance:
        result = defs.resolve_job_def("release").execute_in_process(
            run_config=run_config_for(ReleaseConfig(**FAST)), instance=instance, raise_on_error=False
        )
    assert not result.success
    failure = next(e for e in result.all_events if e.is_step_failure)
    assert "splice budget set fair_affairs" in failure.event_specific_data.error.cause.message
    with BudgetLedger(f"sqlite:///{tmp_path / 'ledger.sqlite'}") as book:
        assert book.budget("fair_affairs") is None and book.entries("fair_affairs") == []
    # No run or resource setting carries a budget: the launchpad cannot raise one.
    for fields in (ReleaseConfig.model_fields, LedgerResource.model_fields):
        assert not any("budget" in name for name in fields)
    # Run config is the settings block (and loggers) only: neither a budget nor resource config gets in.
    for raising, named in (
        ({SETTINGS: {**FAST, "budget_epsilon": 100.0}}, "budget_epsilon"),
        ({SETTINGS: FAST, "resources": {"ledger": {"config": {"budget_epsilon": 100.0}}}}, "resources"),
    ):
        with (
            dg.DagsterInstance.ephemeral() as instance,
            pytest.raises(dg.DagsterInvalidConfigError, match=named),
        ):
            defs.resolve_job_def("release").execute_in_process(run_config=raising, instance=instance)


def test_release_settings_are_one_job_level_block():
    job = build_definitions().resolve_job_def("release")
    top = job.run_config_schema.config_type.fields
    assert set(top) == {SETTINGS, "loggers"}
    assert set(top[SETTINGS].config_type.fields) == set(ReleaseConfig.model_fields)
    config = ReleaseConfig(**FAST)
    assert run_config_for(config) == {SETTINGS: config.model_dump()}
    # The CLI and the demo add the console logger's level; the settings block is kept as it is.
    from splice_assets.dagster_layer.console import with_console_level

    quiet = with_console_level(run_config_for(config), "INFO")
    assert quiet == {SETTINGS: config.model_dump(), "loggers": {"console": {"config": {"log_level": "INFO"}}}}


def test_invalid_settings_are_refused_at_launch_with_the_validators_message(tmp_path):
    set_budget(tmp_path)
    job = build_definitions(resources_in(tmp_path)).resolve_job_def("release")
    # Dagster's config schema checks types only (the pydantic constraints are not in it): the mapping refuses.
    from dagster._config import process_config

    assert process_config(job.run_config_schema.config_type, {SETTINGS: {"epsilon": -1.0, "bounds_share": 1.5}}).success
    with dg.DagsterInstance.ephemeral() as instance:
        for settings, message in (
            ({"epsilon": -1.0}, r"epsilon must be a number in \(0, 20\], got -1.0"),
            ({"bounds_share": 1.5}, r"bounds_share must be a number in \(0, 1\), got 1.5"),
            ({"holdout_fraction": 2.5}, r"holdout_fraction must be a number in \[0, 0.9\), got 2.5"),
        ):
            with pytest.raises(ReleaseSettingsRefused, match=message) as refused:
                job.execute_in_process(run_config={SETTINGS: {**FAST, **settings}}, instance=instance)
            assert "pydantic" not in str(refused.value) and "launch refused" in str(refused.value)
        assert instance.get_runs() == []  # refused before any run (or step) exists
    assert ledger_entries(tmp_path) == []



def test_what_needs_the_schema_or_the_input_is_refused_at_launch_too(tmp_path):
    # Issue 70 item 1: delta >= 1/n_min, a missing input file (refused by the mapping: no run exists) and an
    # unknown dataset (not in the Enum of the schema folder's datasets: Dagster's own config check, which the
    # launchpad's ERRORS pane shows while typing).
    from dagster._config import process_config

    from splice_assets.dagster_layer.automation import DATASET_ENUM

    set_budget(tmp_path)
    job = build_definitions(resources_in(tmp_path)).resolve_job_def("release")
    checked = process_config(job.run_config_schema.config_type, {SETTINGS: {**FAST, "dataset": "nosuch"}})
    assert not checked.success and f"not in enum type {DATASET_ENUM} got nosuch" in checked.errors[0].message
    assert process_config(job.run_config_schema.config_type, {SETTINGS: FAST}).success
    with dg.DagsterInstance.ephemeral() as instance:
        for settings, message in (
            ({"delta": 0.001}, r"delta must be < 1/n_min = 0.0002 \(n_min=5000\), got 0.001"),
            ({"input_path": str(tmp_path / "nope.csv")}, r"input_path: no file or folder at .*nope.csv"),
        ):
            with pytest.raises(ReleaseSettingsRefused, match=message):
                job.execute_in_process(run_config={SETTINGS: {**FAST, **settings}}, instance=instance)
        assert instance.get_runs() == []
    with pytest.raises(ValidationError, match="no schema for dataset 'nosuch'"):
        ReleaseConfig(dataset="nosuch")
    assert ReleaseConfig(input_path=str(tmp_path / "*.csv")).input_path.endswith("*.csv")  # a glob: the run reads it

def test_invalid_config_quotes_the_value():
    with pytest.raises(Exception, match="-1"):
        ReleaseConfig(epsilon=-1.0)
    with pytest.raises(Exception, match="2.5"):
        ReleaseConfig(holdout_fraction=2.5)
    with pytest.raises(Exception, match="link_lambda .* got 1.5"):
        ReleaseConfig(link_lambda=1.5)
    with pytest.raises(Exception, match="tilt_chi2 .* got -0.5"):
        ReleaseConfig(tilt_chi2=-0.5)
    with pytest.raises(Exception, match="joint_pairs must be an integer >= 0, got -2"):
        ReleaseConfig(joint_pairs=-2)
    with pytest.raises(Exception, match="field_iterations must be an integer >= 0, got -1"):
        ReleaseConfig(field_iterations=-1)
    # Research switches are not release settings (only `splice_assets.experimental` reaches them).
    assert not {"rank", "numeric_model", "candidate_K"} & set(ReleaseConfig.model_fields)
    with pytest.raises(Exception, match="relation must be one of .* got 'add_remove'"):
        ReleaseConfig(relation="add_remove")
    with pytest.raises(Exception, match="count's 0.01 under add-remove"):
        ReleaseConfig(relation="add-remove", marginal_share=0.4, pair_share=0.59)
    assert ReleaseConfig(marginal_share=0.4, pair_share=0.59).relation == "replace-one"


def test_a_failed_run_removes_its_steps_and_resume_finishes_it_without_a_second_charge(tmp_path, monkeypatch):
    """A step failing after the charge removes the run's private step files and logs the spend and the resume
    command; re-executing from the failed step finds no step files and points to `splice release --resume`, which
    finishes the release from its stored measurement without charging again."""
    from splice_assets.postprocess import chain
    from splice_assets.release.resume import resume_release

    real_fit = chain.fit
    calls = {"n": 0}

    def flaky_fit(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("injected fitting failure")
        return real_fit(*args, **kwargs)

    monkeypatch.setattr(chain, "fit", flaky_fit)
    monkeypatch.setenv("SPLICE_TEST_TMP", str(tmp_path))
    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
        first = run_release(tmp_path, instance)
        assert not first.success
        assert [e.status for e in ledger_entries(tmp_path)] == ["committed"]
        release_dir = tmp_path / "releases" / "fair_affairs" / first.run_id
        assert not (release_dir / "internal" / "steps").exists()
        warnings = [e.message for e in instance.all_logs(first.run_id) if e.level == logging.WARNING]
        assert any(f"splice release --resume {first.run_id}" in m and "epsilon = 1" in m for m in warnings)
        options = dg.ReexecutionOptions.from_failure(first.run_id, instance)
        with dg.execute_job(
            dg.reconstructable(_release_job_for_tests), instance=instance, reexecution_options=options
        ) as second:
            assert not second.success
            failure = next(e for e in second.all_events if e.is_step_failure)
            assert "splice release --resume" in failure.event_specific_data.error.message
    assert calls["n"] == 1
    record = resume_release(first.run_id, base_dir=tmp_path / "releases", ledger_url=ledger_url(tmp_path),
                            mlflow_tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}",
                            mlflow_artifact_root=str(tmp_path / "mlartifacts"))
    assert record["release_id"] == first.run_id and (release_dir / "public" / "release.json").is_file()
    assert calls["n"] == 2
    assert [e.status for e in ledger_entries(tmp_path)] == ["committed"]


def _release_job_for_tests():
    tmp = Path(os.environ["SPLICE_TEST_TMP"])
    return build_definitions(resources_in(tmp)).resolve_job_def("release")


def test_schedule_requests_a_run_and_skips_when_budget_is_spent(tmp_path, monkeypatch):
    monkeypatch.setenv("SPLICE_REFRESH_EPSILON", "1.0")
    ledger = LedgerResource(url=f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    skipped = refresh_schedule(dg.build_schedule_context(resources={"ledger": ledger}))
    assert isinstance(skipped, dg.SkipReason) and "no lifetime budget" in skipped.skip_message
    set_budget(tmp_path, 1.0)
    tick = datetime.datetime(2026, 11, 30, 3, 0, tzinfo=datetime.UTC)
    context = dg.build_schedule_context(resources={"ledger": ledger}, scheduled_execution_time=tick)
    request = refresh_schedule(context)
    assert isinstance(request, dg.RunRequest)
    assert request.run_config[SETTINGS]["dataset"] == "fair_affairs"
    # Spend most of the budget, then the next refresh must be skipped with a reason.
    book = ledger.open()
    from splice_assets.private import mechanism as privacy

    cal = privacy.calibrate(1.0, 1e-9, 5000, 128, 8)
    entry = book.reserve(
        dataset="fair_affairs",
        release_id="r1",
        mechanism="gaussian",
        noise_multiplier=cal.noise_multiplier,
        sigma=cal.sigma,
        sensitivity=cal.sensitivity,
        epsilon=1.0,
        delta=1e-9,
        relation="replace-one",
        params_hash="x",
    )
    book.commit(entry)
    skipped = refresh_schedule(dg.build_schedule_context(resources={"ledger": ledger}, scheduled_execution_time=tick))
    assert isinstance(skipped, dg.SkipReason) and "budget" in skipped.skip_message


def test_sensor_launches_once_per_file(tmp_path, monkeypatch, demo_table):
    landing = tmp_path / "landing"
    (landing / "fair_affairs").mkdir(parents=True)
    monkeypatch.setenv("SPLICE_LANDING_DIR", str(landing))
    set_budget(tmp_path)
    ledger = LedgerResource(url=f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    empty = new_file_sensor(dg.build_sensor_context(resources={"ledger": ledger}))
    assert isinstance(empty, dg.SkipReason)
    path = landing / "fair_affairs" / "batch1.csv"
    demo_table.to_csv(path, index=False)
    (landing / "fair_affairs" / "notes.txt").write_text("ignored")
    first = new_file_sensor(dg.build_sensor_context(resources={"ledger": ledger})).run_requests
    assert len(first) == 1 and first[0].run_key.startswith("fair_affairs/batch1.csv@")
    again = new_file_sensor(dg.build_sensor_context(resources={"ledger": ledger})).run_requests
    assert again[0].run_key == first[0].run_key  # same file, same key: Dagster launches it once
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    touched = new_file_sensor(dg.build_sensor_context(resources={"ledger": ledger})).run_requests
    assert touched[0].run_key != first[0].run_key


def test_sensor_names_every_skipped_file_with_its_reason(tmp_path, monkeypatch, demo_table):
    """A file in an unknown dataset's folder, a file of another type and a file outside any dataset folder are each
    named with the reason: in the skip message when nothing launches, in the tick's log beside a launch."""
    landing = tmp_path / "landing"
    for folder in ("fair_affairs", "nosuch"):
        (landing / folder).mkdir(parents=True)
    monkeypatch.setenv("SPLICE_LANDING_DIR", str(landing))
    set_budget(tmp_path)
    ledger = LedgerResource(url=f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    demo_table.to_csv(landing / "nosuch" / "rows.csv", index=False)
    (landing / "fair_affairs" / "notes.txt").write_text("ignored")
    (landing / "stray.csv").write_text("a\n1\n")
    skipped = new_file_sensor(dg.build_sensor_context(resources={"ledger": ledger}))
    assert isinstance(skipped, dg.SkipReason)
    message = skipped.skip_message or ""
    assert message.startswith("3 file(s) skipped")
    assert "nosuch/rows.csv: no schema for dataset 'nosuch'" in message
    assert "fair_affairs/notes.txt: not a .csv, .csv.gz, .parquet file" in message
    assert "stray.csv: not in a dataset folder" in message
    demo_table.to_csv(landing / "fair_affairs" / "batch1.csv", index=False)
    context = dg.build_sensor_context(resources={"ledger": ledger})
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append  # type: ignore[method-assign]
    context.log.addHandler(handler)  # the tick's log, as the UI shows it
    launched = new_file_sensor(context)
    assert isinstance(launched, dg.SensorResult) and len(launched.run_requests or []) == 1
    logged = "\n".join(r.getMessage() for r in records)
    for name in ("nosuch/rows.csv: no schema", "fair_affairs/notes.txt: not a", "stray.csv: not in a dataset"):
        assert f"skipped {name}" in logged, logged


def test_the_landing_folder_defaults_to_dagster_home(tmp_path, monkeypatch):
    monkeypatch.delenv("SPLICE_LANDING_DIR", raising=False)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    assert landing_dir() == tmp_path / "landing"
    monkeypatch.delenv("DAGSTER_HOME")
    repo = Path(__file__).resolve().parents[1]
    assert landing_dir() == repo / "dagster_home" / "landing"
    ignored = subprocess.run(["git", "check-ignore", "-q", "dagster_home/landing/fair_affairs/x.csv"], cwd=repo)
    assert not (repo / ".git").exists() or ignored.returncode == 0


REFUSED_LAUNCH = """mutation($params: ExecutionParams!) { launchRun(executionParams: $params) { __typename
  ... on PythonError { message stack errorChain { error { message } } } } }"""


def test_ui_trigger_through_graphql(tmp_path):
    """`dg dev` (as `make dagster-ui`): a launch with epsilon = -1, delta >= 1/n_min or a missing input is refused
    with the validator's message alone (no stack: the launchpad shows no traceback) and no run; a good one runs to
    success (the browser test, tests/test_dagster_ui.py, does the same through the UI)."""
    set_budget(tmp_path)
    with dagster_ui(tmp_path) as url:
        for setting, value, message in (
            ("epsilon", -1, "epsilon must be a number in (0, 20], got -1.0"),
            ("delta", 0.001, "delta must be < 1/n_min = 0.0002 (n_min=5000), got 0.001"),
            ("input_path", str(tmp_path / "nope.csv"), f"input_path: no file or folder at '{tmp_path / 'nope.csv'}'"),
        ):
            params = {"selector": RELEASE_JOB, "runConfigData": {SETTINGS: {**FAST, setting: value}}}
            refused = graphql(url, REFUSED_LAUNCH, {"params": params})["data"]["launchRun"]
            assert refused == {"__typename": "PythonError", "stack": [], "errorChain": [],
                               "message": f"{message} (launch refused; no run was started)"}, refused
        assert run_ids(url) == []
        launched = launch_release(url, {SETTINGS: FAST})
        assert launched["__typename"] == "LaunchRunSuccess", launched
        assert wait_for_run(url, launched["run"]["runId"]) == "SUCCESS"


def test_a_partitioned_input_is_streamed_through_the_same_job(tmp_path, demo_table):
    """A directory of Parquet files goes through the same assets, streamed: one charge, the same report and
    bundle, and the measured row count of the whole-table split."""
    parts = tmp_path / "parts"
    parts.mkdir()
    for i, start in enumerate(range(0, len(demo_table), 2500)):
        demo_table.iloc[start:start + 2500].to_parquet(parts / f"part-{i}.parquet", index=False, row_group_size=900)
    with dg.DagsterInstance.ephemeral() as instance:
        result = run_release(tmp_path, instance, input_path=str(parts))
    assert result.success
    meta = result.asset_materializations_for_node(op_name("validated_table"))[0].metadata
    assert meta["engine"].value == "local" and meta["partitions"].value == 3 + 3 + 2  # row groups of 900 rows
    assert meta["n (public)"].value == len(demo_table) - round(0.2 * len(demo_table))
    assert [e.status for e in ledger_entries(tmp_path)] == ["committed"]
    record = result.output_for_node(op_name("release"))
    assert (Path(record["internal_dir"]) / "audit.json").exists()
    public = Path(record["public_dir"])
    manifest = json.loads((public / "release.json").read_text())
    assert manifest["privacy"]["epsilon"] == 1.0
    # Partitioned input, partitioned output: the rows as Parquet parts in the public bundle, counted in the manifest.
    assert manifest["synthetic_files"] == ["synthetic/part-00000.parquet"]
    assert manifest["synthetic_rows"] == FAST["n_synthetic"] == len(pd.read_parquet(public / "synthetic"))
    assert not (public / "synthetic.csv").exists()
