"""``kind: boolean``: true or false. Takes no bounds, categories or ``other``: its two values are fixed. A cell is
true/false (any case, as a boolean or text) or 1/0 (as a number or text, ``1.0`` too); anything else is unparseable,
under the share rule, and the refusal says so without advising categories, which a boolean cannot take. Written as
pandas' nullable ``boolean``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from splice_assets.kinds.cells import MAX_CELL_CHARS
from splice_assets.kinds.discrete import DiscreteKind
from splice_assets.kinds.fields import _fail

if TYPE_CHECKING:
    import pandas as pd
    import pandera.pandas as pa

    from splice_assets.schema import ColumnSpec

#: The cells a boolean reads, by canonical key (``category_key``): false is category 0, true 1.
CELLS: dict[str, int] = {"false": 0, "true": 1, "0": 0, "1": 1}
_WORDS = frozenset({"true", "false"})


class Boolean(DiscreteKind):
    name: ClassVar[str] = "boolean"
    draft_order: ClassVar[int | None] = 0

    def parse_fields(self, where: str, raw: dict[str, Any]) -> dict[str, Any]:
        if "bounds" in raw or "categories" in raw:
            raise _fail(where, raw, "a boolean column takes no bounds or categories")
        if raw.get("other") is not None:
            raise _fail(where, raw, "a boolean column takes no other: a cell that is not true/false or 1/0 is "
                        "unparseable")
        return self._with_no_value_fields(where, raw, categories=(False, True), other=None)

    def fields_to_dict(self, spec: ColumnSpec) -> dict[str, Any]:
        return {}

    def category_index(self, spec: ColumnSpec) -> dict[str, int]:
        return dict(CELLS)

    def wrong_dtype(self, spec: ColumnSpec, dtype: Any, temporal: bool) -> tuple[str, str] | None:
        return ("a boolean was declared", "write the column as text or fix the schema's kind") if temporal else None

    def unparseable(self, spec: ColumnSpec) -> tuple[str, str]:
        return (f"not true/false or 1/0 or longer than {MAX_CELL_CHARS:,} characters",
                "fix the input, or the schema's kind if the column is not a boolean")

    def from_codes(self, codes: np.ndarray, spec: ColumnSpec) -> pd.Series:
        import pandas as pd

        return pd.Series(pd.arrays.BooleanArray(codes == 1, codes < 0))

    def pandera_column(self, spec: ColumnSpec) -> pa.Column:
        import pandera.pandas as pa

        return pa.Column("boolean", nullable=spec.nullable)

    def output_dtype(self, spec: ColumnSpec) -> str:
        return "boolean"

    def output_values(self, spec: ColumnSpec) -> list[Any] | None:
        return [True, False]

    def output_codes(self, series: pd.Series, spec: ColumnSpec) -> np.ndarray:
        """False 0, True 1, missing -1, read as pandas' nullable boolean (vectorised)."""
        values = series.astype("boolean")
        codes = values.fillna(False).to_numpy(dtype=bool).astype(np.int64)
        codes[values.isna().to_numpy()] = -1
        return codes

    def recognises(self, present: pd.Series) -> bool:
        import pandas as pd

        return bool(pd.api.types.is_bool_dtype(present)) or (
            len(present) > 0 and set(present.astype(str).str.strip().str.lower()) <= _WORDS)

    def draft(self, values: pd.Series, from_data: bool) -> dict[str, Any]:
        return {}
