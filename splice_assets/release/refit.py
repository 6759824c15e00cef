"""Zero-cost refit: a new release fitted to a stored measurement, without touching real rows.

The parent's public bundle holds the noisy moments (``measurement.npz/json``) and the public ``schema.yaml``.
Refitting them with other fit settings (K, R, steps, seed) is post-processing: the ledger records the child
with epsilon = 0 and a link to its parent, and the child gets its own public bundle and MLflow run. No
fidelity report is made for a refit (that would need the real rows).

Release folders are found through the ArtifactStore layout ``<artifact dir>/<dataset>/<release_id>/public``
(``release.locations.find_release``).
"""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from splice_assets.measurement import Measurement
from splice_assets.private.ledger import (
    BudgetLedger,
    LedgerError,
    default_ledger_url,
    params_hash,
)
from splice_assets.release.locations import (
    ReleaseLocation,
    artifact_dir,
    find_release,
    mlflow_artifact_location,
    tracking_uri,
)
from splice_assets.schema import load_schema

if TYPE_CHECKING:
    from splice_assets.api import Synthesizer
    from splice_assets.synthetic import SyntheticModel


def release_synthesizer(location: ReleaseLocation) -> Synthesizer:
    """The fitted synthesizer of a finished release, from its public bundle alone (schema, settings, noisy
    measurement, model): it samples, refits and answers queries at zero cost."""
    from splice_assets.api import Synthesizer
    from splice_assets.release.settings import ReleaseSettings
    from splice_assets.sampling import load_model

    manifest = location.manifest()
    dataset = manifest["dataset"]
    measurement = Measurement.load(location.public_dir / "measurement")
    schema = load_schema(location.public_dir / "schema.yaml")
    if schema.name != dataset or measurement.dataset != dataset:
        raise ValueError(f"release {location.release_id!r}: its schema, measurement and manifest disagree on the "
                         "dataset")
    settings = ReleaseSettings.from_parameters({"dataset": dataset, **(manifest.get("parameters") or {})})
    synth = Synthesizer.from_settings(schema, settings.synthesizer_settings())
    synth.measurement = measurement
    if (location.public_dir / "model.json").exists():
        synth.model = load_model(location.public_dir / "model")
    return synth


def refit_release(
    parent_release_id: str,
    K: int | None = None,
    steps: int | None = None,
    n_rows: int | None = None,
    seed: int | None = None,
    *,
    base_dir: Path | str | None = None,
    ledger_url: str | None = None,
    mlflow_tracking_uri: str | None = None,
    mlflow_artifact_root: str | None = None,
    release_id: str | None = None,
) -> dict[str, Any]:
    """Refit the parent's stored noisy moments with new fit settings and write a zero-cost child release.

    Unset settings default to the parent's (``Synthesizer.refit``). Returns ``write_release``'s summary (release
    id, folders, MLflow run id, registered model version, ...).
    """
    from splice_assets.release.bundle import write_release
    from splice_assets.release.settings import ReleaseSettings

    base = Path(base_dir) if base_dir is not None else artifact_dir()
    parent = find_release(parent_release_id, base)
    manifest = parent.manifest()
    dataset = manifest["dataset"]
    parent_synth = release_synthesizer(parent)
    schema, measurement = parent_synth.schema, parent_synth.measurement
    assert measurement is not None  # release_synthesizer loads it
    parent_settings = ReleaseSettings.from_parameters(
        {"dataset": dataset, **(manifest.get("parameters") or {})}
    )
    changes: dict[str, Any] = {"components": K, "max_steps": steps, "seed": seed, "n_synthetic": n_rows}
    settings = dataclasses.replace(parent_settings, **{k: v for k, v in changes.items() if v is not None})
    if settings.n_synthetic == 0:
        settings = dataclasses.replace(settings, n_synthetic=int(manifest.get("synthetic_rows") or measurement.n))
    synth = settings.synthesizer(schema)  # validates the new settings before anything is fitted
    child_id = release_id or str(uuid.uuid4())  # the dashed form of a Dagster run id, as every release id

    ledger = BudgetLedger(ledger_url or default_ledger_url())
    try:
        # Fail before fitting if the ledger does not know the parent (no committed charged entry to derive from).
        if not any(e.release_id == parent.release_id and e.status == "committed" for e in ledger.entries(dataset)):
            raise LedgerError(f"the ledger has no committed entry for release {parent.release_id!r} of {dataset!r}")
        child = parent_synth.refit(synth.settings.model, synth.settings.postprocessing, settings.seed)
        synthetic = child.sample(settings.n_synthetic, settings.seed)
        public = {**dataclasses.asdict(settings), "refit_of": parent.release_id}
        entry_id = ledger.record_zero_cost(
            dataset, child_id, parent.release_id, mechanism="refit",
            params_hash=params_hash({k: v for k, v in public.items() if k != "input_path"}),
        )
        root = base / dataset / child_id
        return write_release(
            release_id=child_id,
            settings=public,
            schema=schema,
            measurement=measurement,
            model=cast("SyntheticModel", child.model),  # refit() fits the child's model
            synthetic=synthetic,
            report=None,
            validation=None,
            source_uri="",
            ledger=ledger,
            public_dir=root / "public",
            internal_dir=root / "internal",
            tracking_uri=mlflow_tracking_uri or tracking_uri(),
            artifact_location=mlflow_artifact_location(mlflow_artifact_root),
            dagster_run_id="",
            parent_release_id=parent.release_id,
            ledger_entry_id=entry_id,
            # the parent's schema holds its DP bounds, so their cost is part of the child's guarantee too
            bounds_noise_multiplier=(manifest.get("privacy") or {}).get("bounds_noise_multiplier"),
        )
    finally:
        ledger.close()
