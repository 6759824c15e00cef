"""The release job run in this process, as `splice release` and `make demo` run it.

The release id (the run's id) is chosen before the run starts, so that however the run ends its private step files
are removed, the parts of its reservation that no draw claimed are withdrawn, and the caller can say what it
spent. A failed step, Ctrl-C inside a step (Dagster records an
interrupted step) and Ctrl-C between steps (it reaches this process as ``KeyboardInterrupt``) all come back as a
``ReleaseRun`` that did not succeed.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import dagster as dg

from splice_assets.dagster_layer.assets import op_name
from splice_assets.dagster_layer.automation import IN_PROCESS_TAG
from splice_assets.private.ledger import BudgetLedger, default_ledger_url
from splice_assets.release.locations import remove_step_files
from splice_assets.release.resume import stopped_text, withdraw_unclaimed


@dataclass(frozen=True)
class ReleaseRun:
    release_id: str
    dataset: str
    result: dg.ExecuteInProcessResult | None  # None: interrupted between steps

    @property
    def success(self) -> bool:
        return self.result is not None and self.result.success

    @property
    def interrupted(self) -> bool:
        """Ended by Ctrl-C rather than by a failure."""
        if self.result is None:
            return True
        for event in self.result.all_events:
            data = event.event_specific_data
            if event.is_step_failure and getattr(getattr(data, "error_source", None), "name", "") == "INTERRUPT":
                return True
            if event.is_run_failure and getattr(getattr(data, "failure_reason", None), "name", "") == \
                    "UNEXPECTED_TERMINATION":
                return True
        return False

    def record(self) -> dict[str, Any]:
        """The ``release`` step's summary (``bundle.write_release``) of a run that succeeded."""
        assert self.result is not None
        return self.result.output_for_node(op_name("release"))

    def stopped_text(self) -> str:
        """What the stopped run spent and how to finish it, in one line (``resume.stopped_text``)."""
        with BudgetLedger(default_ledger_url()) as ledger:
            return stopped_text(self.dataset, self.release_id, ledger)


def run_release(job: dg.JobDefinition, run_config: dict[str, Any], dataset: str,
                tags: dict[str, str] | None = None) -> ReleaseRun:
    """Run the release job in this process; its step files are gone when this returns, whatever happened."""
    release_id = str(uuid.uuid4())
    result = None
    try:
        with dg.DagsterInstance.get() as instance:
            result = job.execute_in_process(run_config=run_config, instance=instance, raise_on_error=False,
                                            run_id=release_id, tags={**(tags or {}), IN_PROCESS_TAG: "true"})
    except KeyboardInterrupt:
        pass  # between steps: reported by the caller, as one inside a step
    finally:
        remove_step_files(release_id)
    run = ReleaseRun(release_id, dataset, result)
    if not run.success:
        with BudgetLedger(default_ledger_url()) as ledger:
            withdraw_unclaimed(ledger, dataset, release_id)
    return run
