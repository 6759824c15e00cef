"""``kind: integer``: an integer in public bounds (which may be fractional). Its exact values and ``step`` are
integers and ``step: auto`` is its own; cells are rounded on validation and decoding, and it is written as int64
(``Int64`` when nullable)."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from splice_assets.kinds.numeric import NumericKind, round_integral

if TYPE_CHECKING:
    import pandas as pd

    from splice_assets.schema import ColumnSpec


class Integer(NumericKind):
    name: ClassVar[str] = "integer"
    integral: ClassVar[bool] = True
    draft_order: ClassVar[int | None] = 1

    def finish(self, values: np.ndarray, missing: np.ndarray, spec: ColumnSpec, counts: Counter[str]) -> pd.Series:
        import pandas as pd

        assert spec.bounds is not None
        rounded = round_integral(values, *spec.bounds)
        counts["non_integer_rounded"] += int(np.sum((rounded != values) & ~missing))
        out = pd.Series(pd.array(np.where(missing, 0, rounded).astype(np.int64), dtype="Int64"))
        out[missing] = pd.NA
        return out if spec.nullable else out.astype(np.int64)

    def output_series(self, values: np.ndarray, missing: np.ndarray, spec: ColumnSpec) -> pd.Series:
        import pandas as pd

        assert spec.bounds is not None
        # Round inside the bounds: a public integer bound may be fractional.
        rounded = round_integral(values, *spec.bounds)
        series = pd.Series(pd.array(rounded.astype(np.int64), dtype="Int64"))
        if spec.nullable:
            series[missing] = pd.NA
            return series
        return series.astype(np.int64)

    def output_dtype(self, spec: ColumnSpec) -> str:
        return "Int64" if spec.nullable else "int64"

    def recognises(self, present: pd.Series) -> bool:
        import pandas as pd

        numbers = pd.to_numeric(present, errors="coerce")
        return (len(present) > 0 and not numbers.isna().any() and bool((numbers == numbers.round()).all())
                and not has_leading_zeros(present))


def has_leading_zeros(present: pd.Series) -> bool:
    """Whether a text cell is a number written with a leading zero (``02139``, ``007``): a code, never a quantity."""
    import pandas as pd

    if pd.api.types.is_numeric_dtype(present) or pd.api.types.is_bool_dtype(present):
        return False  # typed numbers (Parquet) carry no leading zero
    return bool(present.astype(str).str.strip().str.match(r"^[+-]?0\d").any())
