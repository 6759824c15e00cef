"""Resources: the budget ledger, MLflow tracking, the release artifact store, the engine and the step storage.

Defaults are embedded (SQLite files under $DAGSTER_HOME); production points them elsewhere through
environment variables without code changes: SPLICE_LEDGER_URL, MLFLOW_TRACKING_URI, SPLICE_ARTIFACT_DIR,
SPLICE_ENGINE, SPLICE_DASK_SCHEDULER, SPLICE_DASK_WORKERS. The deployment sets them and no run can: bound as it is,
a ``ConfigurableResource`` turns its fields into run config (the bound value only a default), so any launch of any
job could pick the ledger that is charged or where private rows go; ``locked`` serves each with an empty config
schema instead, and a run config that names one of their fields is refused before the run exists.
Lifetime budgets are not configured here: an administrator sets them in the ledger (``splice budget set``), so
nobody who can launch a run can raise them.

Step outputs carry private rows (the validated table, the encoded matrix) and facts computed from them, so they
never go to Dagster's shared storage: ``ReleaseStepStorage`` keeps them in the release's own internal folder
(0600 files in 0700 folders), keyed by the release id, and removes them when the release is written or a step
fails (``automation.remove_steps_on_failure``); `splice release` and `make demo` also on Ctrl-C.
"""

from __future__ import annotations

import inspect
import os
import pickle
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import dagster as dg

from splice_assets.engine import Engine, make_engine
from splice_assets.private.ledger import BudgetLedger, default_ledger_url
from splice_assets.private.row_count import is_partitioned_source
from splice_assets.release.locations import (
    STEPS_FOLDER,
    default_artifact_dir,
    default_tracking_uri,
    mlflow_artifact_location,
    open_private,
    private_dir,
    remove_step_files,
)


class LedgerResource(dg.ConfigurableResource):
    """The persistent privacy-budget ledger. It never sets a budget: a dataset without one is refused."""

    url: str = ""

    def open(self) -> BudgetLedger:
        """A ledger handle (use it as a context manager so the connection pool is closed)."""
        return BudgetLedger(self.url or default_ledger_url())


class MlflowResource(dg.ConfigurableResource):
    """MLflow tracking: SQLite store under $DAGSTER_HOME unless a tracking URI is configured."""

    tracking_uri: str = ""
    artifact_root: str = ""

    def uri(self) -> str:
        return self.tracking_uri or default_tracking_uri()

    def artifact_location(self) -> str | None:
        return mlflow_artifact_location(self.artifact_root or None)


class EngineResource(dg.ConfigurableResource):
    """Where partitioned work runs (``splice_assets.engine``): ``local`` (this process) or ``dask`` (the scheduler
    at ``scheduler``, else a LocalCluster of ``workers``). A release streams its input when the engine is Dask or
    the input is a directory, a glob or a URL (``streams``); a single local file is read whole, as before."""

    engine: str = "local"
    scheduler: str = ""
    workers: int = 2

    def streams(self, input_path: str) -> bool:
        return self.engine != "local" or is_partitioned_source(input_path)

    @contextmanager
    def open(self) -> Iterator[Engine]:
        engine = make_engine(self.engine, self.scheduler or None, self.workers)
        try:
            yield engine
        finally:
            engine.close()


class ArtifactStore(dg.ConfigurableResource):
    """Where release folders live: <base_dir>/<dataset>/<release_id>/{public,internal}/. Paths only: a folder is
    created by whatever writes into it, so a run refused before its first write leaves nothing behind."""

    base_dir: str = ""

    def release_dir(self, dataset: str, release_id: str) -> Path:
        return Path(self.base_dir or default_artifact_dir()) / dataset / release_id

    def public_dir(self, dataset: str, release_id: str) -> Path:
        return self.release_dir(dataset, release_id) / "public"

    def internal_dir(self, dataset: str, release_id: str) -> Path:
        return self.release_dir(dataset, release_id) / "internal"


