"""Where the embedded defaults and a release's folders live (no Dagster import, so the CLI stays quick to start).

$DAGSTER_HOME (else the repository's ``dagster_home/``) holds the MLflow SQLite store, MLflow artifacts and the
release folders unless MLFLOW_TRACKING_URI / SPLICE_ARTIFACT_DIR point elsewhere. A release's private files live
in its ``internal/`` folder only, readable by its owner alone (``private_dir``, ``open_private``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from splice_assets.defaults import dagster_home as dagster_home  # re-exported: the layers import it from here


def prepare_dagster_home() -> Path:
    """$DAGSTER_HOME (set to the default when unset), created with the repository's embedded defaults (SQLite storage
    under it, telemetry off, as in dagster_home/dagster.yaml) when it has no dagster.yaml."""
    if not os.environ.get("DAGSTER_HOME"):
        os.environ["DAGSTER_HOME"] = str(dagster_home())
    home = Path(os.environ["DAGSTER_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    if not (home / "dagster.yaml").exists():
        (home / "dagster.yaml").write_text(DAGSTER_YAML)
    return home


DAGSTER_YAML = """# Written by splice (embedded defaults): run/event/schedule storage in SQLite under $DAGSTER_HOME.
storage:
  sqlite:
    base_dir:
      env: DAGSTER_HOME
telemetry:
  enabled: false
"""


def quiet_mlflow() -> None:
    """MLflow's INFO chatter (store creation, registry) off: a release prints its own progress."""
    import logging

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "ERROR")
    logging.getLogger("mlflow").setLevel(logging.ERROR)


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


MANIFEST = "release.json"
#: The noisy measurement's file in ``public/``: once it exists, the release's noise was drawn and kept.
MEASUREMENT = "measurement"
#: ``internal/steps/``: the pickled outputs of a running release's Dagster steps (private rows among them).
STEPS_FOLDER = "steps"


class ReleaseNotFound(LookupError):
    """No release folder with that id (or prefix) exists under the artifact directory."""


@dataclass(frozen=True)
class ReleaseLocation:
    release_id: str
    dataset: str
    root: Path

    @property
    def public_dir(self) -> Path:
        return self.root / "public"

    @property
    def internal_dir(self) -> Path:
        return self.root / "internal"

    @property
    def steps_dir(self) -> Path:
        return self.internal_dir / STEPS_FOLDER

    @property
    def charged(self) -> bool:
        """Whether the noisy measurement is stored (its spend is then counted, and a run that stopped can resume)."""
        return (self.public_dir / f"{MEASUREMENT}.json").is_file()

    def manifest(self) -> dict[str, Any]:
        path = self.public_dir / MANIFEST
        if not path.is_file():
            finish = f"; finish it with `splice release --resume {self.release_id}`" if self.charged else ""
            raise ReleaseNotFound(f"release {self.release_id!r} is incomplete: it has no public/{MANIFEST}{finish}")
        return json.loads(path.read_text())


def private_dir(path: Path) -> Path:
    """``path`` made (its parents as usual) and kept readable by its owner only (0700)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.mkdir(mode=0o700, exist_ok=True)
    path.chmod(0o700)
    return path


def open_private(path: Path) -> BinaryIO:
    """``path`` opened for writing, readable by its owner only (0600, also when it existed)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    return os.fdopen(fd, "wb")


def remove_step_files(release_id: str, base: Path | None = None) -> None:
    """Remove a release's step files, then its folders left empty: a run that stopped before writing anything else
    leaves nothing behind."""
    base = Path(base) if base is not None else artifact_dir()
    for root in (base.glob(f"*/{release_id}") if release_id and "/" not in release_id else ()):
        shutil.rmtree(root / "internal" / STEPS_FOLDER, ignore_errors=True)
        for folder in (root / "internal", root / "public", root):
            with contextlib.suppress(OSError):
                folder.rmdir()  # only when empty


def iter_releases(base: Path | None = None, dataset: str | None = None) -> list[ReleaseLocation]:
    """Every release folder under the artifact directory (optionally of one dataset)."""
    base = Path(base) if base is not None else artifact_dir()
    if not base.is_dir():
        return []
    folders = [base / dataset] if dataset else sorted(p for p in base.iterdir() if p.is_dir())
    out = []
    for folder in folders:
        if not folder.is_dir():
            continue
        for root in sorted(p for p in folder.iterdir() if p.is_dir()):
            out.append(ReleaseLocation(root.name, folder.name, root))
    return out


#: The shortest release id prefix that ``find_release`` matches.
MIN_PREFIX = 6


def find_release(release_id: str, base: Path | None = None) -> ReleaseLocation:
    """The release folder of an id, or of a unique id prefix (at least ``MIN_PREFIX`` characters)."""
    release_id = (release_id or "").strip()
    if not release_id or "/" in release_id or release_id.startswith("."):
        raise ReleaseNotFound(f"invalid release id {release_id!r}")
    everything = iter_releases(base)
    exact = [r for r in everything if r.release_id == release_id]
    if len(exact) == 1:
        return exact[0]
    short = len(release_id) < MIN_PREFIX
    matches = exact or ([] if short else [r for r in everything if r.release_id.startswith(release_id)])
    where = str(Path(base) if base is not None else artifact_dir())
    if not matches and short:
        raise ReleaseNotFound(f"no release {release_id!r} under {where}: a release id prefix needs at least "
                              f"{MIN_PREFIX} characters (`splice releases` lists the ids)")
    if not matches:
        raise ReleaseNotFound(f"no release {release_id!r} under {where}")
    if len(matches) > 1:
        raise ReleaseNotFound(f"release id {release_id!r} is ambiguous ({len(matches)} matches) under {where}")
    return matches[0]
