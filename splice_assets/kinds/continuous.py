"""``kind: continuous``: a real number in public bounds. Its own fields: ``decimals`` (or ``auto``) and ``float32``,
the public output precision; decoded as float64 (NaN where missing)."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from splice_assets.kinds.numeric import NumericKind

if TYPE_CHECKING:
    import pandas as pd


class Continuous(NumericKind):
    name: ClassVar[str] = "continuous"
    fractional: ClassVar[bool] = True
    draft_order: ClassVar[int | None] = 2

    def recognises(self, present: pd.Series) -> bool:
        import pandas as pd

        return len(present) > 0 and not pd.to_numeric(present, errors="coerce").isna().any()
