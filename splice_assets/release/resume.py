"""Finishing a release whose run stopped after its charge, from the noisy measurement it stored.

When the measurement's noise is drawn, the run stores, before the measurement itself (whose file marks the charge):
the resolved public schema it was measured under (after any DP estimate of ``auto`` entries) beside it in
``public/``, and the run's settings and the DP estimate's record in ``internal/charge.json`` (the input's path is
among the settings). ``resume_release`` fits, samples and writes such a release as its run would have: the same
release id, bundle, MLflow run and ledger entry, and no new charge or noise (post-processing of the stored
measurement). It reads the input again only for the internal fidelity report, and goes without the report when
the input cannot be read.

``stopped_text`` says what a stopped run spent and how to finish it; ``leftovers`` lists what killed runs left in
the release folders (`splice ledger stale`).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from splice_assets.private.ledger import (
    STATUS_RESERVED,
    BudgetLedger,
    LedgerError,
    default_actor,
    default_ledger_url,
)
from splice_assets.release.budget_text import release_text
from splice_assets.release.locations import (
    MANIFEST,
    MEASUREMENT,
    ReleaseLocation,
    artifact_dir,
    find_release,
    iter_releases,
    mlflow_artifact_location,
    open_private,
    private_dir,
    remove_step_files,
    tracking_uri,
)

if TYPE_CHECKING:  # the rest is imported where it is used: `splice ledger stale` stays light
    import pandas as pd

    from splice_assets.api import Synthesizer
    from splice_assets.measurement import Measurement
    from splice_assets.private.bounds import BoundsEstimate
    from splice_assets.private.validation import ValidationReport
    from splice_assets.release.settings import ReleaseSettings
    from splice_assets.schema import TableSchema

CHARGE_FILE = "charge.json"
SCHEMA_FILE = "schema.yaml"
NOTHING_CHARGED = "nothing was charged"


class ResumeRefused(ValueError):
    """The release cannot be finished from a stored measurement (none stored, already written, or inconsistent)."""


def resume_command(release_id: str) -> str:
    return f"splice release --resume {release_id}"


def record_charge(location: ReleaseLocation, settings: ReleaseSettings, schema: TableSchema,
                  bounds: BoundsEstimate | None, streamed: bool, dagster_run_id: str) -> None:
    """Store what finishing the release needs besides its measurement; called once its noise is drawn, before the
    measurement is saved."""
    import yaml

    from splice_assets.schema import schema_to_dict

    location.public_dir.mkdir(parents=True, exist_ok=True)
    (location.public_dir / SCHEMA_FILE).write_text(yaml.safe_dump(schema_to_dict(schema), sort_keys=False))
    record = {
        "release_id": location.release_id,
        "dagster_run_id": dagster_run_id,
        "settings": dataclasses.asdict(settings),
        "bounds": None if bounds is None else dataclasses.asdict(bounds),
        "streamed": streamed,
    }
    with open_private(private_dir(location.internal_dir) / CHARGE_FILE) as handle:
        handle.write(json.dumps(record, indent=2, default=list).encode())


@dataclass(frozen=True)
class Charge:
    """A charged release's stored measurement, the schema it was measured under and its run's record."""

    location: ReleaseLocation
    measurement: Measurement
    schema: TableSchema
    settings: ReleaseSettings
    bounds: BoundsEstimate | None
    streamed: bool
    dagster_run_id: str

    @property
    def bounds_noise_multiplier(self) -> float | None:
        return self.bounds.noise_multiplier if self.bounds is not None and self.bounds.spent else None

    @property
    def epsilon(self) -> float:
        """The release's whole epsilon at ``delta``: what its run charged."""
        from splice_assets.api import release_epsilon

        return release_epsilon(self.measurement, self.bounds_noise_multiplier)

    @property
    def delta(self) -> float:
        return self.measurement.delta


def load_charge(location: ReleaseLocation) -> Charge:
    """The stored charge of a release folder; ``ResumeRefused`` when there is none or it does not hang together."""
    from splice_assets.api import bounds_from_dict
    from splice_assets.layout import layout_for
    from splice_assets.measurement import Measurement
    from splice_assets.release.settings import ReleaseSettings
    from splice_assets.schema import load_schema

    rid = location.release_id
    if not location.charged:
        raise ResumeRefused(f"release {rid!r} stored no noisy measurement: its run stopped before measuring, so "
                            "there is nothing to finish (start a new release)")
    path = location.internal_dir / CHARGE_FILE
    if not path.is_file():
        raise ResumeRefused(f"release {rid!r} has no internal/{CHARGE_FILE} beside its measurement (measured by an "
                            "older splice): it cannot be finished")
    record = json.loads(path.read_text())
    measurement = Measurement.load(location.public_dir / MEASUREMENT)
    schema = load_schema(location.public_dir / SCHEMA_FILE)
    if not (schema.name == measurement.dataset == location.dataset and schema.version == measurement.schema_version
            and layout_for(schema).d == measurement.d):
        raise ResumeRefused(f"release {rid!r}: its schema.yaml is not the schema its measurement was taken under")
    return Charge(location, measurement, schema, ReleaseSettings.from_parameters(record["settings"]),
                  None if record.get("bounds") is None else bounds_from_dict(record["bounds"]),
                  bool(record.get("streamed")), str(record.get("dagster_run_id") or rid))


