"""One wording for the two budget figures, so they can not be mistaken for each other on screen.

* **This release**: the (epsilon, delta) of one release, what the ledger charges for it (0 for a refit): its parts
  (a DP estimate of the schema's ``auto`` entries, the measurement) composed into one guarantee. The parts, each
  alone, are shown beside it under their own names, never as releases of their own.
* **Lifetime**: the dataset's spend, every counted release composed (exactly, as Gaussian mechanisms) at the
  budget's delta_total, against the lifetime epsilon_total. Composition is tighter than a sum, so a lifetime of 1.5 can
  admit three releases at epsilon = 1 (docs/privacy.md, "Lifetime budget").

Used by the CLI and the demo; imports nothing heavy (the ledger is passed in).
"""

from __future__ import annotations

from typing import Any

from splice_assets.defaults import ESTIMATE_MECHANISM

#: The parts of a release shown beside its headline, in this order.
PARTS = ("estimate", "measurement")


def release_text(epsilon: float, delta: float | None = None) -> str:
    """``epsilon = 1 (delta = 1e-09)``: one release's cost."""
    return f"epsilon = {epsilon:g}" + ("" if delta is None else f" (delta = {delta:g})")


def parts_text(row: dict[str, Any]) -> str:
    """``its parts alone: estimate epsilon = 0.2106, measurement epsilon = 0.9735``, or "" for a release of one
    part: what a release's parts would spend each alone (they compose to its epsilon, they do not add up to it)."""
    values = {name: row.get(f"epsilon_{name}") for name in PARTS}
    parts = [f"{name} epsilon = {value:.4g}" for name, value in values.items() if value is not None]
    return f"its parts alone: {', '.join(parts)}" if len(parts) > 1 else ""


def part_of(entry: Any) -> str:
    """Which part of its release a ledger entry is: ``estimate``, ``measurement`` or ``refit``."""
    if entry.parent_release_id:
        return "refit"
    return "estimate" if entry.mechanism == ESTIMATE_MECHANISM else "measurement"


def release_rows(ledger: Any, dataset: str) -> list[dict[str, Any]]:
    """One row per release of the dataset's ledger, oldest first: ``epsilon`` at ``delta``, its headline, composes
    its counted entries (all of them when none counts: what it would have spent), as its guarantee does;
    ``epsilon_estimate`` / ``epsilon_measurement`` are its parts alone; ``status`` is ``reserved`` while any counted
    part is, then ``expired``, then ``committed``; ``aborted`` when no part counts."""
    grouped: dict[str, list[Any]] = {}
    for entry in ledger.entries(dataset):
        grouped.setdefault(entry.release_id, []).append(entry)
    rows = []
    for entries in grouped.values():
        counted = [e for e in entries if e.counted] or entries
        statuses = {e.status for e in entries if e.counted}
        parts = {name: [e for e in counted if part_of(e) == name] for name in PARTS}
        rows.append({
            "release_id": entries[0].release_id,
            "parent_release_id": entries[0].parent_release_id,
            "created_at": entries[0].created_at,
            "status": next((s for s in ("reserved", "expired", "committed") if s in statuses), "aborted"),
            "epsilon": _composed(ledger, counted),
            "delta": max(e.delta for e in counted),
            **{f"epsilon_{name}": _composed(ledger, part) for name, part in parts.items() if part},
            "entries": entries,
        })
    return rows


def _composed(ledger: Any, entries: list[Any]) -> float:
    """The epsilon of these entries together at their delta: one entry's own, else their composition (Gaussian
    parts of a release compose exactly; through the ledger's composition cache) at their delta less what their
    category thresholds spent (``selection_delta``), as the release's guarantee states it."""
    held = [float(getattr(e, "selection_delta", 0.0) or 0.0) for e in entries]
    if (len(entries) == 1 and not any(held)) or all(e.epsilon == 0 for e in entries):
        return float(max(e.epsilon for e in entries))
    from splice_assets.private.ledger import gaussian_delta

    gaussian = [e.noise_multiplier for e in entries if e.noise_multiplier is not None and e.epsilon > 0]
    pure = [e.epsilon for e in entries if e.noise_multiplier is None and e.epsilon > 0]
    at = gaussian_delta(max(e.delta for e in entries), held)
    return float(ledger.composed(gaussian, at, pure)) if at > 0 else float("inf")


def composed_releases(ledger: Any, dataset: str) -> int:
    """Releases the lifetime spend composes: distinct release ids with a counted entry of epsilon > 0 (a release's
    DP bounds and its measurement are one release; a zero-cost refit is none)."""
    return len({e.release_id for e in ledger.entries(dataset) if e.counted and e.epsilon > 0})


def lifetime_text(spent: float, total: float | None, delta_total: float, releases: int | None = None,
                  remaining: float | None = None, selection_delta: float = 0.0) -> str:
    """``epsilon = 0.753617 spent of 1.5 (0.746383 remaining) - 2 releases composed at delta_total = 1e-06 (exact
    Gaussian composition, rounded up)``: the dataset's lifetime spend, never a per-release figure. With category
    thresholds (``selection_delta`` > 0, what they spent) the Gaussians compose at delta_total less it, and the line
    says so: ``composed at delta_total = 1e-06 less 1e-07 spent by category thresholds``."""
    of = "" if total is None else f" of {total:g}"
    left = "" if remaining is None else f" ({remaining:.6f} remaining)"
    count = "" if releases is None else f"{releases} release{'' if releases == 1 else 's'} "
    held = f" less {selection_delta:g} spent by category thresholds" if selection_delta > 0 else ""
    return (f"epsilon = {spent:.6f} spent{of}{left} - {count}composed at delta_total = {delta_total:g}{held} "
            "(exact Gaussian composition, rounded up)")


def lifetime_of(ledger: Any, dataset: str) -> str:
    """The lifetime line of a dataset as the ledger has it now."""
    spent, delta_total = ledger.spent(dataset)
    budget = ledger.budget(dataset)
    return lifetime_text(spent, None if budget is None else budget.epsilon_total, delta_total,
                         composed_releases(ledger, dataset), ledger.remaining(dataset), ledger.selection_spent(dataset))
