"""Entry point for `dagster dev -f definitions.py` and `dagster definitions validate -f definitions.py`."""

from splice_assets.dagster_layer.definitions import build_definitions

defs = build_definitions()
