"""The persistent budget ledger: refusals before noise, composition, races, aborts, relations, recorded budget
changes, delta_total bounds, and resolving stale reservations (committed, or expired and still counted).

Every test runs against SQLite; the same battery runs against PostgreSQL when SPLICE_TEST_POSTGRES_URL is set
(e.g. ``eval "$(bash .ci/pg-start.sh)"``), and is skipped cleanly otherwise.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from splice_assets.measurement import RELATION_REPLACE_ONE
from splice_assets.private.ledger import (
    BUDGET_TOLERANCE,
    COUNTED_STATUSES,
    BudgetExceeded,
    BudgetLedger,
    LedgerError,
    NoBudget,
    RelationMismatch,
    default_actor,
    default_ledger_url,
    entries_table,
    params_hash,
)
from splice_assets.private.mechanism import (
    Calibration,
    PrivacyParameterError,
    add_noise,
    calibrate,
    compose_epsilon,
)
from splice_assets.release.locations import tracking_uri

PG_URL = os.environ.get("SPLICE_TEST_POSTGRES_URL")

BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param(
        "postgres",
        id="postgres",
        marks=[pytest.mark.postgres, pytest.mark.skipif(not PG_URL, reason="SPLICE_TEST_POSTGRES_URL is not set")],
    ),
]


@pytest.fixture(params=BACKENDS)
def ledger_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger' / 'ledger.sqlite'}"
    return PG_URL


@pytest.fixture
def ledger(ledger_url):
    with BudgetLedger(ledger_url) as ledger:
        yield ledger


@pytest.fixture
def dataset():
    # Unique per test: a PostgreSQL database is shared between tests and runs.
    return f"test-{uuid.uuid4().hex[:12]}"


CAL = calibrate(1.0, 1e-6, n=1000, n_directions=64, k=8)


def reserve(ledger: BudgetLedger, dataset: str, cal: Calibration = CAL, relation: str = RELATION_REPLACE_ONE,
            release_id: str = "r") -> str:
    return ledger.reserve(
        dataset,
        release_id,
        "gaussian-sliced-moments",
        cal.noise_multiplier,
        cal.sigma,
        cal.sensitivity,
        cal.epsilon,
        cal.delta,
        relation,
        params_hash({"n": cal.n, "L": cal.n_directions, "k": cal.k, "epsilon": cal.epsilon, "delta": cal.delta}),
    )


def release(ledger: BudgetLedger, dataset: str, moments: np.ndarray, noise, cal: Calibration = CAL) -> np.ndarray:
    """The release protocol: reserve first, then draw noise, then commit."""
    entry = reserve(ledger, dataset, cal)
    noisy = noise(moments, cal.sigma)
    ledger.commit(entry)
    return noisy


def test_budget_roundtrip_and_missing_budget(ledger, dataset):
    assert ledger.budget(dataset) is None
    with pytest.raises(NoBudget, match=dataset):
        reserve(ledger, dataset)
    with pytest.raises(NoBudget):
        ledger.spent(dataset)
    b = ledger.set_budget(dataset, 3.0, 1e-6)
    assert ledger.budget(dataset) == b
    assert (b.epsilon_total, b.delta_total, b.relation) == (3.0, 1e-6, RELATION_REPLACE_ONE)
    assert ledger.spent(dataset) == (0.0, 1e-6)
    assert ledger.remaining(dataset) == 3.0
    ledger.set_budget(dataset, 5.0, 1e-7)
    assert ledger.budget(dataset).epsilon_total == 5.0
    with pytest.raises(PrivacyParameterError):
        ledger.set_budget(dataset, -1.0, 1e-6)
    with pytest.raises(PrivacyParameterError):
        ledger.set_budget(dataset, 1.0, 0.0)


def test_overspend_is_refused_before_any_noise(ledger, dataset):
    ledger.set_budget(dataset, 1.2, 1e-6)
    draws = []

    def noise(m, sigma):
        draws.append(sigma)
        return add_noise(m, sigma)

    moments = np.zeros((CAL.k, CAL.n_directions))
    release(ledger, dataset, moments, noise)
    assert len(draws) == 1
    with pytest.raises(BudgetExceeded) as info:
        release(ledger, dataset, moments, noise)
    assert len(draws) == 1  # refused before the noise was drawn
    message = str(info.value)
    assert dataset in message and "spent epsilon=1.000000" in message and "budget epsilon=1.2" in message
    assert "total to epsilon=1.45" in message  # two releases compose to 1.45, not 2
    assert len(ledger.entries(dataset)) == 1  # nothing reserved by the refused call


def test_twelve_refreshes_compose_to_3_90(ledger, dataset):
    ledger.set_budget(dataset, 3.9041, 1e-6)
    for i in range(12):
        ledger.commit(reserve(ledger, dataset, release_id=f"refresh-{i}"))
    spent, delta = ledger.spent(dataset)
    assert delta == 1e-6
    assert spent == pytest.approx(3.90, abs=0.01)
    assert spent == compose_epsilon([CAL.noise_multiplier] * 12, 1e-6)
    assert ledger.remaining(dataset) == pytest.approx(3.9041 - spent, abs=1e-6)
    with pytest.raises(BudgetExceeded):
        reserve(ledger, dataset, release_id="refresh-13")


def test_budget_of_exactly_one_release_fits_it(ledger, dataset):
    ledger.set_budget(dataset, 1.0, 1e-6)
    ledger.commit(reserve(ledger, dataset))
    assert ledger.spent(dataset)[0] <= 1.0 + BUDGET_TOLERANCE
    assert ledger.remaining(dataset) == 0.0


def test_aborted_reservation_leaves_budget_intact(ledger, dataset):
    ledger.set_budget(dataset, 1.0, 1e-6)
    entry = reserve(ledger, dataset)
    assert ledger.spent(dataset)[0] == pytest.approx(1.0, abs=1e-6)
    ledger.abort(entry)
    assert ledger.spent(dataset)[0] == 0.0
    assert ledger.remaining(dataset) == 1.0
    with pytest.raises(LedgerError, match="aborted"):
        ledger.abort(entry)
    with pytest.raises(LedgerError, match="aborted"):
        ledger.commit(entry)
    ledger.commit(reserve(ledger, dataset))  # the budget is available again
    statuses = [e.status for e in ledger.entries(dataset)]
    assert statuses.count("aborted") == 1 and statuses.count("committed") == 1


def test_reserved_entries_count_even_after_a_crash(ledger_url, ledger, dataset):
    ledger.set_budget(dataset, 1.2, 1e-6)
    reserve(ledger, dataset)  # the process "crashes" here: never committed, never aborted
    with BudgetLedger(ledger_url) as fresh:
        assert fresh.spent(dataset)[0] == pytest.approx(1.0, abs=1e-6)
        with pytest.raises(BudgetExceeded):
            reserve(fresh, dataset)
        (entry,) = fresh.entries(dataset)
        assert entry.status == "reserved" and entry.counted


def test_commit_is_idempotent_and_unknown_entries_are_refused(ledger, dataset):
    ledger.set_budget(dataset, 2.0, 1e-6)
    entry = reserve(ledger, dataset)
    ledger.commit(entry)
    ledger.commit(entry)
    assert ledger.entry(entry).status == "committed"
    with pytest.raises(LedgerError, match="committed"):
        ledger.abort(entry)
    with pytest.raises(LedgerError, match="no ledger entry"):
        ledger.commit("0" * 32)


def test_relation_mismatch_is_refused(ledger, dataset):
    ledger.set_budget(dataset, 5.0, 1e-6)
    with pytest.raises(RelationMismatch, match="add-remove"):
        reserve(ledger, dataset, relation="add-remove")
    assert ledger.entries(dataset) == []
    ledger.commit(reserve(ledger, dataset))
    with pytest.raises(RelationMismatch):
        ledger.set_budget(dataset, 5.0, 1e-6, relation="add-remove")
    other = dataset + "-ar"
    ledger.set_budget(other, 5.0, 1e-6, relation="add-remove")
    with pytest.raises(RelationMismatch, match="replace-one"):
        reserve(ledger, other)


def test_zero_cost_refit(ledger, dataset):
    ledger.set_budget(dataset, 1.0, 1e-6)
    with pytest.raises(LedgerError, match="no committed release"):
        ledger.record_zero_cost(dataset, "refit-0", parent_release_id="m-1")
    entry = reserve(ledger, dataset, release_id="m-1")
    with pytest.raises(LedgerError):  # parent only reserved: not yet a release
        ledger.record_zero_cost(dataset, "refit-0", parent_release_id="m-1")
    ledger.commit(entry)
    spent = ledger.spent(dataset)
    refit = ledger.record_zero_cost(dataset, "refit-1", "m-1", params_hash=params_hash({"K": 8}))
    refit2 = ledger.record_zero_cost(dataset, "refit-2", "m-1")
    assert ledger.spent(dataset) == spent
    zero = ledger.entry(refit)
    assert (zero.epsilon, zero.delta, zero.status, zero.parent_release_id) == (0.0, 0.0, "committed", "m-1")
    assert zero.noise_multiplier is None and zero.sigma is None
    assert ledger.entry(refit2).relation == RELATION_REPLACE_ONE


def test_entry_fields(ledger, dataset):
    ledger.set_budget(dataset, 2.0, 1e-6)
    entry_id = reserve(ledger, dataset, release_id="rel-1")
    (entry,) = ledger.entries(dataset)
    assert entry.id == entry_id and len(entry_id) == 32 and int(entry_id, 16) >= 0
    assert entry.created_at.tzinfo is not None and entry.created_at.utcoffset() == UTC.utcoffset(None)
    assert (entry.dataset, entry.release_id, entry.status, entry.relation) == (dataset, "rel-1", "reserved",
                                                                                RELATION_REPLACE_ONE)
    assert entry.noise_multiplier == CAL.noise_multiplier
    assert entry.sigma == CAL.sigma and entry.sensitivity == CAL.sensitivity
    assert (entry.epsilon, entry.delta) == (1.0, 1e-6)
    assert len(entry.params_hash) == 64 and entry.parent_release_id is None


def test_reserve_rejects_inconsistent_primitives(ledger, dataset):
    ledger.set_budget(dataset, 10.0, 1e-6)
    base = dict(dataset=dataset, release_id="r", mechanism="g", noise_multiplier=CAL.noise_multiplier,
                sigma=CAL.sigma, sensitivity=CAL.sensitivity, epsilon=1.0, delta=1e-6,
                relation=RELATION_REPLACE_ONE, params_hash="h")
    for bad in (dict(noise_multiplier=0.0), dict(noise_multiplier=math.inf), dict(sigma=CAL.sigma / 2),
                dict(epsilon=0.0), dict(delta=0.0), dict(sensitivity=-1.0)):
        with pytest.raises(PrivacyParameterError):
            ledger.reserve(**{**base, **bad})
    assert ledger.entries(dataset) == []


def _race_worker(url: str, dataset: str, barrier, results) -> None:
    ledger = BudgetLedger(url)
    try:
        barrier.wait(timeout=60)
        try:
            entry = reserve(ledger, dataset, release_id=f"pid-{os.getpid()}")
            results.put(("ok", entry))
        except BudgetExceeded:
            results.put(("refused", None))
    except Exception as exc:  # noqa: BLE001 - report to the parent
        results.put(("error", repr(exc)))
    finally:
        ledger.close()


def test_concurrent_reservations_never_overspend(ledger_url, ledger, dataset):
    workers = 6
    budget = compose_epsilon([CAL.noise_multiplier] * 3, 1e-6)  # exactly three releases fit
    ledger.set_budget(dataset, budget, 1e-6)
    ledger.close()  # no inherited connections across fork
    ctx = mp.get_context("fork")
    barrier, results = ctx.Barrier(workers), ctx.Queue()
    procs = [ctx.Process(target=_race_worker, args=(ledger_url, dataset, barrier, results)) for _ in range(workers)]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    kinds = sorted(kind for kind, _ in outcomes)
    assert "error" not in kinds, outcomes
    assert kinds.count("ok") == 3 and kinds.count("refused") == 3
    with BudgetLedger(ledger_url) as fresh:
        assert len(fresh.entries(dataset)) == 3
        assert fresh.spent(dataset)[0] <= budget + BUDGET_TOLERANCE


def test_params_hash_is_canonical():
    a = params_hash({"epsilon": 1.0, "L": 1024, "k": 16, "seed": 7, "columns": ["a", "b"]})
    b = params_hash({"columns": ["a", "b"], "seed": 7, "k": 16, "L": 1024, "epsilon": 1.0})
    assert a == b and len(a) == 64
    assert params_hash({"k": np.int64(16), "eps": np.float64(1.0)}) == params_hash({"k": 16, "eps": 1.0})
    assert params_hash({"k": 16}) != params_hash({"k": 17})
    with pytest.raises(ValueError):
        params_hash({"epsilon": float("nan")})
    with pytest.raises(TypeError):
        params_hash({"data": object()})


def test_default_ledger_url(monkeypatch, tmp_path):
    monkeypatch.delenv("SPLICE_LEDGER_URL", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)  # a test's own mlflow.set_tracking_uri writes it
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    assert default_ledger_url() == f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    monkeypatch.delenv("DAGSTER_HOME")
    monkeypatch.chdir(tmp_path)  # from any directory: the repository's dagster_home, where Dagster and MLflow look
    repository_home = Path(__file__).resolve().parents[1] / "dagster_home"
    assert default_ledger_url() == f"sqlite:///{repository_home / 'ledger.sqlite'}"
    assert tracking_uri() == f"sqlite:///{repository_home / 'mlflow.db'}"
    monkeypatch.setenv("SPLICE_LEDGER_URL", "postgresql+psycopg://u@h/db")
    assert default_ledger_url() == "postgresql+psycopg://u@h/db"


def test_in_memory_sqlite_works():
    with BudgetLedger("sqlite://") as ledger:
        ledger.set_budget("d", 1.0, 1e-6)
        ledger.commit(reserve(ledger, "d"))
        assert ledger.remaining("d") == 0.0


# -- recorded budget changes, delta_total bounds -----------------------------------------------------------------


def test_budget_changes_record_create_raise_and_lower(ledger, dataset):
    assert ledger.budget_changes(dataset) == []
    ledger.set_budget(dataset, 2.0, 1e-6, actor="alice", reason="initial grant")
    ledger.commit(reserve(ledger, dataset))  # spends epsilon 1
    ledger.set_budget(dataset, 5.0, 1e-7, actor="bob", reason="board approval 12")
    ledger.set_budget(dataset, 0.5, 1e-7, reason="incident")  # below the spend: allowed, still recorded
    created, raised, lowered = ledger.budget_changes(dataset)
    assert (created.actor, created.old_epsilon_total, created.old_delta_total, created.old_relation) == (
        "alice", None, None, None)
    assert (created.epsilon_total, created.delta_total, created.relation, created.reason) == (
        2.0, 1e-6, RELATION_REPLACE_ONE, "initial grant")
    assert (raised.actor, raised.old_epsilon_total, raised.old_delta_total, raised.epsilon_total,
            raised.delta_total, raised.reason) == ("bob", 2.0, 1e-6, 5.0, 1e-7, "board approval 12")
    assert (lowered.actor, lowered.old_epsilon_total, lowered.epsilon_total) == (default_actor(), 5.0, 0.5)
    assert created.id < raised.id < lowered.id and created.created_at.tzinfo is not None
    assert ledger.budget(dataset).epsilon_total == 0.5
    assert ledger.remaining(dataset) == 0.0
    with pytest.raises(BudgetExceeded):  # lowering only blocks further releases
        reserve(ledger, dataset, release_id="after-lowering")
    assert ledger.budget_changes(dataset + "-other") == []


def test_default_actor_falls_back_to_unknown(monkeypatch):
    import getpass

    def no_user() -> str:
        raise OSError("no user name")

    monkeypatch.setattr(getpass, "getuser", no_user)
    assert default_actor() == "unknown"


def test_delta_total_is_bounded(ledger, dataset):
    for bad in (0.5, 0.01, 0.0, -1e-6, math.nan):
        with pytest.raises(PrivacyParameterError, match=r"\(0, 0\.01\)") as info:
            ledger.set_budget(dataset, 1.0, bad, actor="alice")
        assert repr(bad) in str(info.value)
    with pytest.raises(PrivacyParameterError, match=r"1/n_min = 0\.001 \(n_min=1000\), got 0\.001"):
        ledger.set_budget(dataset, 1.0, 1e-3, actor="alice", n_min=1000)
    with pytest.raises(PrivacyParameterError, match="2e-03|0.002"):
        ledger.set_budget(dataset, 1.0, 2e-3, actor="alice", n_min=1000)
    assert ledger.budget(dataset) is None and ledger.budget_changes(dataset) == []  # refusals write nothing
    ledger.set_budget(dataset, 1.0, 9.9e-4, actor="alice", n_min=1000)
    ledger.set_budget(dataset, 1.0, 9.9e-3, actor="alice")  # no n_min given: only (0, 0.01) applies
    assert len(ledger.budget_changes(dataset)) == 2


# -- stale reservations ------------------------------------------------------------------------------------------


def backdate(ledger: BudgetLedger, entry_id: str, age: timedelta) -> None:
    """Pretend the entry was reserved ``age`` ago (its run died then)."""
    with ledger.engine.begin() as conn:
        conn.execute(
            entries_table.update()
            .where(entries_table.c.id == entry_id)
            .values(created_at=datetime.now(UTC) - age)
        )


def test_stale_reservations_honour_the_age_threshold(ledger, dataset):
    ledger.set_budget(dataset, 10.0, 1e-6, actor="alice")
    old = reserve(ledger, dataset, release_id="old")
    middle = reserve(ledger, dataset, release_id="middle")
    fresh = reserve(ledger, dataset, release_id="fresh")
    done = reserve(ledger, dataset, release_id="done")
    backdate(ledger, old, timedelta(hours=3))
    backdate(ledger, middle, timedelta(minutes=30))
    backdate(ledger, done, timedelta(hours=3))
    ledger.commit(done)  # committed: not stale however old
    assert [e.id for e in ledger.stale_reservations(timedelta(hours=1), dataset=dataset)] == [old]
    assert [e.id for e in ledger.stale_reservations(timedelta(minutes=10), dataset=dataset)] == [old, middle]
    assert {old, middle, fresh} == {e.id for e in ledger.stale_reservations(timedelta(0), dataset=dataset)}
    everywhere = {e.id for e in ledger.stale_reservations(timedelta(hours=1))}
    assert old in everywhere and middle not in everywhere and fresh not in everywhere
    other = dataset + "-other"
    ledger.set_budget(other, 10.0, 1e-6, actor="alice")
    backdate(ledger, reserve(ledger, other), timedelta(hours=3))
    assert [e.id for e in ledger.stale_reservations(timedelta(hours=1), dataset=dataset)] == [old]
    with pytest.raises(LedgerError, match="older_than"):
        ledger.stale_reservations(timedelta(minutes=-1))


def test_resolve_commits_with_a_measurement_and_expires_otherwise(ledger, dataset):
    ledger.set_budget(dataset, 10.0, 1e-6, actor="alice")
    released = reserve(ledger, dataset, release_id="released")
    lost = reserve(ledger, dataset, release_id="lost")
    spent_before = ledger.spent(dataset)
    projected_before = ledger.projected(dataset, [CAL.noise_multiplier])
    assert ledger.resolve(released, noise_released=True, actor="carol").status == "committed"
    entry = ledger.resolve(lost, noise_released=False, actor="carol")
    assert entry.status == "expired" and entry.counted and "expired" in COUNTED_STATUSES
    assert ledger.entry(lost).status == "expired"
    # Expired still counts: the noise may have been drawn and lost.
    assert ledger.spent(dataset) == spent_before == (compose_epsilon([CAL.noise_multiplier] * 2, 1e-6), 1e-6)
    assert ledger.projected(dataset, [CAL.noise_multiplier]) == projected_before
    assert projected_before == compose_epsilon([CAL.noise_multiplier] * 3, 1e-6)
    assert [(r.entry_id, r.actor, r.old_status, r.new_status, r.noise_released)
            for r in ledger.resolutions(dataset)] == [
        (released, "carol", "reserved", "committed", True), (lost, "carol", "reserved", "expired", False)]
    for resolved in (released, lost):  # only a reserved entry can be resolved
        with pytest.raises(LedgerError, match="only a reserved entry can be resolved"):
            ledger.resolve(resolved, noise_released=False, actor="carol")
    with pytest.raises(LedgerError, match="'expired'"):
        ledger.abort(lost)  # never un-counted once expired
    with pytest.raises(LedgerError, match="no ledger entry"):
        ledger.resolve("0" * 32, noise_released=True, actor="carol")
    ledger.commit(lost)  # a slow (not dead) run's own commit after all: still counted, now committed
    assert ledger.entry(lost).status == "committed" and ledger.spent(dataset) == spent_before


def test_expired_entries_block_releases_like_committed_ones(ledger, dataset):
    ledger.set_budget(dataset, 1.2, 1e-6, actor="alice")
    entry = reserve(ledger, dataset)
    ledger.resolve(entry, noise_released=False, actor="carol")
    with pytest.raises(BudgetExceeded):
        reserve(ledger, dataset, release_id="second")
    assert ledger.remaining(dataset) == pytest.approx(0.2, abs=2e-6)  # spent is rounded up


def test_admin_abort_is_recorded(ledger, dataset):
    ledger.set_budget(dataset, 1.0, 1e-6, actor="alice")
    entry = reserve(ledger, dataset)
    ledger.abort(entry, actor="dave")
    assert ledger.spent(dataset)[0] == 0.0
    (resolution,) = ledger.resolutions(dataset)
    assert (resolution.entry_id, resolution.actor, resolution.new_status, resolution.noise_released) == (
        entry, "dave", "aborted", False)
    protocol = reserve(ledger, dataset, release_id="protocol")
    ledger.abort(protocol)  # the release protocol's own abort: no actor, not an administrator's resolution
    assert ledger.entry(protocol).status == "aborted" and len(ledger.resolutions(dataset)) == 1


def test_compositions_are_kept_and_reused_across_ledger_instances(tmp_path, monkeypatch):
    """The accountant composes a set of entries once: another ledger on the same database reads the result (the
    accountant is not called), whatever the entries' order; zero-cost entries do not change the key, a different
    delta_total does."""
    import splice_assets.private.ledger as ledger_module

    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    with BudgetLedger(url) as book:
        book.set_budget("toy", 5.0, 1e-6, actor="test")
        for release, nm in (("a", 4.0), ("b", 6.0)):
            book.commit(book.reserve("toy", release, "gaussian", nm, nm, 1.0, 1.0, 1e-9, "replace-one", "h"))
        spent, _ = book.spent("toy")
        assert spent == compose_epsilon([4.0, 6.0], 1e-6)
        projected = book.projected("toy", [5.0])

    def refuse(*_args, **_kwargs):
        raise AssertionError("the accountant was called for a kept composition")

    monkeypatch.setattr(ledger_module, "_compose_epsilon", refuse)
    with BudgetLedger(url) as book:
        assert book.spent("toy") == (spent, 1e-6)
        assert book.projected("toy", [5.0]) == projected
    key = ledger_module._composition_key
    assert key([6.0, 4.0, None, float("inf")], 1e-6, []) == key([4.0, 6.0], 1e-6, [])
    assert key([4.0, 6.0], 1e-7, []) != key([4.0, 6.0], 1e-6, [])


def test_setting_the_same_budget_again_records_no_change(ledger, dataset):
    # Issue 70 item 5: rerunning `set_budget` with the same values is a no-op, not a change row.
    ledger.set_budget(dataset, 2.0, 1e-6, actor="alice", reason="initial grant")
    again = ledger.set_budget(dataset, 2.0, 1e-6, actor="bob", reason="rerun of the setup script")
    assert (again.epsilon_total, again.delta_total) == (2.0, 1e-6)
    assert [c.reason for c in ledger.budget_changes(dataset)] == ["initial grant"]
    ledger.set_budget(dataset, 3.0, 1e-6, actor="bob", reason="raise")
    assert [c.reason for c in ledger.budget_changes(dataset)] == ["initial grant", "raise"]
