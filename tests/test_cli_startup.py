"""`splice --help` stays light: building the help imports no heavy module (a module-set test, not a timing one).

Each heavy module below costs from 0.3 s (SQLAlchemy) to several seconds (torch, Dagster, the accountant) at import;
the CLI imports them inside the commands that need them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import splice_assets

# The subprocess imports the same splice_assets as this test, whatever its working directory.
ROOT = str(Path(splice_assets.__file__).resolve().parents[1])

HEAVY = ("torch", "dagster", "mlflow", "dp_accounting", "pandas", "sqlalchemy", "numba", "opendp", "numpy", "scipy")

PROBE = """
import json, sys
from click.testing import CliRunner
from splice_assets.cli import main
args = json.loads(sys.argv[1])
result = CliRunner().invoke(main, args)
assert result.exit_code == 0, result.output
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})))
"""


def run_probe(probe: str, args: list[str]) -> set[str]:
    env = {**os.environ, "PYTHONPATH": ROOT}
    proc = subprocess.run([sys.executable, "-c", probe, json.dumps(args)], capture_output=True, text=True,
                          timeout=120, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return set(json.loads(proc.stdout))


def loaded_after(*args: str) -> set[str]:
    return run_probe(PROBE, list(args))


@pytest.mark.parametrize("args", [["--help"], ["plan", "--help"], ["release", "--help"], ["budget", "--help"],
                                  ["schema", "init", "--help"]])
def test_help_imports_no_heavy_module(args):
    heavy = loaded_after(*args) & set(HEAVY)
    assert not heavy, f"`splice {' '.join(args)}` imported {sorted(heavy)}"


def test_reading_the_ledger_does_not_load_the_accountant(tmp_path):
    # `splice releases` and `show` read ledger entries: SQLAlchemy, but not dp_accounting, numba or pandas.
    probe = PROBE.replace("args = json.loads(sys.argv[1])", f"""import os
os.environ.update(SPLICE_LEDGER_URL="sqlite:///{tmp_path / 'ledger.sqlite'}", SPLICE_ARTIFACT_DIR="{tmp_path}")
from splice_assets.private.ledger import BudgetLedger
BudgetLedger(os.environ["SPLICE_LEDGER_URL"]).close()
args = json.loads(sys.argv[1])""")
    loaded = run_probe(probe, ["releases"])
    assert "sqlalchemy" in loaded  # the probe did reach the ledger
    assert not loaded & {"dp_accounting", "numba", "pandas", "torch", "dagster", "mlflow", "opendp", "scipy"}


def test_the_lifetime_spend_is_read_without_the_accountant_once_composed(tmp_path):
    # A release composes its dataset's spend at reservation; `splice budget` then reads it from the ledger's
    # composition cache: SQLAlchemy, but not dp_accounting or scipy.
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    probe = PROBE.replace("args = json.loads(sys.argv[1])", f"""import os
os.environ.update(SPLICE_LEDGER_URL="{url}", SPLICE_ARTIFACT_DIR="{tmp_path}")
args = json.loads(sys.argv[1])""")
    setup = f"""
from splice_assets.private.ledger import BudgetLedger
with BudgetLedger("{url}") as book:
    book.set_budget("toy", 3.0, 1e-6, actor="test")
    book.commit(book.reserve("toy", "r1", "gaussian", 4.0, 4.0, 1.0, 1.2, 1e-9, "replace-one", "h"))
    book.spent("toy")
"""
    subprocess.run([sys.executable, "-c", setup], check=True, timeout=120, env={**os.environ, "PYTHONPATH": ROOT},
                   cwd=ROOT)
    loaded = run_probe(probe, ["budget", "toy"])
    assert "sqlalchemy" in loaded
    assert not loaded & {"dp_accounting", "scipy", "numba", "pandas", "torch", "dagster", "mlflow"}


def test_planning_a_release_loads_neither_the_accountant_nor_the_data_stack(tmp_path):
    # `splice plan` calibrates and projects the lifetime spend on a fresh ledger with a budget (a composition the
    # cache has not seen) from the closed-form Gaussian curve: no dp_accounting, scipy, numba or pandas.
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    setup = f"""
from splice_assets.private.ledger import BudgetLedger
with BudgetLedger("{url}") as book:
    book.set_budget("fair_affairs", 3.0, 1e-6, actor="test")
"""
    subprocess.run([sys.executable, "-c", setup], check=True, timeout=120, env={**os.environ, "PYTHONPATH": ROOT},
                   cwd=ROOT)
    schema = Path(ROOT) / "schemas" / "fair_affairs.yaml"
    loaded = loaded_after("plan", "--schema", str(schema), "--n", "6366", "--epsilon", "1", "--delta", "1e-9",
                          "--ledger-url", url, "--json")
    assert {"sqlalchemy", "numpy"} <= loaded  # the probe did calibrate and read the ledger
    assert not loaded & {"dp_accounting", "scipy", "numba", "pandas", "torch", "dagster", "mlflow", "opendp"}


REFUSAL_PROBE = """
import json, sys
from click.testing import CliRunner
from splice_assets.cli import main
result = CliRunner().invoke(main, json.loads(sys.argv[1]))
print(json.dumps({"code": result.exit_code, "output": result.output,
                  "loaded": sorted({name.split(".")[0] for name in sys.modules})}))
"""


@pytest.mark.parametrize("bad", ["missing_column", "wrong_header", "unparseable", "too_few_rows"])
def test_a_bad_input_is_refused_before_dagster_or_torch_loads(tmp_path, bad):
    # Issue 70 item 4: `splice release --input FILE` checks the file's structure with the release's own checks
    # (validation.check_structure) before Dagster (and the model's torch) load: a refusal in about a second.
    from splice_assets.datasets import demo_data_path

    header, *rows = demo_data_path().read_text().splitlines()
    names = header.split(",")
    lines = {
        "missing_column": [",".join(names[:-1])] + [r.rsplit(",", 1)[0] for r in rows],
        "wrong_header": [",".join("Age" if n == "\"age\"" else n for n in names)] + rows,
        "unparseable": [header] + [("x" + r if i % 2 else r) for i, r in enumerate(rows)],
        "too_few_rows": [header] + rows[:50],
    }[bad]
    source = tmp_path / "bad.csv"
    source.write_text("\n".join(lines) + "\n")
    env = {**os.environ, "PYTHONPATH": ROOT, "SPLICE_ARTIFACT_DIR": str(tmp_path / "art"),
           "SPLICE_LEDGER_URL": f"sqlite:///{tmp_path / 'ledger.sqlite'}", "DAGSTER_HOME": str(tmp_path / "dh")}
    args = ["release", "--dataset", "fair_affairs", "--input", str(source), "--epsilon", "1", "--delta", "1e-9"]
    proc = subprocess.run([sys.executable, "-c", REFUSAL_PROBE, json.dumps(args)], capture_output=True, text=True,
                          timeout=120, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert out["code"] == 1 and "input refused before the release started (nothing charged)" in out["output"]
    expected = {"missing_column": "column 'affairs': required by schema", "wrong_header": "column 'age': required",
                "unparseable": "not declared categories", "too_few_rows": "fewer rows than the schema's public"}[bad]
    assert expected in out["output"]
    assert not set(out["loaded"]) & {"dagster", "torch", "mlflow"}


def test_the_module_entry_point_has_every_command():
    """``python -m splice_assets.cli`` (what the bench's start-up timings run) knows the groups added after ``main``."""
    proc = subprocess.run([sys.executable, "-m", "splice_assets.cli", "budget", "--help"], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": ROOT}, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
