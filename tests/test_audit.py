"""The shipped privacy audit (``bench.audit``) at CI size: the product holds every claim, and each planted defect
(noise calibrated to half the sensitivity; the selection that ranked empty candidates last; open categories kept by
the cap with no threshold) is caught. False alarms:
below 1e-5 per run for the product (the sampler's sd bound at 1e-6 per step, Clopper-Pearson at 1e-3 a side); a
planted defect escapes with probability below 1e-6 (its audited epsilon is 2 to 25 times its claim at this size)."""

from __future__ import annotations

from bench import audit
from splice_assets.measurement import RELATION_ADD_REMOVE


def test_the_product_audits_within_every_claim() -> None:
    rows = audit.run("quick")
    assert {r.relation for r in rows} == {"add-remove", "replace-one"}
    steps = {r.step for r in rows}
    assert {"measurement", "release (composed)", "estimate (composed)", "estimate: values counts",
            "estimate: knot histograms", "estimate: values selection (distinguisher)", audit.CATEGORY_STEP} <= steps
    assert all(r.holds for r in rows), audit.markdown(rows, "quick", None)
    # The neighbours reach the sensitivity arguments: the audit has power where it matters.
    assert max(r.ratio for r in rows if r.step == "measurement") > 0.9
    assert max(r.ratio for r in rows if r.step == "estimate (composed)") > 0.9


def test_the_audit_catches_noise_calibrated_to_half_the_sensitivity() -> None:
    rows = {r.step: r for r in audit.run("quick", "half-delta", relations=(RELATION_ADD_REMOVE,))}
    for step in ("measurement", "estimate (composed)", "release (composed)"):
        assert not rows[step].holds, rows[step]
        assert rows[step].audited > 1.5 * rows[step].claimed, rows[step]


def test_the_audit_catches_the_selection_that_ranked_empty_candidates_last() -> None:
    rows = {r.step: r for r in audit.run("quick", "empty-last", relations=(RELATION_ADD_REMOVE,))}
    selection = rows["estimate: values selection (distinguisher)"]
    assert not selection.holds and selection.audited > 5 * selection.claimed, selection
    assert rows["release (composed)"].holds  # the vectors are the same: only the selection's law is wrong


def test_the_audit_catches_open_categories_kept_with_no_threshold() -> None:
    """The threshold's row alone (the rest of the audit does not read ``select_categories``), both relations."""
    for relation in ("add-remove", "replace-one"):
        assert audit.category_row(relation, 12.0, audit.SELECTION_DRAWS["quick"]).holds
        with audit.planted("no-threshold"):
            row = audit.category_row(relation, 12.0, audit.SELECTION_DRAWS["quick"])
        assert not row.holds and row.audited > 5 * row.claimed, row
