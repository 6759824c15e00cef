"""Entry point for `dagster dev -f definitions.py` and `dagster definitions validate -f definitions.py`.

`dg dev` (``make dagster-ui``) loads the same definitions through pyproject.toml's ``[tool.dg.project]``.
"""

from splice_assets.dagster_layer.definitions import build_definitions

defs = build_definitions()
