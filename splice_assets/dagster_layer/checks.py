"""Asset checks: the budget gate before measurement and the great-expectations suite on synthetic rows."""


import dagster as dg

from splice_assets.api import MEASUREMENT
from splice_assets.dagster_layer.assets import PREFIX, EncodedInput, SyntheticTable
from splice_assets.dagster_layer.resources import LedgerResource
from splice_assets.evaluation.expectations import check_synthetic
from splice_assets.private.ledger import BUDGET_TOLERANCE, STATUS_RESERVED
from splice_assets.private.preflight import ReleaseCost, ledger_projection


@dg.asset_check(
    asset=dg.AssetKey([PREFIX, "unit_ball_encoding"]),
    blocking=True,
    description="Blocking: the measurement's spend still fits the dataset's lifetime budget just before its noise "
    "(pre-flight checked the whole release before any charge, and the release reserved it whole; this catches a "
    "reservation lost since, and a lowered budget).",
)
def budget_available(unit_ball_encoding: EncodedInput, ledger: LedgerResource) -> dg.AssetCheckResult:
    e = unit_ball_encoding
    s, synth = e.settings, e.synthesizer()
    _, calibration = synth.plan(e.scan.n_measured if e.scan is not None else len(e.x) if e.x is not None else 0)
    with ledger.open() as book:
        budget = book.budget(s.dataset)
        if budget is None:
            return dg.AssetCheckResult(passed=False, description=f"no lifetime budget is set for {s.dataset!r}")
        held = dict(e.reservation).get(MEASUREMENT)
        reserved = held is not None and (entry := book.entry(held)).status == STATUS_RESERVED and not entry.claimed
        # A measurement already reserved with its release counts in the spend: adding it again would count it twice.
        cost = ReleaseCost(() if reserved else (calibration.noise_multiplier,))
        spent, after = ledger_projection(book, s.dataset, budget.delta_total, cost)
    fits = after <= budget.epsilon_total + BUDGET_TOLERANCE
    return dg.AssetCheckResult(
        passed=bool(fits),
        severity=dg.AssetCheckSeverity.ERROR,
        description=None if fits else (
            f"release at epsilon={s.epsilon} would bring dataset {s.dataset!r} to epsilon={after:.4f} at "
            f"delta={budget.delta_total:g}, over its lifetime budget {budget.epsilon_total:g}; nothing was charged"
        ),
        metadata={
            "epsilon_spent": spent,
            "epsilon_after_release": after,
            "epsilon_budget": budget.epsilon_total,
            "delta_total": budget.delta_total,
        },
    )


@dg.asset_check(
    asset=dg.AssetKey([PREFIX, "synthetic_table"]),
    blocking=False,
    description="Great-expectations suite from the schema on the SYNTHETIC rows only (BOOLEAN_ONLY results).",
)
def synthetic_expectations(synthetic_table: SyntheticTable) -> dg.AssetCheckResult:
    summary = check_synthetic(synthetic_table.table, synthetic_table.schema)
    return dg.AssetCheckResult(
        passed=bool(summary.success),
        severity=dg.AssetCheckSeverity.WARN,
        metadata={
            "expectations": summary.n_expectations,
            "failed": summary.n_failed,
            "results": dg.MetadataValue.json(summary.to_dict()),
        },
    )


ALL_CHECKS = [budget_available, synthetic_expectations]
