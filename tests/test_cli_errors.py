"""The CLI's error contract in real processes: one line without Python class paths, and a pipe closed early
(``splice releases | head -1``) ends the command quietly."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from helpers import without_progress

from splice_assets.cli import EXIT_BROKEN_PIPE
from splice_assets.dagster_layer.console import without_class_path
from splice_assets.datasets import DEMO_DATASET, demo_data_path
from splice_assets.private.ledger import BudgetLedger

#: A dotted Python class path such as ``splice_assets.private.validation.StructuralError``.
CLASS_PATH = re.compile(r"\b[a-z_][\w]*(?:\.[\w]+)+\.[A-Z]\w*(?:Error|Exception|Failure|Exceeded)\b")


def splice(tmp: Path, *args: object, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "DAGSTER_HOME": str(tmp / "home"), "SPLICE_LEDGER_URL": f"sqlite:///{tmp / 'ledger.sqlite'}",
           "MLFLOW_TRACKING_URI": f"sqlite:///{tmp / 'mlflow.db'}", "SPLICE_ARTIFACT_DIR": str(tmp / "releases")}
    return subprocess.Popen([sys.executable, "-m", "splice_assets.cli", *map(str, args)], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)


@pytest.mark.parametrize(
    ("message", "cls_name", "plain"),
    [
        ("splice_assets.private.validation.StructuralError: column 'affairs': missing from the input\n",
         "StructuralError", "column 'affairs': missing from the input"),
        ("dagster._core.definitions.events.Failure: after holding out 20% the measured part is below n_min\n",
         "Failure", "after holding out 20% the measured part is below n_min"),
        ("ValueError: bad value 'x'\n\nmore", "ValueError", "bad value 'x'"),
        ("a message that names no class", "RuntimeError", "a message that names no class"),
    ],
)
def test_dagster_error_messages_lose_their_class_path(message, cls_name, plain):
    assert without_class_path(message, cls_name) == plain


def test_a_failed_release_prints_one_plain_line(tmp_path):
    with BudgetLedger(f"sqlite:///{tmp_path / 'ledger.sqlite'}") as book:
        book.set_budget(DEMO_DATASET, 10.0, 1e-6)
    broken = tmp_path / "broken.csv"
    pd.read_csv(demo_data_path()).drop(columns=["affairs"]).to_csv(broken, index=False)
    proc = splice(tmp_path, "release", "--dataset", DEMO_DATASET, "--input", broken, "--epsilon", "1", "--delta",
                  "1e-9", "--k", "4", "--L", "16", "--K", "2", "--steps", "5")
    _, stderr = proc.communicate(timeout=600)
    lines = without_progress(stderr)  # the stages it ran, the FAILED one last, then the one error line
    assert proc.returncode == 1 and len(lines) == 1 and lines[0].startswith("Error: "), stderr[-3000:]
    # A missing column is refused before Dagster loads (issue 70 item 4: ``release.input_check``), no stage ran.
    assert "input refused before the release started (nothing charged)" in lines[0] and "Traceback" not in stderr
    assert "'affairs'" in lines[0] and not CLASS_PATH.search(lines[0]), lines[0]


def test_a_pipe_closed_early_ends_quietly(tmp_path):
    # Far more output than a pipe buffers (64 KiB), so the command is still writing when the reader leaves.
    for i in range(1500):
        (tmp_path / "releases" / "toy" / f"{i:05d}-0000-release").mkdir(parents=True)
    proc = splice(tmp_path, "releases")
    assert proc.stdout is not None and proc.stdout.readline().startswith("release")
    proc.stdout.close()  # as `head -1` does
    proc.wait(timeout=120)
    stderr = proc.stderr.read() if proc.stderr else ""
    assert proc.returncode in (0, EXIT_BROKEN_PIPE) and stderr == "", (proc.returncode, stderr)