def stopped_text(dataset: str, release_id: str, ledger: BudgetLedger | None = None, base: Path | None = None) -> str:
    """One line on a release whose run stopped: what it spent and how to finish it (``ledger``: also what it spent
    without storing a measurement, e.g. on a DP estimate)."""
    location = ReleaseLocation(release_id, dataset, (base or artifact_dir()) / dataset / release_id)
    if (location.public_dir / MANIFEST).is_file():
        return f"release {release_id} was written before it stopped (splice show {release_id})"
    if location.charged:
        try:
            charge = load_charge(location)
            spent = release_text(charge.epsilon, charge.delta)
        except (ResumeRefused, OSError, ValueError, KeyError) as exc:
            return f"release {release_id} stored its noisy measurement, but {exc}"
        return (f"release {release_id} spent {spent} and stored its noisy measurement: finish it at no further "
                f"privacy cost with `{resume_command(release_id)}`")
    # Entries a draw claimed (its noise may have been drawn); a part reserved ahead and never claimed drew nothing.
    entries = [] if ledger is None else [e for e in ledger.entries(dataset) if e.release_id == release_id
                                         and e.counted and e.epsilon > 0 and getattr(e, "claimed", True)]
    if entries:
        spent = ", ".join(f"{release_text(e.epsilon, e.delta)} ({e.mechanism})" for e in entries)
        return f"release {release_id} spent {spent} but stored no measurement: there is nothing to resume"
    return NOTHING_CHARGED


def withdraw_unclaimed(ledger: BudgetLedger, dataset: str, release_id: str) -> None:
    """Abort the parts of a stopped run's reservation that no draw claimed: no noise was drawn for them
    (``BudgetLedger.withdraw`` leaves any other entry as it is)."""
    for entry in ledger.entries(dataset):
        if entry.release_id == release_id and entry.status == STATUS_RESERVED:
            ledger.withdraw(entry.id)


def resume_release(
    release_id: str,
    *,
    base_dir: Path | str | None = None,
    ledger_url: str | None = None,
    mlflow_tracking_uri: str | None = None,
    mlflow_artifact_root: str | None = None,
) -> dict[str, Any]:
    """Finish a charged release from its stored measurement: fit, sample, report (if its input can be read again)
    and write, as its run would have. Returns ``write_release``'s summary plus ``fidelity_report``: None, or why
    there is none."""
    from splice_assets.release.bundle import write_release

    base = Path(base_dir) if base_dir is not None else artifact_dir()
    location = find_release(release_id, base)
    rid = location.release_id
    if (location.public_dir / MANIFEST).is_file():
        raise ResumeRefused(f"release {rid!r} is already written: nothing to resume (splice show {rid})")
    charge = load_charge(location)
    s = charge.settings
    ledger = BudgetLedger(ledger_url or default_ledger_url())
    try:
        _confirm_counted(ledger, charge)
        remove_step_files(rid, base)  # a killed run's: nothing reads them any more
        synth = s.synthesizer(charge.schema)
        synth.measurement, synth.bounds = charge.measurement, charge.bounds
        model = synth.fit_model()
        n = s.n_synthetic or charge.measurement.n
        files: tuple[str, ...] = ()
        if charge.streamed:  # partitioned output, as the run's would have been
            import pandas as pd

            files = tuple(synth.write_partitions(str(location.public_dir / "synthetic"), n, s.seed))
            synthetic = pd.read_parquet(files[0])
        else:
            synthetic = synth.sample(n, s.seed)
        report, rows, missing = _internal_report(charge, synth, synthetic, ledger)
        record = write_release(
            release_id=rid,
            settings=dataclasses.asdict(s),
            schema=charge.schema,
            measurement=charge.measurement,
            model=model,
            synthetic=synthetic,
            report=report,
            validation=None if rows is None else rows.repairs,
            source_uri=s.resolved_input(),
            ledger=ledger,
            public_dir=location.public_dir,
            internal_dir=location.internal_dir,
            tracking_uri=mlflow_tracking_uri or tracking_uri(),
            artifact_location=mlflow_artifact_location(mlflow_artifact_root),
            dagster_run_id=charge.dagster_run_id,
            bounds_estimate=charge.bounds,
            synthetic_files=files,
            measured_rows=None if rows is None else rows.measured,
            note=f"finished from its stored measurement (`{resume_command(rid)}`)"
            + (f"; {missing}" if missing else ""),
        )
    finally:
        ledger.close()
    return {**record, "delta": charge.delta, "resumed": True, "fidelity_report": missing}


