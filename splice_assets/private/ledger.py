"""Persistent privacy-budget ledger (SQLAlchemy 2 Core; SQLite by default, any SQLAlchemy URL).

One budget row per dataset (epsilon_total at delta_total, neighbouring relation) and one entry per noisy draw of a
release (its DP estimate, its measurement) or zero-cost refit. A release reserves everything it will spend at once
(``reserve_release``: one entry per part, refused whole or reserved whole) before any of its noise is drawn; each
draw then *claims* its part just before drawing, and commits it, or aborts it when no noise was drawn. Reserved
and committed entries count; a crash after reservation stays counted (conservative). An administrator resolves a
dead run's reservation (``resolve``): a part no draw claimed is aborted (no noise can have been drawn for it);
otherwise committed if its noisy output is stored, else *expired*, which still counts (its noise may have been
drawn and lost); only ``abort`` un-counts a claimed entry.

A lifetime budget is set only by an explicit ``set_budget`` call, and every call is recorded in
``splice_budget_changes`` (who, when, old -> new, why); administrators' resolutions of reservations are recorded
in ``splice_ledger_resolutions``.
Totals are always recomputed from the stored primitives (sigma/Delta per entry) with ``compose_epsilon`` at
the budget's delta_total, rounded up, and compared with the budget with an explicit tolerance. An entry whose draw
also thresholded keys it could not noise (``categories: auto``) stores the delta that selection spends
(``selection_delta``): the Gaussian entries then compose at delta_total less the sum of those over the counted
entries (``gaussian_delta``), so the lifetime is (epsilon, delta_total)-DP in all; a reservation that would leave
them no delta is refused (``BudgetExceeded``).

Reservations are serialised per dataset: SQLite transactions start with ``BEGIN IMMEDIATE`` (one writer at a
time, others wait on the busy timeout); other backends (PostgreSQL) lock the budget row with
``SELECT ... FOR UPDATE``. The ledger holds only public parameters and mechanism outputs' metadata: never a
noise draw, never a private value, never an exact row count beyond the public n in ``params_hash`` inputs.
"""

from __future__ import annotations

import dataclasses
import getpass
import math
import os
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from decimal import ROUND_FLOOR, Decimal
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.pool import StaticPool

from splice_assets.defaults import dagster_home
from splice_assets.limits import Relation, SettingsError, check_delta_for
from splice_assets.private.errors import PrivacyParameterError

# The composition arithmetic lives in ``ledger_composition``; its names stay importable from here.
from splice_assets.private.ledger_composition import COMPOSITION_RULE as COMPOSITION_RULE
from splice_assets.private.ledger_composition import _compose_epsilon as _compose_epsilon
from splice_assets.private.ledger_composition import _composition_key as _composition_key
from splice_assets.private.ledger_composition import _delta_text as _delta_text
from splice_assets.private.ledger_composition import cached_composition as cached_composition
from splice_assets.private.ledger_composition import gaussian_delta as gaussian_delta
from splice_assets.private.ledger_composition import params_hash as params_hash

# The tables and records live in ``ledger_records``; every name stays importable from here.
from splice_assets.private.ledger_records import (
    ADDED_ENTRY_COLUMNS as ADDED_ENTRY_COLUMNS,
)
from splice_assets.private.ledger_records import (
    COUNTED_STATUSES as COUNTED_STATUSES,
)
from splice_assets.private.ledger_records import (
    STATUS_ABORTED as STATUS_ABORTED,
)
from splice_assets.private.ledger_records import (
    STATUS_COMMITTED as STATUS_COMMITTED,
)
from splice_assets.private.ledger_records import (
    STATUS_EXPIRED as STATUS_EXPIRED,
)
from splice_assets.private.ledger_records import (
    STATUS_RESERVED as STATUS_RESERVED,
)
from splice_assets.private.ledger_records import (
    Budget as Budget,
)
from splice_assets.private.ledger_records import (
    BudgetChange as BudgetChange,
)
from splice_assets.private.ledger_records import (
    BudgetExceeded as BudgetExceeded,
)
from splice_assets.private.ledger_records import (
    LedgerEntry as LedgerEntry,
)
from splice_assets.private.ledger_records import (
    LedgerError as LedgerError,
)
from splice_assets.private.ledger_records import (
    NoBudget as NoBudget,
)
from splice_assets.private.ledger_records import (
    Part as Part,
)
from splice_assets.private.ledger_records import (
    RelationMismatch as RelationMismatch,
)
from splice_assets.private.ledger_records import (
    Resolution as Resolution,
)
from splice_assets.private.ledger_records import (
    _as_utc as _as_utc,
)
from splice_assets.private.ledger_records import (
    _change as _change,
)
from splice_assets.private.ledger_records import (
    _entry as _entry,
)
from splice_assets.private.ledger_records import (
    _metadata as _metadata,
)
from splice_assets.private.ledger_records import (
    _resolution as _resolution,
)
from splice_assets.private.ledger_records import (
    budget_changes_table as budget_changes_table,
)
from splice_assets.private.ledger_records import (
    budgets_table as budgets_table,
)
from splice_assets.private.ledger_records import (
    compositions_table as compositions_table,
)
from splice_assets.private.ledger_records import (
    entries_table as entries_table,
)
from splice_assets.private.ledger_records import (
    resolutions_table as resolutions_table,
)

