"""One settings model feeds every entry point: the same bad value is refused by ``Synthesizer(...)``, ``splice plan``,
``splice release`` (before Dagster loads) and the Dagster ``release`` job's run config (at launch), with the same
message, which quotes the value (issue 66)."""

from __future__ import annotations

import dataclasses
import json

import dagster as dg
import numpy as np
import pandas as pd
import pytest
import yaml
from click.testing import CliRunner
from helpers import release_resources

from splice_assets import cli
from splice_assets.api import Synthesizer
from splice_assets.config import (
    MeasurementSettings,
    PrivacyLoss,
    Relation,
    SettingsError,
    SynthesizerSettings,
    flat_setting_names,
)
from splice_assets.dagster_layer.automation import SETTINGS, ReleaseSettingsRefused
from splice_assets.dagster_layer.config import ReleaseConfig
from splice_assets.dagster_layer.definitions import build_definitions
from splice_assets.release.settings import RELEASE_ONLY, ReleaseSettings
from splice_assets.schema import parse_schema

SCHEMA = {
    "name": "toy_settings", "version": 1, "n_min": 100,
    "columns": [
        {"name": "amount", "kind": "continuous", "bounds": [0, 1000]},
        {"name": "colour", "kind": "categorical", "categories": ["red", "green", "blue"]},
    ],
}
GOOD = {"epsilon": 1.0, "delta": 1e-6}

# (setting, bad value, the one message, its `splice release` flag, its `splice plan` flag: None where it takes none)
BAD = [
    ("epsilon", 50.0, "epsilon must be a number in (0, 20], got 50.0", "--epsilon", "--epsilon"),
    ("epsilon", -1.0, "epsilon must be a number in (0, 20], got -1.0", "--epsilon", "--epsilon"),
    ("delta", 0.01, "delta must be < 1/n_min = 0.01 (n_min=100), got 0.01", "--delta", "--delta"),
    ("k", 100, "k must be an integer in [1, 64], got 100", "--k", "--k"),
    ("n_directions", 0, "n_directions (L) must be an integer in [1, 8192], got 0", "--L", "--L"),
    ("n_synthetic", -5, "n_synthetic must be an integer in [0, 10000000], got -5", "--rows", None),
    ("holdout_fraction", 1.5, "holdout_fraction must be a number in [0, 0.9), got 1.5", "--holdout", "--holdout"),
    ("relation", "add_remove", "relation must be one of ('replace-one', 'add-remove'), got 'add_remove'",
     "--relation", "--relation"),
]
IDS = [f"{setting}={value}" for setting, value, *_ in BAD]


@pytest.fixture
def world(tmp_path, monkeypatch):
    folder = tmp_path / "schemas"
    folder.mkdir()
    (folder / f"{SCHEMA['name']}.yaml").write_text(yaml.safe_dump(SCHEMA))
    monkeypatch.setenv("SPLICE_SCHEMA_DIR", str(folder))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SPLICE_LEDGER_URL", f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    monkeypatch.setenv("SPLICE_ARTIFACT_DIR", str(tmp_path / "releases"))
    rng = np.random.default_rng(0)
    table = pd.DataFrame({"amount": rng.gamma(2, 50, 400).round(2), "colour": rng.choice(["red", "green"], 400)})
    table.to_csv(tmp_path / "input.csv", index=False)
    return tmp_path


def python_api(setting: str, value: object) -> str | None:
    """The library's refusal (None: the setting is not the library's, e.g. the release's synthetic rows)."""
    schema = parse_schema(SCHEMA)
    try:
        if setting in ("epsilon", "delta", "relation"):
            Synthesizer(schema, **{**GOOD, setting: value})
        elif setting in ("k", "n_directions"):
            Synthesizer(schema, **GOOD, measurement=MeasurementSettings(**{setting: value}))
        elif setting == "holdout_fraction":  # the library's holdout: a partitioned input's
            Synthesizer(schema, **GOOD).scan_source("nowhere/*.parquet", None, holdout_fraction=value)
        else:
            return None
    except ValueError as exc:
        return str(exc)
    raise AssertionError(f"Synthesizer accepted {setting}={value!r}")


def one_line_error(result) -> str:
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    return lines[0].removeprefix("Error: ")


def splice_plan(world, flag: str | None, value: object) -> str | None:
    if flag is None:
        return None
    args = {"--n": "1000", "--epsilon": "1", "--delta": "1e-6", flag: str(value)}
    result = CliRunner().invoke(cli.main, ["plan", "--schema", str(world / "schemas" / "toy_settings.yaml"),
                                           *[x for pair in args.items() for x in pair]])
    return one_line_error(result)


