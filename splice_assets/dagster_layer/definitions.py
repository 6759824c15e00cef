"""The Dagster ``Definitions``: assets, checks, the release job, schedule, sensor and resources.

``defs`` is what `dg dev` loads (pyproject.toml's ``[tool.dg.project]``); it is built when Dagster asks for it, so
importing this module (as `splice release` does) costs nothing extra.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from splice_assets.dagster_layer.assets import release_assets
from splice_assets.dagster_layer.automation import (
    build_release_job,
    new_file_sensor,
    refresh_schedule,
)
from splice_assets.dagster_layer.checks import ALL_CHECKS
from splice_assets.dagster_layer.resources import default_resources, locked


def build_definitions(resources: dict[str, object] | None = None, schema_folder: Path | None = None
                      ) -> dg.Definitions:
    """The definitions with these resources (default: the deployment's), which no run config can change; the release
    job's ``dataset`` is an Enum of the schema folder's datasets now (``automation.build_release_job``).
    ``schema_folder``: where the schemas are, a deployment setting like the resources (default
    ``datasets.schema_dir()``); `splice release --schema FILE` builds its definitions with the file's folder."""
    return dg.Definitions(
        assets=release_assets(schema_folder),
        asset_checks=ALL_CHECKS,
        jobs=[build_release_job(schema_folder=schema_folder)],
        schedules=[refresh_schedule],
        sensors=[new_file_sensor],
        resources=locked(resources or default_resources()),
    )


@dg.definitions
def defs() -> dg.Definitions:
    return build_definitions()
