"""The ``splice budget``, ``splice ledger`` and ``splice schema`` command groups: a dataset's lifetime budget, the
reservations and leftovers of stopped runs, and schema drafts. Registered on the ``splice`` group by ``cli``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

# Only click, the standard library and import-free modules at module level: `splice --help` and the light commands
# start in well under a second. Every heavy module (SQLAlchemy, the ledger, the accountant, pandas, torch, Dagster)
# is imported inside the command that needs it (tests/test_cli_startup.py pins this).
from splice_assets.cli_support import (
    _entry_dict,
    _json_out,
    _one_line,
    _open_ledger,
    _redact,
    budget_status,
    fail,
    guarded,
)
from splice_assets.defaults import RELATIONS
from splice_assets.limits import Relation
from splice_assets.release.locations import artifact_dir


class _DefaultCommandGroup(click.Group):
    """A group whose first word, when it is not one of its subcommands, is handed to ``default_command``: so
    ``splice budget DATASET [--json]`` still means ``splice budget show DATASET [--json]`` next to ``budget set``.
    (A dataset literally named like a subcommand is shown with ``splice budget show NAME``.)"""

    def __init__(self, *args: Any, default_command: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.default_command = default_command

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
            args = [self.default_command, *args]
        return super().parse_args(ctx, args)


def _budget_text(epsilon_total: float, delta_total: float, relation: str) -> str:
    return f"epsilon {epsilon_total:g} at delta {delta_total:g} ({relation})"


def _change_dict(change: Any) -> dict[str, Any]:
    return {
        "created_at": change.created_at.isoformat(timespec="seconds"),
        "actor": change.actor,
        "old_epsilon_total": change.old_epsilon_total,
        "old_delta_total": change.old_delta_total,
        "old_relation": change.old_relation,
        "epsilon_total": change.epsilon_total,
        "delta_total": change.delta_total,
        "relation": change.relation,
        "reason": change.reason,
    }


def _change_text(change: dict[str, Any]) -> str:
    old = "none" if change["old_epsilon_total"] is None else _budget_text(
        change["old_epsilon_total"], change["old_delta_total"], change["old_relation"]
    )
    new = _budget_text(change["epsilon_total"], change["delta_total"], change["relation"])
    reason = f"  ({change['reason']})" if change["reason"] else ""
    return f"{change['created_at']}  {change['actor']}: {old} -> {new}{reason}"


@click.group("budget", cls=_DefaultCommandGroup, default_command="show")
def budget_group() -> None:
    """A dataset's lifetime budget: `budget DATASET` shows it, `budget set DATASET ...` sets or changes it."""


@budget_group.command("show")
@click.argument("dataset")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@guarded
def budget_command(dataset: str, as_json: bool) -> None:
    """A dataset's lifetime budget: spent, remaining, the per-release history and the budget's change history."""
    from splice_assets.private.ledger import BudgetLedger, default_ledger_url
    from splice_assets.release.budget_text import lifetime_text, parts_text, release_rows, release_text

    url = default_ledger_url()
    status = budget_status(url, dataset)
    if status is None:
        raise fail(f"no budget for dataset {dataset!r} in {_redact(url)}")
    ledger = BudgetLedger(url)
    try:
        # One row per release, its parts (estimate, measurement) composed into its headline epsilon.
        history = [{**row, "created_at": row["created_at"].isoformat(timespec="seconds"),
                    "entries": [_entry_dict(e) for e in row["entries"]]} for row in release_rows(ledger, dataset)]
        changes = [_change_dict(c) for c in ledger.budget_changes(dataset)]
    finally:
        ledger.close()
    if as_json:
        _json_out({**status, "history": history, "budget_changes": changes})
        return
    click.echo(f"dataset   {dataset} (relation {status['relation']})")
    click.echo(f"budget    lifetime epsilon_total = {status['epsilon_total']:g} at delta_total = "
               f"{status['delta_total']:g}")
    for c in changes:
        click.echo(f"  changed {_change_text(c)}")
    if not changes:  # budgets set before changes were recorded
        click.echo("  changed (no recorded change)")
    click.echo("lifetime  " + lifetime_text(status["epsilon_spent"], status["epsilon_total"], status["delta_total"],
                                            status["releases_composed"], status["epsilon_remaining"],
                                            status["selection_delta_spent"]))
    if history:
        click.echo("releases  each at its own (epsilon, delta); the lifetime line composes them")
    for e in history:
        parent = f" refit of {e['parent_release_id']}" if e["parent_release_id"] else ""
        parts = f" ({parts_text(e)})" if parts_text(e) else ""
        click.echo(f"  {e['created_at']}  {e['release_id']}  {e['status']:<9} this release "
                   f"{release_text(e['epsilon'], e['delta'])}{parts}{parent}")


