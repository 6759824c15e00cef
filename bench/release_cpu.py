"""CPU time of a CLI release against the library alone and the bare interpreter, as ratios from one run.

Three commands, each in a fresh process ``--runs`` times after one warm-up run (file cache, .pyc and numba
caches warm for all); the table reports the median CPU seconds (user + sys of the child, from ``os.wait4``) and
wall seconds, and the ratios of the release to the library and to ``python -c pass``, so figures taken on a
loaded machine stay comparable:

- ``python -c pass``;
- ``library``: ``Synthesizer(schema, epsilon=1, delta=1e-9).fit(table, ledger=None).sample()`` on the bundled
  6,366-row demo table (the algorithm's own cost: no ledger, no Dagster, no report);
- ``splice release``: ``splice release --dataset fair_affairs --epsilon 1 --delta 1e-9`` (5,093 rows measured
  after the holdout), each run in a new throwaway DAGSTER_HOME with a fresh budget (``splice budget set``, not
  timed), so every run writes the same release to an empty ledger and MLflow store.

With ``--against COMMIT``, the same release of that commit's code (a temporary ``git worktree``, run with this
virtualenv) is measured in the same run: the before/after of a change, or of the product-path issue's starting
point. Its warm-up run is its first release with empty numba caches (a fresh checkout compiles every kernel once),
which the table reports beside the warm median.

Below the table, the release's and the library's stages (the lines the CLI prints) in median CPU and wall
seconds; "outside the stages" is the process total minus its top-level stages (imports, Dagster's own work).

    python -m bench.release_cpu [--runs 3] [--against e358940]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RELEASE_ARGS = ["release", "--dataset", "fair_affairs", "--epsilon", "1", "--delta", "1e-9"]
OUTSIDE = "outside the stages"

# The child processes: each installs a progress display that records every stage's CPU (all threads of the
# process, time.process_time) and wall seconds, and writes them as JSON to the file named by its last argument.
_RECORDER = """
import json, sys, time
try:
    from splice_assets import progress
except ImportError:
    progress = None

class Recorder:  # stages are recorded only where the code has splice_assets.progress (not before e6a5cb7)
    def __init__(self):
        self.stack, self.rows = [], []
    def started(self, name, total, depth):
        self.stack.append((time.process_time(), time.perf_counter()))
    def advanced(self, steps):
        pass
    def finished(self, name, seconds, depth, failed=False):
        cpu, wall = self.stack.pop()
        self.rows.append({"name": name, "depth": depth, "cpu": time.process_time() - cpu,
                          "wall": time.perf_counter() - wall})

recorder = Recorder()
out = sys.argv.pop()
"""

LIBRARY_CHILD = _RECORDER + """
import pandas as pd
from splice_assets.api import Synthesizer
from splice_assets.datasets import demo_data_path, schema_path
from splice_assets.schema import load_schema

with progress.showing(recorder):
    with progress.stage("read the demo table"):
        table = pd.read_csv(demo_data_path())
    synthetic = Synthesizer(load_schema(schema_path("fair_affairs")), epsilon=1, delta=1e-9).fit(
        table, ledger=None).sample()
assert len(synthetic) > 0
json.dump(recorder.rows, open(out, "w"))
"""

RELEASE_CHILD = _RECORDER + """
from splice_assets import cli

if progress is not None:
    progress.display_for = lambda stream=None: recorder  # the CLI's own stages, recorded instead of printed
try:
    cli.main(sys.argv[1:], standalone_mode=False)
finally:
    json.dump(recorder.rows, open(out, "w"))