#: A composed epsilon (already rounded up to 1e-6) may exceed epsilon_total by at most this much.
BUDGET_TOLERANCE = 1e-9
#: Seconds a SQLite writer waits for the lock before giving up.
SQLITE_BUSY_TIMEOUT_S = 120.0

#: delta_total must lie strictly below this (and below 1/n_min when the dataset's public n_min is known):
#: a lifetime delta of 1% or more is not a meaningful guarantee.
DELTA_TOTAL_BOUND = 0.01

def default_actor() -> str:
    """The OS user name recorded as the actor of an administrative change, or "unknown"."""
    try:
        return getpass.getuser() or "unknown"
    except Exception:  # noqa: BLE001 - getuser raises OSError/KeyError when no user name is configured
        return "unknown"


def _check_actor(actor: str | None) -> str:
    actor = default_actor() if actor is None else actor
    if not isinstance(actor, str) or not actor.strip():
        raise LedgerError(f"actor must be a non-empty string, got {actor!r}")
    return actor.strip()


def default_ledger_url() -> str:
    """``$SPLICE_LEDGER_URL`` if set, else a SQLite file ledger.sqlite under ``defaults.dagster_home()`` (as
    Dagster and MLflow find theirs, from any working directory)."""
    url = os.environ.get("SPLICE_LEDGER_URL")
    if url:
        return url
    return f"sqlite:///{(dagster_home() / 'ledger.sqlite').resolve()}"


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _make_engine(url: str) -> Engine:
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return sa.create_engine(parsed, pool_pre_ping=True)
    database = parsed.database or ""
    in_memory = database in ("", ":memory:") or database.startswith("file::memory:")
    if in_memory:
        engine = sa.create_engine(
            parsed, poolclass=StaticPool, connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_S}
        )
    else:
        Path(database).expanduser().resolve().parent.mkdir(parents=True, exist_ok=True)
        engine = sa.create_engine(parsed, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S})

    # SQLAlchemy's recipe: let SQLAlchemy (not the sqlite3 module) emit BEGIN, and make it BEGIN IMMEDIATE so a
    # transaction takes the write lock up front (no read-then-upgrade deadlock, no lost update).
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


def _check_multiplier(noise_multiplier: float) -> float:
    nm = float(noise_multiplier)
    if not (math.isfinite(nm) and nm > 0):
        raise PrivacyParameterError(f"noise_multiplier must be a finite number > 0, got {noise_multiplier!r}")
    return nm


def _check_gaussian(noise_multiplier: float, sigma: float, sensitivity: float) -> float:
    """The noise multiplier of a Gaussian draw, checked against its sigma / sensitivity."""
    nm = _check_multiplier(noise_multiplier)
    if not (math.isfinite(sigma) and sigma > 0 and math.isfinite(sensitivity) and sensitivity > 0):
        raise PrivacyParameterError(f"sigma and sensitivity must be > 0, got {sigma!r}, {sensitivity!r}")
    if abs(sigma / sensitivity - nm) > 1e-6 * nm:
        raise PrivacyParameterError(
            f"noise_multiplier {nm!r} does not equal sigma/sensitivity = {sigma / sensitivity!r}"
        )
    return nm


def _check_part_privacy(epsilon: float, delta: float) -> None:
    if not (math.isfinite(epsilon) and epsilon > 0 and 0 < delta < 1):
        raise PrivacyParameterError(f"per-release (epsilon, delta) must be > 0, got ({epsilon!r}, {delta!r})")


def _check_selection_delta(selection_delta: float, delta: float) -> float:
    """A draw's threshold delta: a number in [0, delta) (its release's delta pays for it and for its Gaussian)."""
    if isinstance(selection_delta, bool) or not isinstance(selection_delta, (int, float)) or not (
            0.0 <= selection_delta < delta):
        raise PrivacyParameterError(f"selection_delta must lie in [0, delta={delta!r}), got {selection_delta!r}")
    return float(selection_delta)


def check_delta_total(delta_total: float, n_min: int | None = None) -> None:
    """Refuse a lifetime delta outside (0, DELTA_TOTAL_BOUND), or >= 1/n_min when the public n_min is given."""
    if isinstance(delta_total, bool) or not isinstance(delta_total, (int, float)):
        raise PrivacyParameterError(f"delta_total must be a number, got {delta_total!r}")
    if not 0.0 < delta_total < DELTA_TOTAL_BOUND:
        raise PrivacyParameterError(f"delta_total must lie in (0, {DELTA_TOTAL_BOUND:g}), got {delta_total!r}")
    if n_min is None:
        return
    # delta >= 1/n would allow releasing one row in the clear and still meet the guarantee: the same limit as a
    # release's delta (``limits.check_delta_for``).
    try:
        check_delta_for(delta_total, n_min, "delta_total")
    except SettingsError as exc:
        raise PrivacyParameterError(str(exc)) from None