@budget_group.command("set")
@click.argument("dataset")
@click.option("--epsilon", required=True, type=float, help="Lifetime epsilon_total (all releases composed).")
@click.option("--delta", required=True, type=float,
              help="Lifetime delta_total the epsilon is reported at: in (0, 0.01) and below 1/n_min of the schema.")
@click.option("--relation", type=click.Choice(RELATIONS), default=None,
              help=f"Neighbouring relation [default: the current budget's, else {Relation.REPLACE_ONE}].")
@click.option("--reason", default="", help="Why the budget is set or changed (recorded with the change).")
@guarded
def budget_set_command(dataset: str, epsilon: float, delta: float, relation: str | None, reason: str) -> None:
    """Set or change a dataset's lifetime budget: an administrator's action, recorded (who, when, old -> new, why).

    Lowering it below what is already spent is allowed: it only refuses further releases."""
    from splice_assets.datasets import schema_path
    from splice_assets.private.ledger import BUDGET_TOLERANCE, BudgetLedger, default_actor, default_ledger_url
    from splice_assets.schema import load_schema

    try:
        path: Path | None = schema_path(dataset)
    except FileNotFoundError:
        path = None  # no repository schema (e.g. --schema FILE releases): only the (0, 0.01) bound applies
    n_min = None if path is None else load_schema(path).n_min
    ledger = BudgetLedger(default_ledger_url())
    try:
        before = ledger.budget(dataset)
        # Keep the dataset's relation unless asked: a default of replace-one would silently switch an add-remove one.
        chosen = relation or (before.relation if before is not None else Relation.REPLACE_ONE)
        after = ledger.set_budget(dataset, epsilon, delta, chosen, actor=default_actor(), reason=reason, n_min=n_min)
        spent, _ = ledger.spent(dataset)
    finally:
        ledger.close()
    was = "none" if before is None else _budget_text(before.epsilon_total, before.delta_total, before.relation)
    click.echo(f"lifetime budget of {dataset!r}: "
               f"{_budget_text(after.epsilon_total, after.delta_total, after.relation)}, was: {was}")
    if spent > after.epsilon_total + BUDGET_TOLERANCE:
        click.echo(f"warning: {dataset!r} has already spent epsilon {spent:.6f} (composed at delta "
                   f"{after.delta_total:g}), more than the new budget: further releases are refused", err=True)


# -- schema drafting ---------------------------------------------------------------------------------------


@click.group("schema")
def schema_group() -> None:
    """Write a first schema: `schema init --input FILE` drafts one from the header and cell types."""


@schema_group.command("init")
@click.option("--input", "input_path", required=True, type=click.Path(dir_okay=False),
              help="CSV (optionally .gz) or Parquet input; only its header and cell types shape the draft.")
@click.option("--out", default=None, type=click.Path(dir_okay=False),
              help="Write the draft here (refused if the file exists) [default: print it].")
@click.option("--name", default=None, help="Dataset name [default: the input's file name up to its first dot].")
@click.option("--from-data", "from_data", is_flag=True,
              help="Offer observed categories and min/max, each column marked `from_data: true`: releases refuse "
              "it until you have checked the values are public and removed the mark.")
@guarded
def schema_init_command(input_path: str, out: str | None, name: str | None, from_data: bool) -> None:
    """Draft a schema: column names, kinds and nullability, marked `from_data: true` (read from the rows, so refused
    until you confirm them and remove the mark); numeric columns get `bounds: auto`, `values: auto` and (continuous)
    `decimals: auto`, DP estimates for `bounds_share` of the release; categories and n_min left to you."""
    from splice_assets.private.schema_draft import draft_schema

    if out is not None and Path(out).exists():
        raise fail(f"--out {out!r} exists; not overwriting it")
    text = draft_schema(input_path, name, from_data)
    if out is None:
        click.echo(text, nl=False)
        return
    Path(out).write_text(text, encoding="utf-8")
    click.echo(f"wrote a draft schema to {out}: fill in n_min and categories, replace an `auto` by public bounds, "
               "values or decimals where you know them, and remove every from_data mark "
               "once what it marks (kinds, nullable" + (", observed values" if from_data else "") + ") is confirmed "
               "public")


# -- ledger maintenance --------------------------------------------------------------------------------------


