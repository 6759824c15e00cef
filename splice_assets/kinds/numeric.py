"""What the numeric kinds (``continuous``, ``integer``) share: public bounds, exact values, a scale and knots; a
strict number parse in which a non-number is unparseable; a value coordinate on the scale, a sentinel coordinate and
a missing indicator."""

from __future__ import annotations

import math
from collections import Counter
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from splice_assets.kinds.base import Kind
from splice_assets.kinds.fields import _fail, _parse_bounds, value_fields
from splice_assets.kinds.scales import _grid_position, _nearest_level, _on_public_precision, at_point, cube_of, value_of

if TYPE_CHECKING:
    import pandas as pd
    import pandera.pandas as pa

    from splice_assets.schema import ColumnSpec


class NumericKind(Kind):
    numeric: ClassVar[bool] = True

    def parse_fields(self, where: str, raw: dict[str, Any]) -> dict[str, Any]:
        if "bounds" not in raw:
            raise _fail(where, raw, "a numeric column needs public bounds [lo, hi] (or 'auto')")
        if "categories" in raw or raw.get("other") is not None:
            raise _fail(where, raw, "a numeric column takes no categories or other")
        bounds, auto, known_end = _parse_bounds(where, raw["bounds"])
        return dict(bounds=bounds, bounds_auto=auto, known_end=known_end, categories=None, other=raw.get("other"),
                    **value_fields(where, raw, self, bounds, auto))

    def _number(self, value: float) -> int | float:
        """A declared number as the schema writes it."""
        return int(value) if self.integral else value

    def fields_to_dict(self, spec: ColumnSpec) -> dict[str, Any]:
        c, entry = spec, dict[str, Any]()
        entry["bounds"] = list(c.bounds or ()) if not c.bounds_auto else (
            "auto" if c.known_end == (None, None) else ["auto" if end is None else end for end in c.known_end])
        if c.decimals is not None or c.decimals_auto:
            entry["decimals"] = "auto" if c.decimals_auto else c.decimals
        for key, declared in (("values", c.values), ("sentinels", c.sentinels), ("candidates", c.candidates)):
            if declared:
                entry[key] = [self._number(v) for v in declared]
        if c.values_auto:
            entry["values"] = [*entry.get("values", []), "auto"] if c.values else "auto"
        if c.step_auto:
            entry["step"] = "auto"
        elif c.step is not None:
            entry["step"] = self._number(c.step)
        if c.scale != "linear":
            entry["scale"] = c.scale
        if c.float32:
            entry["float32"] = True
        if c.knots_auto or c.knots:
            entry["knots"] = "auto" if c.knots_auto else list(c.knots)
        return entry

    # -- parsing -------------------------------------------------------------------------------------------------------
    def wrong_dtype(self, spec: ColumnSpec, dtype: Any, temporal: bool) -> tuple[str, str] | None:
        import pandas as pd

        if temporal or pd.api.types.is_bool_dtype(dtype):
            return "a number was declared", "fix the input or the schema's kind"
        return None

    def parse(self, series: pd.Series, spec: ColumnSpec) -> tuple[np.ndarray, np.ndarray]:
        from splice_assets.kinds.cells import parse_numbers

        return parse_numbers(series), series.isna().to_numpy()

    def tally(self, spec: ColumnSpec, values: np.ndarray, was_missing: np.ndarray) -> tuple[int, int]:
        non_empty = int(was_missing.size - np.count_nonzero(was_missing))
        return non_empty, int(np.count_nonzero(np.isnan(values) & ~was_missing))

    def unparseable(self, spec: ColumnSpec) -> tuple[str, str]:
        return "not numbers", "fix the input or the schema's kind"

    def clean(self, values: np.ndarray, was_missing: np.ndarray, spec: ColumnSpec, counts: Counter[str]
              ) -> pd.Series:
        """Unparsed to missing, infinities and out-of-bounds values clipped, missing imputed to the bounds'
        midpoint when not nullable; then ``finish``."""
        assert spec.bounds is not None
        lo, hi = spec.bounds
        unparsed = np.isnan(values) & ~was_missing
        counts["unparseable_to_missing"] += int(unparsed.sum())
        counts["infinite_clipped"] += int(np.isinf(values).sum())
        finite_out = np.isfinite(values) & ((values < lo) | (values > hi))
        counts["out_of_bounds_clipped"] += int(finite_out.sum())
        # Clip before any arithmetic: inf and 1e308 become the public bounds.
        values = np.where(np.isnan(values), np.nan, np.clip(values, lo, hi))
        missing = np.isnan(values)
        if not spec.nullable and missing.any():
            counts["missing_in_non_nullable_imputed"] += int(missing.sum())
            values = np.where(missing, (lo + hi) / 2.0, values)
            missing = np.zeros_like(missing)
        counts["missing"] += int(missing.sum())
        return self.finish(values, missing, spec, counts)

    def finish(self, values: np.ndarray, missing: np.ndarray, spec: ColumnSpec, counts: Counter[str]) -> pd.Series:
        """Clipped values (NaN where ``missing``) -> the validated column."""
        import pandas as pd

        return pd.Series(values, dtype=np.float64)

    def pandera_column(self, spec: ColumnSpec) -> pa.Column:
        import pandera.pandas as pa

        assert spec.bounds is not None
        check = pa.Check.in_range(spec.bounds[0], spec.bounds[1])
        return pa.Column(self.validated_dtype(spec), check, nullable=spec.nullable)

    # -- the cube ------------------------------------------------------------------------------------------------------
    def coordinates(self, spec: ColumnSpec) -> list[tuple[str, int, int]]:
        coords = [("value", 0, 0)]
        if spec.sentinels:
            coords.append(("exact", len(spec.sentinels) + 1, 0))
        if spec.nullable:
            coords.append(("missing", 2, 0))
        return coords

    def encode(self, series: pd.Series, spec: ColumnSpec) -> list[np.ndarray]:
        assert spec.bounds is not None, f"column {spec.name!r} has no bounds (resolve 'auto' bounds first)"
        missing = series.isna().to_numpy()
        lo, hi = spec.bounds
        values = series.to_numpy(dtype=np.float64, na_value=np.nan)
        scaled = np.clip(cube_of(np.nan_to_num(values, nan=(lo + hi) / 2.0), lo, hi, spec.scale, spec.knots), -1.0,
                         1.0)
        columns = [np.where(missing, 0.0, scaled)]
        if spec.sentinels:
            columns.append(_grid_position(exact_levels(values, spec).astype(np.float64), len(spec.sentinels) + 1))
        if spec.nullable:
            columns.append(np.where(missing, 1.0, -1.0))
        return columns

    def decode(self, x: np.ndarray, spec: ColumnSpec) -> pd.Series:
        assert spec.bounds is not None
        lo, hi = spec.bounds
        values = value_of(x[:, 0], lo, hi, spec.scale, spec.knots)
        j = 1
        if spec.sentinels:
            level = _nearest_level(x[:, j], len(spec.sentinels) + 1)
            exact = np.asarray((np.nan, *spec.sentinels))[level]
            values = np.where(level > 0, exact, values)
            j += 1
        missing = np.zeros(len(x), dtype=bool)
        if spec.nullable:
            missing = x[:, j] > 0.0
        return self.output_series(_on_public_precision(np.clip(values, lo, hi), spec), missing, spec)

    def output_series(self, values: np.ndarray, missing: np.ndarray, spec: ColumnSpec) -> pd.Series:
        """Values at the public precision, inside the bounds -> the output column (NA where ``missing``)."""
        import pandas as pd

        series = pd.Series(values, dtype=np.float64)
        series[missing] = np.nan
        return series

    def output_dtype(self, spec: ColumnSpec) -> str:
        return "float64"

    def grid_step(self, spec: ColumnSpec) -> float | None:
        return spec.step if spec.step is not None else (1.0 if self.integral else None)

    # -- schema init ---------------------------------------------------------------------------------------------------
    def draft(self, values: pd.Series, from_data: bool) -> dict[str, Any]:
        """``bounds: auto`` (with ``from_data`` the observed min/max), ``decimals: auto`` on a fractional kind and
        ``values: auto``: the DP estimates that keep a column's range, precision and point masses where nothing
        public is said yet, for ``bounds_share`` of the release's privacy in all (docs/schema.md, ``bounds: auto``)."""
        import pandas as pd

        numbers = pd.to_numeric(values.dropna())
        number = int if self.integral else float
        entry: dict[str, Any] = {"bounds": [number(numbers.min()), number(numbers.max())] if from_data else "auto"}
        if self.fractional:
            entry["decimals"] = "auto"
        entry["values"] = "auto"
        return entry


def exact_levels(values: np.ndarray, spec: ColumnSpec) -> np.ndarray:
    """Level of each value's sentinel (1-based, in the schema's order), 0 for any other value or NA."""
    assert spec.bounds is not None
    levels = np.zeros(len(values), dtype=np.int64)
    for i, point in enumerate(spec.sentinels, start=1):
        levels[at_point(values, point, *spec.bounds)] = i  # NaN is at no point: missing stays 0
    return levels


def round_integral(values: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Integers nearest ``values`` inside [lo, hi] (a public integer bound may be fractional)."""
    return np.clip(np.rint(values), math.ceil(lo), math.floor(hi))