def upgrade_entries_table(engine: Engine) -> None:
    """Add the columns added to ``splice_ledger_entries`` since a ledger was created (``ADDED_ENTRY_COLUMNS``, each
    with its server default: an existing entry reads ``selection_delta`` 0, which it spent). Idempotent; another
    process adding the same column meanwhile is not an error."""
    table = entries_table.name
    for name in ADDED_ENTRY_COLUMNS:
        if name in {c["name"] for c in sa.inspect(engine).get_columns(table)}:
            continue
        column = entries_table.c[name]
        default = column.server_default.arg.text  # type: ignore[union-attr]
        kind = column.type.compile(dialect=engine.dialect)
        try:
            with engine.begin() as conn:
                conn.exec_driver_sql(f"ALTER TABLE {table} ADD COLUMN {name} {kind} NOT NULL DEFAULT {default}")
        except sa.exc.DBAPIError:
            if name not in {c["name"] for c in sa.inspect(engine).get_columns(table)}:
                raise


class BudgetLedger:
    """The privacy-budget ledger of all datasets behind one SQLAlchemy URL."""

    def __init__(self, url: str | None = None) -> None:
        self.url = url or default_ledger_url()
        self.engine = _make_engine(self.url)
        try:
            _metadata.create_all(self.engine)
        except sa.exc.DBAPIError:
            # Another process created the tables concurrently (PostgreSQL); the second pass sees them.
            _metadata.create_all(self.engine)
        upgrade_entries_table(self.engine)

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> BudgetLedger:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _read(self, query: Any) -> list[Any]:
        """The rows of a read-only query, in a transaction of its own that is rolled back (nothing to commit)."""
        with self.engine.connect() as conn:
            rows = list(conn.execute(query).all())
            conn.rollback()
        return rows

    @contextmanager
    def _transaction(self) -> Iterator[Connection]:
        with self.engine.begin() as conn:
            yield conn

    # -- budgets -------------------------------------------------------------------------------------------

    def set_budget(
        self,
        dataset: str,
        epsilon_total: float,
        delta_total: float,
        relation: Relation | str = Relation.REPLACE_ONE,
        *,
        actor: str | None = None,
        reason: str = "",
        n_min: int | None = None,
    ) -> Budget:
        """Create or change a dataset's lifetime budget (epsilon_total reported at delta_total); an admin action.

        Every call that creates or changes the budget writes a ``splice_budget_changes`` record (old -> new,
        ``actor``, default the OS user, and ``reason``) in the same transaction; the same values again are a
        no-op. delta_total must lie in (0, DELTA_TOTAL_BOUND) and, when the schema's public ``n_min`` is given,
        below 1/n_min. Lowering the budget below what is already spent is allowed: it
        only refuses further releases. The relation cannot change once the dataset has entries (never mix
        relations in one ledger).
        """
        if not isinstance(dataset, str) or not dataset:
            raise LedgerError(f"dataset must be a non-empty string, got {dataset!r}")
        if isinstance(epsilon_total, bool) or not (
            isinstance(epsilon_total, (int, float)) and math.isfinite(epsilon_total) and epsilon_total >= 0
        ):
            raise PrivacyParameterError(f"epsilon_total must be a finite number >= 0, got {epsilon_total!r}")
        check_delta_total(delta_total, n_min)
        if not isinstance(reason, str):
            raise LedgerError(f"reason must be a string, got {reason!r}")
        actor = _check_actor(actor)
        relation = Relation.parse(relation).value  # stored as the plain string
        epsilon_total, delta_total = float(epsilon_total), float(delta_total)
        now = _utcnow()
        with self._transaction() as conn:
            current = self._lock_budget(conn, dataset)
            if current is None:
                conn.execute(
                    budgets_table.insert().values(
                        dataset=dataset,
                        epsilon_total=epsilon_total,
                        delta_total=delta_total,
                        relation=relation,
                        created_at=now,
                        updated_at=now,
                    )
                )
            elif (current.epsilon_total, current.delta_total, current.relation) == (epsilon_total, delta_total,
                                                                                      relation):
                return current  # the same values again: no change, so no change record
            else:
                if relation != current.relation and self._count_entries(conn, dataset) > 0:
                    raise RelationMismatch(
                        f"dataset {dataset!r} already has entries under relation {current.relation!r}; "
                        f"cannot switch to {relation!r}"
                    )
                conn.execute(
                    budgets_table.update()
                    .where(budgets_table.c.dataset == dataset)
                    .values(
                        epsilon_total=epsilon_total,
                        delta_total=delta_total,
                        relation=relation,
                        updated_at=now,
                    )
                )
            conn.execute(
                budget_changes_table.insert().values(
                    dataset=dataset,
                    created_at=now,
                    actor=actor,
                    old_epsilon_total=None if current is None else current.epsilon_total,
                    old_delta_total=None if current is None else current.delta_total,
                    old_relation=None if current is None else current.relation,
                    epsilon_total=epsilon_total,
                    delta_total=delta_total,
                    relation=relation,
                    reason=reason,
                )
            )
        return Budget(dataset, epsilon_total, delta_total, relation)

    def budget_changes(self, dataset: str) -> list[BudgetChange]:
        """The dataset's recorded budget creations and changes, oldest first."""
        rows = self._read(
            sa.select(budget_changes_table)
            .where(budget_changes_table.c.dataset == dataset)
            .order_by(budget_changes_table.c.id)
        )
        return [_change(r) for r in rows]

    def budget(self, dataset: str) -> Budget | None:
        rows = self._read(sa.select(budgets_table).where(budgets_table.c.dataset == dataset))
        return self._budget(rows[0]) if rows else None

    @staticmethod
    def _budget(row: Any) -> Budget:
        return Budget(row.dataset, float(row.epsilon_total), float(row.delta_total), row.relation)

    def _lock_budget(self, conn: Connection, dataset: str) -> Budget | None:
        # FOR UPDATE serialises reservations on PostgreSQL; SQLite ignores it (BEGIN IMMEDIATE already locked).
        row = conn.execute(
            sa.select(budgets_table).where(budgets_table.c.dataset == dataset).with_for_update()
        ).one_or_none()
        return None if row is None else self._budget(row)

    def _require_budget(self, conn: Connection, dataset: str) -> Budget:
        budget = self._lock_budget(conn, dataset)
        if budget is None:
            raise NoBudget(f"no privacy budget is set for dataset {dataset!r}; set one before any release")
        return budget

    @staticmethod
    def _count_entries(conn: Connection, dataset: str) -> int:
        query = sa.select(sa.func.count()).select_from(entries_table).where(entries_table.c.dataset == dataset)
        return int(conn.execute(query).scalar_one())

    @staticmethod
    def _counted(conn: Connection, dataset: str) -> tuple[list[float], list[float]]:
        """Noise multipliers of counted Gaussian entries and epsilons of counted pure-DP entries (epsilon > 0)."""
        rows = conn.execute(
            sa.select(entries_table.c.noise_multiplier, entries_table.c.epsilon).where(
                entries_table.c.dataset == dataset,
                entries_table.c.status.in_(COUNTED_STATUSES),
                entries_table.c.epsilon > 0,
            )
        ).all()
        gaussian = [float(r.noise_multiplier) for r in rows if r.noise_multiplier is not None]
        return gaussian, [float(r.epsilon) for r in rows if r.noise_multiplier is None]

    @staticmethod
    def _selection_deltas(conn: Connection, dataset: str) -> list[float]:
        """The deltas the counted entries' thresholds spent (``selection_delta`` > 0)."""
        rows = conn.execute(
            sa.select(entries_table.c.selection_delta).where(
                entries_table.c.dataset == dataset,
                entries_table.c.status.in_(COUNTED_STATUSES),
                entries_table.c.selection_delta > 0,
            )
        ).all()
        return [float(r.selection_delta) for r in rows]

    @staticmethod
    def _check_relation(conn: Connection, budget: Budget, relation: Relation | str) -> None:
        other = conn.execute(
            sa.select(entries_table.c.relation)
            .where(entries_table.c.dataset == budget.dataset, entries_table.c.relation != relation)
            .limit(1)
        ).one_or_none()
        if relation != budget.relation or other is not None:
            existing = budget.relation if relation != budget.relation or other is None else other.relation
            raise RelationMismatch(
                f"dataset {budget.dataset!r} is accounted under relation {existing!r}; "
                f"refusing a release under {relation!r} (never mix relations in one ledger)"
            )

    # -- spends --------------------------------------------------------------------------------------------

    def reserve(
        self,
        dataset: str,
        release_id: str,
        mechanism: str,
        noise_multiplier: float,
        sigma: float,
        sensitivity: float,
        epsilon: float,
        delta: float,
        relation: Relation | str,
        params_hash: str,
        parent_release_id: str | None = None,
        selection_delta: float = 0.0,
    ) -> str:
        """Atomically reserve one Gaussian draw; returns the entry id. Call *before* drawing any noise.

        All counted (reserved, committed, expired) entries of the dataset plus the new one are composed at
        delta_total less their ``selection_delta`` (``compose_epsilon``, rounded up); refuses with ``BudgetExceeded``
        if that exceeds epsilon_total or leaves no delta. ``selection_delta``: what the draw's thresholds spend
        beside its Gaussian (``categories: auto``). A release of several draws reserves them together instead
        (``reserve_release``).
        """
        nm = _check_gaussian(noise_multiplier, sigma, sensitivity)
        _check_part_privacy(epsilon, delta)
        held = _check_selection_delta(selection_delta, delta)
        return self._reserve(
            dataset, relation, f"this release (epsilon={epsilon:g}, delta={delta:g})",
            [dict(release_id=str(release_id), parent_release_id=parent_release_id, mechanism=str(mechanism),
                  noise_multiplier=nm, sigma=float(sigma), sensitivity=float(sensitivity), epsilon=float(epsilon),
                  delta=float(delta), params_hash=str(params_hash), selection_delta=held)],
        )[0]

    def reserve_release(
        self, dataset: str, release_id: str, relation: Relation, parts: Sequence[Part]
    ) -> dict[str, str]:
        """Atomically reserve everything one release will spend, before any of its noise is drawn; returns each
        part's entry id by name.

        All counted entries plus every part are composed at delta_total in one locked transaction, as ``reserve``
        does for one draw: the release fits whole or is refused whole (``BudgetExceeded``, nothing reserved), so
        racing releases never spend a DP estimate for a release that then cannot measure. Each part becomes a
        ``reserved`` entry with its noise multiplier and no sigma yet; its draw ``claim``s it just before drawing.
        """
        names = [p.name for p in parts]
        if not parts or len(set(names)) != len(names):
            raise LedgerError(f"a release reserves one or more parts with distinct names, got {names!r}")
        for part in parts:
            _check_multiplier(part.noise_multiplier)
            _check_part_privacy(part.epsilon, part.delta)
            _check_selection_delta(part.selection_delta, part.delta)
        delta = max(p.delta for p in parts)
        # the release's epsilon: its Gaussian parts composed at its delta less what its thresholds spend
        gaussian_at = gaussian_delta(delta, [p.selection_delta for p in parts])
        if gaussian_at <= 0.0:
            raise PrivacyParameterError(f"the parts' selection_delta leave no delta of {delta!r} to their Gaussians")
        epsilon = self.composed([p.noise_multiplier for p in parts], gaussian_at)
        ids = self._reserve(
            dataset, relation, f"this release (epsilon={epsilon:g}, delta={delta:g}; {' + '.join(names)})",
            [dict(release_id=str(release_id), parent_release_id=None, mechanism=str(p.mechanism),
                  noise_multiplier=float(p.noise_multiplier), sigma=None, sensitivity=None, epsilon=float(p.epsilon),
                  delta=float(p.delta), params_hash="", selection_delta=float(p.selection_delta)) for p in parts],
        )
        return dict(zip(names, ids))

    def claim(
        self, entry_id: str, *, dataset: str, release_id: str, mechanism: str, noise_multiplier: float, sigma: float,
        sensitivity: float, relation: Relation | str, params_hash: str, selection_delta: float = 0.0,
    ) -> bool:
        """Claim a part of a release's reservation for the draw about to use it, recording the draw's mechanism,
        noise multiplier, sigma, sensitivity and parameters. Call *before* drawing its noise.

        Returns False, changing nothing, when the part can no longer be claimed: an earlier attempt claimed, committed
        or aborted it (its noise may be spent), so the caller reserves afresh. Refuses a draw of another release or
        relation, one whose noise multiplier is not the reserved one (beyond float rounding, far below the 1e-6
        that composed epsilons are rounded up to), or one whose thresholds spend more delta (``selection_delta``)
        than the part reserved: it would spend other than what was charged.
        """
        nm = _check_gaussian(noise_multiplier, sigma, sensitivity)
        with self._transaction() as conn:
            entry = self._locked_entry(conn, entry_id)
            if entry.status != STATUS_RESERVED or entry.claimed or entry.noise_multiplier is None:
                return False
            if (entry.dataset, entry.release_id, entry.relation) != (dataset, str(release_id), relation):
                raise LedgerError(f"ledger entry {entry_id!r} is reserved for release {entry.release_id!r} of "
                                  f"{entry.dataset!r} under {entry.relation!r}, not for this draw")
            reserved = entry.noise_multiplier
            if abs(nm - reserved) > 1e-9 * reserved:
                raise PrivacyParameterError(
                    f"the draw's noise multiplier {nm!r} is not the {reserved!r} reserved for ledger entry {entry_id!r}"
                )
            if float(selection_delta) > entry.selection_delta:
                raise PrivacyParameterError(
                    f"the draw's thresholds spend delta {selection_delta!r}, more than the {entry.selection_delta!r} "
                    f"reserved for ledger entry {entry_id!r}"
                )
            conn.execute(entries_table.update().where(entries_table.c.id == entry_id).values(
                mechanism=str(mechanism), noise_multiplier=nm, sigma=float(sigma), sensitivity=float(sensitivity),
                params_hash=str(params_hash)))
        return True

    def withdraw(self, entry_id: str, *, actor: str | None = None) -> bool:
        """Abort a reserved part that no draw has claimed: no noise can have been drawn for it (every draw claims
        its part first). Returns whether it did; any other entry is left as it is. Recorded with an ``actor``."""
        with self._transaction() as conn:
            entry = self._locked_entry(conn, entry_id)
            if entry.status != STATUS_RESERVED or entry.claimed:
                return False
            self._set_status(conn, entry, STATUS_ABORTED, actor, noise_released=False)
        return True

    def reserve_pure(
        self, dataset: str, release_id: str, mechanism: str, epsilon: float, relation: Relation, params_hash: str
    ) -> str:
        """Atomically reserve a pure epsilon-DP release (e.g. DP bound estimation); same rules as ``reserve``."""
        if not (math.isfinite(epsilon) and epsilon > 0):
            raise PrivacyParameterError(f"epsilon must be a finite number > 0, got {epsilon!r}")
        return self._reserve(
            dataset, relation, f"{mechanism} at epsilon={epsilon:g}",
            [dict(release_id=str(release_id), parent_release_id=None, mechanism=str(mechanism), noise_multiplier=None,
                  sigma=None, sensitivity=None, epsilon=float(epsilon), delta=0.0, params_hash=str(params_hash))],
        )[0]

    def _reserve(self, dataset: str, relation: Relation | str, what: str, rows: Sequence[dict[str, Any]]) -> list[str]:
        """Compose all counted entries plus ``rows`` at delta_total inside one locked transaction; refuse with
        ``BudgetExceeded`` (nothing inserted) if the rounded-up total exceeds epsilon_total, else insert every row
        as reserved. A row without a noise multiplier is a pure epsilon-DP event."""
        multipliers = [float(r["noise_multiplier"]) for r in rows if r["noise_multiplier"] is not None]
        pure = [float(r["epsilon"]) for r in rows if r["noise_multiplier"] is None]
        selection = [float(r.get("selection_delta", 0.0)) for r in rows]
        with self._transaction() as conn:
            budget = self._require_budget(conn, dataset)
            self._check_relation(conn, budget, relation)
            existing, existing_pure = self._counted(conn, dataset)
            existing_held = self._selection_deltas(conn, dataset)
            held = [*existing_held, *selection]
            at = gaussian_delta(budget.delta_total, held)
            total = (self._composed(conn, [*existing, *multipliers], at, [*existing_pure, *pure]) if at > 0.0
                     else math.inf)

            def exceeded(would_bring: str) -> BudgetExceeded:
                spent = self._spent_of(conn, existing, budget.delta_total, existing_pure, existing_held)
                return BudgetExceeded(
                    f"privacy budget exceeded for dataset {dataset!r}: spent epsilon={spent:.6f} "
                    f"({len(existing) + len(existing_pure)} entries), {what} would bring {would_bring}, "
                    f"budget epsilon={budget.epsilon_total:g}"
                )

            if at <= 0.0:
                raise exceeded(f"the delta spent by category thresholds to {sum(held):g}, leaving none of "
                               f"delta={budget.delta_total:g} to the Gaussian entries")
            if total > budget.epsilon_total + BUDGET_TOLERANCE:
                raise exceeded(f"the total to epsilon={total:.6f} at delta={_delta_text(budget.delta_total, held)}")
            return [self._insert(conn, dataset=dataset, relation=str(relation), status=STATUS_RESERVED, **row)
                    for row in rows]

    @staticmethod
    def _locked_entry(conn: Connection, entry_id: str) -> LedgerEntry:
        row = conn.execute(
            sa.select(entries_table).where(entries_table.c.id == entry_id).with_for_update()
        ).one_or_none()
        if row is None:
            raise LedgerError(f"no ledger entry with id {entry_id!r}")
        return _entry(row)

    @staticmethod
    def _set_status(conn: Connection, entry: LedgerEntry, target: str, actor: str | None,
                    noise_released: bool) -> None:
        """Move ``entry`` to ``target``; with an ``actor``, record the resolution."""
        conn.execute(entries_table.update().where(entries_table.c.id == entry.id).values(status=target))
        if actor is not None:
            conn.execute(
                resolutions_table.insert().values(
                    entry_id=entry.id,
                    dataset=entry.dataset,
                    created_at=_utcnow(),
                    actor=actor,
                    old_status=entry.status,
                    new_status=target,
                    noise_released=bool(noise_released),
                )
            )

    @staticmethod
    def _insert(conn: Connection, **fields: Any) -> str:
        entry_id = uuid.uuid4().hex
        conn.execute(entries_table.insert().values(id=entry_id, created_at=_utcnow(), **fields))
        return entry_id

    def _transition(
        self,
        entry_id: str,
        target: str,
        allowed_from: tuple[str, ...] = (STATUS_RESERVED,),
        verb: str | None = None,
        actor: str | None = None,
        noise_released: bool = False,
    ) -> LedgerEntry:
        """Move one entry to ``target`` inside a locked transaction; with an ``actor``, record the resolution."""
        verb = verb or target
        with self._transaction() as conn:
            entry = self._locked_entry(conn, entry_id)
            if entry.status == target == STATUS_COMMITTED and verb == STATUS_COMMITTED:
                return entry  # idempotent commit (a retried step)
            if entry.status not in allowed_from:
                raise LedgerError(
                    f"ledger entry {entry_id!r} is {entry.status!r}; only a {' or '.join(allowed_from)} entry "
                    f"can be {verb}"
                )
            self._set_status(conn, entry, target, actor, noise_released)
        return dataclasses.replace(entry, status=target)

    def commit(self, entry_id: str) -> None:
        """Mark a reserved entry committed (the noisy release exists). Committing twice is a no-op.

        An entry an administrator already resolved as expired may still be committed by its (slow, not dead) run:
        both statuses count, so this only records that the release does exist.
        """
        self._transition(entry_id, STATUS_COMMITTED, allowed_from=(STATUS_RESERVED, STATUS_EXPIRED))

    def abort(self, entry_id: str, *, actor: str | None = None) -> None:
        """Release a reservation. Only legal while reserved and only if NO noise was drawn for it.

        The release protocol aborts without an actor; an administrator passes ``actor`` and the abort is recorded
        in ``splice_ledger_resolutions``.
        """
        self._transition(
            entry_id, STATUS_ABORTED, actor=None if actor is None else _check_actor(actor), noise_released=False
        )

    def resolve(self, entry_id: str, *, noise_released: bool, actor: str) -> LedgerEntry:
        """Resolve a reservation whose run died; returns the entry with its new status. Recorded with ``actor``.

        The rule: a part of a release's reservation that no draw claimed is aborted, since every draw claims its
        part before drawing (``withdraw``). A claimed entry may have had its noise drawn before the process died,
        so resolving never un-counts it. If its noisy output is stored (the caller checked and passes
        ``noise_released=True``) the entry becomes ``committed``. Otherwise it becomes ``expired``, which still
        counts toward the budget: noise may have been drawn and lost, and nothing proves otherwise. Only
        ``abort`` un-counts, and only when the caller knows that no noise was drawn. Refuses a non-reserved entry.
        """
        if not isinstance(noise_released, bool):
            raise LedgerError(f"noise_released must be True or False, got {noise_released!r}")
        actor = _check_actor(actor)
        if self.withdraw(entry_id, actor=actor):
            return self.entry(entry_id)
        target = STATUS_COMMITTED if noise_released else STATUS_EXPIRED
        return self._transition(entry_id, target, verb="resolved", actor=actor, noise_released=noise_released)

    def stale_reservations(self, older_than: timedelta, dataset: str | None = None) -> list[LedgerEntry]:
        """Entries still ``reserved`` that were created more than ``older_than`` ago (all datasets, or one)."""
        if not isinstance(older_than, timedelta) or older_than < timedelta(0):
            raise LedgerError(f"older_than must be a timedelta >= 0, got {older_than!r}")
        query = sa.select(entries_table).where(
            entries_table.c.status == STATUS_RESERVED, entries_table.c.created_at < _utcnow() - older_than
        )
        if dataset is not None:
            query = query.where(entries_table.c.dataset == dataset)
        return [_entry(r) for r in self._read(query.order_by(entries_table.c.created_at, entries_table.c.id))]

    def resolutions(self, dataset: str) -> list[Resolution]:
        """Administrators' recorded resolutions of the dataset's reservations, oldest first."""
        rows = self._read(
            sa.select(resolutions_table)
            .where(resolutions_table.c.dataset == dataset)
            .order_by(resolutions_table.c.id)
        )
        return [_resolution(r) for r in rows]

    def record_zero_cost(
        self,
        dataset: str,
        release_id: str,
        parent_release_id: str,
        mechanism: str = "refit",
        params_hash: str = "",
        relation: Relation | None = None,
    ) -> str:
        """Record a post-processing release (e.g. a refit of stored noisy moments): epsilon 0, committed.

        The parent release must have a committed entry for the dataset (the charged measurement it reuses).
        """
        with self._transaction() as conn:
            budget = self._require_budget(conn, dataset)
            chosen = budget.relation if relation is None else str(relation)  # stored as the plain string
            self._check_relation(conn, budget, chosen)
            parent = conn.execute(
                sa.select(entries_table.c.id)
                .where(
                    entries_table.c.dataset == dataset,
                    entries_table.c.release_id == parent_release_id,
                    entries_table.c.status == STATUS_COMMITTED,
                )
                .limit(1)
            ).one_or_none()
            if parent is None:
                raise LedgerError(
                    f"dataset {dataset!r} has no committed release {parent_release_id!r} "
                    "to derive a zero-cost release from"
                )
            return self._insert(
                conn, dataset=dataset, release_id=str(release_id), parent_release_id=str(parent_release_id),
                mechanism=str(mechanism), noise_multiplier=None, sigma=None, sensitivity=None, epsilon=0.0,
                delta=0.0, relation=chosen, params_hash=str(params_hash), status=STATUS_COMMITTED,
            )

    # -- reports -------------------------------------------------------------------------------------------

    def entries(self, dataset: str) -> list[LedgerEntry]:
        rows = self._read(
            sa.select(entries_table)
            .where(entries_table.c.dataset == dataset)
            .order_by(entries_table.c.created_at, entries_table.c.id)
        )
        return [_entry(r) for r in rows]

    def entry(self, entry_id: str) -> LedgerEntry:
        rows = self._read(sa.select(entries_table).where(entries_table.c.id == entry_id))
        if not rows:
            raise LedgerError(f"no ledger entry with id {entry_id!r}")
        return _entry(rows[0])

    def _get_budget(self, dataset: str) -> Budget:
        budget = self.budget(dataset)
        if budget is None:
            raise NoBudget(f"no privacy budget is set for dataset {dataset!r}")
        return budget

    def spent(self, dataset: str) -> tuple[float, float]:
        """(composed epsilon of the counted entries (reserved, committed, expired), rounded up; its delta_total).
        The Gaussian entries compose at delta_total less the counted ``selection_delta`` (``gaussian_delta``);
        inf when those leave no delta (a budget lowered below them)."""
        budget = self._get_budget(dataset)
        with self._transaction() as conn:
            multipliers, pure = self._counted(conn, dataset)
            held = self._selection_deltas(conn, dataset)
            return self._spent_of(conn, multipliers, budget.delta_total, pure, held), budget.delta_total

    def projected(self, dataset: str, noise_multipliers: list[float], selection_delta: float = 0.0) -> float:
        """Composed epsilon (at delta_total less every threshold's delta) if releases with these sigma/Delta, whose
        thresholds spend ``selection_delta`` in all, were added now; inf when no delta would be left."""
        budget = self._get_budget(dataset)
        with self._transaction() as conn:
            multipliers, pure = self._counted(conn, dataset)
            held = [*self._selection_deltas(conn, dataset), float(selection_delta)]
            return self._spent_of(conn, [*multipliers, *noise_multipliers], budget.delta_total, pure, held)

    def selection_spent(self, dataset: str) -> float:
        """The delta the counted entries' thresholds spent in all (``selection_delta``; 0 without
        ``categories: auto``): the Gaussian entries compose at delta_total less this."""
        with self.engine.connect() as conn:
            held = self._selection_deltas(conn, dataset)
            conn.rollback()
        return float(sum(held))

    @classmethod
    def _spent_of(cls, conn: Connection, noise_multipliers: Sequence[float], delta_total: float,
                  pure_epsilons: Sequence[float], selection_deltas: Sequence[float]) -> float:
        """The composed epsilon of these entries at ``gaussian_delta``; inf when it is <= 0."""
        at = gaussian_delta(delta_total, selection_deltas)
        return cls._composed(conn, noise_multipliers, at, pure_epsilons) if at > 0.0 else math.inf

    @staticmethod
    def _composed(conn: Connection, noise_multipliers: Sequence[float | None], delta_total: float,
                  pure_epsilons: Sequence[float]) -> float:
        """``compose_epsilon`` of these entries through the composition cache (``cached_composition``); the
        accountant is this module's ``_compose_epsilon``, looked up at each call."""
        return cached_composition(conn, noise_multipliers, delta_total, pure_epsilons, _compose_epsilon)

    def composed(self, noise_multipliers: Sequence[float], delta: float, pure_epsilons: Sequence[float] = ()) -> float:
        """``compose_epsilon`` of these events at ``delta``, through the composition cache (a release's parts into
        its headline epsilon, read again without the accountant)."""
        with self._transaction() as conn:
            return self._composed(conn, noise_multipliers, delta, pure_epsilons)

    def counted(self, dataset: str) -> tuple[list[float], list[float]]:
        """(noise multipliers of the counted Gaussian entries, epsilons of the counted pure-DP entries)."""
        with self.engine.connect() as conn:
            counted = self._counted(conn, dataset)
            conn.rollback()
        return counted

    def remaining(self, dataset: str) -> float:
        """epsilon_total - composed epsilon spent (>= 0). Composition is not additive: use ``projected`` to test
        whether a release fits."""
        budget = self._get_budget(dataset)
        spent, _ = self.spent(dataset)
        if not math.isfinite(spent):
            return 0.0
        left = Decimal(budget.epsilon_total) - Decimal(spent)
        return max(0.0, float(left.quantize(Decimal("1e-6"), rounding=ROUND_FLOOR)))


