from __future__ import annotations

import os

import pytest

os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")


@pytest.fixture
def demo_schema():
    from splice_assets.datasets import DEMO_DATASET, schema_path
    from splice_assets.schema import load_schema

    return load_schema(schema_path(DEMO_DATASET))


@pytest.fixture
def demo_table():
    from splice_assets.datasets import demo_data_path
    from splice_assets.private.validation import read_table

    return read_table(demo_data_path())
