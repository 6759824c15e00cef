"""``kind: id``: a key column. Never read, never measured, never costs epsilon: every synthetic row gets a new key,
unique across the whole synthetic table (its partitions included), from a public ``format``:

- ``sequence`` (the default): integers from ``start`` (default 1);
- ``uuid``: random version-4 UUIDs from the sample's public seed;
- a pattern with one ``{N}`` (``ORD{6}``, ``{8}-X``): N digits in the place of the braces. The digits of row i are
  a public bijection of i over the 10^N numbers (an affine map modulo 10^N fixed by the column's name, the same in
  every partition), so keys look unordered and never repeat; a table of more than 10^N rows is refused.

``kind: text`` (free text: notes, comments) is refused with what to do instead: free text is never released.
"""

from __future__ import annotations

import math
import re
import uuid
import zlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from splice_assets.kinds.fields import _fail
from splice_assets.kinds.lowered import LoweredColumn, LoweredKind

if TYPE_CHECKING:
    import pandas as pd

    from splice_assets.schema import ColumnSpec

_DIGITS = re.compile(r"\{(\d+)(?: digits)?\}")
#: Stream of the sample's public seed that keys draw from.
_TAG_KEYS = 0x1D5E_0001
#: A column whose cells are distinct in at least this share of the rows is drafted as an ``id``.
DISTINCT_SHARE = 0.99
#: Free text: cells this long on average, with spaces, most of them distinct.
TEXT_CHARS = 30


def _digits(pattern: str) -> int | None:
    found = _DIGITS.findall(pattern)
    return int(found[0]) if len(found) == 1 else None


class Identifier(LoweredKind):
    name: ClassVar[str] = "id"
    draft_order: ClassVar[int | None] = 5  # after the dates and times, whose cells may be distinct too

    def parse(self, where: str, raw: dict[str, Any], position: int) -> tuple[LoweredColumn, list[dict[str, Any]]]:
        unknown = set(raw) - {"name", "kind", "format", "start", "description"}
        if unknown:
            raise _fail(where, raw, f"unknown keys {sorted(unknown)} for an id column (it takes format and start)")
        key_format = raw.get("format", "sequence")
        if not isinstance(key_format, str) or not (key_format in ("sequence", "uuid") or _digits(key_format)):
            raise _fail(where, key_format, "format must be 'sequence', 'uuid' or a pattern with one {N} for N "
                        "digits, such as ORD{6}")
        digits = _digits(key_format)
        if digits is not None and not 1 <= digits <= 18:
            raise _fail(where, key_format, "a pattern's {N} must be 1 to 18 digits")
        start = raw.get("start", 1)
        if isinstance(start, bool) or not isinstance(start, int):
            raise _fail(where, start, "start must be an integer")
        return LoweredColumn(raw["name"], self.name, position, (), False, format=key_format, start=start), []

    def to_dict(self, column: LoweredColumn, parts: Mapping[str, ColumnSpec]) -> dict[str, Any]:
        entry: dict[str, Any] = {"format": column.format}
        if column.start != 1:
            entry["start"] = column.start
        return entry

    def assemble(self, parts: Mapping[str, pd.Series], column: LoweredColumn, rows: range, seed: int) -> pd.Series:
        import pandas as pd

        index = np.arange(rows.start, rows.stop, dtype=np.int64)
        if column.format == "sequence":
            return pd.Series(index + column.start, dtype=np.int64)
        if column.format == "uuid":
            # A partition samples from its own stream of the seed: keys are unique with probability 1 - n^2 / 2^123.
            raw = np.random.default_rng(np.random.SeedSequence([int(seed), _TAG_KEYS])).bytes(16 * len(index))
            keys = [str(uuid.UUID(bytes=raw[16 * i:16 * i + 16], version=4)) for i in range(len(index))]
            return pd.Series(keys, dtype="string")
        assert column.format is not None
        digits = _digits(column.format)
        assert digits is not None
        space = 10 ** digits
        if rows.stop > space:
            raise ValueError(f"column {column.name!r}: the id pattern {column.format!r} holds {space:,} keys; "
                             f"{rows.stop:,} rows were asked for (widen the pattern)")
        # One map for the whole table, whatever the partition: fixed by the column's name (public), not the seed.
        rng = np.random.default_rng(np.random.SeedSequence([_TAG_KEYS, zlib.crc32(column.name.encode())]))
        multiplier = int(rng.integers(1, space)) | 1
        while math.gcd(multiplier, space) != 1:  # coprime to 10^N: the map is a bijection
            multiplier += 2
        shift = int(rng.integers(0, space))
        numbers = [(multiplier * i + shift) % space for i in index.tolist()]
        head, _, tail = _DIGITS.split(column.format, maxsplit=1)
        return pd.Series([f"{head}{k:0{digits}d}{tail}" for k in numbers], dtype="string")

    def output_dtype(self, column: LoweredColumn) -> str:
        return "int64" if column.format == "sequence" else "string"

    def recognises(self, present: pd.Series) -> bool:
        import pandas as pd

        if len(present) < 20 or pd.api.types.is_float_dtype(present.dtype):
            return False
        text = present.astype(str).str.strip()
        if text.str.len().mean() > TEXT_CHARS or text.str.contains(" ").mean() > 0.5:
            return False  # free text, not keys
        numbers = pd.to_numeric(text, errors="coerce")
        if numbers.notna().all() and not bool((numbers == numbers.round()).all()):
            return False  # distinct measurements, not keys
        return text.nunique() >= DISTINCT_SHARE * len(text)

    def draft(self, values: pd.Series, from_data: bool) -> dict[str, Any]:
        import pandas as pd

        text = values.dropna().astype(str).str.strip()
        if pd.to_numeric(text, errors="coerce").notna().all():
            return {"format": "sequence"}
        parts = text.str.extract(r"^(\D*)(\d+)(\D*)$")
        if parts.notna().all().all() and parts[0].nunique() == 1 and parts[2].nunique() == 1 \
                and parts[1].str.len().nunique() == 1:  # one prefix, one width of digits, one suffix
            return {"format": f"{parts[0].iloc[0]}{{{len(parts[1].iloc[0])}}}{parts[2].iloc[0]}"}
        return {"format": "uuid"}


class Text(LoweredKind):
    """Free text: refused at the schema, with the two things a user can do instead."""

    name: ClassVar[str] = "text"
    draft_order: ClassVar[int | None] = 0

    def parse(self, where: str, raw: dict[str, Any], position: int) -> tuple[LoweredColumn, list[dict[str, Any]]]:
        raise _fail(where, raw.get("kind"), "free text is never released: write kind: categorical with "
                    "categories: auto and an other label to keep its frequent values (a DP selection), or delete "
                    "the column from the schema (an input column the schema does not name is ignored)")

    def to_dict(self, column: LoweredColumn, parts: Mapping[str, ColumnSpec]) -> dict[str, Any]:
        raise TypeError("a text column is never part of a parsed schema")

    def assemble(self, parts: Mapping[str, pd.Series], column: LoweredColumn, rows: range, seed: int) -> pd.Series:
        raise TypeError("a text column is never part of a parsed schema")

    def output_dtype(self, column: LoweredColumn) -> str:
        return "string"

    def recognises(self, present: pd.Series) -> bool:
        import pandas as pd

        if len(present) < 20 or pd.api.types.is_numeric_dtype(present.dtype):
            return False
        text = present.astype(str).str.strip()
        return bool(text.str.len().mean() > TEXT_CHARS and text.str.contains(" ").mean() > 0.5
                    and text.nunique() > 0.5 * len(text))
