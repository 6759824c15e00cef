"""The budget ledger's tables, statuses and the records read from them (``private.ledger`` keeps the budget).

Public parameters and mechanism metadata only: never a noise draw, a private value or an exact private count.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

STATUS_RESERVED = "reserved"
STATUS_COMMITTED = "committed"
STATUS_ABORTED = "aborted"
#: A dead run's reservation resolved without a stored measurement: its noise may have been drawn, so it counts.
STATUS_EXPIRED = "expired"
COUNTED_STATUSES = (STATUS_RESERVED, STATUS_COMMITTED, STATUS_EXPIRED)

_metadata = sa.MetaData()

budgets_table = sa.Table(
    "splice_budgets",
    _metadata,
    sa.Column("dataset", sa.String(255), primary_key=True),
    sa.Column("epsilon_total", sa.Double, nullable=False),
    sa.Column("delta_total", sa.Double, nullable=False),
    sa.Column("relation", sa.String(32), nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)

entries_table = sa.Table(
    "splice_ledger_entries",
    _metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("dataset", sa.String(255), sa.ForeignKey("splice_budgets.dataset"), nullable=False, index=True),
    sa.Column("release_id", sa.String(255), nullable=False),
    sa.Column("parent_release_id", sa.String(255), nullable=True),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("mechanism", sa.String(64), nullable=False),
    sa.Column("noise_multiplier", sa.Double, nullable=True),  # NULL = zero cost
    sa.Column("sigma", sa.Double, nullable=True),
    sa.Column("sensitivity", sa.Double, nullable=True),
    sa.Column("epsilon", sa.Double, nullable=False),
    sa.Column("delta", sa.Double, nullable=False),
    sa.Column("relation", sa.String(32), nullable=False),
    sa.Column("params_hash", sa.String(64), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    # The delta a draw's thresholds spend beside its Gaussian (``categories: auto``): the lifetime composes the
    # Gaussian entries at delta_total less the sum of these over counted entries. Added after the first ledgers:
    # ``ledger.BudgetLedger`` adds it to an older table (``upgrade_entries_table``), existing rows read 0.
    sa.Column("selection_delta", sa.Double, nullable=False, server_default=sa.text("0")),
)

#: Columns added to ``splice_ledger_entries`` after its first version, in order: an older ledger gets them (with
#: their server default) when opened (``ledger.BudgetLedger``).
ADDED_ENTRY_COLUMNS = ("selection_delta",)

# Append-only audit of every set_budget call (creation included); old_* are NULL when the budget was created.
budget_changes_table = sa.Table(
    "splice_budget_changes",
    _metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("dataset", sa.String(255), sa.ForeignKey("splice_budgets.dataset"), nullable=False, index=True),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("actor", sa.String(255), nullable=False),
    sa.Column("old_epsilon_total", sa.Double, nullable=True),
    sa.Column("old_delta_total", sa.Double, nullable=True),
    sa.Column("old_relation", sa.String(32), nullable=True),
    sa.Column("epsilon_total", sa.Double, nullable=False),
    sa.Column("delta_total", sa.Double, nullable=False),
    sa.Column("relation", sa.String(32), nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
)

# Append-only audit of administrators' resolutions of reservations (resolve, and abort with an actor).
resolutions_table = sa.Table(
    "splice_ledger_resolutions",
    _metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("entry_id", sa.String(32), sa.ForeignKey("splice_ledger_entries.id"), nullable=False, index=True),
    sa.Column("dataset", sa.String(255), nullable=False, index=True),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("actor", sa.String(255), nullable=False),
    sa.Column("old_status", sa.String(16), nullable=False),
    sa.Column("new_status", sa.String(16), nullable=False),
    sa.Column("noise_released", sa.Boolean, nullable=False),
)


# Compositions of ledger entries, keyed by what was composed: a pure function of public parameters, kept so that
# reading the lifetime spend (`splice budget`) loads neither numpy nor, for pure epsilon-DP entries, dp-accounting.
# The key names the composition rule and dp-accounting's version.
compositions_table = sa.Table(
    "splice_compositions",
    _metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("epsilon", sa.Double, nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
)


class LedgerError(RuntimeError):
    """A ledger operation was refused (unknown dataset or entry, wrong state, relation mismatch)."""


class BudgetExceeded(LedgerError):
    """A reservation would push the composed epsilon over the dataset's budget. Nothing was reserved."""


class NoBudget(LedgerError):
    """No budget has been set for the dataset."""


class RelationMismatch(LedgerError):
    """A release's neighbouring relation differs from the one the dataset's ledger uses."""


@dataclass(frozen=True)
class Budget:
    dataset: str
    epsilon_total: float
    delta_total: float
    relation: str


@dataclass(frozen=True)
class LedgerEntry:
    id: str
    dataset: str
    release_id: str
    parent_release_id: str | None
    created_at: datetime
    mechanism: str
    noise_multiplier: float | None
    sigma: float | None
    sensitivity: float | None
    epsilon: float
    delta: float
    relation: str
    params_hash: str
    status: str
    #: The delta its thresholds spend beside its Gaussian (``categories: auto``); 0 for every other draw.
    selection_delta: float = 0.0

    @property
    def counted(self) -> bool:
        return self.status in COUNTED_STATUSES

    @property
    def claimed(self) -> bool:
        """Whether a draw has claimed this entry, so its noise may have been drawn: every entry but a Gaussian part
        that ``reserve_release`` reserved ahead and no draw has claimed yet (it has no sigma until then)."""
        return self.noise_multiplier is None or self.sigma is not None


@dataclass(frozen=True)
class Part:
    """One noisy draw a release will make, priced before any of its noise is drawn (``reserve_release``): its name
    (``estimate``, ``measurement``), mechanism, Gaussian noise multiplier sigma / Delta (what it costs) and, for
    the record, its own (epsilon, delta)."""

    name: str
    mechanism: str
    noise_multiplier: float
    epsilon: float
    delta: float
    #: The delta its thresholds spend beside its Gaussian (the DP estimate of ``categories: auto`` columns).
    selection_delta: float = 0.0


@dataclass(frozen=True)
class BudgetChange:
    """One recorded set_budget call; old_* are None when it created the budget."""

    id: int
    dataset: str
    created_at: datetime
    actor: str
    old_epsilon_total: float | None
    old_delta_total: float | None
    old_relation: str | None
    epsilon_total: float
    delta_total: float
    relation: str
    reason: str


@dataclass(frozen=True)
class Resolution:
    """One administrator's resolution of a reserved entry (to committed, expired or aborted)."""

    id: int
    entry_id: str
    dataset: str
    created_at: datetime
    actor: str
    old_status: str
    new_status: str
    noise_released: bool


def _entry(row: Any) -> LedgerEntry:
    data = dict(row._mapping)
    data["created_at"] = _as_utc(data["created_at"])
    data["selection_delta"] = float(data.get("selection_delta") or 0.0)
    return LedgerEntry(**data)


def _change(row: Any) -> BudgetChange:
    data = dict(row._mapping)
    data["created_at"] = _as_utc(data["created_at"])
    return BudgetChange(**data)


def _resolution(row: Any) -> Resolution:
    data = dict(row._mapping)
    data["created_at"] = _as_utc(data["created_at"])
    data["noise_released"] = bool(data["noise_released"])
    return Resolution(**data)


def _as_utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
