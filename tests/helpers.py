"""Shared helpers of the release tests: resources rooted in a temporary folder, the administrator's budget, and the
Dagster UI (`dg dev`) started in a subprocess against those stores."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from splice_assets.cli import main
from splice_assets.dagster_layer.resources import (
    ArtifactStore,
    EngineResource,
    LedgerResource,
    MlflowResource,
    ReleaseStepStorage,
)
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
        "engine": EngineResource(),
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


REPO = Path(__file__).resolve().parents[1]
# Small settings of a release that still runs every step (a few minutes at most on a loaded 2-core machine).
FAST = dict(k=8, n_directions=128, components=3, max_steps=60, n_synthetic=2000)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def graphql(url: str, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
    """One GraphQL request to the webserver; its JSON answer (Dagster answers some errors with HTTP 500 + JSON)."""
    body = json.dumps({"query": query, "variables": variables or {}}).encode()
    request = urllib.request.Request(f"{url}/graphql", data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.load(response)
    except urllib.error.HTTPError as exc:
        return json.loads(exc.read())


@contextlib.contextmanager
def dagster_ui(tmp: Path, timeout: float = 240.0) -> Iterator[str]:
    """`dg dev` (webserver + daemon, as `make dagster-ui`) on a free port, with every store under ``tmp``; yields its
    URL once it answers and stops the whole process group afterwards."""
    home = tmp / "home"
    home.mkdir(exist_ok=True)
    (home / "dagster.yaml").write_text((REPO / "dagster_home" / "dagster.yaml").read_text())
    port = free_port()
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "SPLICE_LEDGER_URL": ledger_url(tmp),
        "MLFLOW_TRACKING_URI": f"sqlite:///{tmp / 'mlflow.db'}",
        "SPLICE_ARTIFACT_DIR": str(tmp / "releases"),
    }
    log = open(tmp / "dg-dev.log", "wb")
    web = subprocess.Popen(
        [str(Path(sys.executable).with_name("dg")), "dev", "-h", "127.0.0.1", "-p", str(port)],
        cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + timeout
        while True:
            assert web.poll() is None, f"dg dev exited: {(tmp / 'dg-dev.log').read_text()[-2000:]}"
            try:
                answer = graphql(url, '{ repositoryOrError(repositorySelector: {repositoryLocationName: "splice", '
                                      'repositoryName: "__repository__"}) { __typename } }')
                if answer.get("data", {}).get("repositoryOrError", {}).get("__typename") == "Repository":
                    break  # the webserver answers and the code location has loaded
            except (OSError, ValueError):
                pass
            assert time.time() < deadline, "dg dev did not come up"
            time.sleep(1)
        yield url
    finally:
        os.killpg(web.pid, signal.SIGTERM)
        try:
            web.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(web.pid, signal.SIGKILL)
        log.close()


LAUNCH_RUN = """mutation($params: ExecutionParams!) { launchRun(executionParams: $params) { __typename
  ... on LaunchRunSuccess { run { runId } }
  ... on PythonError { message }
  ... on RunConfigValidationInvalid { errors { message } } } }"""
RELEASE_JOB = {"repositoryLocationName": "splice", "repositoryName": "__repository__", "jobName": "release"}


def launch_release(url: str, run_config: dict[str, Any]) -> dict[str, Any]:
    """Launch the release job as the launchpad does; the ``launchRun`` answer."""
    params = {"selector": RELEASE_JOB, "runConfigData": run_config}
    return graphql(url, LAUNCH_RUN, {"params": params})["data"]["launchRun"]


def run_ids(url: str) -> list[str]:
    answer = graphql(url, "{ runsOrError { ... on Runs { results { runId } } } }")
    return [r["runId"] for r in answer["data"]["runsOrError"]["results"]]


def wait_for_run(url: str, run_id: str, timeout: float = 600.0) -> str:
    """The run's final status (SUCCESS, FAILURE, CANCELED), polling the webserver."""
    query = "query($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }"
    deadline = time.time() + timeout
    status = ""
    while time.time() < deadline:
        status = graphql(url, query, {"id": run_id})["data"]["runOrError"].get("status", "")
        if status in {"SUCCESS", "FAILURE", "CANCELED"}:
            return status
        time.sleep(2)
    return status
