"""A release as an MLflow run: every field logged, public bundle free of private values, registered model
loadable in a fresh process, zero-cost refit linked to its parent."""

from __future__ import annotations

import json
import logging
import os
import re
import struct
import subprocess
import sys
import warnings
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest

from splice_assets.dagster_layer.assets import op_name
from splice_assets.dagster_layer.automation import run_config_for
from splice_assets.dagster_layer.config import ReleaseConfig
from splice_assets.dagster_layer.definitions import build_definitions
from splice_assets.datasets import DEMO_DATASET, demo_data_path, schema_path
from splice_assets.defaults import default_pair_share
from splice_assets.private.ledger import BudgetLedger
from splice_assets.schema import load_schema

REPO = Path(__file__).resolve().parents[1]
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
FAST = dict(k=8, n_directions=128, components=3, max_steps=60, n_synthetic=2000)
SECRET = "PLANTED_SECRET_93xk"
EXTREME = 98765432.125
SOURCE_MARK = "SRCURI_private_q7z"
UNIQUE_VALUE = "37.0918273645"  # inside the public bound [0, 100]: it survives validation into the measured rows
UNIQUE_CATEGORY = "CATEGORY_only_here_x4"


def environment(tmp: Path) -> dict[str, str]:
    return {
        "DAGSTER_HOME": str(tmp),
        "SPLICE_LEDGER_URL": f"sqlite:///{tmp / 'ledger.sqlite'}",
        "MLFLOW_TRACKING_URI": f"sqlite:///{tmp / 'mlflow.db'}",
        "SPLICE_ARTIFACT_DIR": str(tmp / "releases"),
    }


def planted_input(tmp: Path) -> Path:
    """The demo table plus values that exist only in the 'real' data: an undeclared column, an undeclared
    category and an out-of-bounds number."""
    table = pd.read_csv(demo_data_path(), dtype=str)
    table["notes"] = SECRET  # column the schema does not declare
    table.loc[7, "occupation"] = SECRET  # category the schema does not declare
    table.loc[11, "affairs"] = repr(EXTREME)  # far outside the public bound [0, 100]
    table.loc[12, "affairs"] = UNIQUE_VALUE
    table.loc[13, "occupation_husb"] = UNIQUE_CATEGORY
    path = tmp / f"input_{SOURCE_MARK}.csv"
    table.to_csv(path, index=False)
    return path


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("release_mlflow")
    source = planted_input(tmp)
    with pytest.MonkeyPatch.context() as mp:
        for key, value in environment(tmp).items():
            mp.setenv(key, value)
        (tmp / "dagster.yaml").write_text((REPO / "dagster_home" / "dagster.yaml").read_text())
        with BudgetLedger(environment(tmp)["SPLICE_LEDGER_URL"]) as book:
            book.set_budget(DEMO_DATASET, 10.0, 1e-6)
        job = build_definitions().resolve_job_def("release")
        # A persistent instance under DAGSTER_HOME, as `dagster dev` and the CLI use: its event log is searched.
        with dg.DagsterInstance.get() as instance:
            result = job.execute_in_process(
                run_config=run_config_for(ReleaseConfig(input_path=str(source), **FAST)), instance=instance
            )
        assert result.success
        record = result.output_for_node(op_name("release"))
        yield {"tmp": tmp, "source": source, "record": record, "dagster_run_id": result.run_id}


def client_for(tmp: Path):
    import mlflow

    return mlflow.MlflowClient(tracking_uri=environment(tmp)["MLFLOW_TRACKING_URI"])


