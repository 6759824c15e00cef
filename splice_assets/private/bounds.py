"""DP estimates of numeric bounds the schema leaves as ``auto``, charged to the ledger as their own spend.

Each ``auto`` column gets two private quantiles (OpenDP's exponential-mechanism quantile over a public,
data-independent candidate grid), at ``lower_quantile`` and ``upper_quantile``. The estimates are DP outputs
and therefore public: they replace ``auto`` in the schema used for the release and are shown in it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pandas as pd

from splice_assets.measurement import RELATION_REPLACE_ONE
from splice_assets.schema import ColumnSpec, TableSchema

#: Public candidate grid: 0 and +-10^e for e in [-3, 9], 20 per decade. Data-independent and fine on purpose:
#: every candidate beyond the data ties, so only a candidate close to the quantile can out-score that flat tail.
_MAGNITUDES = np.geomspace(1e-3, 1e9, 241)
CANDIDATES: tuple[float, ...] = tuple(np.concatenate([-_MAGNITUDES[::-1], [0.0], _MAGNITUDES]).tolist())
MECHANISM = "exponential/private-quantile-bounds"


class PureSpendRecorder(Protocol):
    def reserve_pure(
        self, *, dataset: str, release_id: str, mechanism: str, epsilon: float, relation: str, params_hash: str
    ) -> str: ...

    def commit(self, entry_id: str) -> None: ...

    def abort(self, entry_id: str) -> None: ...


@dataclass(frozen=True)
class BoundsEstimate:
    """Public record of a bounds estimation: which columns, the estimates, and what it cost."""

    epsilon: float
    columns: dict[str, tuple[float, float]]
    ledger_entry_id: str | None
    lower_quantile: float
    upper_quantile: float
    mechanism: str = MECHANISM


def auto_columns(schema: TableSchema) -> list[ColumnSpec]:
    return [c for c in schema.columns if c.is_numeric and c.bounds_auto]


def private_quantile(values: np.ndarray, alpha: float, epsilon: float, relation: str = RELATION_REPLACE_ONE) -> float:
    """One epsilon-DP quantile of ``values`` over the public candidate grid (OpenDP, OS-entropy noise).

    Sensitivity: under replace-one neighbours (n public, a sized domain) the input vectors differ in one element,
    i.e. symmetric distance 2; under add-remove (n private, an unsized domain) by one added or removed element,
    symmetric distance 1. The noise scale is searched so that OpenDP's privacy map at that d_in is <= epsilon.
    """
    import opendp.prelude as dp

    dp.enable_features("contrib")
    replace_one = relation == RELATION_REPLACE_ONE
    d_in = 2 if replace_one else 1
    domain = dp.vector_domain(dp.atom_domain(T=float, nan=False), size=len(values) if replace_one else None)

    def make(scale: float) -> Any:  # opendp's Measurement methods are untyped
        return dp.m.make_private_quantile(domain, dp.symmetric_distance(), dp.max_divergence(), list(CANDIDATES),
                                          alpha, scale)

    scale = dp.binary_search_param(make, d_in=d_in, d_out=epsilon, T=float)
    measurement = make(scale)
    assert measurement.map(d_in) <= epsilon
    return float(measurement(np.asarray(values, dtype=np.float64).tolist()))


def estimate_bounds(
    raw: pd.DataFrame,
    schema: TableSchema,
    epsilon: float,
    ledger: PureSpendRecorder | None,
    release_id: str,
    relation: str,
    lower_quantile: float = 0.02,
    upper_quantile: float = 0.98,
) -> tuple[TableSchema, BoundsEstimate]:
    """Resolve every ``auto`` column of ``schema`` with DP quantiles of ``raw``; one ledger entry for all of them.

    epsilon is split evenly over the 2 * (number of auto columns) quantiles (basic composition of pure DP).
    Cells are parsed strictly; missing or unparseable cells become 0 (a public constant) so every row counts once
    (the vector length is the public n under replace-one; under add-remove the domain is unsized). Returns the
    resolved schema and the public record.
    """
    from splice_assets.private.validation import parse_numbers

    columns = auto_columns(schema)
    if not columns:
        return schema, BoundsEstimate(0.0, {}, None, lower_quantile, upper_quantile)
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(
            f"bounds estimation needs an epsilon > 0 for columns {[c.name for c in columns]}, got {epsilon!r}"
        )
    for spec in columns:
        if spec.name not in raw.columns:
            raise ValueError(f"column {spec.name!r}: required by the schema but missing from the input")
    per_quantile = epsilon / (2 * len(columns))
    entry_id = None
    if ledger is not None:
        entry_id = ledger.reserve_pure(
            dataset=schema.name, release_id=release_id, mechanism=MECHANISM, epsilon=epsilon, relation=relation,
            params_hash=f"auto-bounds:{','.join(c.name for c in columns)}:{lower_quantile}:{upper_quantile}",
        )
    try:
        resolved: dict[str, tuple[float, float]] = {}
        for spec in columns:
            values = parse_numbers(raw[spec.name].reset_index(drop=True))
            values = np.nan_to_num(values, nan=0.0, posinf=CANDIDATES[-1], neginf=CANDIDATES[0])
            lo = private_quantile(values, lower_quantile, per_quantile, relation)
            hi = private_quantile(values, upper_quantile, per_quantile, relation)
            lo, hi = min(lo, hi), max(lo, hi)
            if hi <= lo:  # a degenerate estimate: widen to the next candidate (public rule)
                hi = next((c for c in CANDIDATES if c > lo), lo + 1.0)
            resolved[spec.name] = (lo, hi)
    except BaseException:
        # Only reached before any quantile was released from this process.
        if ledger is not None and entry_id is not None and not resolved:
            ledger.abort(entry_id)
        raise
    if ledger is not None and entry_id is not None:
        ledger.commit(entry_id)
    new_columns = tuple(
        dataclasses.replace(c, bounds=resolved[c.name], bounds_auto=False) if c.name in resolved else c
        for c in schema.columns
    )
    return dataclasses.replace(schema, columns=new_columns), BoundsEstimate(
        epsilon, resolved, entry_id, lower_quantile, upper_quantile
    )
