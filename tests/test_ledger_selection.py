"""The ledger's delta for category thresholds (``categories: auto``): an entry whose draw thresholded keys stores the
delta that selection spends (``selection_delta``), and the lifetime composes the counted Gaussian entries at
delta_total less their sum; a reservation that a threshold's delta pushes over the budget is refused before any
noise; a ledger created before the column reads it as 0."""

from __future__ import annotations

import sqlite3

import numpy as np
import pandas as pd
import pytest
import sqlalchemy as sa

from splice_assets.private import mechanism
from splice_assets.private.ledger import (
    BudgetExceeded,
    BudgetLedger,
    Part,
    budgets_table,
    entries_table,
    gaussian_delta,
)
from splice_assets.private.mechanism import PrivacyParameterError, compose_epsilon
from splice_assets.private.preflight import PreflightError
from splice_assets.release.budget_text import lifetime_of, release_rows
from splice_assets.schema import parse_schema

DELTA = 1e-6
HELD = 1e-7  # bounds.SELECTION_DELTA_SHARE of DELTA
ESTIMATE_NM, MEASURE_NM = 30.0, 5.0


@pytest.fixture
def ledger(tmp_path):
    with BudgetLedger(f"sqlite:///{tmp_path / 'ledger.sqlite'}") as book:
        yield book


def _parts(held: float = HELD, delta: float = DELTA) -> list[Part]:
    return [Part("estimate", "gaussian-bounds", ESTIMATE_NM, 0.1, delta, held),
            Part("measurement", "gaussian-sliced-moments", MEASURE_NM, 0.9, delta)]


def test_gaussian_delta_is_delta_total_less_the_selections_never_above() -> None:
    assert gaussian_delta(1e-6, []) == 1e-6
    assert gaussian_delta(1e-6, [0.0, 0.0]) == 1e-6
    left = gaussian_delta(1e-6, [1e-7, 2e-7])
    assert left == pytest.approx(7e-7, rel=1e-12)
    from decimal import Decimal

    assert Decimal(left) <= Decimal(1e-6) - Decimal(1e-7) - Decimal(2e-7)
    assert gaussian_delta(1e-6, [6e-7, 4e-7]) <= 0.0


def test_lifetime_composes_the_gaussians_at_delta_total_less_the_counted_selections(ledger) -> None:
    ledger.set_budget("d", 50.0, DELTA, actor="t")
    with_threshold = ledger.reserve_release("d", "r1", "replace-one", _parts())
    ledger.reserve_release("d", "r2", "replace-one", _parts(held=0.0))  # no categories: auto
    entries = {(e.release_id, e.mechanism): e for e in ledger.entries("d")}
    assert entries["r1", "gaussian-bounds"].selection_delta == HELD
    assert entries["r1", "gaussian-sliced-moments"].selection_delta == 0.0
    assert entries["r2", "gaussian-bounds"].selection_delta == 0.0
    multipliers = [ESTIMATE_NM, MEASURE_NM] * 2
    spent, delta_total = ledger.spent("d")
    assert delta_total == DELTA
    assert spent == compose_epsilon(multipliers, gaussian_delta(DELTA, [HELD]))
    assert spent > compose_epsilon(multipliers, DELTA) + 1e-4  # the old rule under-counted
    assert ledger.selection_spent("d") == HELD
    assert ledger.projected("d", [MEASURE_NM], HELD) == compose_epsilon([*multipliers, MEASURE_NM],
                                                                          gaussian_delta(DELTA, [HELD, HELD]))
    # the release's own headline composes its parts at its delta less its threshold's
    row = next(r for r in release_rows(ledger, "d") if r["release_id"] == "r1")
    assert row["epsilon"] == compose_epsilon([ESTIMATE_NM, MEASURE_NM], DELTA - HELD)
    assert "composed at delta_total = 1e-06 less 1e-07 spent by category thresholds" in lifetime_of(ledger, "d")
    # an aborted part no draw claimed no longer counts, its selection delta with it
    ledger.withdraw(with_threshold["estimate"])
    assert ledger.selection_spent("d") == 0.0
    assert ledger.spent("d")[0] == compose_epsilon([MEASURE_NM, ESTIMATE_NM, MEASURE_NM], DELTA)


def test_a_budget_the_selection_pushes_over_is_refused_whole(ledger) -> None:
    at_total = compose_epsilon([ESTIMATE_NM, MEASURE_NM], DELTA)
    at_less = compose_epsilon([ESTIMATE_NM, MEASURE_NM], DELTA - HELD)
    assert at_less - at_total > 1e-3
    ledger.set_budget("d", (at_total + at_less) / 2, DELTA, actor="t")
    with pytest.raises(BudgetExceeded, match=r"privacy budget exceeded .* less 1e-07 spent by category thresholds"):
        ledger.reserve_release("d", "r1", "replace-one", _parts())
    assert ledger.entries("d") == []
    ledger.reserve_release("d", "r2", "replace-one", _parts(held=0.0))  # the same release without it fits


