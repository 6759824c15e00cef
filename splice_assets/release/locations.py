"""Where the embedded defaults live (no Dagster import, so the CLI stays quick to start).

$DAGSTER_HOME (else the repository's ``dagster_home/``) holds the MLflow SQLite store, MLflow artifacts and the
release folders unless MLFLOW_TRACKING_URI / SPLICE_ARTIFACT_DIR point elsewhere.
"""

from __future__ import annotations

import os
from pathlib import Path


def dagster_home() -> Path:
    return Path(os.environ.get("DAGSTER_HOME") or Path(__file__).resolve().parents[1] / "dagster_home")


def default_tracking_uri() -> str:
    return f"sqlite:///{dagster_home() / 'mlflow.db'}"


def default_artifact_dir() -> str:
    return str(dagster_home() / "releases")


def default_mlflow_artifact_root() -> str:
    return str(dagster_home() / "mlartifacts")


def tracking_uri() -> str:
    """``$MLFLOW_TRACKING_URI`` or the SQLite store under $DAGSTER_HOME."""
    return os.environ.get("MLFLOW_TRACKING_URI") or default_tracking_uri()


def artifact_dir() -> Path:
    """``$SPLICE_ARTIFACT_DIR`` or $DAGSTER_HOME/releases: <dir>/<dataset>/<release_id>/{public,internal}."""
    return Path(os.environ.get("SPLICE_ARTIFACT_DIR") or default_artifact_dir())


def mlflow_artifact_location(root: str | None = None) -> str:
    """A file URI for new MLflow experiments' artifacts."""
    return Path(root or default_mlflow_artifact_root()).resolve().as_uri()


def package_version() -> str:
    """The installed distribution's version (works even when the package resolves as a namespace package)."""
    from importlib import metadata

    try:
        return metadata.version("splice-assets")
    except metadata.PackageNotFoundError:
        from splice_assets import __version__

        return __version__
