"""`make demo` (``python -m splice_assets.dagster_layer.demo``) in a new, empty DAGSTER_HOME: it creates the home with
the embedded defaults, sets the demo's budget, releases, and prints only its own progress and summary."""

from __future__ import annotations

import os
import subprocess
import sys

from helpers import PROGRESS_LINE


def test_the_demo_releases_quietly_into_a_new_home(tmp_path):
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items()
           if k not in ("DAGSTER_HOME", "SPLICE_LEDGER_URL", "MLFLOW_TRACKING_URI", "SPLICE_ARTIFACT_DIR")}
    env["DAGSTER_HOME"] = str(home)
    proc = subprocess.run([sys.executable, "-m", "splice_assets.dagster_layer.demo"], env=env, capture_output=True,
                          text=True, timeout=600)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    assert "telemetry: enabled: false" in " ".join((home / "dagster.yaml").read_text().split())
    assert "this release  : epsilon = 1" in proc.stdout and "lifetime      : epsilon" in proc.stdout
    assert (home / "releases" / "fair_affairs").is_dir() and (home / "mlflow.db").is_file()
    chatter = [line for line in output.splitlines() if line.strip() and not PROGRESS_LINE.match(line)
               and ("INFO" in line or "DEBUG" in line or "telemetry" in line.lower() or "Warning" in line)]
    assert not chatter, output[-3000:]
