"""The bench's prepared split records what the schema's bounds clipped (bench/run.py ``prepare``): the scores
compare with the clipped rows, so the share is reported beside them in results.csv (``clipped_max``)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import bench.run as bench_run

SCHEMA_YAML = """
name: toy_clipped
version: 1
n_min: 100
columns:
  - {name: amount, kind: continuous, bounds: [0, 10]}
  - {name: colour, kind: categorical, categories: [red, blue]}
"""


def test_prepare_reports_the_share_of_each_columns_rows_its_bounds_clipped(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    amount = rng.uniform(0, 10, 1000)
    amount[:50] = 50.0  # 5% beyond the upper bound
    folder = tmp_path / "datasets" / "toy_clipped"
    folder.mkdir(parents=True)
    pd.DataFrame({"amount": amount, "colour": rng.choice(["red", "blue"], 1000)}).to_csv(
        folder / "data.csv.gz", index=False)
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "toy_clipped.yaml").write_text(SCHEMA_YAML)
    monkeypatch.setenv("SPLICE_SCHEMA_DIR", str(tmp_path / "schemas"))
    monkeypatch.setattr(bench_run, "DATASETS_DIR", tmp_path / "datasets")
    monkeypatch.setattr(bench_run, "RAW_DIR", tmp_path / "raw")
    prepared = bench_run.prepare("toy_clipped")
    assert prepared is not None
    assert prepared.clipped == {"amount": pytest.approx(0.05)} and prepared.clipped_max == pytest.approx(0.05)
    assert prepared.train["amount"].max() <= 10.0  # the scores see the clipped rows
    assert "clipped_max" in bench_run.COLUMNS


def test_without_a_data_folder_the_bench_says_how_to_set_one(monkeypatch):
    monkeypatch.setattr(bench_run, "DATASETS_DIR", None)
    monkeypatch.setattr("bench.common.DATASETS_DIR", None)
    with pytest.raises(SystemExit, match="SPLICE_BENCH_DATASETS is not set: set SPLICE_BENCH_DATASETS to a folder"):
        bench_run.prepare("adult")
    with pytest.raises(SystemExit, match="SPLICE_BENCH_DATASETS is not set"):
        bench_run.main(["--datasets", "adult", "--methods", "splice"])
