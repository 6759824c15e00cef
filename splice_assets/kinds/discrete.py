"""What the discrete kinds (``categorical``, ``ordinal``, ``boolean``) share: a list of categories (one grid level
each, plus one for missing when nullable); cells matched by their canonical key; unseen cells to ``other``, missing
or the first category under the share rule (``private.validation``)."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from splice_assets.kinds.base import Kind
from splice_assets.kinds.fields import (
    OpenCategories,
    _fail,
    _parse_categories,
    _parse_open_categories,
    category_key,
    is_open,
    open_entry,
    value_fields,
)
from splice_assets.kinds.scales import _grid_position, _nearest_level

if TYPE_CHECKING:
    import pandas as pd
    import pandera.pandas as pa

    from splice_assets.schema import ColumnSpec


class DiscreteKind(Kind):
    numeric: ClassVar[bool] = False
    #: ``categories: auto`` (an open domain, ``private.bounds.select_categories``) is allowed: categorical only.
    open_domain: ClassVar[bool] = False

    def parse_fields(self, where: str, raw: dict[str, Any]) -> dict[str, Any]:
        """Declared categories (``other`` appended unless it is one of them), then no numeric field. An open list
        (``categories: auto``, categorical only) needs an ``other`` and takes a ``max_categories``."""
        if "bounds" in raw:
            raise _fail(where, raw, "a categorical/ordinal column takes no bounds")
        if is_open(raw) and not self.open_domain:
            raise _fail(where, raw.get("categories"),
                        f"categories: auto belongs to categorical columns, not {self.name}")
        if "max_categories" in raw and not is_open(raw):
            raise _fail(where, raw, "max_categories belongs to categories: auto")
        categories = (_parse_open_categories(where, raw) if is_open(raw)
                      else _parse_categories(where, raw.get("categories")))
        other = raw.get("other")
        if other is not None:
            if category_key(other) not in {category_key(c) for c in categories}:
                categories = (*categories, other)
        return self._with_no_value_fields(where, raw, categories=categories, other=other)

    def _with_no_value_fields(self, where: str, raw: dict[str, Any], **fields: Any) -> dict[str, Any]:
        return {**value_fields(where, raw, self, None, False), **fields}

    def fields_to_dict(self, spec: ColumnSpec) -> dict[str, Any]:
        entry: dict[str, Any] = {"categories": list(spec.categories or ())}
        if spec.other is not None:
            entry["other"] = spec.other
        opened = open_entry(spec.categories)
        if opened is not None:  # an unresolved open list: ``auto`` where it was written, and its cap if not default
            from splice_assets.kinds.fields import DEFAULT_MAX_CATEGORIES

            entry["categories"] = ["auto" if c is opened else c for c in entry["categories"]]
            if opened.max_categories != DEFAULT_MAX_CATEGORIES:
                entry["max_categories"] = opened.max_categories
        return entry

    def categories_of(self, spec: ColumnSpec) -> tuple[Any, ...]:
        """The column's categories (an unresolved open list's public ones and its ``other``; the estimate resolves
        it before any cell is encoded)."""
        assert spec.categories is not None
        return tuple(c for c in spec.categories if not isinstance(c, OpenCategories))

    def category_index(self, spec: ColumnSpec) -> dict[str, int]:
        return {category_key(c): i for i, c in enumerate(self.categories_of(spec))}

    # -- parsing -------------------------------------------------------------------------------------------------------
    def wrong_dtype(self, spec: ColumnSpec, dtype: Any, temporal: bool) -> tuple[str, str] | None:
        return ("categories were declared", "write the column as text or fix the schema's kind") if temporal else None

    def parse(self, series: pd.Series, spec: ColumnSpec) -> tuple[np.ndarray, np.ndarray]:
        from splice_assets.kinds.cells import MISSING, cell_codes

        codes = cell_codes(series, spec.category_index())
        return codes, codes == MISSING

    def tally(self, spec: ColumnSpec, values: np.ndarray, was_missing: np.ndarray) -> tuple[int, int]:
        from splice_assets.kinds.cells import TOO_LONG, UNSEEN

        non_empty = int(was_missing.size - np.count_nonzero(was_missing))
        too_long = int(np.count_nonzero(values == TOO_LONG))
        return non_empty, too_long + (0 if spec.other is not None else int(np.count_nonzero(values == UNSEEN)))

    def unparseable(self, spec: ColumnSpec) -> tuple[str, str]:
        from splice_assets.kinds.cells import MAX_CELL_CHARS

        if spec.other is not None:  # only over-long cells count: every other value goes to `other`
            return (f"longer than {MAX_CELL_CHARS:,} characters", "fix the input (an unclosed quote in a CSV makes "
                    "one cell of many rows)")
        return (f"not declared categories or longer than {MAX_CELL_CHARS:,} characters",
                "fix the input or the schema's categories (or declare an `other`)")

    def clean(self, values: np.ndarray, was_missing: np.ndarray, spec: ColumnSpec, counts: Counter[str]
              ) -> pd.Series:
        """Codes to the schema's categories by the rule in ``private.validation``'s docstring; unseen and missing
        counted apart."""
        from splice_assets.kinds.cells import MISSING, TOO_LONG, UNSEEN

        codes = values
        index = spec.category_index()
        too_long = codes == TOO_LONG
        if too_long.any():  # not a value: missing, then the non-nullable rule below (never ``other``)
            counts["too_long_to_missing"] += int(too_long.sum())
            codes = np.where(too_long, MISSING, codes)
        unseen = codes == UNSEEN
        if unseen.any():
            if spec.other is not None:
                counts["unseen_to_other"] += int(unseen.sum())
                codes = np.where(unseen, index[category_key(spec.other)], codes)
            elif spec.nullable:
                counts["unseen_to_missing"] += int(unseen.sum())
                codes = np.where(unseen, MISSING, codes)
            else:
                # The schema's first category is the public choice; a share over the limit was refused, not imputed.
                counts["unseen_imputed_to_first_category"] += int(unseen.sum())
                codes = np.where(unseen, 0, codes)
        missing = codes == MISSING
        if not spec.nullable and missing.any():
            fallback = index[category_key(spec.other)] if spec.other is not None else 0
            counts["missing_in_non_nullable_imputed"] += int(missing.sum())
            codes = np.where(missing, fallback, codes)
        counts["missing"] += int((codes == MISSING).sum())
        return self.from_codes(codes, spec)

    def from_codes(self, codes: np.ndarray, spec: ColumnSpec) -> pd.Series:
        """Category codes (-1: missing) -> the column in its output dtype."""
        import pandas as pd

        return pd.Series(pd.Categorical.from_codes(codes, dtype=self.categorical_dtype(spec)))

    def categorical_dtype(self, spec: ColumnSpec) -> pd.CategoricalDtype:
        import pandas as pd

        return pd.CategoricalDtype(list(self.categories_of(spec)), ordered=self.ordered)

    def pandera_column(self, spec: ColumnSpec) -> pa.Column:
        import pandera.pandas as pa

        # A plain "category" dtype plus an explicit check: pandera's CategoricalDtype comparison breaks on
        # mixed int/float category lists (e.g. [17.5, 22]).
        expected = self.categorical_dtype(spec)
        same_categories = pa.Check(lambda series, expected=expected: series.dtype == expected, name="schema_categories")
        return pa.Column("category", same_categories, nullable=spec.nullable)

    # -- the cube ------------------------------------------------------------------------------------------------------
    def levels(self, spec: ColumnSpec) -> int:
        """Grid levels; an unresolved open list counts its cap (what planning and the pre-flight price)."""
        opened = open_entry(spec.categories)
        return len(self.categories_of(spec)) + (opened.max_categories if opened else 0) + int(spec.nullable)

    def coordinates(self, spec: ColumnSpec) -> list[tuple[str, int, int]]:
        ordered = len(self.categories_of(spec)) if self.ordered else 0
        return [("value", self.levels(spec), ordered)]

    def encode(self, series: pd.Series, spec: ColumnSpec) -> list[np.ndarray]:
        missing = series.isna().to_numpy()
        levels = self.levels(spec)
        codes = self.codes(series, spec)
        if spec.nullable:
            codes = np.where(missing | (codes < 0), levels - 1, codes)
        codes = np.clip(codes, 0, levels - 1)
        return [_grid_position(codes.astype(np.float64), levels)]

    def codes(self, series: pd.Series, spec: ColumnSpec) -> np.ndarray:
        """0-based schema position of each value of a validated (or synthetic) column, -1 for missing/unknown."""
        import pandas as pd

        if isinstance(series.dtype, pd.CategoricalDtype) and list(series.cat.categories) == list(spec.categories or ()):
            return series.cat.codes.to_numpy().astype(np.int64)
        index = spec.category_index()
        return np.array([-1 if pd.isna(v) else index.get(category_key(v), -1) for v in series], dtype=np.int64)

    def decode(self, x: np.ndarray, spec: ColumnSpec) -> pd.Series:
        levels = self.levels(spec)
        codes = _nearest_level(x[:, 0], levels)
        if spec.nullable:
            codes = np.where(codes == levels - 1, -1, codes)
        return self.from_codes(codes, spec)

    def output_dtype(self, spec: ColumnSpec) -> str:
        return "category"

    def output_values(self, spec: ColumnSpec) -> list[Any] | None:
        return list(self.categories_of(spec))

    def output_codes(self, series: pd.Series, spec: ColumnSpec) -> np.ndarray:
        return self.codes(series, spec)
