"""Pre-flight checks of a release: everything that can fail is checked before any budget is reserved.

A release that is charged and then fails (an overflow in the model at k = 20,000, an accountant asked for
epsilon = 10^6, an out-of-memory at L = 2 * 10^8) spends budget and releases nothing. So every entry point checks its
settings against their limits (``splice_assets.limits``, through ``splice_assets.config``) where they enter (also at
launch in Dagster), and the release path calls ``check_release`` once the input's row count is known, before the first
reservation and before any folder is written. Every message quotes the bad value.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from splice_assets.limits import MAX_COMPONENTS as MAX_COMPONENTS
from splice_assets.limits import MAX_DIRECTIONS as MAX_DIRECTIONS
from splice_assets.limits import MAX_EPSILON as MAX_EPSILON
from splice_assets.limits import MAX_K as MAX_K
from splice_assets.limits import MAX_SYNTHETIC_ROWS as MAX_SYNTHETIC_ROWS
from splice_assets.limits import Relation
from splice_assets.private.ledger import BUDGET_TOLERANCE, BudgetLedger, NoBudget, gaussian_delta
from splice_assets.private.mechanism import PrivacyParameterError, compose_epsilon
from splice_assets.schema import TableSchema

#: Share of the machine's memory a release may plan to use.
MEMORY_SHARE = 0.8


class PreflightError(PrivacyParameterError):
    """A release setting cannot succeed; nothing was charged or written."""


def estimated_peak_bytes(n_rows: int, d: int, n_directions: int, k: int, components: int, cells: int) -> int:
    """An upper estimate of a release's peak memory: the table and its encoding (a few copies of n x d), the
    directions and one chunk of projections, the model's moments per component and order, and the cells of the
    measured tables per component. Order of magnitude only: it guards against settings that cannot fit."""
    floats = (
        6 * n_rows * d
        + n_directions * d
        + 4 * 1024 * n_directions
        + 8 * components * n_directions * (k + 1)
        + 4 * components * cells
    )
    return 8 * floats + 600 * 2**20  # interpreter, torch and the libraries


def available_memory_bytes() -> int:
    """Physical memory, or the cgroup's limit when lower (a container)."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(limit_file).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return total


@dataclass(frozen=True)
class ReleaseCost:
    """What one release charges: its Gaussian measurements (sigma / Delta: the moments and tables, any DP bounds)
    and any pure-epsilon parts."""

    noise_multipliers: tuple[float, ...]
    pure_epsilons: tuple[float, ...] = ()
    #: The delta its thresholds spend beside its Gaussians (``categories: auto``): the lifetime's Gaussians compose
    #: at delta_total less it (``ledger.gaussian_delta``). ``check_release`` reads it from the schema when 0.
    selection_delta: float = 0.0


def check_release(
    schema: TableSchema,
    relation: Relation | str,
    delta: float,
    n_rows: int,
    d: int,
    n_directions: int,
    k: int,
    components: int,
    cells: int,
    ledger: BudgetLedger,
    cost: ReleaseCost,
    memory_bytes: int | None = None,
    rows_in_memory: int | None = None,
) -> None:
    """Checks that need the input's row count and the ledger, run before the first reservation.

    - delta < 1/n for the public n (replace-one) or 1/n_min (add-remove, where only n_min is public), and delta
      <= the dataset's lifetime delta, which itself must be < 1/n_min;
    - the dataset has a lifetime budget (set by an administrator), under this relation, and the whole release,
      bounds estimation included, fits it;
    - the planned memory fits the machine, for ``rows_in_memory`` rows at a time (default: all ``n_rows`` under
      replace-one, n_min under add-remove; a streamed input holds one batch and the report's samples).
    """
    public_n = n_rows if relation == Relation.REPLACE_ONE else schema.n_min
    if not delta < 1.0 / public_n:
        which = "the public row count n" if relation == Relation.REPLACE_ONE else "the schema's n_min"
        raise PreflightError(f"delta must be < 1/{public_n} (1 over {which}), got {delta!r}")
    budget = ledger.budget(schema.name)
    if budget is None:
        raise NoBudget(
            f"no lifetime privacy budget is set for dataset {schema.name!r}; an administrator sets one with "
            f"`splice budget set {schema.name} --epsilon E --delta D`"
        )
    if budget.relation != relation:
        raise PreflightError(
            f"dataset {schema.name!r} is accounted under relation {budget.relation!r}; refusing a release under "
            f"{relation!r} (never mix relations in one ledger)"
        )
    if not budget.delta_total < 1.0 / schema.n_min:
        raise PreflightError(
            f"the lifetime delta of {schema.name!r} ({budget.delta_total!r}) must be < 1/n_min = 1/{schema.n_min}; "
            "an administrator lowers it with `splice budget set`"
        )
    if delta > budget.delta_total:
        raise PreflightError(f"delta {delta!r} exceeds the dataset's lifetime delta {budget.delta_total!r}")
    if not cost.selection_delta:
        from dataclasses import replace

        from splice_assets.private.bounds import selection_delta

        cost = replace(cost, selection_delta=selection_delta(schema, delta))
    spent, after = ledger_projection(ledger, schema.name, budget.delta_total, cost)
    if after > budget.epsilon_total + BUDGET_TOLERANCE:
        raise PreflightError(
            f"this release would bring dataset {schema.name!r} to a lifetime epsilon of {after:.4f} at delta "
            f"{budget.delta_total:g} (spent so far {spent:.4f}, budget {budget.epsilon_total:g}); nothing was charged"
        )
    if rows_in_memory is None:
        # Under add-remove the row count is private: a refusal that depends on it would publish a bit of it in the
        # run's outcome, so only public settings (n_min for the rows) decide it. An input too large for the machine
        # then fails as it would unrefused: this check only moves what public settings make certain before a charge.
        rows_in_memory = n_rows if relation == Relation.REPLACE_ONE else schema.n_min
    needed = estimated_peak_bytes(rows_in_memory, d, n_directions, k, components, cells)
    limit = MEMORY_SHARE * (available_memory_bytes() if memory_bytes is None else memory_bytes)
    if needed > limit:
        # The row count is private under add-remove: only the public settings go into the message.
        rows = f"n={n_rows}, " if relation == Relation.REPLACE_ONE else ""
        raise PreflightError(
            f"the release would need about {needed / 2**30:.1f} GiB of memory ({rows}d={d}, L={n_directions}, "
            f"k={k}, K={components}, {cells} table cells), more than {limit / 2**30:.1f} GiB available; lower L, K "
            "or k"
        )


def ledger_projection(ledger: BudgetLedger, dataset: str, delta_total: float, cost: ReleaseCost) -> tuple[float, float]:
    """(lifetime epsilon spent, lifetime epsilon after this release), both composed at the lifetime delta less the
    delta spent by category thresholds, the ledger's and this release's (``ledger.gaussian_delta``); inf when that
    leaves no delta."""
    gaussian, pure = ledger.counted(dataset)
    held = ledger.selection_spent(dataset)
    before_at = gaussian_delta(delta_total, [held])
    after_at = gaussian_delta(delta_total, [held, cost.selection_delta])
    spent = compose_epsilon(gaussian, before_at, pure) if before_at > 0.0 else math.inf
    after = (compose_epsilon([*gaussian, *cost.noise_multipliers], after_at, [*pure, *cost.pure_epsilons])
             if after_at > 0.0 else math.inf)
    return spent, after if math.isfinite(after) else math.inf
