"""What the ``splice`` commands share: one-line errors, JSON output, the ledger's budget status and the release
listing. Light at import (click and the standard library): the heavy modules are imported where they are used."""

from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

# Only click, the standard library and import-free modules at module level: `splice --help` and the light commands
# start in well under a second. Every heavy module (SQLAlchemy, the ledger, the accountant, pandas, torch, Dagster)
# is imported inside the command that needs it (tests/test_cli_startup.py pins this).
from splice_assets.release.locations import (
    artifact_dir,
    iter_releases,
)

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from splice_assets.private.ledger import BudgetLedger

def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


def fail(exc: BaseException | str) -> click.ClickException:
    """A ClickException carrying a one-line message (click prints it on stderr and exits 1)."""
    return click.ClickException(exc if isinstance(exc, str) else _one_line(exc))


def _sqlite_file_missing(url: str) -> bool:
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return False
    database = parsed.database or ""
    if database in ("", ":memory:") or database.startswith("file:"):
        return False
    return not Path(database).expanduser().exists()


def budget_status(url: str, dataset: str, noise_multipliers: list[float] | None = None,
                  selection_delta: float = 0.0) -> dict[str, Any] | None:
    """The dataset's budget and spend from the ledger (None if no ledger or no budget). Never creates a file.
    ``selection_delta``: what the planned release's category thresholds spend beside ``noise_multipliers``."""
    from splice_assets.private.ledger import BudgetLedger
    from splice_assets.release.budget_text import composed_releases

    if _sqlite_file_missing(url):
        return None
    ledger = BudgetLedger(url)
    try:
        budget = ledger.budget(dataset)
        if budget is None:
            return None
        spent, delta_total = ledger.spent(dataset)
        status: dict[str, Any] = {
            "dataset": dataset,
            "epsilon_total": budget.epsilon_total,
            "delta_total": delta_total,
            "relation": budget.relation,
            "epsilon_spent": spent,
            "epsilon_remaining": ledger.remaining(dataset),
            "releases_composed": composed_releases(ledger, dataset),
            # the delta category thresholds spent: the Gaussian entries compose at delta_total less it
            "selection_delta_spent": ledger.selection_spent(dataset),
        }
        if noise_multipliers is not None:
            after = ledger.projected(dataset, noise_multipliers, selection_delta)
            status["epsilon_after_release"] = after
            status["release_fits"] = after <= budget.epsilon_total + 1e-9
        return status
    finally:
        ledger.close()


def _redact(url: str) -> str:
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - only for display
        return "<ledger>"


# -- releases ------------------------------------------------------------------------------------------------