class ReservedSpend:
    """One part of a release's reservation as what a draw charges (``measuring.SpendRecorder``): its ``reserve``
    claims the part (``BudgetLedger.claim``), or reserves afresh, budget checked, when an earlier attempt of the
    release already used it (a retried step whose noise may have been drawn)."""

    def __init__(self, ledger: BudgetLedger, entry_id: str) -> None:
        self.ledger, self.entry_id = ledger, entry_id

    def reserve(
        self, *, dataset: str, release_id: str, mechanism: str, noise_multiplier: float, sigma: float,
        sensitivity: float, epsilon: float, delta: float, relation: Relation | str, params_hash: str,
        selection_delta: float = 0.0,
    ) -> str:
        if self.ledger.claim(self.entry_id, dataset=dataset, release_id=release_id, mechanism=mechanism,
                             noise_multiplier=noise_multiplier, sigma=sigma, sensitivity=sensitivity,
                             relation=relation, params_hash=params_hash, selection_delta=selection_delta):
            return self.entry_id
        return self.ledger.reserve(dataset, release_id, mechanism, noise_multiplier, sigma, sensitivity, epsilon,
                                   delta, relation, params_hash, selection_delta=selection_delta)

    def commit(self, entry_id: str) -> None:
        self.ledger.commit(entry_id)

    def abort(self, entry_id: str) -> None:
        self.ledger.abort(entry_id)
