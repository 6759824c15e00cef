"""The ledger's composition arithmetic: what its counted entries spend once composed.

``params_hash`` is the canonical hash of public parameters (an entry's, and a composition's cache key);
``gaussian_delta`` the delta the Gaussian entries compose at once category thresholds took theirs; and
``cached_composition`` runs the accountant (``mechanism.compose_epsilon``) through the composition cache
(``splice_ledger_compositions``), keyed by ``COMPOSITION_RULE``, the accountant's version and its inputs.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from splice_assets.private.ledger_records import compositions_table

#: Names ``mechanism.compose_epsilon``'s rule in the composition cache's keys: change it when that rule changes.
COMPOSITION_RULE = "exact Gaussian composition, PLD only with pure epsilon-DP events, rounded up to 1e-6"


def _json_default(value: Any) -> Any:
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return value.item()
    if hasattr(value, "tolist") and callable(value.tolist):  # numpy arrays
        return value.tolist()
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"public parameter of type {type(value).__name__} is not JSON-serialisable")


def params_hash(public_params: Mapping[str, Any]) -> str:
    """sha256 (hex) of the canonical JSON (sorted keys, no spaces, no NaN) of *public* parameters only."""
    text = json.dumps(
        dict(public_params), sort_keys=True, separators=(",", ":"), allow_nan=False, default=_json_default
    )
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def gaussian_delta(delta_total: float, selection_deltas: Sequence[float]) -> float:
    """The delta the counted Gaussian entries compose at: ``delta_total`` less the deltas their thresholds spend
    (``selection_delta``), never rounded up (the next float below when the difference is not one); <= 0 when the
    thresholds leave nothing."""
    held = [Decimal(float(d)) for d in selection_deltas if float(d) > 0.0]
    if not held:
        return float(delta_total)
    exact = Decimal(float(delta_total)) - sum(held, Decimal(0))
    left = float(exact)
    if Decimal(left) > exact:
        left = math.nextafter(left, -math.inf)
    return left


def _compose_epsilon(
    noise_multipliers: Sequence[float | None], delta_total: float, pure_epsilons: Sequence[float] = ()
) -> float:
    """``mechanism.compose_epsilon``, imported on first use: reading entries (``splice releases``, ``show``) does
    not load the mechanism (numpy)."""
    from splice_assets.private.mechanism import compose_epsilon

    return compose_epsilon(noise_multipliers, delta_total, pure_epsilons)


def _composition_key(noise_multipliers: Sequence[float | None], delta_total: float,
                     pure_epsilons: Sequence[float]) -> str:
    """The cache key of one composition: the rule's version and its inputs as ``compose_epsilon`` reads them
    (zero-cost entries skipped, order ignored)."""
    gaussian = sorted(float(m) for m in noise_multipliers if m is not None and not (math.isinf(m) and m > 0))
    return params_hash({"accountant": _composition_version(),
                        "gaussian": gaussian, "pure": sorted(float(e) for e in pure_epsilons if float(e) > 0.0),
                        "delta_total": float(delta_total)})


@functools.cache
def _composition_version() -> str:
    """The installed dp-accounting's version (it composes pure epsilon-DP events) and ``COMPOSITION_RULE``, read
    from its metadata once per process."""
    from importlib.metadata import version

    return f"dp-accounting {version('dp-accounting')}, {COMPOSITION_RULE}"


def _delta_text(delta_total: float, selection_deltas: Sequence[float]) -> str:
    """``1e-06``, or ``9e-07 (delta_total 1e-06 less 1e-07 spent by thresholds)`` when thresholds spent some."""
    held = float(sum(d for d in selection_deltas if d > 0.0))
    if held <= 0.0:
        return f"{delta_total:g}"
    return f"{gaussian_delta(delta_total, selection_deltas):g} (delta_total {delta_total:g} less {held:g} spent by " \
           "category thresholds)"


def cached_composition(conn: Connection, noise_multipliers: Sequence[float | None], delta_total: float,
                       pure_epsilons: Sequence[float],
                       compose: Callable[[Sequence[float | None], float, Sequence[float]], float]) -> float:
    """``compose`` (the accountant) of these entries, read from the composition cache when the same ones were
    composed before (in any process), else computed and kept there."""
    key = _composition_key(noise_multipliers, delta_total, pure_epsilons)
    cached = conn.execute(sa.select(compositions_table.c.epsilon).where(compositions_table.c.key == key)).first()
    if cached is not None:
        return float(cached[0])
    epsilon = compose(noise_multipliers, delta_total, pure_epsilons)
    try:
        with conn.begin_nested():  # another process may have kept the same composition meanwhile
            conn.execute(compositions_table.insert().values(key=key, epsilon=epsilon, created_at=datetime.now(UTC)))
    except sa.exc.IntegrityError:
        pass
    return epsilon
