"""``kind: categorical``: one of a public list of ``categories`` (``other`` takes every unseen value), or an open
domain (``categories: auto``: a DP selection in the estimate keeps the frequent values, ``private.bounds``); the
drafted entry lists the observed values only with ``--from-data``, and proposes ``categories: auto`` for a column
with many distinct values (more than ``OPEN_DISTINCT``, or more than ``OPEN_MIN`` that are ``OPEN_SHARE`` of its
cells). Observed values that are all numbers are listed in numeric order (``2`` before ``10``), others
alphabetically: neither is the public order an ``ordinal`` needs."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, ClassVar

from splice_assets.kinds.discrete import DiscreteKind

if TYPE_CHECKING:
    import pandas as pd


#: ``schema init`` drafts ``categories: auto`` above this many distinct values, or this share of distinct cells.
OPEN_DISTINCT, OPEN_SHARE, OPEN_MIN = 50, 0.05, 20


class Categorical(DiscreteKind):
    name: ClassVar[str] = "categorical"
    draft_order: ClassVar[int | None] = 3  # what no other kind recognises
    open_domain: ClassVar[bool] = True

    def recognises(self, present: pd.Series) -> bool:
        return True

    def draft(self, values: pd.Series, from_data: bool) -> dict[str, Any]:
        present = values.dropna()
        observed = sorted({str(v).strip() for v in present}, key=_numeric_first)
        if len(observed) > OPEN_DISTINCT or (len(observed) > OPEN_MIN and len(observed) > OPEN_SHARE * len(present)):
            return {"categories": "auto", "other": "other"}
        return {"categories": observed if from_data else []}


def _numeric_first(value: str) -> tuple[float, str]:
    """Sort key: a number by its value (then its text, so ``02`` and ``2`` keep an order), text after numbers."""
    try:
        number = float(value)
    except ValueError:
        return (math.inf, value)
    return (number if math.isfinite(number) else math.inf, value)