def test_run_logs_every_field(released):
    tmp, record = released["tmp"], released["record"]
    run = client_for(tmp).get_run(record["mlflow_run_id"])
    params, tags, metrics = run.data.params, run.data.tags, run.data.metrics
    for key in ("dataset", "epsilon", "delta", "k", "n_directions", "components", "max_steps",
                "n_synthetic", "seed", "holdout_fraction", "tilt_chi2", "link_lambda", "joint_pairs"):
        assert key in params, key
    assert "input_path" not in params and "source_uri" not in params
    for key in ("epsilon", "delta", "sigma", "sensitivity", "relation", "L", "k", "n", "directions_seed",
                "ledger_entry_id", "epsilon_cost", "lifetime_epsilon_spent", "lifetime_delta",
                "lifetime_epsilon_remaining", "lifetime_epsilon_budget"):
        assert f"privacy.{key}" in params, key
    entries = BudgetLedger(environment(tmp)["SPLICE_LEDGER_URL"]).entries(DEMO_DATASET)
    assert params["privacy.ledger_entry_id"] == entries[0].id
    assert float(params["privacy.epsilon"]) == 1.0 and params["privacy.relation"] == "replace-one"
    assert tags["dataset"] == DEMO_DATASET and tags["schema_version"] == "1"
    assert tags["dagster_run_id"] == released["dagster_run_id"] and tags["release_id"] == record["release_id"]
    # One release-id format: the Dagster run's dashed UUID names the run, its tags, its dataset and its folder.
    assert UUID.fullmatch(record["release_id"]) and run.info.run_name == record["release_id"]
    assert Path(record["public_dir"]).parent.name == record["release_id"]
    assert tags["code.package_version"]
    if (REPO / ".git").exists():
        assert len(tags.get("code.git_sha", "")) == 40
    assert "fit_loss" in metrics and "fit_final_loss" in metrics
    # The loss curve (logged as one batch): every len(curve) // 100-th step from 0, each at its own step.
    steps = json.loads((Path(record["public_dir"]) / "release.json").read_text())["fit"]["steps"]
    history = client_for(tmp).get_metric_history(run.info.run_id, "fit_loss")
    assert [m.step for m in history] == list(range(0, steps, max(1, steps // 100)))
    assert not any(k.startswith("internal") for k in metrics)  # nothing computed from real rows beside the model
    # The logged dataset is the synthetic table, never the private input.
    inputs = run.inputs.dataset_inputs
    assert len(inputs) == 1 and inputs[0].dataset.name == f"{DEMO_DATASET}-synthetic-{record['release_id']}"
    assert SOURCE_MARK not in json.dumps([i.dataset.source for i in inputs])
    top = {a.path for a in client_for(tmp).list_artifacts(run.info.run_id)}
    assert "public" in top and "internal" not in top


def test_the_store_holds_one_experiment_typed_for_classic_ml(released):
    """No GenAI landing page (the experiment kind tag) and no stray ``Default`` experiment beside it."""
    from splice_assets.release.bundle import EXPERIMENT_KIND, EXPERIMENT_KIND_TAG

    experiments = client_for(released["tmp"]).search_experiments()  # active ones, as the UI lists them
    assert [e.name for e in experiments] == [f"splice/{DEMO_DATASET}"]
    assert experiments[0].tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND == "custom_model_development"


def test_logging_and_registering_the_model_is_quiet(released, capfd):
    """No CloudPickle warning (the model is logged from code), no registry chatter ("Registered model ... already
    exists") on stdout or stderr, no warning: logged twice, so the second registration meets an existing model."""
    import mlflow

    from splice_assets.release.bundle import ensure_experiment
    from splice_assets.release.mlflow_model import log_release_model

    mlflow.set_tracking_uri(environment(released["tmp"])["MLFLOW_TRACKING_URI"])
    mlflow.set_experiment(experiment_id=ensure_experiment(DEMO_DATASET))
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("mlflow")
    level = logger.level
    logger.setLevel(logging.INFO)  # another test may have quietened it: it must be quiet on its own
    logger.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            logged = []
            for release_id in ("quiet-check-1", "quiet-check-2"):
                with mlflow.start_run(run_name=release_id):
                    logged.append(log_release_model(Path(released["record"]["public_dir"]), "quiet_check",
                                                    release_id))
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    out, err = capfd.readouterr()
    assert [m["registered_model_version"] for m in logged] == [1, 2]
    assert "already exists" not in out + err and "Registered model" not in out + err, out + err
    messages = [r.getMessage() for r in records if r.levelno >= logging.WARNING]
    assert not any("pickle" in m.lower() for m in messages), messages
    assert not [str(w.message) for w in caught if "mlflow" in w.filename], [str(w.message) for w in caught]
    version = client_for(released["tmp"]).get_model_version("splice-quiet_check", "2")
    assert version.tags["release_id"] == "quiet-check-2"
    client_for(released["tmp"]).delete_registered_model("splice-quiet_check")


def test_private_values_live_only_in_the_internal_folder(released):
    """Everything under DAGSTER_HOME (Dagster's run and event storage, the ledger, the MLflow store and its
    artifacts, the public bundle) except the release's internal folder and the input itself holds none of the
    planted values nor the input file's fingerprint. (The input's path is in the Dagster run's config, which is
    how the run finds it; the public bundle and MLflow never hold it: ``test_public_bundle_holds_no_private_value``.)"""
    tmp, source, record = released["tmp"], released["source"], released["record"]
    internal = Path(record["internal_dir"])
    audit = json.loads((internal / "audit.json").read_text())
    needles = {
        "unique value": UNIQUE_VALUE.encode(),
        "unique value (float64 bytes)": struct.pack("<d", float(UNIQUE_VALUE)),
        "unique category": UNIQUE_CATEGORY.encode(),
        "undeclared category": SECRET.encode(),
        "source fingerprint": audit["source_sha256"].encode(),
    }
    searched = 0
    for path in tmp.rglob("*"):
        if not path.is_file() or path == source or internal in path.parents:
            continue
        data = path.read_bytes()
        searched += 1
        for what, needle in needles.items():
            assert needle not in data, f"{what} found in {path.relative_to(tmp)}"
    assert searched > 20 and any(p.suffix == ".db" for p in tmp.rglob("*.db"))
    assert not (internal / "steps").exists()  # the step outputs (private rows) were removed at the end
    # The plants were really in the input, and the internal record does know where it came from.
    assert UNIQUE_VALUE.encode() in source.read_bytes() and SOURCE_MARK in audit["source_uri"]


def public_bytes(released) -> dict[str, bytes]:
    """Every public file: the bundle folder, the MLflow "public" artifacts and the registered model's artifacts."""
    import mlflow

    tmp, record = released["tmp"], released["record"]
    files = {f"bundle/{p.name}": p.read_bytes() for p in Path(record["public_dir"]).rglob("*") if p.is_file()}
    mlflow.set_tracking_uri(environment(tmp)["MLFLOW_TRACKING_URI"])
    public = Path(mlflow.artifacts.download_artifacts(run_id=record["mlflow_run_id"], artifact_path="public",
                                                      dst_path=str(tmp / "dl_public")))
    files.update({f"mlflow/{p.relative_to(public)}": p.read_bytes() for p in public.rglob("*") if p.is_file()})
    model = Path(mlflow.artifacts.download_artifacts(artifact_uri=record["model_uri"], dst_path=str(tmp / "dl_model")))
    files.update({f"model/{p.relative_to(model)}": p.read_bytes() for p in model.rglob("*") if p.is_file()})
    run = client_for(tmp).get_run(record["mlflow_run_id"])
    files["mlflow-params-tags"] = json.dumps([run.data.params, run.data.tags]).encode()
    return files


def test_public_bundle_holds_no_private_value(released):
    source, record = released["source"], released["record"]
    raw = source.read_bytes()
    assert SECRET.encode() in raw and repr(EXTREME).encode() in raw  # the plants are really in the input
    audit = json.loads((Path(record["internal_dir"]) / "audit.json").read_text())
    assert SOURCE_MARK in audit["source_uri"]  # the internal record does know the source
    files = public_bytes(released)
    assert any(name.startswith("mlflow/") for name in files) and any(name.startswith("model/") for name in files)
    forbidden = {
        "planted category": SECRET.encode(),
        "planted number": b"98765432",
        "planted number (float64 bytes)": struct.pack("<d", EXTREME),
        "planted number (float32 bytes)": struct.pack("<f", EXTREME),
        "source uri": SOURCE_MARK.encode(),
        "source fingerprint": audit["source_sha256"].encode(),
    }
    for name, data in files.items():
        assert "audit" not in name and "fidelity" not in name and "internal" not in name.split("/")[-1], name
        for what, needle in forbidden.items():
            assert needle not in data, f"{what} found in public file {name}"
    manifest = json.loads(Path(record["public_dir"], "release.json").read_text())
    assert "validation" not in manifest and "input_path" not in manifest["parameters"]
    # The pair share left to the schema is recorded as the number it measured with (8 of 9 columns discrete).
    assert manifest["parameters"]["pair_share"] == default_pair_share(load_schema(schema_path(DEMO_DATASET))) == 0.7222
    # The only row count in the bundle is the public n of the measurement (and the chosen synthetic size).
    assert manifest["privacy"]["n"] == json.loads(Path(record["public_dir"], "measurement.json").read_text())["n"]


def test_the_answers_with_intervals_stay_in_the_internal_report(released):
    """The internal report shows exact intervals beside the real answers on the measured rows; no public file (the
    bundle, MLflow's public artifacts and registered model, its params and tags) holds the section or its summary."""
    internal = Path(released["record"]["internal_dir"])
    section = json.loads((internal / "fidelity_report.json").read_text())["answers_with_intervals"]
    assert len(section["rows"]) >= 10 and {r["interval"] for r in section["rows"]} == {"exact"}
    measured = json.loads((internal / "audit.json").read_text())["measured_rows"]
    assert section["real_rows"] == f"the {measured:,} measured rows"
    assert section["summary"] in (internal / "fidelity_report.html").read_text(encoding="utf-8")
    for name, data in public_bytes(released).items():
        for needle in (section["summary"], "answers_with_intervals", "intervals hold the real answer"):
            assert needle.encode() not in data, f"{needle!r} found in public file {name}"


def test_release_lists_the_stored_models_links_by_column(released):
    """release.json's fit.links are the stored model's links (coordinate indices -> schema columns, lambda)."""
    public = Path(released["record"]["public_dir"])
    manifest = json.loads((public / "release.json").read_text())
    model = json.loads((public / "model.json").read_text())
    columns = [column for column, _, _ in model["layout"]]
    assert manifest["fit"]["links"] == [
        {"source": columns[source], "target": columns[target], "lambda": round(strength, 4)}
        for source, target, strength in model["links"]
    ]
    assert all(0.6 <= link["lambda"] <= 1.0 for link in manifest["fit"]["links"])


def test_release_lists_the_stored_models_joint_parts_by_column(released):
    """release.json's fit.joint_parts are the stored model's joint pairs by column (the demo data has some), at
    most the configured number, no column twice."""
    public = Path(released["record"]["public_dir"])
    manifest = json.loads((public / "release.json").read_text())
    model = json.loads((public / "model.json").read_text())
    name = lambda i: (
        model["layout"][i][0] + ("" if model["layout"][i][1] in ("value", "binned") else f"/{model['layout'][i][1]}")
    )  # noqa: E731
    assert manifest["fit"]["joint_parts"] == [[name(a), name(b)] for a, b in model["joint_pairs"]]
    assert 1 <= len(model["joint_pairs"]) <= manifest["parameters"]["joint_pairs"]
    used = [i for pair in model["joint_pairs"] for i in pair]
    assert len(used) == len(set(used))


def test_release_records_the_stored_models_pairwise_field(released):
    """release.json's fit.field is the stored model's field summary, fitted with the release's field_iterations."""
    public = Path(released["record"]["public_dir"])
    manifest = json.loads((public / "release.json").read_text())
    stored = json.loads((public / "model.json").read_text())["field"]
    summary = manifest["fit"]["field"]
    assert manifest["parameters"]["field_iterations"] == stored["iterations"] == summary["iterations"] > 0
    assert summary["sweeps"] == stored["sweeps"] and summary["residual"] == stored["residual"]


def test_registered_model_samples_in_a_fresh_process(released):
    tmp, record = released["tmp"], released["record"]
    version = client_for(tmp).get_model_version_by_alias(f"splice-{DEMO_DATASET}", "latest")
    assert version.tags["release_id"] == record["release_id"]
    # The version page shows the release's guarantee: headline epsilon (composed), delta, relation, what it charged.
    manifest = json.loads((Path(record["public_dir"]) / "release.json").read_text())["privacy"]
    assert version.tags["epsilon"] == str(manifest["epsilon"]) == str(record["epsilon_cost"])
    assert version.tags["delta"] == str(manifest["delta"]) == "1e-09"
    assert version.tags["relation"] == "replace-one" and version.tags["epsilon_cost"] == str(record["epsilon_cost"])
    code = (
        "import json, mlflow, pandas as pd\n"
        f"m = mlflow.pyfunc.load_model('models:/splice-{DEMO_DATASET}@latest')\n"
        "a = m.predict(pd.DataFrame({'n_rows': [50], 'seed': [1]}))\n"
        "b = m.predict({'n_rows': 50}, params={'seed': 1})\n"
        "q = m.predict(pd.DataFrame({'query': ['share where rate_marriage == 5', 'count']}))\n"
        "try:\n"
        "    m.predict({'query': 'median(affairs)'})\n"
        "    refused = ''\n"
        "except Exception as error:\n"
        "    refused = str(error)\n"
        "print(json.dumps({'shape': list(a.shape), 'columns': list(a.columns), 'same': bool(a.equals(b)),"
        " 'max_affairs': float(a['affairs'].max()), 'answers': q.to_dict('records'), 'refused': refused}))\n"
    )
    env = {**os.environ, **environment(tmp)}
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=str(tmp), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    schema = pd.read_parquet(Path(record["public_dir"]) / "synthetic.parquet").columns.tolist()
    assert out["shape"] == [50, len(schema)] and out["columns"] == schema
    assert out["same"] and out["max_affairs"] <= 100.0
    # A query input answers with a 95% interval instead of sampling; a bad query is refused, quoted.
    share, count = out["answers"]
    assert share["interval"] == count["interval"] == "exact" and share["lower"] < share["estimate"] < share["upper"]
    assert count["estimate"] == count["rows"] == manifest["n"]  # replace-one: n is public, exactly
    assert "cannot read 'median(affairs)'" in out["refused"]


def readme_registry_snippet() -> str:
    text = (REPO / "README.md").read_text()
    section = text[text.index("## Dagster quickstart"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readme_registry_load_works_from_any_directory(released, tmp_path):
    """The README's snippet, verbatim, in a plain process started elsewhere with only DAGSTER_HOME set (as `make`
    and the CLI set it): it finds the store the CLI and Dagster wrote, and leaves no stray ./mlflow.db."""
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env["DAGSTER_HOME"] = str(released["tmp"])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = subprocess.run([sys.executable, "-c", readme_registry_snippet()], env=env, cwd=elsewhere,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "affairs" in proc.stdout and list(elsewhere.iterdir()) == []


def test_the_stores_default_to_the_repository_whatever_the_working_directory(monkeypatch, tmp_path):
    from splice_assets.release.locations import dagster_home, tracking_uri

    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    assert dagster_home() == REPO / "dagster_home"
    assert tracking_uri() == f"sqlite:///{REPO / 'dagster_home' / 'mlflow.db'}"
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    assert tracking_uri() == f"sqlite:///{tmp_path / 'mlflow.db'}"


def test_refit_costs_zero_and_links_its_parent(released, monkeypatch):
    from splice_assets.release.refit import refit_release

    tmp, parent = released["tmp"], released["record"]
    for key, value in environment(tmp).items():
        monkeypatch.setenv(key, value)
    ledger = BudgetLedger(environment(tmp)["SPLICE_LEDGER_URL"])
    spent_before = ledger.spent(DEMO_DATASET)
    child = refit_release(parent["release_id"], K=2, steps=40, n_rows=500)
    assert UUID.fullmatch(child["release_id"])  # the same format as a Dagster run's release id
    assert ledger.spent(DEMO_DATASET) == spent_before
    entry = [e for e in ledger.entries(DEMO_DATASET) if e.release_id == child["release_id"]]
    assert len(entry) == 1 and entry[0].epsilon == 0.0 and entry[0].parent_release_id == parent["release_id"]
    manifest = json.loads(Path(child["public_dir"], "release.json").read_text())
    assert manifest["parent_release_id"] == parent["release_id"] and manifest["kind"] == "refit"
    assert manifest["privacy"]["epsilon_cost"] == 0.0 and manifest["privacy"]["ledger_entry_id"] == entry[0].id
    assert manifest["parameters"]["components"] == 2 and manifest["synthetic_rows"] == 500
    parent_manifest = json.loads(Path(parent["public_dir"], "release.json").read_text())
    for key in ("tilt_chi2", "link_lambda", "joint_pairs"):  # fit settings a refit does not override are inherited
        assert manifest["parameters"][key] == parent_manifest["parameters"][key]
    assert "no fidelity report" in manifest["fidelity_report"]
    for name in ("measurement.npz", "measurement.json"):  # the very same noisy moments, no new draw
        assert Path(child["public_dir"], name).read_bytes() == Path(parent["public_dir"], name).read_bytes()
    run = client_for(tmp).get_run(child["mlflow_run_id"])
    assert run.data.tags["parent_release_id"] == parent["release_id"]
    assert float(run.data.params["privacy.epsilon_cost"]) == 0.0
    assert not any(k.startswith("internal.") for k in run.data.metrics)
    latest = client_for(tmp).get_model_version_by_alias(f"splice-{DEMO_DATASET}", "latest")
    assert latest.tags["release_id"] == child["release_id"]
    audit = json.loads(Path(child["internal_dir"], "audit.json").read_text())
    assert audit["source_uri"] is None and audit["validation"] is None


def test_public_quality_summary_is_derived_from_public_files_alone(released):
    """quality.json sits beside release.json and is recomputed exactly from the public bundle (noisy measurement,
    schema, synthetic rows): no number in it can come from real rows. The internal report's real-row numbers
    (the share of zeros of the real affairs column, its 1-way TVD against the holdout) are not in it."""
    from splice_assets.measurement import Measurement
    from splice_assets.release.quality import quality_summary
    from splice_assets.schema import load_schema

    public, internal = Path(released["record"]["public_dir"]), Path(released["record"]["internal_dir"])
    stored = json.loads((public / "quality.json").read_text())
    manifest = json.loads((public / "release.json").read_text())
    assert "quality.json" in manifest["files"] and manifest["quality"]["file"] == "quality.json"
    assert manifest["quality"]["model_tvd_1way"] == stored["model_tvd_1way"]
    recomputed = quality_summary(Measurement.load(public / "measurement"), load_schema(public / "schema.yaml"),
                                 pd.read_parquet(public / "synthetic.parquet"))
    assert json.loads(json.dumps(recomputed)) == stored
    affairs = stored["columns"]["affairs"]
    assert affairs["cells"] == 16 and affairs["noise_std_per_cell"] > 0 and affairs["model_tvd"] is not None
    # The accuracy a reader needs, from sigma: a cell's 95% count error per column, and every measured pair's table.
    n = manifest["privacy"]["n"]
    assert affairs["count_error_95"] == pytest.approx(1.96 * affairs["noise_std_per_cell"] * n, rel=1e-3)
    assert len(stored["pair_tables"]) == stored["pairs"] > 0 and stored["pair_count_error_95"] > 0
    assert stored["pair_tables"]["rate_marriage x affairs"]["cells"] == 5 * 16
    # Planted check: numbers the internal report computed from real rows do not appear in the public summary.
    report = json.loads((internal / "fidelity_report.json").read_text())
    real_side = report["verdict"]["columns"]["affairs"]["real"]
    text = (public / "quality.json").read_text()
    for value in (real_side["zero_share"], real_side["quantiles"]["95%"], report["metrics"]["marginals"]["one_way"]):
        assert f"{value:.4g}" not in text, value


def test_a_release_leaves_the_tracking_uri_variable_as_it_found_it(monkeypatch, tmp_path):
    """``mlflow.set_tracking_uri`` writes $MLFLOW_TRACKING_URI (MLflow 3); the release's MLflow block restores it, so
    the next in-process release under another $DAGSTER_HOME does not log to this one's store."""
    from splice_assets.release.bundle import _tracking_uri_set

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with _tracking_uri_set(uri):
        assert os.environ.get("MLFLOW_TRACKING_URI") == uri
    assert "MLFLOW_TRACKING_URI" not in os.environ
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///elsewhere.db")
    with _tracking_uri_set(uri):
        pass
    assert os.environ["MLFLOW_TRACKING_URI"] == "sqlite:///elsewhere.db"
