"""Shared helpers of the release tests: resources rooted in a temporary folder, and the administrator's budget."""

from __future__ import annotations

import re
from pathlib import Path

from click.testing import CliRunner

from splice_assets.cli import main
from splice_assets.dagster_layer.resources import ArtifactStore, LedgerResource, MlflowResource, ReleaseStepStorage
from splice_assets.private.ledger import BudgetLedger


def ledger_url(tmp: Path) -> str:
    return f"sqlite:///{tmp / 'ledger.sqlite'}"


def release_resources(tmp: Path) -> dict[str, object]:
    """The release job's resources with every store under ``tmp`` (ledger, MLflow, release folders)."""
    return {
        "ledger": LedgerResource(url=ledger_url(tmp)),
        "mlflow": MlflowResource(tracking_uri=f"sqlite:///{tmp / 'mlflow.db'}", artifact_root=str(tmp / "mlartifacts")),
        "store": ArtifactStore(base_dir=str(tmp / "releases")),
        "io_manager": ReleaseStepStorage(base_dir=str(tmp / "releases")),
    }


def set_budget(tmp: Path, dataset: str, epsilon: float = 10.0, delta: float = 1e-6,
               relation: str = "replace-one") -> None:
    """The administrator's step (releases never set a budget themselves); keeps an existing budget."""
    with BudgetLedger(ledger_url(tmp)) as book:
        if book.budget(dataset) is None:
            book.set_budget(dataset, epsilon, delta, relation)


#: A line of the release's progress display when stderr is not a terminal (``splice_assets.progress``).
PROGRESS_LINE = re.compile(r"^\s*(done|FAILED) \S")


def without_progress(stderr: str) -> list[str]:
    """The non-empty lines of ``stderr`` that are not progress lines."""
    return [line for line in stderr.splitlines() if line.strip() and not PROGRESS_LINE.match(line)]


def invoke(*args: object):
    """``splice ARGS`` in this process."""
    return CliRunner().invoke(main, [str(a) for a in args])


def ok(*args: object):
    result = invoke(*args)
    assert result.exit_code == 0, (args, result.output, result.exception)
    return result


def fails_cleanly(*args: object) -> str:
    """The command fails with one ``Error: ...`` line on stderr and no uncaught exception; returns the line."""
    result = invoke(*args)
    assert result.exit_code != 0, (args, result.output)
    assert isinstance(result.exception, SystemExit), (args, repr(result.exception))
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), (args, result.stderr)
    return lines[0]