def release_id_of_run(run: Any) -> str:
    """A release is identified by the root run: re-executions of a failed run keep the same id."""
    return run.root_run_id or run.run_id


class ReleaseStepStorage(dg.ConfigurableIOManager):
    """Step outputs pickled into <base_dir>/<dataset>/<release_id>/internal/steps/, readable by the later steps of
    the same release (same root run) and by no other run; the final ``release`` step removes the folder, as does a
    failed step (a charged release is then finished by `splice release --resume`, not by re-executing the run).

    Every output of the chain carries its settings, hence its dataset; an input is found by its release id.
    """

    base_dir: str = ""
    final_asset: str = "release"

    def base(self) -> Path:
        return Path(self.base_dir or default_artifact_dir())

    def remove(self, release_id: str) -> None:
        """Remove the release's step files (and its folders left empty)."""
        remove_step_files(release_id, self.base())

    def _file(self, release_id: str, dataset: str, asset: str) -> Path:
        return self.base() / dataset / release_id / "internal" / STEPS_FOLDER / f"{asset}.pkl"

    def handle_output(self, context: dg.OutputContext, obj: Any) -> None:
        release_id = release_id_of_run(context.step_context.dagster_run)
        asset = context.asset_key.path[-1]
        if asset == self.final_asset:
            # The release is written: nothing downstream needs the step outputs any more.
            self.remove(release_id)
            return
        path = self._file(release_id, obj.settings.dataset, asset)
        private_dir(path.parent.parent)  # internal/
        private_dir(path.parent)
        with open_private(path) as handle:
            pickle.dump(obj, handle, protocol=pickle.HIGHEST_PROTOCOL)

    def load_input(self, context: dg.InputContext) -> Any:
        release_id = release_id_of_run(context.step_context.dagster_run)
        asset = cast(dg.OutputContext, context.upstream_output).asset_key.path[-1]  # set for an asset's input
        found = sorted(self.base().glob(f"*/{release_id}/internal/{STEPS_FOLDER}/{asset}.pkl"))
        if not found:
            raise dg.Failure(f"no stored output of step {asset!r} for release {release_id!r}: a failed run's step "
                             f"files are removed; finish a charged release with `splice release --resume {release_id}`")
        with open(found[0], "rb") as handle:
            return pickle.load(handle)


def default_resources(engine: str | None = None) -> dict[str, object]:
    """The deployment's resources, from the environment as the definitions load; ``engine``: the deployment's own
    choice of engine instead of SPLICE_ENGINE's (`splice release --engine`, which builds its definitions)."""
    artifacts = os.environ.get("SPLICE_ARTIFACT_DIR", "")
    return {
        "ledger": LedgerResource(url=os.environ.get("SPLICE_LEDGER_URL", "")),
        "mlflow": MlflowResource(tracking_uri=os.environ.get("MLFLOW_TRACKING_URI", "")),
        "store": ArtifactStore(base_dir=artifacts),
        "engine": EngineResource(
            engine=engine or os.environ.get("SPLICE_ENGINE", "local"),
            scheduler=os.environ.get("SPLICE_DASK_SCHEDULER", ""),
            workers=int(os.environ.get("SPLICE_DASK_WORKERS", "2")),
        ),
        "io_manager": ReleaseStepStorage(base_dir=artifacts),
    }


def locked(resources: Mapping[str, object]) -> dict[str, dg.ResourceDefinition]:
    """The resources as built, each served to every job, schedule and sensor with an empty config schema: a run
    config that sets any of their fields fails Dagster's config validation at launch. The UI shows no value."""
    return {key: _fixed(value) for key, value in resources.items()}


def _fixed(value: object) -> dg.ResourceDefinition:
    description = inspect.getdoc(type(value))
    if isinstance(value, dg.IOManager):
        return dg.IOManagerDefinition(lambda _: value, config_schema={}, description=description)
    return dg.ResourceDefinition(lambda _: value, config_schema={}, description=description)