"""


def run_child(argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    """One fresh process: its CPU (user + sys) and wall seconds, and the stages it recorded (if any)."""
    with tempfile.NamedTemporaryFile(suffix=".json") as stages, tempfile.TemporaryFile() as log:
        start = time.perf_counter()
        # The code's tree is the working directory: -c and -m put it first on sys.path.
        proc = subprocess.Popen([*argv, stages.name], env=env, cwd=env["PYTHONPATH"], stdout=log, stderr=log)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            log.seek(0)
            raise RuntimeError(f"{argv[:4]} exited {proc.returncode}:\n{log.read().decode()[-3000:]}")
        text = Path(stages.name).read_text()
    return {"cpu": usage.ru_utime + usage.ru_stime, "wall": wall, "stages": json.loads(text) if text else []}


def fresh_home(env: dict[str, str]) -> tuple[tempfile.TemporaryDirectory[str], dict[str, str]]:
    home = tempfile.TemporaryDirectory(prefix="release-cpu-")
    child_env = {**env, "DAGSTER_HOME": home.name}
    subprocess.run([sys.executable, "-m", "splice_assets.cli", "budget", "set", "fair_affairs", "--epsilon", "1000",
                    "--delta", "1e-6"], env=child_env, cwd=env["PYTHONPATH"], capture_output=True, check=True)
    return home, child_env


def measure(name: str, argv: list[str], runs: int, env: dict[str, str], needs_home: bool) -> list[dict[str, Any]]:
    """The warm-up run, then ``runs`` timed runs."""
    results = []
    for i in range(runs + 1):
        home, child_env = fresh_home(env) if needs_home else (None, env)
        try:
            results.append(run_child(argv, child_env))
        finally:
            if home is not None:
                home.cleanup()
        print(f"  {name} run {i or 'warm-up'}: {results[-1]['cpu']:.1f} CPU s, {results[-1]['wall']:.1f} s wall",
              file=sys.stderr, flush=True)
    return results


@contextlib.contextmanager
def checkout(commit: str) -> Iterator[Path]:
    """A temporary ``git worktree`` of ``commit`` (removed afterwards)."""
    with tempfile.TemporaryDirectory(prefix="release-cpu-tree-") as parent:
        tree = Path(parent) / "tree"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(tree), commit], check=True)
        try:
            yield tree
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=True)


def stage_table(results: list[dict[str, Any]]) -> list[tuple[str, float, float]]:
    """Median CPU and wall seconds per stage (stages in the order they finished, matched by position: a stage
    name may repeat), plus the rest of the process."""
    first = results[0]["stages"]
    out = []
    for i, row in enumerate(first):
        same = [res["stages"][i] for res in results
                if len(res["stages"]) > i and res["stages"][i]["name"] == row["name"]]
        out.append(("&nbsp;&nbsp;" * row["depth"] + row["name"], statistics.median(r["cpu"] for r in same),
                    statistics.median(r["wall"] for r in same)))
    outside_cpu = [res["cpu"] - sum(r["cpu"] for r in res["stages"] if r["depth"] == 0) for res in results]
    outside_wall = [res["wall"] - sum(r["wall"] for r in res["stages"] if r["depth"] == 0) for res in results]
    out.append((OUTSIDE, statistics.median(outside_cpu), statistics.median(outside_wall)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="Timed runs per command (median reported).")
    parser.add_argument("--against", nargs="*", default=[], metavar="COMMIT",
                        help="Also measure the release of these commits' code (git worktrees, this virtualenv).")
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GX_ANALYTICS_ENABLED": "false",
           "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"}
    for var in ("MLFLOW_TRACKING_URI", "SPLICE_ARTIFACT_DIR", "SPLICE_LEDGER_URL", "SPLICE_SCHEMA_DIR"):
        env.pop(var, None)
    commands = {
        "python -c pass": ([sys.executable, "-c", "pass"], False),
        "library (fit + sample)": ([sys.executable, "-c", LIBRARY_CHILD], False),
        "splice release": ([sys.executable, "-c", RELEASE_CHILD, *RELEASE_ARGS], True),
    }
    results = {name: measure(name, argv, args.runs, env, home) for name, (argv, home) in commands.items()}
    for commit in args.against:
        with checkout(commit) as tree:
            label = f"splice release at {commit}"
            results[label] = measure(label, commands["splice release"][0], args.runs,
                                     {**env, "PYTHONPATH": str(tree)}, True)
    timed = {name: res[1:] for name, res in results.items()}
    cpu = {name: statistics.median(r["cpu"] for r in res) for name, res in timed.items()}
    wall = {name: statistics.median(r["wall"] for r in res) for name, res in timed.items()}
    base, library = cpu["python -c pass"], cpu["library (fit + sample)"]
    print(f"| command | CPU s (median of {args.runs}) | wall s | first run CPU s | CPU ratio to library "
          "| CPU ratio to python -c pass |")
    print("|---|---|---|---|---|---|")
    for name in results:
        print(f"| {name} | {cpu[name]:.2f} | {wall[name]:.2f} | {results[name][0]['cpu']:.2f} "
              f"| {cpu[name] / library:.2f}x | {cpu[name] / base:.0f}x |")
    for name in ("splice release", "library (fit + sample)"):
        print(f"\n| {name}: stage | CPU s | wall s |")
        print("|---|---|---|")
        for stage, stage_cpu, stage_wall in stage_table(timed[name]):
            print(f"| {stage} | {stage_cpu:.2f} | {stage_wall:.2f} |")


if __name__ == "__main__":
    main()
