"""The ``splice`` command line. Commands are thin wrappers around library functions.

``splice plan`` computes a release's privacy calibration from public inputs only (schema, n, epsilon, delta,
L, k) and the ledger's budget, without touching any data. ``splice release`` runs the Dagster ``release`` job
in-process; ``releases``, ``show``, ``budget``, ``refit``, ``sample`` and ``export`` work on the release folders
(``$SPLICE_ARTIFACT_DIR`` or ``$DAGSTER_HOME/releases``), the ledger (``$SPLICE_LEDGER_URL`` or
``$DAGSTER_HOME/ledger.sqlite``) and MLflow (``$MLFLOW_TRACKING_URI`` or ``$DAGSTER_HOME/mlflow.db``) and do not
import Dagster. Errors print one line on stderr and exit non-zero (``SPLICE_DEBUG=1`` shows tracebacks); Ctrl-C
prints one line and exits 130, and after a release's charge that line says what it spent and how to finish it
(``splice release --resume``).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from splice_assets.cli_ledger import budget_group, ledger_group, schema_group
from splice_assets.cli_support import (
    _entry_dict,
    _json_out,
    _one_line,
    _open_ledger,
    _redact,
    budget_status,
    fail,
    guarded,
    release_rows,
)

# Only click, the standard library and import-free modules at module level: `splice --help` and the light commands
# start in well under a second. Every heavy module (SQLAlchemy, the ledger, the accountant, pandas, torch, Dagster)
# is imported inside the command that needs it (tests/test_cli_startup.py pins this).
from splice_assets.defaults import (
    DEFAULT_HOLDOUT_FRACTION,
    DEFAULT_K,
    DEFAULT_MARGINAL_SHARE,
    DEFAULT_N_DIRECTIONS,
    DEFAULT_PAIR_SHARE,
    DISCRETE_PAIR_SHARE,
    RELATIONS,
)
from splice_assets.limits import Relation
from splice_assets.release.locations import (
    ReleaseLocation,
    artifact_dir,
    find_release,
    prepare_dagster_home,
    quiet_mlflow,
)

if TYPE_CHECKING:  # pragma: no cover - annotations only
    pass

#: How ``--relation`` shows its values: it takes any string, and the settings model refuses a bad one with the
#: message every entry point gives (``limits.Relation.parse``).
RELATION_METAVAR = "[" + "|".join(RELATIONS) + "]"


#: Exit status when stdout is a pipe closed early (``splice releases | head -1``): 128 + SIGPIPE, what a shell
#: reports for a command the pipe's signal ended.
EXIT_BROKEN_PIPE = 141
#: Exit status after Ctrl-C: 128 + SIGINT, as a shell reports it.
EXIT_INTERRUPTED = 130


class Interrupted(click.ClickException):
    """Ctrl-C: one line on stderr (no traceback), exit status 130."""

    exit_code = EXIT_INTERRUPTED

    def show(self, file: Any = None) -> None:
        click.echo(self.format_message(), err=True)


class _SpliceGroup(click.Group):
    """The top-level group: a pipe closed early ends the command quietly (no ``Error: [Errno 32] Broken pipe``),
    and Ctrl-C prints one line (commands that know more, such as ``release``, say more)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            result = super().invoke(ctx)
            sys.stdout.flush()  # a closed pipe surfaces here, not in the interpreter's exit-time flush
            return result
        except KeyboardInterrupt:
            raise Interrupted("interrupted") from None
        except BrokenPipeError:
            # As the Python docs recommend (signal module, "Note on SIGPIPE"): point stdout at devnull so the
            # exit-time flush does not raise again, then exit quietly.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            raise SystemExit(EXIT_BROKEN_PIPE) from None