def test_selections_that_leave_the_gaussians_no_delta_are_refused(ledger) -> None:
    ledger.set_budget("d", 1000.0, DELTA, actor="t")
    ledger.reserve_release("d", "r1", "replace-one", _parts(held=6e-7))
    with pytest.raises(BudgetExceeded, match="leaving none of delta=1e-06 to the Gaussian entries"):
        ledger.reserve_release("d", "r2", "replace-one", _parts(held=4e-7))
    assert {e.release_id for e in ledger.entries("d")} == {"r1"}
    # a budget lowered below the selections already spent: nothing fits, nothing is left
    ledger.set_budget("d", 1000.0, 5e-7, actor="t")
    assert ledger.spent("d")[0] == float("inf")
    assert ledger.remaining("d") == 0.0


def test_a_claim_may_not_spend_more_selection_delta_than_reserved(ledger) -> None:
    ledger.set_budget("d", 50.0, DELTA, actor="t")
    ids = ledger.reserve_release("d", "r1", "replace-one", _parts(held=0.0))
    with pytest.raises(PrivacyParameterError, match="more than the 0.0 reserved"):
        ledger.claim(ids["estimate"], dataset="d", release_id="r1", mechanism="gaussian-bounds",
                     noise_multiplier=ESTIMATE_NM, sigma=ESTIMATE_NM, sensitivity=1.0, relation="replace-one",
                     params_hash="h", selection_delta=HELD)
    with pytest.raises(PrivacyParameterError, match="selection_delta must lie in"):
        ledger.reserve_release("d", "r2", "replace-one", _parts(held=DELTA))


def test_a_ledger_created_before_the_column_is_upgraded_and_reads_zero(tmp_path) -> None:
    path = tmp_path / "old.sqlite"
    old = sa.MetaData()
    for table in (budgets_table, entries_table):  # as the first ledgers had them: no selection_delta
        sa.Table(table.name, old, *(sa.Column(c.name, c.type, nullable=c.nullable, primary_key=c.primary_key)
                                    for c in table.columns if c.name != "selection_delta"))
    engine = sa.create_engine(f"sqlite:///{path}")
    old.create_all(engine)
    engine.dispose()
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO splice_budgets VALUES ('d', 5.0, 1e-6, 'replace-one', '2025-01-01', '2025-01-01')")
        conn.execute("INSERT INTO splice_ledger_entries (id, dataset, release_id, created_at, mechanism, "
                     "noise_multiplier, sigma, sensitivity, epsilon, delta, relation, params_hash, status) VALUES "
                     "('e1', 'd', 'r0', '2025-01-01 00:00:00', 'gaussian-sliced-moments', 5.0, 5.0, 1.0, 0.9, 1e-6, "
                     "'replace-one', 'h', 'committed')")
    for _ in range(2):  # opening again leaves it as it is
        with BudgetLedger(f"sqlite:///{path}") as book:
            entry = book.entry("e1")
            assert entry.selection_delta == 0.0
            if _ == 0:
                assert book.spent("d")[0] == compose_epsilon([5.0], 1e-6)
            book.reserve_release("d", f"r{_ + 1}", "replace-one", _parts())
            assert book.selection_spent("d") == pytest.approx(HELD * (_ + 1))


def test_a_release_whose_threshold_delta_exceeds_the_budget_is_refused_before_noise(tmp_path, monkeypatch) -> None:
    """A categories: auto release at (1, 1e-6) against a budget between its Gaussian parts' epsilon at delta_total
    and at delta_total - delta_sel: refused by the pre-flight (and by the ledger when the pre-flight is skipped),
    nothing reserved and no noise drawn."""
    from splice_assets import Synthesizer

    schema = parse_schema({"name": "t", "version": 1, "n_min": 10, "columns": [
        {"name": "c", "kind": "categorical", "categories": "auto", "other": "rest"},
        {"name": "x", "kind": "continuous", "bounds": [0, 1]}]})
    rng = np.random.default_rng(0)
    table = pd.DataFrame({"c": rng.choice(["a", "b", "c"], 2000), "x": rng.random(2000)})
    synth = Synthesizer(schema, epsilon=1.0, delta=DELTA)
    parts = synth.release_parts(len(table))
    assert [p.selection_delta for p in parts] == [pytest.approx(HELD), 0.0]
    multipliers = [p.noise_multiplier for p in parts]
    at_total, at_less = compose_epsilon(multipliers, DELTA), compose_epsilon(multipliers, DELTA - HELD)
    assert at_less <= 1.0 + 1e-6 and at_less - at_total > 1e-3

    def no_noise(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("noise drawn")

    monkeypatch.setattr(mechanism, "gaussian_noise", no_noise)
    with BudgetLedger(f"sqlite:///{tmp_path / 'ledger.sqlite'}") as book:
        book.set_budget("t", (at_total + at_less) / 2, DELTA, actor="t")
        with pytest.raises(PreflightError, match="lifetime epsilon"):
            Synthesizer(schema, epsilon=1.0, delta=DELTA).fit(table, ledger=book)
        monkeypatch.setattr(Synthesizer, "_preflight", lambda *args, **kwargs: None)
        with pytest.raises(BudgetExceeded, match="spent by category thresholds"):
            Synthesizer(schema, epsilon=1.0, delta=DELTA).fit(table, ledger=book)
        assert book.entries("t") == []