def _measurement_file(dataset: str, release_id: str) -> Path:
    """A release's stored noisy measurement: if it exists, the reservation's noise was drawn and kept."""
    return artifact_dir() / dataset / release_id / "public" / "measurement.json"


def _noisy_output(entry: Any) -> tuple[Path, bool]:
    """Where a ledger entry's noisy output is kept (its DP estimate's public record, or its measurement) and whether
    it is there: each is stored as soon as it is drawn, before its entry is committed, so a stored one proves that
    the entry's noise was drawn. An estimate's noise is also proven drawn by its release's measurement, drawn after
    it. Estimate and measurement entries are resolved by the same rules on this."""
    from splice_assets.defaults import ESTIMATE_FILE, ESTIMATE_MECHANISM

    measurement = _measurement_file(entry.dataset, entry.release_id)
    if entry.mechanism != ESTIMATE_MECHANISM:
        return measurement, measurement.is_file()
    estimate = measurement.with_name(ESTIMATE_FILE)
    return estimate, estimate.is_file() or measurement.is_file()


@click.group("ledger")
def ledger_group() -> None:
    """Maintain the budget ledger: list and resolve reservations left behind by runs that died, finish or clean up
    the releases they left."""


@ledger_group.command("stale")
@click.option("--older-than", "older_than", default=60.0, show_default=True, type=click.FloatRange(min=0),
              help="Only reservations made, and release folders last changed, more than this many minutes ago "
              "(younger ones may belong to a running release).")
@click.option("--dataset", default=None, help="Only this dataset.")
@click.option("--remove", is_flag=True,
              help="Remove the private files the listed releases left (step files; a release not charged entirely). "
              "A charged release keeps its measurement and charge record, so it can still be resumed.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list (each row's `kind`: reservation or release).")
@guarded
def ledger_stale_command(older_than: float, dataset: str | None, remove: bool, as_json: bool) -> None:
    """List reservations still `reserved` after --older-than minutes, and whether their measurement is stored; and
    releases their runs left behind: charged but unwritten (with the command that finishes them), or holding private
    step files."""
    from datetime import timedelta

    from splice_assets.release.resume import leftovers, remove_leftover

    ledger = _open_ledger()
    try:
        stale = [] if ledger is None else ledger.stale_reservations(timedelta(minutes=older_than), dataset=dataset)
    finally:
        if ledger is not None:
            ledger.close()
    rows: list[dict[str, Any]] = []
    for entry in stale:
        path, kept = _noisy_output(entry)  # an estimate entry's output is its estimate.json
        rows.append({
            "kind": "reservation",
            "ledger_entry_id": entry.id,
            "dataset": entry.dataset,
            "release_id": entry.release_id,
            "created_at": entry.created_at.isoformat(timespec="seconds"),
            "mechanism": entry.mechanism,
            "epsilon": entry.epsilon,
            "delta": entry.delta,
            "measurement_stored": kept,
            "measurement_path": str(path),
        })
    left = leftovers(older_than * 60.0, dataset)
    if remove:
        for leftover in left:
            remove_leftover(leftover)
    releases = [_leftover_row(leftover, remove) for leftover in left]
    if as_json:
        _json_out(rows + releases)
        return
    if not rows:
        click.echo(f"no reservations older than {older_than:g} minutes" + (f" for {dataset!r}" if dataset else ""))
    else:
        click.echo(f"{'entry':<32}  {'dataset':<18} {'release':<36}  {'created (UTC)':<25} {'epsilon':>8} "
                   f"{'delta':>8}  measurement")
    for r in rows:
        stored = "stored" if r["measurement_stored"] else "none"
        click.echo(f"{r['ledger_entry_id']:<32}  {r['dataset']:<18} {r['release_id']:<36}  {r['created_at']:<25} "
                   f"{r['epsilon']:>8g} {r['delta']:>8g}  {stored}")
    if releases:
        click.echo(f"releases left by stopped runs (unchanged for {older_than:g} minutes):")
    for r in releases:
        files = ", ".join(r["private_files"])
        click.echo(f"  {r['release_id']}  {r['dataset']}  {r['state']}"
                   + (f"; finish it: {r['resume']}" if r["resume"] else "")
                   + (f"; private files {'removed' if remove else 'left'}: {files}" if files else ""))
    if any(r["private_files"] for r in releases) and not remove:
        click.echo("remove the private files with `splice ledger stale --remove` (same --older-than and --dataset)")


