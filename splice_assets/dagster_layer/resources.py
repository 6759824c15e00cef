"""Resources: the budget ledger, MLflow tracking and the release artifact store.

Defaults are embedded (SQLite files under $DAGSTER_HOME); production points them elsewhere through
environment variables without code changes: SPLICE_LEDGER_URL, MLFLOW_TRACKING_URI, SPLICE_ARTIFACT_DIR,
SPLICE_BUDGET_EPSILON / SPLICE_BUDGET_DELTA (lifetime budget per dataset).
"""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg

from ..ledger import BudgetLedger, default_ledger_url
from ..measurement import RELATION_REPLACE_ONE
from ..locations import (  # noqa: F401 - re-exported for existing callers
    dagster_home,
    default_artifact_dir,
    default_mlflow_artifact_root,
    default_tracking_uri,
    mlflow_artifact_location,
)


class LedgerResource(dg.ConfigurableResource):
    """The persistent privacy-budget ledger, with the lifetime budget applied to datasets that have none."""

    url: str = ""
    budget_epsilon: float = 10.0
    budget_delta: float = 1e-6

    def open(self, dataset: str, relation: str = RELATION_REPLACE_ONE) -> BudgetLedger:
        """A ledger handle (use it as a context manager so the connection pool is closed). A dataset without a budget
        gets the lifetime budget under ``relation``; one with a budget keeps its relation, and the ledger refuses a
        spend under the other."""
        ledger = BudgetLedger(self.url or default_ledger_url())
        if ledger.budget(dataset) is None:
            ledger.set_budget(dataset, self.budget_epsilon, self.budget_delta, relation)
        return ledger


class MlflowResource(dg.ConfigurableResource):
    """MLflow tracking: SQLite store under $DAGSTER_HOME unless a tracking URI is configured."""

    tracking_uri: str = ""
    artifact_root: str = ""

    def uri(self) -> str:
        return self.tracking_uri or default_tracking_uri()

    def artifact_location(self) -> str | None:
        return mlflow_artifact_location(self.artifact_root or None)


class ArtifactStore(dg.ConfigurableResource):
    """Where release folders live: <base_dir>/<dataset>/<release_id>/{public,internal}/."""

    base_dir: str = ""

    def release_dir(self, dataset: str, release_id: str) -> Path:
        path = Path(self.base_dir or default_artifact_dir()) / dataset / release_id
        path.mkdir(parents=True, exist_ok=True)
        return path

    def public_dir(self, dataset: str, release_id: str) -> Path:
        path = self.release_dir(dataset, release_id) / "public"
        path.mkdir(exist_ok=True)
        return path

    def internal_dir(self, dataset: str, release_id: str) -> Path:
        path = self.release_dir(dataset, release_id) / "internal"
        path.mkdir(exist_ok=True)
        return path


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"environment variable {name} must be a number, got {raw!r}") from None


def default_resources() -> dict[str, object]:
    """Resources wired from the environment (EnvVar keeps secrets out of the UI)."""
    return {
        "ledger": LedgerResource(
            url=dg.EnvVar("SPLICE_LEDGER_URL") if os.environ.get("SPLICE_LEDGER_URL") else "",
            budget_epsilon=env_float("SPLICE_BUDGET_EPSILON", 10.0),
            budget_delta=env_float("SPLICE_BUDGET_DELTA", 1e-6),
        ),
        "mlflow": MlflowResource(
            tracking_uri=dg.EnvVar("MLFLOW_TRACKING_URI") if os.environ.get("MLFLOW_TRACKING_URI") else "",
        ),
        "store": ArtifactStore(
            base_dir=dg.EnvVar("SPLICE_ARTIFACT_DIR") if os.environ.get("SPLICE_ARTIFACT_DIR") else "",
        ),
        "io_manager": dg.FilesystemIOManager(
            base_dir=os.environ.get("SPLICE_IO_DIR") or str(dagster_home() / "storage"),
        ),
    }
