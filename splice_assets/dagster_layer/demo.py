"""`make demo`: one full release of the bundled demo dataset, in-process, with embedded defaults.

Shows a progress display of the release's stages on stderr and Dagster's console log at INFO (``--verbose``: DEBUG,
every step event). Stopped by a failure or Ctrl-C (exit status 130), it says in one line what was spent and how to
finish it, as `splice release` does.
"""

from __future__ import annotations

import argparse
import sys
import time

from splice_assets import progress
from splice_assets.datasets import DEMO_DATASET
from splice_assets.private.ledger import BudgetLedger, default_ledger_url
from splice_assets.release.budget_text import lifetime_of, release_text
from splice_assets.release.locations import prepare_dagster_home, quiet_mlflow

#: Exit status after Ctrl-C: 128 + SIGINT, as a shell reports it (as `splice`'s).
EXIT_INTERRUPTED = 130
#: The demo's lifetime budget, set as an administrator would (`splice budget set`) when the ledger has none.
DEMO_BUDGET = (10.0, 1e-6)


def ensure_demo_budget() -> None:
    with BudgetLedger(default_ledger_url()) as book:
        if book.budget(DEMO_DATASET) is None:
            epsilon, delta = DEMO_BUDGET
            book.set_budget(DEMO_DATASET, epsilon, delta, actor="make demo", reason="bundled public demo dataset")
            print(f"lifetime budget of {DEMO_DATASET!r} set to epsilon {epsilon:g} at delta {delta:g} "
                  f"(as `splice budget set {DEMO_DATASET} --epsilon {epsilon:g} --delta {delta:g}` would)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verbose", action="store_true", help="Dagster's console log at DEBUG instead of INFO")
    verbose = parser.parse_args(argv).verbose
    home = prepare_dagster_home()
    ensure_demo_budget()
    if not verbose:
        quiet_mlflow()
    start = time.perf_counter()
    try:
        with progress.showing(progress.display_for()):
            with progress.stage("load Dagster and the release job"):
                from splice_assets.dagster_layer.automation import run_config_for
                from splice_assets.dagster_layer.config import ReleaseConfig
                from splice_assets.dagster_layer.console import console_level, with_console_level, with_splice_console
                from splice_assets.dagster_layer.definitions import build_definitions
                from splice_assets.dagster_layer.inprocess import run_release

                job = with_splice_console(build_definitions().resolve_job_def("release"))
            run_config = with_console_level(run_config_for(ReleaseConfig()), console_level(verbose))
            run = run_release(job, run_config, DEMO_DATASET, tags={"splice/trigger": "demo"})
    except KeyboardInterrupt:  # before the run started (the run reports its own)
        print("interrupted before the release started: nothing was charged", file=sys.stderr)
        return EXIT_INTERRUPTED
    wall = time.perf_counter() - start
    if not run.success:
        if run.interrupted:
            print(f"interrupted: {run.stopped_text()}", file=sys.stderr)
            return EXIT_INTERRUPTED
        from splice_assets.dagster_layer.console import failure_reason

        print(f"demo release FAILED: {failure_reason(run.result)}; {run.stopped_text()} "
              "(make demo DEMO_ARGS=--verbose: every Dagster event)")
        return 1
    result = run.result
    assert result is not None
    durations = {}
    for event in result.all_events:
        if event.is_step_success and event.step_key:
            durations[event.step_key.removeprefix("splice__")] = event.event_specific_data.duration_ms / 1000.0
    record = run.record()
    print(f"\nrelease {record['release_id']} done in {wall:.1f} s (Dagster home: {home})")
    for step, seconds in durations.items():
        print(f"  {step:<22} {seconds:7.2f} s")
    print(f"public bundle : {record['public_dir']}")
    print(f"internal audit: {record['internal_dir']} (fidelity_report.html: internal, reads real rows)")
    print(f"MLflow run    : {record['mlflow_run_id']}  (make mlflow-ui)")
    settings = ReleaseConfig().settings()
    print(f"this release  : {release_text(record['epsilon_cost'], settings.delta)} charged to the ledger")
    with BudgetLedger(default_ledger_url()) as book:
        print(f"lifetime      : {lifetime_of(book, DEMO_DATASET)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