def _leftover_row(leftover: Any, removed: bool) -> dict[str, Any]:
    """A release folder that a stopped run left (``resume.leftovers``), as a row of `splice ledger stale`."""
    from splice_assets.release.budget_text import release_text
    from splice_assets.release.resume import ResumeRefused, load_charge, resume_command

    location = leftover.location
    epsilon = delta = None
    if leftover.written:
        state = "written"
    elif leftover.charged:
        try:
            charge = load_charge(location)
            epsilon, delta = charge.epsilon, charge.delta
            state = f"charged {release_text(epsilon, delta)}, not written"
        except (ResumeRefused, OSError, ValueError, KeyError) as exc:
            state = f"charged, not written, cannot be resumed: {_one_line(exc)}"
    else:
        state = "not charged (no measurement stored), not written: nothing to resume"
    return {
        "kind": "release",
        "dataset": location.dataset,
        "release_id": location.release_id,
        "path": str(location.root),
        "state": state,
        "epsilon": epsilon,
        "delta": delta,
        "resume": resume_command(location.release_id) if epsilon is not None else None,
        "private_files": [str(p.relative_to(location.root)) if p != location.root else "the whole release folder"
                          for p in leftover.private],
        "removed": removed and bool(leftover.private),
    }


@ledger_group.command("resolve")
@click.argument("entry_id")
@click.option("--abort", "abort", is_flag=True,
              help="Un-count the reservation (needs --confirm-no-noise-drawn; refused if its noisy output is stored).")
@click.option("--confirm-no-noise-drawn", "confirm_no_noise", is_flag=True,
              help="Confirm that the dead run never drew this reservation's noise (only with --abort).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@guarded
def ledger_resolve_command(entry_id: str, abort: bool, confirm_no_noise: bool, as_json: bool) -> None:
    """Resolve a dead run's reservation: committed if its noisy output (measurement, or DP estimate) is stored, else
    expired (still counted, since its noise may have been drawn and lost). Only --abort --confirm-no-noise-drawn
    un-counts it, except a part of a release's reservation that no draw claimed: no noise was drawn for it, so it is
    aborted either way."""
    from splice_assets.private.ledger import STATUS_RESERVED, default_actor, default_ledger_url
    from splice_assets.release.budget_text import lifetime_of

    if confirm_no_noise and not abort:
        raise fail("--confirm-no-noise-drawn only goes with --abort")
    url = default_ledger_url()
    ledger = _open_ledger(url)
    if ledger is None:
        raise fail(f"no ledger at {_redact(url)}")
    try:
        entry = ledger.entry(entry_id)
        if entry.status != STATUS_RESERVED:
            raise fail(f"ledger entry {entry_id!r} is {entry.status!r}; only a 'reserved' entry can be resolved")
        path, stored = _noisy_output(entry)
        if not entry.claimed:  # the ledger knows: every draw claims its part before drawing
            ledger.withdraw(entry_id, actor=default_actor())
            status, why = "aborted", "un-counted: no draw claimed this part of its release, so no noise was drawn"
        elif abort:
            if stored:
                raise fail(f"refusing to abort ledger entry {entry_id!r}: its noisy output {str(path)!r} is "
                           "stored, so noise was drawn; resolve it without --abort to commit it")
            if not confirm_no_noise:
                raise fail(f"--abort un-counts ledger entry {entry_id!r}: add --confirm-no-noise-drawn if and only if "
                           "its run never drew the noise")
            ledger.abort(entry_id, actor=default_actor())
            status, why = "aborted", "un-counted: confirmed that no noise was drawn"
        else:
            status = ledger.resolve(entry_id, noise_released=stored, actor=default_actor()).status
            why = ("counted: its noisy output is stored" if stored
                   else "still counted: no stored output, and its noise may have been drawn and lost")
        spent, delta_total = ledger.spent(entry.dataset)
        budget = ledger.budget(entry.dataset)
        remaining = ledger.remaining(entry.dataset)
        lifetime = lifetime_of(ledger, entry.dataset)
    finally:
        ledger.close()
    if as_json:
        _json_out({"ledger_entry_id": entry_id, "dataset": entry.dataset, "release_id": entry.release_id,
                   "old_status": entry.status, "status": status, "measurement_stored": stored,
                   "measurement_path": str(path), "epsilon_spent": spent, "delta_total": delta_total,
                   "epsilon_total": None if budget is None else budget.epsilon_total, "epsilon_remaining": remaining})
        return
    click.echo(f"ledger entry {entry_id} ({entry.dataset!r}, release {entry.release_id}): reserved -> {status} ({why})")
    click.echo(f"lifetime of {entry.dataset!r}: {lifetime}")
