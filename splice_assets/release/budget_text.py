"""One wording for the two budget figures, so they can not be mistaken for each other on screen.

* **This release**: the (epsilon, delta) of one release, what the ledger charges for it (0 for a refit).
* **Lifetime**: the dataset's spend, every counted release composed (exactly, as Gaussian mechanisms) at the
  budget's delta_total, against the lifetime epsilon_total. Composition is tighter than a sum, so a lifetime of 1.5 can
  admit three releases at epsilon = 1 (docs/privacy.md, "Lifetime budget").

Used by the CLI and the demo; imports nothing heavy (the ledger is passed in).
"""

from __future__ import annotations

from typing import Any


def release_text(epsilon: float, delta: float | None = None) -> str:
    """``epsilon = 1 (delta = 1e-09)``: one release's cost."""
    return f"epsilon = {epsilon:g}" + ("" if delta is None else f" (delta = {delta:g})")


def composed_releases(ledger: Any, dataset: str) -> int:
    """Releases the lifetime spend composes: distinct release ids with a counted entry of epsilon > 0 (a release's
    DP bounds and its measurement are one release; a zero-cost refit is none)."""
    return len({e.release_id for e in ledger.entries(dataset) if e.counted and e.epsilon > 0})


def lifetime_text(spent: float, total: float | None, delta_total: float, releases: int | None = None,
                  remaining: float | None = None) -> str:
    """``epsilon = 0.753617 spent of 1.5 (0.746383 remaining) - 2 releases composed at delta_total = 1e-06 (exact
    Gaussian composition, rounded up)``: the dataset's lifetime spend, never a per-release figure."""
    of = "" if total is None else f" of {total:g}"
    left = "" if remaining is None else f" ({remaining:.6f} remaining)"
    count = "" if releases is None else f"{releases} release{'' if releases == 1 else 's'} "
    return (f"epsilon = {spent:.6f} spent{of}{left} - {count}composed at delta_total = {delta_total:g} "
            "(exact Gaussian composition, rounded up)")


def lifetime_of(ledger: Any, dataset: str) -> str:
    """The lifetime line of a dataset as the ledger has it now."""
    spent, delta_total = ledger.spent(dataset)
    budget = ledger.budget(dataset)
    return lifetime_text(spent, None if budget is None else budget.epsilon_total, delta_total,
                         composed_releases(ledger, dataset), ledger.remaining(dataset))
