"""``kind: categorical``: one of a public list of ``categories`` (``other`` takes every unseen value); the drafted
entry lists the observed values only with ``--from-data``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from splice_assets.kinds.discrete import DiscreteKind

if TYPE_CHECKING:
    import pandas as pd


class Categorical(DiscreteKind):
    name: ClassVar[str] = "categorical"
    draft_order: ClassVar[int | None] = 3  # what no other kind recognises

    def recognises(self, present: pd.Series) -> bool:
        return True

    def draft(self, values: pd.Series, from_data: bool) -> dict[str, Any]:
        observed = sorted({str(v).strip() for v in values.dropna()})
        return {"categories": observed if from_data else []}
