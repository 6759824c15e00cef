"""The README's Python quickstart runs as written, and the package's public surface is what it documents."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import splice_assets

REPO = Path(__file__).resolve().parents[1]


def quickstart() -> str:
    text = (REPO / "README.md").read_text()
    section = text[text.index("## Python quickstart"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readme_quickstart_runs(tmp_path):
    # Verbatim, from a directory outside the repository (no `schemas/` beside it): issue 70 item 5.
    assert not (tmp_path / "schemas").exists() and REPO not in tmp_path.parents
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path / "home")}
    env.pop("SPLICE_SCHEMA_DIR", None)
    proc = subprocess.run([sys.executable, "-c", quickstart()], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "PrivacyFacts(epsilon=1.0" in proc.stdout
    saved = tmp_path / "quickstart-model"
    assert {"measurement.npz", "model.npz", "schema.yaml", "settings.json"} <= {p.name for p in saved.iterdir()}


def test_the_public_surface_is_small_and_lazy():
    assert {"Synthesizer", "load_schema", "BudgetLedger", "MeasurementSettings"} <= set(splice_assets.__all__)
    for name in splice_assets.__all__:
        assert getattr(splice_assets, name) is not None
    # Importing the package (as the CLI does) pulls in neither torch nor Dagster.
    probe = "import sys, splice_assets; print('torch' in sys.modules, 'dagster' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