@click.group(cls=_SpliceGroup, context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """SPLICE: differentially private synthetic tables from sliced Chebyshev moments."""


Workload = tuple[tuple[str, ...], ...]


def _workload(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> Workload | None:
    """``--workload a,b,c`` (repeated): the 3-way marginals, as the settings take them; None when not given."""
    return tuple(tuple(name.strip() for name in value.split(",")) for value in values) or None


_WORKLOAD_HELP = ("A 3-way marginal that matters, as three column names (a,b,c); repeat for more. Each is measured "
                  "as a 3-way table with a quarter of a 2-way cell's noise (the other tables get more), and the "
                  "model is tilted toward it.")


@main.command()
@click.option("--schema", "schema_path", default=None, type=click.Path(dir_okay=False),
              help="Public schema YAML (instead of --dataset).")
@click.option("--dataset", default=None, help="Dataset name: schemas/<dataset>.yaml (or $SPLICE_SCHEMA_DIR).")
@click.option("--n", "n", default=None, type=int,
              help="Rows of the input table: public under replace-one; under add-remove only used to show the noise "
              "on frequencies (n is private there and does not shape the noise) [default: the schema's n_min].")
@click.option("--input", "input_path", default=None, type=click.Path(),
              help="CSV (optionally .gz) or Parquet input, or a folder of them, whose row count stands for --n "
              "(replace-one only): only the count is read (CSV records, Parquet metadata).")
@click.option("--holdout", "holdout_fraction", default=DEFAULT_HOLDOUT_FRACTION, show_default=True, type=float,
              help="Share of the rows the release holds out (never measured), as `splice release --holdout`.")
@click.option("--relation", default=Relation.REPLACE_ONE.value, show_default=True, metavar=RELATION_METAVAR,
              help="Neighbouring relation of the guarantee.")
@click.option("--epsilon", required=True, type=float, help="Per-release epsilon.")
@click.option("--delta", required=True, type=float, help="Per-release delta, in (0, 1/n_min).")
@click.option("--L", "--n-directions", "n_directions", default=DEFAULT_N_DIRECTIONS, show_default=True, type=int,
              help="Number of random directions L.")
@click.option("--k", "k", default=DEFAULT_K, show_default=True, type=int, help="Highest moment order k.")
@click.option("--ledger-url", default=None, help="SQLAlchemy URL of the budget ledger [default: $SPLICE_LEDGER_URL "
              "or $DAGSTER_HOME/ledger.sqlite].")
@click.option("--marginal-share", default=DEFAULT_MARGINAL_SHARE, show_default=True, type=float,
              help="Share of Delta^2 given to the noisy 1-way marginals (0 = the paper's moments only).")
@click.option("--pair-share", default=None, type=float,
              help="Share of Delta^2 given to the noisy 2-way marginals of coordinate pairs (0 = none) [default: "
              f"{DEFAULT_PAIR_SHARE:g}, plus {DISCRETE_PAIR_SHARE - DEFAULT_PAIR_SHARE:g} times the schema's share of "
              "discrete columns].")
@click.option("--workload", multiple=True, callback=_workload, metavar="A,B,C", help=_WORKLOAD_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def plan(
    schema_path: str | None,
    dataset: str | None,
    n: int | None,
    input_path: str | None,
    holdout_fraction: float,
    epsilon: float,
    delta: float,
    n_directions: int,
    k: int,
    marginal_share: float,
    pair_share: float | None,
    workload: Workload | None,
    relation: str,
    ledger_url: str | None,
    as_json: bool,
) -> None:
    """Show sensitivity, sigma, per-order noise and the budget left, from public inputs only.

    sigma is for the rows the release measures: the input's rows less the holdout. With --input only the row count
    is read. Exits with status 3 when the dataset has a budget and this release would not fit it."""
    from sqlalchemy.exc import SQLAlchemyError

    from splice_assets.config import MeasurementSettings, Relation, SynthesizerSettings
    from splice_assets.layout import WORKLOAD_UNITS, layout_for
    from splice_assets.limits import HOLDOUT_FRACTION, check_rows_for
    from splice_assets.planning import ReleasePlanner
    from splice_assets.private.bounds import open_category_threshold
    from splice_assets.private.gaussian_dp import delta_cost
    from splice_assets.private.ledger import LedgerError, default_ledger_url
    from splice_assets.private.mechanism import PrivacyParameterError, epsilon_of
    from splice_assets.schema import SchemaError, load_schema

    if (schema_path is None) == (dataset is None):
        raise fail("give --dataset NAME or --schema FILE")
    try:
        if schema_path is None:
            from splice_assets.datasets import schema_path as dataset_schema

            assert dataset is not None  # one of the two is given (checked above)
            schema_path = str(dataset_schema(dataset))
        schema = load_schema(schema_path)
        if dataset is not None and dataset != schema.name:
            raise ValueError(f"--dataset {dataset!r} differs from the schema's name {schema.name!r}")
        # The one settings model and the one planner, as the release: the same limits, the same messages.
        planner = ReleasePlanner.of(schema, SynthesizerSettings(
            epsilon=epsilon, delta=delta, relation=Relation.parse(relation), measurement=MeasurementSettings(
                n_directions=n_directions, k=k, marginal_share=marginal_share, pair_share=pair_share,
                workload=workload or ())))
        relation = planner.settings.relation
        HOLDOUT_FRACTION.check(holdout_fraction)
        rows = _planned_rows(schema.n_min, n, input_path, holdout_fraction, planner.settings.relation)
        n = rows["n"]
        check_rows_for(n, schema.n_min)
        # DP bounds of `bounds: auto` columns take their share of the privacy, as in the release.
        bounds_multiplier = planner.privacy_split()[1]
        measurement_plan, cal = planner.plan(n)
    except (SchemaError, PrivacyParameterError, ValueError, FileNotFoundError) as exc:
        raise fail(exc) from None
    url = ledger_url or default_ledger_url()
    try:
        multipliers = [cal.noise_multiplier] + ([bounds_multiplier] if bounds_multiplier else [])
        held = sum(part.selection_delta for part in planner.parts(measurement_plan, cal))  # categories: auto
        budget = budget_status(url, schema.name, multipliers, held)
    except (LedgerError, SQLAlchemyError, ValueError) as exc:
        raise fail(f"cannot read the budget ledger: {_one_line(exc)}") from None
    # Under add-remove sigma is on sums and counts; divided by n it is the noise on frequencies, as replace-one's.
    per_row = 1.0 if relation == Relation.REPLACE_ONE else 1.0 / n
    stds = [float(s) * per_row for s in cal.noise_std_per_order()]
    result: dict[str, Any] = {
        "dataset": schema.name,
        "schema_version": schema.version,
        "relation": str(cal.relation),
        "n": n,
        "n_input": rows["n_input"],
        "n_source": rows["n_source"],
        "holdout_fraction": holdout_fraction,
        "L": n_directions,
        "k": k,
        "epsilon": epsilon,  # the whole release's; its parts, each alone, beside it
        "epsilon_estimate": None if bounds_multiplier is None else epsilon_of(bounds_multiplier, delta),
        "epsilon_measurement": cal.epsilon,
        "bounds_noise_multiplier": bounds_multiplier,
        "delta": cal.delta,
        "selection_delta": held,  # of delta, spent by the estimate's category thresholds (categories: auto)
        # categories: auto keeps a value whose noisy count clears this many rows (None: no such column)
        "category_threshold_rows": None if bounds_multiplier is None else open_category_threshold(
            schema, bounds_multiplier, cal.delta, str(cal.relation)),
        "sensitivity": cal.sensitivity,
        "float_slack": cal.slack,
        "sigma": cal.sigma,
        "noise_multiplier": cal.noise_multiplier,
        "noise_std_per_order": stds,
        "marginal_share": marginal_share,
        "one_way_share": measurement_plan.one_way_share,
        "marginal_noise_std": None if cal.marginal_weight == 0 else cal.marginal_noise_std() * per_row,
        "many_levels": {  # the tables that count as more than one (``measurement.level_units``)
            c.column: {"cells": cells, "units": units,
                       "noise_std": cal.marginal_noise_std() / math.sqrt(units) * per_row}
            for c, cells, units in zip(layout_for(schema).coordinates, measurement_plan.marginal_sizes,
                                       measurement_plan.marginal_units) if units > 1
        },
        "value_noise_std": next((cal.sigma / measurement_plan.fine_table_weight(c) * per_row
                                 for c in measurement_plan.fine if c.per_value), None),
        "interval_noise_std": next((cal.sigma / measurement_plan.fine_table_weight(c) * per_row
                                    for c in measurement_plan.fine if not c.per_value), None),
        "pair_share": measurement_plan.pair_share,
        "pairs": cal.pair_count,  # 2-way tables and the 3-way ones (the target's, the workload's)
        "three_way_tables": len(measurement_plan.triples),
        # a workload table's cells count WORKLOAD_UNITS times: 1/sqrt(units) of a pair cell's noise
        "workload_noise_std": None if not measurement_plan.workload_cells else
        cal.pair_noise_std() / math.sqrt(WORKLOAD_UNITS) * per_row,
        "pair_noise_std": None if cal.pair_weight == 0 else cal.pair_noise_std() * per_row,
        "count_noise_std": None if cal.count_weight == 0 else cal.count_noise_std(),
        # sigma at this delta over sigma at delta = 1/(100 n), when delta is far below 1/n (else None)
        "delta_sigma_factor": delta_cost(cal.epsilon, cal.delta, n),
        "budget_remaining": None if budget is None else budget["epsilon_remaining"],
        "budget": budget,
    }
    if as_json:
        click.echo(json.dumps(result, indent=2, allow_nan=False))
    else:
        _print_plan(schema, cal, result, per_row, url)
    if budget is not None and not budget["release_fits"]:
        raise SystemExit(PLAN_DOES_NOT_FIT)


#: Exit status of ``splice plan`` when the release would not fit the dataset's budget.
PLAN_DOES_NOT_FIT = 3


def measured_rows(n_input: int, holdout_fraction: float) -> int:
    """The rows a release measures out of ``n_input``: the replace-one split keeps n - round(fraction * n) of
    them (``holdout_split.split_holdout``; under add-remove that is the expected size)."""
    return n_input - int(round(holdout_fraction * n_input))


def _planned_rows(
    n_min: int, n: int | None, input_path: str | None, holdout_fraction: float, relation: Relation
) -> dict[str, Any]:
    """The n the plan calibrates for (the measured rows), where it comes from, and the input's row count."""
    from splice_assets.private.row_count import input_row_count

    if n is not None and input_path is not None:
        raise ValueError("give --n or --input, not both")
    if relation == Relation.ADD_REMOVE:
        if input_path is not None:
            raise ValueError(f"under {Relation.ADD_REMOVE} the row count is private, so plan does not read it from "
                             f"--input {input_path!r}: give --n to show the noise on frequencies at a row count of "
                             "your choice, or nothing for the schema's public n_min")
        if n is None:  # n_min bounds the measured part from below: the largest noise on a frequency
            return {"n": n_min, "n_input": None, "n_source": "n_min"}
        return {"n": measured_rows(n, holdout_fraction), "n_input": n, "n_source": "--n"}
    if input_path is not None:
        n_input, source = input_row_count(input_path), "--input"
    elif n is not None:
        n_input, source = n, "--n"
    else:
        raise ValueError(f"under {Relation.REPLACE_ONE} sigma depends on the public row count: give --n ROWS or "
                         "--input FILE")
    measured = measured_rows(n_input, holdout_fraction)
    if n_input >= 1 and measured < n_min:
        raise ValueError(f"the release measures {measured:,} of {n_input:,} rows ({holdout_fraction:.0%} holdout), "
                         f"below the schema's n_min = {n_min}; lower --holdout or use more rows")
    return {"n": measured, "n_input": n_input, "n_source": source}


def _rows_text(result: dict[str, Any], n_min: int) -> str:
    """What the plan's n is: the measured part of the input (replace-one), or a display row count (add-remove)."""
    n, n_input, fraction = result["n"], result["n_input"], result["holdout_fraction"]
    if result["relation"] == Relation.ADD_REMOVE:
        shown = (f"the schema's public n_min = {n_min:,}" if n_input is None
                 else f"about {1 - fraction:.0%} of --n {n_input:,} = {n:,} ({fraction:.0%} holdout)")
        return (f"n is private under {Relation.ADD_REMOVE} and does not shape the noise; frequencies shown at "
                f"{shown}")
    source = "" if result["n_source"] == "--n" else " (row count of --input)"
    return (f"measures {1 - fraction:.0%} of {n_input:,} rows{source} = {n:,} ({fraction:.0%} holdout); "
            f"sigma is for {n:,}")


def _print_plan(schema: Any, cal: Any, result: dict[str, Any], per_row: float, url: str) -> None:
    from splice_assets.private.gaussian_dp import delta_cost_text
    from splice_assets.release.budget_text import lifetime_text, release_text

    n, n_directions, k, relation = result["n"], result["L"], result["k"], result["relation"]
    marginal_share, pair_share, stds, budget = (
        result["marginal_share"], result["pair_share"], result["noise_std_per_order"], result["budget"]
    )
    click.echo(f"dataset            {schema.name} (schema v{schema.version}), relation {cal.relation}")
    click.echo(f"rows               {_rows_text(result, schema.n_min)}")
    click.echo(f"n, L, k            {n}, {n_directions}, {k}")
    click.echo(f"this release       {release_text(result['epsilon'], cal.delta)}, charged when it runs")
    if delta_cost_text(cal.epsilon, cal.delta, n):
        click.echo(f"                   {delta_cost_text(cal.epsilon, cal.delta, n)}")
    if result["bounds_noise_multiplier"] is not None:
        click.echo(f"                   its parts alone: DP estimate of the 'auto' entries epsilon = "
                   f"{result['epsilon_estimate']:.4g} (noise multiplier {result['bounds_noise_multiplier']:.4g}), "
                   f"measurement epsilon = {cal.epsilon:.6g}; composed, not added")
    if result["category_threshold_rows"] is not None:
        click.echo(f"categories: auto   keeps a value held by about {result['category_threshold_rows']:,.0f} rows or "
                   "more (the DP selection's threshold: fewer 'auto' entries or a larger bounds_share lower it)")
    formula = (
        "sqrt(4 L H_k + 2 w^2 C + 2 w2^2 P)/n" if relation == Relation.REPLACE_ONE
        else "sqrt(L H_k + w^2 C + w2^2 P + wn^2), on sums and counts"
    )
    click.echo(
        f"sensitivity Delta  {cal.sensitivity:.6g}  ({formula} with marginal share {marginal_share:g}"
        + (f", 1-way share {result['one_way_share']:.4g} with the weights of the fine tables"
           if result["one_way_share"] != marginal_share else "")
        + f", pair share {pair_share:g} over {cal.pair_count} pairs, float slack {cal.slack:.1e})"
    )
    click.echo(f"sigma              {cal.sigma:.6g}  (sigma/Delta = {cal.noise_multiplier:.4f})")
    if cal.count_weight > 0:
        click.echo(f"noise std of the row count: {cal.count_noise_std():.6g} (pooled with the histograms' totals)")
    click.echo("noise std of raw moment order j (sigma sqrt(j)" + ("" if per_row == 1.0 else f" / n at n = {n}") + "):")
    for j, s in enumerate(stds, start=1):
        click.echo(f"  j={j:<3d} {s:.6g}")
    if cal.marginal_weight > 0:
        click.echo(f"noise std of a 1-way marginal frequency: {cal.marginal_noise_std() * per_row:.6g}")
    for column, table in result["many_levels"].items():
        click.echo(f"noise std of a 1-way frequency of {column} ({table['cells']} cells, counted as {table['units']} "
                   f"tables): {table['noise_std']:.6g}")
    if result["value_noise_std"] is not None:
        click.echo(f"noise std of one value's frequency in a numeric column's per-value table: "
                   f"{result['value_noise_std']:.6g}")
    if result["interval_noise_std"] is not None:
        click.echo(f"noise std of one fine interval's frequency in a numeric column's fine table: "
                   f"{result['interval_noise_std']:.6g}")
    if cal.pair_weight > 0:
        click.echo(f"noise std of a 2-way (or the target's 3-way) frequency: {cal.pair_noise_std() * per_row:.6g}")
    if result["workload_noise_std"] is not None:
        click.echo(f"noise std of a workload 3-way frequency: {result['workload_noise_std']:.6g}")
    if budget is None:
        click.echo(f"budget             none set for {schema.name!r} in {_redact(url)}")
    else:
        fits = "fits" if budget["release_fits"] else "does NOT fit"
        total, delta_total, composed = budget["epsilon_total"], budget["delta_total"], budget["releases_composed"]
        held = budget["selection_delta_spent"]
        click.echo("lifetime now       " + lifetime_text(budget["epsilon_spent"], total, delta_total, composed,
                                                         budget["epsilon_remaining"], held))
        after = lifetime_text(budget["epsilon_after_release"], total, delta_total, composed + 1,
                              selection_delta=held + result.get("selection_delta", 0.0))
        click.echo(f"lifetime after it  {after} ({fits})")


@main.command("release")
@click.option("--dataset", default=None, help="Dataset name: schemas/<dataset>.yaml (or $SPLICE_SCHEMA_DIR).")
@click.option("--schema", "schema_file", default=None, type=click.Path(dir_okay=False),
              help="A schema YAML file named <dataset>.yaml (instead of --dataset).")
@click.option("--input", "input_path", default=None, type=str,
              help="CSV (optionally .gz) or Parquet input: a file, or a directory, glob or fsspec URL of files "
              "(streamed in batches); optional only for the bundled demo dataset.")
@click.option("--engine", type=click.Choice(["local", "dask"]), default=None,
              help="Where a streamed input is measured and sampled [default: $SPLICE_ENGINE or local]; dask: the "
              "scheduler at $SPLICE_DASK_SCHEDULER, else a local cluster of $SPLICE_DASK_WORKERS workers.")
@click.option("--epsilon", default=None, type=float, help="Epsilon of this release's measurement [required].")
@click.option("--relation", default=None, metavar=RELATION_METAVAR,
              help=f"Neighbouring relation: {Relation.REPLACE_ONE} (n public) or {Relation.ADD_REMOVE} (n private, as "
              f"AIM / MST) [default: {Relation.REPLACE_ONE}].")
@click.option("--delta", default=None, type=float, help="Delta of this release, in (0, 1/n_min) [required].")
@click.option("--k", "k", default=None, type=int, help=f"Highest Chebyshev order k [default: {DEFAULT_K}].")
@click.option(
    "--L",
    "--n-directions",
    "n_directions",
    default=None,
    type=int,
    help=f"Directions L [default: {DEFAULT_N_DIRECTIONS}].",
)
@click.option("--K", "--components", "components", default=None, type=int, help="Mixture components K [default: 20].")
@click.option("--steps", "max_steps", default=None, type=int, help="Maximum fitting steps [default: 600].")
@click.option("--rows", "n_synthetic", default=None, type=int, help="Synthetic rows [default: as many as measured].")
@click.option("--seed", default=None, type=int, help="Public seed (directions, init, sampling, split) [default: 0].")
@click.option("--holdout", "holdout_fraction", default=None, type=float,
              help="Share of rows held out for the internal report [default: 0.2].")
@click.option("--tilt-chi2", "tilt_chi2", default=None, type=float,
              help="Cell tilt's stopping chi^2 per cell, 0 = no tilt [default: 1].")
@click.option("--link-lambda", "link_lambda", default=None, type=float,
              help="Linked-coordinate threshold (Goodman-Kruskal lambda), 0 = no links [default: 0.6].")
@click.option("--joint-pairs", "joint_pairs", default=None, type=int,
              help="Most column pairs given one joint table per component, 0 = none [default: 6].")
@click.option("--field-iterations", "field_iterations", default=None, type=int,
              help="Pairwise field's fit iterations, 0 = no field (faster) [default: 40].")
@click.option("--workload", multiple=True, callback=_workload, metavar="A,B,C", help=_WORKLOAD_HELP)
@click.option("--resume", "resume_id", default=None, metavar="RELEASE",
              help="Finish RELEASE, whose run stopped after its charge, from its stored noisy measurement and settings "
              "(no other option): no new charge, no new noise.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--verbose", is_flag=True, help="Dagster's console log at DEBUG (every step event) instead of INFO.")
@guarded
def release_command(
    dataset: str | None,
    schema_file: str | None,
    input_path: str | None,
    engine: str | None,
    resume_id: str | None,
    as_json: bool,
    verbose: bool,
    **options: Any,
) -> None:
    """Run one release (the Dagster `release` job, in-process): validate, measure (charged), fit, sample, write.

    Ctrl-C or a failure after the charge leaves the release to finish with `--resume RELEASE`, at no further cost."""
    from splice_assets.datasets import DEMO_DATASET, schema_path
    from splice_assets.limits import check_delta_for
    from splice_assets.release.budget_text import parts_text, release_text
    from splice_assets.release.settings import ReleaseSettings
    from splice_assets.schema import load_schema

    chosen = {k: v for k, v in options.items() if v is not None}
    if resume_id is not None:
        others = [k for k, v in {"dataset": dataset, "schema": schema_file, "input": input_path, "engine": engine,
                                 **chosen}.items() if v is not None]
        if others:
            raise fail(f"--resume takes its settings from the stopped run; drop {', '.join(sorted(others))}")
        _resume(resume_id, as_json)
        return
    for name in ("epsilon", "delta"):
        if name not in chosen:
            raise click.UsageError(f"Missing option '--{name}'.", ctx=click.get_current_context())
    schema_folder = None  # the deployment's (``datasets.schema_dir()``)
    if schema_file is not None:
        schema = load_schema(schema_file)
        if dataset is not None and dataset != schema.name:
            raise fail(f"--dataset {dataset!r} differs from the schema's name {schema.name!r}")
        if Path(schema_file).stem != schema.name:
            raise fail(f"schema file {schema_file!r} must be named {schema.name}.yaml (the dataset name)")
        schema_folder = Path(schema_file).resolve().parent  # the definitions this command builds read it
        dataset = schema.name
    elif dataset is None:
        raise fail("give --dataset NAME or --schema FILE")
    else:
        try:
            schema = load_schema(schema_path(dataset))
        except FileNotFoundError as exc:
            raise fail(exc) from None
    # The one settings model, before Dagster loads: every limit (delta < 1/n_min with the schema), with the message
    # the run config and `splice plan` give.
    settings = ReleaseSettings(dataset=dataset, **chosen)
    check_delta_for(settings.delta, schema.n_min)  # the synthesizer (torch) checks the rest, below
    if input_path is None and dataset != DEMO_DATASET:
        raise fail(f"--input FILE is required for dataset {dataset!r}")
    from splice_assets.private.row_count import is_url_or_glob

    streamed = input_path is not None and is_url_or_glob(input_path)
    if input_path is not None and not streamed and not Path(input_path).exists():
        raise fail(f"input {input_path!r} does not exist")
    if input_path is not None and not streamed and Path(input_path).is_file():
        # The input's structure (header, unparseable shares, rows against n_min) with the release's own checks,
        # before Dagster loads: a bad file is refused in about a second, not after the run has started.
        from splice_assets.release.input_check import StructuralError, check_input_file

        try:
            check_input_file(input_path, settings, schema)
        except StructuralError as exc:
            raise fail(f"input refused before the release started (nothing charged): {exc}") from None
    settings.synthesizer(schema)  # every limit that needs the schema
    where = input_path if streamed or not input_path else str(Path(input_path).resolve())
    record = _run_release_job(dataset, where or "", chosen, verbose, ReleaseDeployment(schema_folder, engine))
    if as_json:
        _json_out(record)
        return
    click.echo(f"release {record['release_id']} ({dataset})")
    _echo_where(record)
    click.echo(f"this release   {release_text(record['epsilon_cost'], chosen['delta'])} charged to the ledger")
    if parts_text(record):
        click.echo(f"               {parts_text(record)} (composed into the release's epsilon, not added)")
    if _delta_cost_line(record, schema.n_min):
        click.echo(f"               {_delta_cost_line(record, schema.n_min)}")
    click.echo(f"lifetime       {_lifetime_now(dataset)}")


def _echo_where(record: dict[str, Any], report: str | None = None) -> None:
    """Where a written release lives: its public bundle, its internal folder (and ``report`` in it), its MLflow run."""
    click.echo(f"public bundle  {record['public_dir']}")
    click.echo(f"internal audit {record['internal_dir']}  (internal: reads real rows; never release)")
    if report:
        click.echo(f"               {report}")
    model = record.get("registered_model_name")
    click.echo(f"MLflow run     {record['mlflow_run_id']}" + (
        f"; model models:/{model}/{record['registered_model_version']}" if model else ""))


def _delta_cost_line(record: dict[str, Any], n_min: int) -> str | None:
    """What the release's delta cost in sigma when far below 1/n: at its public n (replace-one), else n_min."""
    from splice_assets.private.gaussian_dp import delta_cost_text

    try:
        privacy = json.loads((Path(record["public_dir"]) / "release.json").read_text()).get("privacy", {})
    except (OSError, ValueError):
        privacy = {}
    n = privacy.get("n") if privacy.get("relation", Relation.REPLACE_ONE.value) == Relation.REPLACE_ONE else None
    return delta_cost_text(record["epsilon_measurement"], record["delta"], int(n or n_min))


def _lifetime_now(dataset: str) -> str:
    """The dataset's lifetime line as the ledger has it now."""
    from splice_assets.private.ledger import BudgetLedger, default_ledger_url
    from splice_assets.release.budget_text import lifetime_of

    with BudgetLedger(default_ledger_url()) as ledger:
        return lifetime_of(ledger, dataset)


@dataclass(frozen=True)
class ReleaseDeployment:
    """What `splice release`, acting as the deployment, builds its Dagster definitions with (never run config):
    the folder of ``--schema FILE`` (None: ``datasets.schema_dir()``) and ``--engine`` (None: $SPLICE_ENGINE's)."""

    schema_folder: Path | None = None
    engine: str | None = None


def _run_release_job(dataset: str, input_path: str, options: dict[str, Any], verbose: bool,
                     deployment: ReleaseDeployment) -> dict[str, Any]:
    """Execute the Dagster release job in-process (like ``make demo``) with a progress display on stderr;
    one-line error on failure or Ctrl-C."""
    from splice_assets import progress

    try:
        with progress.showing(progress.display_for()):
            return _execute_release_job(dataset, input_path, options, verbose, deployment)
    except KeyboardInterrupt:  # the run reports its own: this one came before it started
        raise Interrupted("interrupted before the release started: nothing was charged") from None


def _execute_release_job(dataset: str, input_path: str, options: dict[str, Any], verbose: bool,
                         deployment: ReleaseDeployment) -> dict[str, Any]:
    from splice_assets import progress

    prepare_dagster_home()
    if not verbose:
        quiet_mlflow()
    with warnings.catch_warnings(), progress.stage("load Dagster and the release job"):
        if not verbose:
            warnings.simplefilter("ignore")
        from pydantic import ValidationError

        from splice_assets.dagster_layer.automation import run_config_for
        from splice_assets.dagster_layer.config import release_config_in, settings_error
        from splice_assets.dagster_layer.console import (
            console_level,
            failure_reason,
            with_console_level,
            with_splice_console,
        )
        from splice_assets.dagster_layer.definitions import build_definitions
        from splice_assets.dagster_layer.inprocess import run_release
        from splice_assets.dagster_layer.resources import default_resources
        from splice_assets.release.resume import NOTHING_CHARGED

        # This command is the deployment: its resources (the engine of --engine) and schema folder (--schema's).
        defs = build_definitions(default_resources(deployment.engine), deployment.schema_folder)
        job = with_splice_console(defs.resolve_job_def("release"))
    with warnings.catch_warnings():
        if not verbose:
            warnings.simplefilter("ignore")

        try:
            config = release_config_in(deployment.schema_folder)(dataset=dataset, input_path=input_path, **options)
        except ValidationError as exc:  # checked before Dagster loaded (``release_command``): not reached
            raise fail(settings_error(exc)) from None
        # INFO: what the assets log and the errors; DEBUG (--verbose): every step event as well.
        run_config = with_console_level(run_config_for(config), console_level(verbose))
        run = run_release(job, run_config, dataset, tags={"splice/trigger": "cli", "splice/dataset": dataset})
        if run.success:
            return run.record()
        stopped = run.stopped_text()
        if run.interrupted:
            raise Interrupted(f"interrupted: {stopped}")
        spent = "" if stopped == NOTHING_CHARGED else f"; {stopped}"
        raise fail(f"release failed (Dagster run {run.release_id}): {failure_reason(run.result)}{spent}")


def _resume(release_id: str, as_json: bool) -> None:
    """`splice release --resume RELEASE`: finish a charged release from its stored measurement."""
    from splice_assets import progress
    from splice_assets.release.budget_text import release_text
    from splice_assets.release.resume import resume_command, resume_release

    quiet_mlflow()
    try:
        with progress.showing(progress.display_for()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            record = resume_release(release_id)
    except KeyboardInterrupt:
        finish = resume_command(release_id)
        raise Interrupted(f"interrupted: nothing more was charged; `{finish}` finishes it") from None
    if as_json:
        _json_out(record)
        return
    click.echo(f"release {record['release_id']} ({record['dataset']}), finished from its stored measurement")
    _echo_where(record, record["fidelity_report"] or None)
    click.echo(f"this release   {release_text(record['epsilon_cost'], record['delta'])} charged to the ledger when it "
               "was measured; nothing more now")
    click.echo(f"lifetime       {_lifetime_now(record['dataset'])}")


@main.command("releases")
@click.option("--dataset", default=None, help="Only this dataset.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
@guarded
def releases_command(dataset: str | None, as_json: bool) -> None:
    """List releases with their epsilon, delta, date and status (ledger + release folders)."""
    rows = release_rows(dataset)
    if as_json:
        _json_out(rows)
        return
    if not rows:
        click.echo("no releases" + (f" of {dataset!r}" if dataset else "") + f" in {artifact_dir()}")
        return
    from splice_assets.release.budget_text import parts_text

    click.echo(
        f"{'release':<36}  {'dataset':<18} {'kind':<7} {'epsilon':>8} {'delta':>8}  {'created (UTC)':<25} status"
    )
    for r in rows:
        eps = "-" if r["epsilon"] is None else f"{r['epsilon']:g}"
        delta = "-" if r["delta"] is None else f"{r['delta']:g}"
        parent = f" (refit of {r['parent_release_id']})" if r["parent_release_id"] else ""
        parts = f" ({parts_text(r)})" if parts_text(r) else ""
        click.echo(f"{r['release_id']:<36}  {r['dataset']:<18} {r['kind']:<7} {eps:>8} {delta:>8}  "
                   f"{r['created_at'] or '-':<25} {r['status']}{parent}{parts}")


def _ledger_entries_of(location: ReleaseLocation) -> list[dict[str, Any]]:
    ledger = _open_ledger()
    if ledger is None:
        return []
    try:
        return [_entry_dict(e) for e in ledger.entries(location.dataset) if e.release_id == location.release_id]
    finally:
        ledger.close()


@main.command("show")
@click.argument("release_id")
@click.option("--json", "as_json", is_flag=True, help="Print the manifest and ledger entries as JSON.")
@guarded
def show_command(release_id: str, as_json: bool) -> None:
    """Show a release's public manifest (release.json) and its ledger entry."""
    from splice_assets.private.ledger import default_ledger_url
    from splice_assets.release.budget_text import lifetime_text, parts_text, release_text

    location = find_release(release_id)
    manifest = location.manifest()
    entries = _ledger_entries_of(location)
    if as_json:
        _json_out({"manifest": manifest, "ledger_entries": entries, "path": str(location.root)})
        return
    privacy = manifest.get("privacy", {})
    click.echo(f"release     {manifest['release_id']}  ({manifest.get('kind', 'release')})")
    if manifest.get("parent_release_id"):
        click.echo(f"parent      {manifest['parent_release_id']}")
    click.echo(f"dataset     {manifest['dataset']} (schema v{manifest.get('schema_version')})")
    click.echo(f"created     {manifest.get('created_at', '-')}")
    click.echo(f"guarantee   ({privacy.get('epsilon')}, {privacy.get('delta')})-DP, relation {privacy.get('relation')}")
    parts = parts_text({"epsilon_estimate": privacy.get("epsilon_estimate"),  # older manifests: measurement_epsilon
                        "epsilon_measurement": privacy.get("epsilon_measurement", privacy.get("measurement_epsilon"))})
    if parts:
        click.echo(f"            {parts} (composed exactly into the guarantee, not added)")
    cost = privacy.get("epsilon_cost")
    refit = manifest.get("kind") == "refit"
    click.echo("this release " + ("-" if cost is None else release_text(cost, None if refit else privacy.get("delta")))
               + " charged" + (" (a zero-cost refit of the parent's measurement)" if refit else ""))
    add_remove = privacy.get("relation") == Relation.ADD_REMOVE
    multiplier = privacy.get("noise_multiplier")
    click.echo(f"mechanism   sigma {privacy.get('sigma'):.6g} on frequencies, Delta {privacy.get('sensitivity'):.6g}"
               + (" on sums and counts" if add_remove else "")
               + ("" if multiplier is None else f", sigma/Delta {multiplier:.4f}")
               + f", L {privacy.get('L')}, k {privacy.get('k')}, n {privacy.get('n')}"
               + (" (noisy)" if add_remove else "")
               + f", seed {privacy.get('directions_seed')}")
    if privacy.get("lifetime_epsilon_spent") is not None and privacy.get("lifetime_delta") is not None:
        lifetime = lifetime_text(privacy["lifetime_epsilon_spent"], privacy.get("lifetime_epsilon_budget"),
                                 privacy["lifetime_delta"], remaining=privacy.get("lifetime_epsilon_remaining"))
        click.echo(f"lifetime    {lifetime}, when this release was made (now: splice budget {manifest['dataset']})")
    click.echo(f"rows        {manifest.get('synthetic_rows')} synthetic")
    mlflow_info = manifest.get("mlflow") or {}
    if mlflow_info.get("run_id"):
        click.echo(f"MLflow      run {mlflow_info['run_id']}, model {mlflow_info.get('registered_model')} "
                   f"v{mlflow_info.get('registered_model_version')}")
    click.echo(f"public      {location.public_dir}")
    for e in entries:
        click.echo(f"ledger      {e['part']} part {e['ledger_entry_id']} {e['status']} {e['mechanism']} epsilon "
                   f"{e['epsilon']:g} alone, delta {e['delta']:g} at {e['created_at']}")
    if not entries:
        click.echo("ledger      no entry for this release in " + _redact(default_ledger_url()))


@main.command("refit")
@click.argument("release_id")
@click.option(
    "--K", "--components", "components", default=None, type=int, help="Mixture components [default: parent's]."
)
@click.option("--steps", default=None, type=int, help="Maximum fitting steps [default: parent's].")
@click.option("--rows", default=None, type=int, help="Synthetic rows [default: parent's].")
@click.option("--seed", default=None, type=int, help="Fit/sampling seed [default: parent's].")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@guarded
def refit_command(release_id: str, components: int | None, steps: int | None, rows: int | None,
                  seed: int | None, as_json: bool) -> None:
    """Refit a release's stored noisy moments into a new zero-cost release (no real rows read)."""
    from splice_assets.release.budget_text import release_text
    from splice_assets.release.refit import refit_release

    quiet_mlflow()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        record = refit_release(release_id, components, steps, rows, seed)
    if as_json:
        _json_out(record)
        return
    click.echo(f"release {record['release_id']} (zero-cost refit of {record['parent_release_id']})")
    click.echo(f"public bundle  {record['public_dir']}")
    click.echo(f"MLflow run     {record['mlflow_run_id']}")
    click.echo(f"this release   {release_text(0.0)} charged (post-processing of the parent's measurement)")
    click.echo(f"lifetime       {_lifetime_now(record['dataset'])}")


@main.command("sample")
@click.argument("release_id")
@click.option("-n", "--rows", "n_rows", required=True, type=click.IntRange(0, 10_000_000), help="Rows to sample.")
@click.option("--seed", default=None, type=int, help="Sampling seed [default: the release's public seed].")
@click.option("--out", default=None, type=click.Path(dir_okay=False),
              help="Write .csv (formula-escaped) or .parquet; without it the first rows are printed.")
@click.option("--force", is_flag=True, help="Overwrite an existing --out file.")
@click.option("--where", default=None, metavar="CONDITION",
              help="Sample from the model's conditional law: clauses joined by 'and', such as \"status == 'paid'\", "
                   "\"state in ('CA', 'NY')\", 'amount >= 10', 'amount <= 100', 'age between 30 and 40'.")
@guarded
def sample_command(release_id: str, n_rows: int, seed: int | None, out: str | None, force: bool,
                   where: str | None) -> None:
    """Sample rows from a release's fitted model (post-processing: no privacy cost); --where conditions them."""
    from splice_assets.conditions import parse_where
    from splice_assets.release.bundle import write_csv_escaped
    from splice_assets.sampling import load_model, sample_table
    from splice_assets.schema import load_schema

    location = find_release(release_id)
    manifest = location.manifest()
    suffix = None if out is None else "".join(Path(out).suffixes[-1:]).lower()
    if suffix not in (None, ".csv", ".parquet"):
        raise fail(f"--out must end in .csv or .parquet, got {out!r}")
    if out is not None and Path(out).exists() and not force:
        raise fail(f"--out {out!r} exists: give --force to overwrite it, or another file name")
    model = load_model(location.public_dir / "model")
    schema = load_schema(location.public_dir / "schema.yaml")
    if seed is None:
        seed = int((manifest.get("parameters") or {}).get("seed", 0))
    try:
        conditions = parse_where(where, schema) if where is not None else None
        table = sample_table(model, schema, n_rows, seed, where=conditions)
    except ValueError as error:  # a bad --where (quoted), or a condition the model gives (near) zero probability
        raise fail(str(error)) from None
    report = table.attrs.get("condition")
    if report:
        click.echo(f"where {report['where']}: probability {report['probability']:.3g} under the model; "
                   f"{report['rejected_share']:.1%} of {report['drawn']:,} drawn rows rejected by the final check",
                   err=True)
    if out is None:
        click.echo(table.head(20).to_string(index=False))
        if n_rows > 20:
            click.echo(f"... ({n_rows} rows; use --out FILE to write them all)")
        return
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    if suffix == ".csv":
        write_csv_escaped(table, Path(out), schema)
    else:
        table.to_parquet(out, index=False)
    click.echo(f"wrote {n_rows} rows to {out}")


@main.command("query")
@click.argument("release_id")
@click.argument("query")
@click.option("--replicates", default=None, type=click.IntRange(2, 200),
              help="Re-noised refits behind a bootstrap interval, each a fit [default: 20]; built once per release "
                   "and kept beside its public bundle (<release>/query-basis).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@guarded
def query_command(release_id: str, query: str, replicates: int | None, as_json: bool) -> None:
    """Answer QUERY from a release with a 95% interval (post-processing: no privacy cost).

    QUERY is count, share, mean(column) or sum(column), optionally followed by 'where' and conditions as --where
    of `splice sample` takes them: "count where status == 'paid' and amount >= 100"."""
    from splice_assets.queries import DEFAULT_REPLICATES, QueryAnswerer, QueryBasis, parse_query
    from splice_assets.release.refit import release_synthesizer

    location = find_release(release_id)
    synth = release_synthesizer(location)
    try:
        parsed = parse_query(query, synth.schema)  # refused before any refit
    except ValueError as error:
        raise fail(str(error)) from None
    if synth.model is None or synth.measurement is None:
        raise fail(f"release {location.release_id!r} has no fitted model in its public bundle")
    replicates = replicates or DEFAULT_REPLICATES
    answer = QueryAnswerer(synth.measurement, synth.schema).exact(parsed)  # a measured answer needs no refits
    if answer is None:
        folder = location.root / "query-basis"  # public post-processing, beside the bundle (export copies it)
        basis = QueryBasis.load(folder) if (folder / "basis.json").is_file() else None
        if basis is None or len(basis.replicates) != replicates:
            if not as_json:
                click.echo(f"building the query basis of {location.release_id}: {replicates} re-noised refits "
                           "(once per release)", err=True)
            basis = QueryBasis.build(synth, replicates)
            basis.save(folder)
        answer = QueryAnswerer(synth.measurement, synth.schema, basis).answer(parsed)
    if as_json:
        _json_out(answer.as_dict())
    else:
        click.echo(answer.describe())


@main.command("export")
@click.argument("release_id")
@click.argument("directory", type=click.Path(file_okay=False))
@guarded
def export_command(release_id: str, directory: str) -> None:
    """Copy ONLY the public bundle of a release into DIRECTORY (new or empty)."""
    location = find_release(release_id)
    location.manifest()  # refuses an incomplete release
    target = Path(directory)
    if target.exists() and any(target.iterdir()):
        raise fail(f"export directory {directory!r} is not empty")
    target.mkdir(parents=True, exist_ok=True)
    copied = []
    for path in sorted(location.public_dir.iterdir()):
        if path.is_file() and not path.is_symlink():
            shutil.copy2(path, target / path.name)
            copied.append(path.name)
    click.echo(f"exported {len(copied)} public files of {location.release_id} to {target}: {', '.join(copied)}")


for _group in (budget_group, ledger_group, schema_group):
    main.add_command(_group)


if __name__ == "__main__":  # pragma: no cover  (after the groups are added: `python -m splice_assets.cli budget`)
    main()
