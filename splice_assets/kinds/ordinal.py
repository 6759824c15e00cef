"""``kind: ordinal``: a categorical column whose categories are listed in their public order; the fit reads the
order (``layout.Coordinate.ordered``) and the column is an ordered pandas categorical. Never drafted."""

from __future__ import annotations

from typing import ClassVar

from splice_assets.kinds.discrete import DiscreteKind


class Ordinal(DiscreteKind):
    name: ClassVar[str] = "ordinal"
    ordered: ClassVar[bool] = True
