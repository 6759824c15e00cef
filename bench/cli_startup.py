"""Start-up time of the ``splice`` CLI: medians of ``--help``, ``budget``, ``plan`` and a refused ``release`` against
``python -c pass`` in one run.

Each command runs in a fresh process ``--runs`` times (after one warm-up run each, so the file cache is warm for
all); the table reports median seconds and the ratio to the bare interpreter, so figures taken on a loaded machine
stay comparable. ``budget`` reads a ledger holding one release of a toy dataset, whose spend the ledger has composed
once (its composition cache); ``plan`` reads no data and calibrates the release it plans on the closed-form
Gaussian curve (no dp_accounting, SciPy, pandas or numba).

    python -m bench.cli_startup [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from splice_assets.private.ledger import BudgetLedger

ROOT = Path(__file__).resolve().parents[1]


def commands(home: Path) -> dict[str, list[str]]:
    cli = [sys.executable, "-m", "splice_assets.cli"]
    return {
        "python -c pass": [sys.executable, "-c", "pass"],
        "splice --help": [*cli, "--help"],
        "splice budget": [*cli, "budget", "toy"],  # the ledger under DAGSTER_HOME
        "splice plan": [*cli, "plan", "--schema", str(ROOT / "schemas" / "fair_affairs.yaml"), "--n", "6366",
                        "--epsilon", "1", "--delta", "1e-9", "--ledger-url", f"sqlite:///{home / 'ledger.sqlite'}"],
        # A bad input is refused before Dagster loads (issue 70: under 2 s on the demo table).
        "splice release (bad input)": [*cli, "release", "--dataset", "fair_affairs", "--input", str(bad_input(home)),
                                       "--epsilon", "1", "--delta", "1e-9"],
    }


def bad_input(home: Path) -> Path:
    """A CSV without the demo schema's columns: refused at the header, nothing charged."""
    path = home / "bad.csv"
    path.write_text("a,b\n1,2\n")
    return path


def median_seconds(argv: list[str], runs: int, env: dict[str, str]) -> float:
    refused = "--input" in argv  # the bad-input release exits 1 by design
    subprocess.run(argv, env=env, capture_output=True, check=not refused)  # warm-up: file cache, .pyc files
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, env=env, capture_output=True, check=not refused)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="Timed runs per command (median reported).")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "DAGSTER_HOME": tmp}
        with BudgetLedger(f"sqlite:///{Path(tmp) / 'ledger.sqlite'}") as book:  # one release, its spend composed
            book.set_budget("toy", 3.0, 1e-6, actor="bench")
            book.commit(book.reserve("toy", "r1", "gaussian", 4.0, 4.0, 1.0, 1.2, 1e-9, "replace-one", "bench"))
            book.spent("toy")
        medians = {name: median_seconds(argv, args.runs, env) for name, argv in commands(Path(tmp)).items()}
    base = medians["python -c pass"]
    print(f"| command | median s ({args.runs} runs) | ratio to python -c pass |")
    print("|---|---|---|")
    for name, seconds in medians.items():
        print(f"| {name} | {seconds:.3f} | {seconds / base:.1f}x |")


if __name__ == "__main__":
    main()