def guarded(command: Callable[..., None]) -> Callable[..., None]:
    """Turn any library error into a one-line ClickException (tracebacks only with SPLICE_DEBUG=1)."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        try:
            command(*args, **kwargs)
        except (click.ClickException, click.exceptions.Exit, click.Abort, BrokenPipeError):
            raise  # click's own, and a closed pipe (handled quietly by the group)
        except Exception as exc:  # noqa: BLE001 - the CLI's one-line error contract
            if os.environ.get("SPLICE_DEBUG"):
                raise
            raise fail(exc) from None

    return wrapper


def _json_out(value: Any) -> None:
    def clean(v: Any) -> Any:
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        if isinstance(v, datetime):
            return v.isoformat(timespec="seconds")
        return v

    click.echo(json.dumps(clean(value), indent=2, default=str, allow_nan=False))


def _open_ledger(url: str | None = None) -> BudgetLedger | None:
    """The ledger, or None when its SQLite file does not exist (reading never creates one)."""
    from splice_assets.private.ledger import BudgetLedger, default_ledger_url

    url = url or default_ledger_url()
    return None if _sqlite_file_missing(url) else BudgetLedger(url)


def _ledger_datasets(ledger: BudgetLedger) -> list[str]:
    import sqlalchemy as sa

    from splice_assets.private.ledger import budgets_table

    with ledger.engine.connect() as conn:
        names = [r.dataset for r in conn.execute(sa.select(budgets_table.c.dataset))]
        conn.rollback()
    return sorted(names)


def _entry_dict(entry: Any) -> dict[str, Any]:
    from splice_assets.release.budget_text import part_of

    return {
        "ledger_entry_id": entry.id,
        "release_id": entry.release_id,
        "part": part_of(entry),
        "parent_release_id": entry.parent_release_id,
        "created_at": entry.created_at.isoformat(timespec="seconds"),
        "mechanism": entry.mechanism,
        "epsilon": entry.epsilon,
        "delta": entry.delta,
        "sigma": entry.sigma,
        "sensitivity": entry.sensitivity,
        "noise_multiplier": entry.noise_multiplier,
        "selection_delta": entry.selection_delta,  # of delta, spent by its category thresholds
        "relation": entry.relation,
        "status": entry.status,
    }


def _known_dataset(dataset: str, ledger: BudgetLedger | None) -> bool:
    from splice_assets.datasets import schema_dir

    return (
        (schema_dir() / f"{dataset}.yaml").is_file()
        or (artifact_dir() / dataset).is_dir()
        or (ledger is not None and ledger.budget(dataset) is not None)
    )


def _status(manifest: dict[str, Any] | None, entry_status: str | None) -> str:
    if entry_status in ("reserved", "aborted"):
        return entry_status
    if entry_status == "expired":
        # A dead run's reservation resolved without a stored measurement: it still counts toward the budget.
        return "expired (counted, no release)" if manifest is None else "released (ledger: expired)"
    if manifest is None:
        return "incomplete (charged, no bundle)" if entry_status == "committed" else "incomplete"
    return "released" if entry_status == "committed" else "released (no ledger entry)"


def release_rows(dataset: str | None = None) -> list[dict[str, Any]]:
    """One row per release: its ledger entries, as one release (``budget_text.release_rows``: the headline epsilon
    composes its parts), joined with release folders (either may be missing)."""
    from splice_assets.release import budget_text

    ledger = _open_ledger()
    try:
        if dataset is not None and not _known_dataset(dataset, ledger):
            raise click.ClickException(f"unknown dataset {dataset!r}: no schema, release folder or ledger budget")
        locations = {(r.dataset, r.release_id): r for r in iter_releases(artifact_dir(), dataset)}
        datasets = {dataset} if dataset else {d for d, _ in locations}
        if ledger is not None and dataset is None:
            datasets.update(_ledger_datasets(ledger))
        entries: dict[tuple[str, str], dict[str, Any]] = {}
        for name in sorted(datasets):
            for summary in budget_text.release_rows(ledger, name) if ledger is not None else []:
                entries[(name, summary["release_id"])] = summary
    finally:
        if ledger is not None:
            ledger.close()
    rows = []
    for key in sorted(set(locations) | set(entries)):
        loc, entry = locations.get(key), entries.get(key)
        manifest = None
        if loc is not None and (loc.public_dir / "release.json").is_file():
            manifest = loc.manifest()
        privacy = (manifest or {}).get("privacy", {})
        # A release.json written before its parts had these names says measurement_epsilon.
        parts = {"epsilon_estimate": privacy.get("epsilon_estimate"),
                 "epsilon_measurement": privacy.get("epsilon_measurement", privacy.get("measurement_epsilon"))}
        if entry is not None:
            parts = {name: entry.get(name) for name in parts}
        rows.append(
            {
                "release_id": key[1],
                "dataset": key[0],
                "kind": (manifest or {}).get("kind")
                or ("refit" if entry is not None and entry["parent_release_id"] else "release"),
                "parent_release_id": (entry["parent_release_id"] if entry is not None else None)
                or (manifest or {}).get("parent_release_id"),
                # The headline: what the whole release charged (its parts composed), beside its parts alone.
                "epsilon": entry["epsilon"] if entry is not None
                else privacy.get("epsilon_cost", privacy.get("epsilon")),
                "delta": entry["delta"] if entry is not None else privacy.get("delta"),
                **parts,
                "guarantee": [privacy["epsilon"], privacy["delta"]] if "epsilon" in privacy else None,
                "created_at": entry["created_at"].isoformat(timespec="seconds")
                if entry is not None
                else (manifest or {}).get("created_at"),
                "status": _status(manifest, entry["status"] if entry is not None else None),
                "ledger_status": entry["status"] if entry is not None else None,
                "path": str(loc.root) if loc is not None else None,
            }
        )
    rows.sort(key=lambda r: (r["created_at"] or "", r["release_id"]))
    return rows
