"""The ``splice`` command line. Commands are thin wrappers around library functions.

``splice plan`` computes a release's privacy calibration from public inputs only (schema, n, epsilon, delta,
L, k) and the ledger's budget, without touching any data. Errors print one line on stderr and exit non-zero.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from .ledger import BudgetLedger, LedgerError, default_ledger_url
from .privacy import PrivacyParameterError, calibrate, validate_parameters
from .schema import SchemaError, load_schema

DEFAULT_L = 1024
DEFAULT_K = 16


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


def fail(exc: BaseException | str) -> click.ClickException:
    """A ClickException carrying a one-line message (click prints it on stderr and exits 1)."""
    return click.ClickException(exc if isinstance(exc, str) else _one_line(exc))


def _sqlite_file_missing(url: str) -> bool:
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return False
    database = parsed.database or ""
    if database in ("", ":memory:") or database.startswith("file:"):
        return False
    return not Path(database).expanduser().exists()


def budget_status(url: str, dataset: str, noise_multiplier: float | None = None) -> dict[str, Any] | None:
    """The dataset's budget and spend from the ledger (None if no ledger or no budget). Never creates a file."""
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
        }
        if noise_multiplier is not None:
            after = ledger.projected(dataset, [noise_multiplier])
            status["epsilon_after_release"] = after
            status["release_fits"] = after <= budget.epsilon_total + 1e-9
        return status
    finally:
        ledger.close()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """SPLICE: differentially private synthetic tables from sliced Chebyshev moments."""


@main.command()
@click.option("--schema", "schema_path", required=True, type=click.Path(dir_okay=False), help="Public schema YAML.")
@click.option("--n", "n", required=True, type=int, help="Public number of rows n (replace-one neighbours).")
@click.option("--epsilon", required=True, type=float, help="Per-release epsilon.")
@click.option("--delta", required=True, type=float, help="Per-release delta, in (0, 1/n_min).")
@click.option("--L", "--n-directions", "n_directions", default=DEFAULT_L, show_default=True, type=int,
              help="Number of random directions L.")
@click.option("--k", "k", default=DEFAULT_K, show_default=True, type=int, help="Highest moment order k.")
@click.option("--ledger-url", default=None, help="SQLAlchemy URL of the budget ledger [default: $SPLICE_LEDGER_URL "
              "or $DAGSTER_HOME/ledger.sqlite].")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def plan(
    schema_path: str,
    n: int,
    epsilon: float,
    delta: float,
    n_directions: int,
    k: int,
    ledger_url: str | None,
    as_json: bool,
) -> None:
    """Show sensitivity, sigma, per-order noise and the budget left, from public inputs only (no data read)."""
    try:
        schema = load_schema(schema_path)
        validate_parameters(epsilon, delta, k, n_directions, schema.n_min, n=n)
        cal = calibrate(epsilon, delta, n, n_directions, k)
    except (SchemaError, PrivacyParameterError) as exc:
        raise fail(exc) from None
    url = ledger_url or default_ledger_url()
    try:
        budget = budget_status(url, schema.name, cal.noise_multiplier)
    except (LedgerError, SQLAlchemyError, ValueError) as exc:
        raise fail(f"cannot read the budget ledger: {_one_line(exc)}") from None
    stds = [float(s) for s in cal.noise_std_per_order()]
    result: dict[str, Any] = {
        "dataset": schema.name,
        "schema_version": schema.version,
        "relation": cal.relation,
        "n": n,
        "L": n_directions,
        "k": k,
        "epsilon": cal.epsilon,
        "delta": cal.delta,
        "sensitivity": cal.sensitivity,
        "float_slack": cal.slack,
        "sigma": cal.sigma,
        "noise_multiplier": cal.noise_multiplier,
        "noise_std_per_order": stds,
        "budget_remaining": None if budget is None else budget["epsilon_remaining"],
        "budget": budget,
    }
    if as_json:
        click.echo(json.dumps(result, indent=2, allow_nan=False))
        return
    click.echo(f"dataset            {schema.name} (schema v{schema.version}), relation {cal.relation}")
    click.echo(f"n, L, k            {n}, {n_directions}, {k}")
    click.echo(f"epsilon, delta     {cal.epsilon:g}, {cal.delta:g}")
    click.echo(f"sensitivity Delta  {cal.sensitivity:.6g}  (2/n sqrt(L H_k), float slack {cal.slack:.1e})")
    click.echo(f"sigma              {cal.sigma:.6g}  (sigma/Delta = {cal.noise_multiplier:.4f})")
    click.echo("noise std of raw moment order j (sigma sqrt(j)):")
    for j, s in enumerate(stds, start=1):
        click.echo(f"  j={j:<3d} {s:.6g}")
    if budget is None:
        click.echo(f"budget             none set for {schema.name!r} in {_redact(url)}")
    else:
        fits = "fits" if budget["release_fits"] else "does NOT fit"
        click.echo(
            f"budget             epsilon {budget['epsilon_total']:g} at delta {budget['delta_total']:g}; "
            f"spent {budget['epsilon_spent']:.6f}, remaining {budget['epsilon_remaining']:.6f}"
        )
        click.echo(f"after this release epsilon {budget['epsilon_after_release']:.6f} ({fits})")


def _redact(url: str) -> str:
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - only for display
        return "<ledger>"


if __name__ == "__main__":  # pragma: no cover
    main()