def _confirm_counted(ledger: BudgetLedger, charge: Charge) -> None:
    """The measurement's ledger entry counts: committed, or committed now when the run stopped between storing its
    noise and committing it (what `splice ledger resolve` would do)."""
    m, rid = charge.measurement, charge.location.release_id
    entry = next((e for e in ledger.entries(m.dataset) if e.id == m.ledger_entry_id and e.release_id == rid), None)
    if entry is None or not entry.counted:
        raise LedgerError(f"release {rid!r}: the ledger does not count its measurement's entry "
                          f"{m.ledger_entry_id!r}; refusing to release it")
    if entry.status == STATUS_RESERVED:
        ledger.resolve(entry.id, noise_released=True, actor=default_actor())


@dataclass(frozen=True)
class RealRows:
    """PRIVATE: the measured and held-out rows (a streamed input's report samples), their repair report and the
    exact count of measured rows."""

    train: pd.DataFrame
    holdout: pd.DataFrame
    repairs: ValidationReport
    measured: int


def _internal_report(charge: Charge, synth: Synthesizer, synthetic: pd.DataFrame, ledger: BudgetLedger
                     ) -> tuple[Any, RealRows | None, str | None]:
    """(report, the rows it read, None), or (None, None, why there is no report) when the input cannot be read
    again. Reading it is no measurement: nothing is charged."""
    from splice_assets.release.bundle import public_facts

    s, rid = charge.settings, charge.location.release_id
    try:
        from splice_assets.evaluation.report import build_report

        rows = _real_rows(charge, synth)
    except Exception as exc:  # noqa: BLE001 - an input gone, moved or changed: the release goes out without it
        reason = " ".join(str(exc).split()) or type(exc).__name__
        return None, None, f"no internal fidelity report: the input could not be read again ({reason})"
    facts = public_facts(charge.measurement, ledger, rid, bounds_noise_multiplier=charge.bounds_noise_multiplier)
    report = build_report(rows.train, rows.holdout, synthetic, charge.schema, facts, s.seed,
                          charge.location.internal_dir, clipped_shares=rows.repairs.shares("out_of_bounds_clipped"),
                          measurement=charge.measurement, measured_count=rows.measured)
    return report, rows, None


def _real_rows(charge: Charge, synth: Synthesizer) -> RealRows:
    """The rows as the run had them: the input read and cleaned under the resolved schema (no DP estimate is left to
    make), then split by the public seed."""
    from splice_assets.private.validation import read_table

    s, rid = charge.settings, charge.location.release_id
    source = s.resolved_input()
    if charge.streamed:
        streamed = synth.stream(synth.scan_source(source, None, rid, s.holdout_fraction))
        return RealRows(streamed.train_sample, streamed.holdout_sample, streamed.report, streamed.sums.rows)
    split = synth.prepare_split(read_table(source), None, rid, s.holdout_fraction, s.schema_version)
    return RealRows(split.train, split.holdout, split.report, len(split.train))


@dataclass(frozen=True)
class Leftover:
    """A release folder a run left without its release.json, or with its step files: ``private`` is what
    `splice ledger stale --remove` deletes (a charged release keeps its measurement and charge record)."""

    location: ReleaseLocation
    written: bool
    charged: bool
    private: tuple[Path, ...]


def leftovers(older_than_s: float, dataset: str | None = None, base: Path | None = None) -> list[Leftover]:
    """Release folders untouched for ``older_than_s`` seconds (younger ones may belong to a running release) that
    hold step files, or that have no release.json."""
    found = []
    for location in iter_releases(base, dataset):
        written = (location.public_dir / MANIFEST).is_file()
        if written and not location.steps_dir.exists():
            continue  # a finished release
        if time.time() - _last_change(location.root) < older_than_s:
            continue
        private: tuple[Path, ...]
        if written:
            private = (location.steps_dir,)
        elif location.charged:
            inside = location.internal_dir.iterdir() if location.internal_dir.is_dir() else iter(())
            private = tuple(sorted(p for p in inside if p.name != CHARGE_FILE))
        else:
            private = (location.root,)  # nothing of it can be used: no measurement
        found.append(Leftover(location, written, location.charged, private))
    return found


def remove_leftover(leftover: Leftover) -> None:
    for path in leftover.private:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def _last_change(root: Path) -> float:
    """The newest modification time in a release folder."""
    return max((p.stat().st_mtime for p in (root, *root.rglob("*"))), default=0.0)
