"""The bench's SDMetrics scores (bench/sdmetrics_score.py, run in the peers' venv) and its bundled digits table
(bench/common.py ``bundled_file``): neither needs the bench's data folder; the end-to-end SDMetrics check is skipped
where the peers' venv has no sdmetrics."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pandas as pd
import pytest

import bench.common as common
import bench.run as bench_run
from bench.sdmetrics_score import metadata_for
from splice_assets.datasets import schema_path
from splice_assets.private.validation import validate
from splice_assets.schema import load_schema, parse_schema

SCHEMA = {
    "name": "toy", "version": 1, "n_min": 10,
    "columns": [
        {"name": "age", "kind": "integer", "bounds": [0, 120]},
        {"name": "income", "kind": "continuous", "bounds": [0, 1e6]},
        {"name": "colour", "kind": "categorical", "categories": ["red", "blue"]},
        {"name": "grade", "kind": "ordinal", "categories": [1, 2, 3]},
        {"name": "flag", "kind": "boolean"},
        {"name": "seen", "kind": "datetime", "bounds": ["2024-01-01", "2024-04-01"], "resolution": "second"},
    ],
}  # fmt: skip


def test_sdmetrics_metadata_follows_the_schemas_kinds():
    schema = parse_schema(SCHEMA)
    meta = metadata_for(schema, ["age", "income", "colour", "grade", "flag", "seen", "unknown"])
    assert meta == {"columns": {
        "age": {"sdtype": "numerical"}, "income": {"sdtype": "numerical"}, "colour": {"sdtype": "categorical"},
        "grade": {"sdtype": "categorical"}, "flag": {"sdtype": "categorical"}, "seen": {"sdtype": "datetime"},
    }}  # fmt: skip
    # A validated table holds a lowered datetime's parts, each mapped by its own kind.
    parts = [n for n in schema.column_names if n.startswith("seen.")]
    assert parts and set(metadata_for(schema, parts)["columns"]) == set(parts)


def test_digits_come_from_scikit_learn_without_a_data_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(common, "BUNDLED_DIR", tmp_path / "cache")
    path = common.dataset_file("digits", tmp_path / "no-such-folder")
    assert path == tmp_path / "cache" / "digits" / "data.csv.gz" and path.is_file()
    monkeypatch.setattr(common, "DATASETS_DIR", None)
    assert common.dataset_file("digits") == path  # no data folder set: still the bundled copy
    table = pd.read_csv(path)
    assert table.shape == (1797, 65) and table["digit"].nunique() == 10
    schema = load_schema(schema_path("digits"))
    assert schema.target == "digit" and schema.task == "classification" and schema.n_min <= 1438  # the train split
    validated = validate(table, schema)
    assert validated.report.shares("out_of_bounds_clipped") == {}
    assert validated.table.shape == (1797, 65)


def test_a_copy_in_the_data_folder_wins_over_the_bundled_table(tmp_path, monkeypatch):
    monkeypatch.setattr(common, "BUNDLED_DIR", tmp_path / "cache")
    own = tmp_path / "data" / "digits" / "data.csv.gz"
    own.parent.mkdir(parents=True)
    own.write_bytes(b"")
    assert common.dataset_file("digits", tmp_path / "data") == own
    assert not (tmp_path / "cache").exists()


def _peers_sdmetrics() -> bool:
    if not bench_run.PEERS_PY.exists():
        return False
    return subprocess.run([str(bench_run.PEERS_PY), "-c", "import sdmetrics"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _peers_sdmetrics(), reason="the peers' venv (bench/.venv-peers) has no sdmetrics")
def test_sdmetrics_scores_a_copy_near_one_and_noise_lower(tmp_path):
    rng = np.random.default_rng(0)
    n = 400
    x = rng.normal(50, 10, n)
    real = pd.DataFrame({"age": np.clip(np.round(x), 0, 120), "income": 1000 * x + rng.normal(0, 500, n),
                         "colour": np.where(x > 50, "red", "blue")})  # fmt: skip
    noise = pd.DataFrame({"age": rng.integers(0, 120, n), "income": rng.uniform(0, 1e5, n),
                          "colour": rng.choice(["red", "blue"], n)})  # fmt: skip
    meta = metadata_for(parse_schema(SCHEMA), list(real.columns))
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    real.to_csv(tmp_path / "real.csv", index=False)
    scores = {}
    for name, table in (("copy", real), ("noise", noise)):
        table.to_csv(tmp_path / f"{name}.csv", index=False)
        subprocess.run([str(bench_run.PEERS_PY), str(common.BENCH_DIR / "sdmetrics_score.py"), "--real",
                        str(tmp_path / "real.csv"), "--synthetic", str(tmp_path / f"{name}.csv"), "--metadata",
                        str(tmp_path / "meta.json"), "--out", str(tmp_path / f"{name}.json")], check=True)  # fmt: skip
        scores[name] = json.loads((tmp_path / f"{name}.json").read_text())
    assert scores["copy"]["sdm_quality"] == pytest.approx(1.0) and scores["copy"]["sdm_pairs"] == pytest.approx(1.0)
    for key in ("sdm_quality", "sdm_shapes", "sdm_pairs"):
        assert scores["noise"][key] < scores["copy"][key] - 0.1