def splice_release(world, flag: str, value: object, monkeypatch) -> str:
    def dagster_loaded(*args, **kwargs):
        raise AssertionError("the release job was started: the settings were not refused before Dagster loaded")

    monkeypatch.setattr(cli, "_run_release_job", dagster_loaded)
    args = {"--epsilon": "1", "--delta": "1e-6", flag: str(value)}
    result = CliRunner().invoke(cli.main, ["release", "--dataset", "toy_settings", "--input",
                                           str(world / "input.csv"), *[x for pair in args.items() for x in pair]])
    return one_line_error(result)


def dagster_launch(world, setting: str, value: object) -> str:
    job = build_definitions(release_resources(world)).resolve_job_def("release")
    settings = {"dataset": "toy_settings", "input_path": str(world / "input.csv"), **GOOD, setting: value}
    with dg.DagsterInstance.ephemeral() as instance:
        with pytest.raises(ReleaseSettingsRefused) as refused:
            job.execute_in_process(run_config={SETTINGS: settings}, instance=instance)
        assert instance.get_runs() == []  # refused at launch: no run exists
    return str(refused.value).removesuffix(" (launch refused; no run was started)")


@pytest.mark.parametrize("setting, value, message, release_flag, plan_flag", BAD, ids=IDS)
def test_every_entry_point_refuses_a_bad_value_with_the_same_message(world, monkeypatch, setting, value, message,
                                                                     release_flag, plan_flag):
    refusals = {
        "Synthesizer(...)": python_api(setting, value),
        "splice plan": splice_plan(world, plan_flag, value),
        "splice release": splice_release(world, release_flag, value, monkeypatch),
        "Dagster launch": dagster_launch(world, setting, value),
    }
    taken = {entry: text for entry, text in refusals.items() if text is not None}
    assert len(taken) == (2 if setting == "n_synthetic" else 4)  # the synthetic rows are the release's alone
    assert taken == dict.fromkeys(taken, message)


def test_release_settings_and_the_run_config_are_the_settings_model():
    """No second copy: the run config's fields are the release settings', every one not the release's own is a field
    of the library's settings model, and every default is the model's."""
    release = {f.name for f in dataclasses.fields(ReleaseSettings)}
    assert set(ReleaseConfig.model_fields) == release
    assert release - RELEASE_ONLY <= flat_setting_names()
    config, settings = ReleaseConfig(), ReleaseSettings()
    assert config.settings() == settings
    library = settings.synthesizer_settings()
    assert library == SynthesizerSettings(epsilon=settings.epsilon, delta=settings.delta)
    # by name, not by position: each setting lands in its group
    moved = ReleaseSettings(k=7, components=4, tilt_chi2=0.5, relation="add-remove").synthesizer_settings()
    assert (moved.measurement.k, moved.model.components, moved.postprocessing.tilt_chi2) == (7, 4, 0.5)
    assert moved.relation is Relation.ADD_REMOVE


def test_relation_is_a_str_enum_that_reads_and_writes_as_its_value():
    assert Relation("add-remove") is Relation.ADD_REMOVE and Relation.ADD_REMOVE == "add-remove"
    assert f"{Relation.REPLACE_ONE}" == "replace-one" and repr(Relation.REPLACE_ONE) == "'replace-one'"
    assert json.dumps({"relation": Relation.ADD_REMOVE}) == '{"relation": "add-remove"}'
    settings = SynthesizerSettings(1.0, 1e-9, "add-remove")
    assert settings.relation is Relation.ADD_REMOVE
    assert SynthesizerSettings.from_dict(json.loads(json.dumps(settings.to_dict()))) == settings
    assert ReleaseSettings.from_parameters({"relation": "add-remove"}).relation is Relation.ADD_REMOVE


def test_privacy_loss_checks_its_limits():
    assert PrivacyLoss(1.0, 1e-9) == SynthesizerSettings(1.0, 1e-9).privacy_loss
    with pytest.raises(SettingsError, match=r"delta must be a number in \(0, 1\), got 1.5"):
        PrivacyLoss(1.0, 1.5)
    with pytest.raises(SettingsError, match=r"delta must be < 1/n_min = 0.001 \(n_min=1000\), got 0.002"):
        PrivacyLoss(1.0, 0.002).check_n_min(1000)
