"""SPLICE: differentially private synthetic tables from sliced Chebyshev moments.

The public surface is small::

    from splice_assets import BudgetLedger, Synthesizer, load_schema

    synth = Synthesizer(load_schema("schemas/adult.yaml"), epsilon=1.0, delta=1e-9)
    synth.fit(table, ledger=BudgetLedger("sqlite:///ledger.sqlite"))
    rows = synth.sample(10_000, seed=0)

A table that does not fit in memory (a folder, glob or fsspec URL of Parquet/CSV files) is streamed, locally or
on Dask: ``synth.fit_source("s3://bucket/table/", ledger=..., engine=make_engine("dask"))``, then
``synth.write_partitions(folder)``.

The library has no Dagster import; ``splice_assets.dagster_layer`` and the ``splice`` CLI are thin callers of it.
Names are resolved lazily so ``splice --help`` does not pay for torch.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.2.0"

_EXPORTS = {
    "Synthesizer": "splice_assets.api",
    "PrivacyFacts": "splice_assets.api",
    "NotFitted": "splice_assets.api",
    "MeasurementSettings": "splice_assets.config",
    "ModelSettings": "splice_assets.config",
    "PostProcessingSettings": "splice_assets.config",
    "SynthesizerSettings": "splice_assets.config",
    "PrivacyLoss": "splice_assets.config",
    "Relation": "splice_assets.config",
    "SettingsError": "splice_assets.config",
    "load_schema": "splice_assets.schema",
    "parse_schema": "splice_assets.schema",
    "TableSchema": "splice_assets.schema",
    "SchemaError": "splice_assets.schema",
    "Measurement": "splice_assets.measurement",
    "BudgetLedger": "splice_assets.private.ledger",
    "StructuralError": "splice_assets.private.validation",
    "PreflightError": "splice_assets.private.preflight",
    "make_engine": "splice_assets.engine",
}
__all__ = [
    "BudgetLedger", "Measurement", "MeasurementSettings", "ModelSettings", "NotFitted", "PostProcessingSettings",
    "PreflightError", "PrivacyFacts", "PrivacyLoss", "Relation", "SchemaError", "SettingsError", "StructuralError",
    "Synthesizer", "SynthesizerSettings", "TableSchema", "__version__", "load_schema", "make_engine", "parse_schema",
]
assert sorted(__all__) == sorted([*_EXPORTS, "__version__"])

if TYPE_CHECKING:  # pragma: no cover - for type checkers and editors
    from splice_assets.api import NotFitted, PrivacyFacts, Synthesizer
    from splice_assets.config import (
        MeasurementSettings,
        ModelSettings,
        PostProcessingSettings,
        PrivacyLoss,
        Relation,
        SettingsError,
        SynthesizerSettings,
    )
    from splice_assets.engine import make_engine
    from splice_assets.measurement import Measurement
    from splice_assets.private.ledger import BudgetLedger
    from splice_assets.private.preflight import PreflightError
    from splice_assets.private.validation import StructuralError
    from splice_assets.schema import SchemaError, TableSchema, load_schema, parse_schema


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'splice_assets' has no attribute {name!r}")
