"""``kind: datetime``, ``date`` and ``time``: points in time on a public resolution, lowered into calendar parts.

A ``datetime`` is read as wall-clock seconds since 1970 in the column's ``timezone`` (a zone-aware cell is
converted to it; without a zone it is normalised to UTC and a naive cell is taken as it is) and modelled as three
parts: ``<name>.week`` (an integer: Monday-started weeks since 1970, in the public bounds' weeks), ``<name>.weekday``
(a categorical, Mon to Sun) and ``<name>.time`` (an integer: the time of day in resolution units). The calendar
structure users query is then measured directly: the weekday is a category with its own 1- and 2-way tables, the
time of day a number whose fine cells resolve the hour, the week the trend; a day is the week and weekday together.
A ``date`` has the week and weekday parts, a ``time`` only the time of day. A ``datetime`` on day resolution is
lowered as a ``date``.

Fields: ``bounds: [start, end]`` (public: the period the table covers, as dates or timestamps; or ``auto``, or one end
``auto`` as in ``[2019-01-01, auto]``: a DP estimate on a public month grid finds it, ``private.bounds``),
``resolution`` (second, minute, hour or day; a datetime's default is second; or ``auto``: a DP estimate picks the
coarsest unit the values are on) and ``timezone`` (an IANA name). Until the estimate resolves them, an ``auto`` end
holds the grid's end (``GRID_START``, ``GRID_END``) and an ``auto`` resolution the finest unit, and the parts are
laid out for those; the resolved schema's parts are rebuilt from the estimates (``resolved``). The output is
datetime64 at the resolution (tz-aware in the declared zone), a ``time`` text ``HH:MM:SS``; a CSV writes them as
ISO text, Parquet as timestamps.

A rule's later column (``dropoff >= pickup``) is lowered instead as its offset from the earlier one, in resolution
units (``splice_assets.lowering``): the kind then only reads and writes the column's seconds.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from splice_assets.kinds.fields import _fail
from splice_assets.kinds.lowered import LoweredColumn, LoweredKind, part_cells

if TYPE_CHECKING:
    import pandas as pd

    from splice_assets.schema import ColumnSpec

DAY = 86_400
UNITS: dict[str, int] = {"second": 1, "minute": 60, "hour": 3_600, "day": DAY}
WEEKDAYS: tuple[str, ...] = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
#: 1970-01-01 was a Thursday: day d is weekday (d + 3) % 7 of week (d + 3) // 7 (weeks start on Monday).
_WEEK_SHIFT = 3
_ZONED = re.compile(r"(?:Z|[+-]\d{2}:?\d{2})$")
_TIME_OF_DAY = re.compile(r"^\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?$")
#: ``bounds: auto``: the public grid of the DP estimate, one cell per calendar month from GRID_START to GRID_END
#: (exclusive); a value outside it counts in the outermost month. An ``auto`` end holds the grid's end until resolved.
GRID_START, GRID_END = "1970-01-01", "2100-01-01"
MONTH_CELLS = (2100 - 1970) * 12
#: ``resolution: auto``: the histogram's cells, coarsest first (a value adds 1 to the coarsest unit it is a multiple
#: of, on the wall clock).
UNIT_CELLS: tuple[str, ...] = ("day", "hour", "minute", "second")


def _timestamp(where: str, value: Any) -> Any:
    import pandas as pd

    try:
        stamp = pd.Timestamp(value)
    except (TypeError, ValueError):
        raise _fail(where, value, "a bound must be a date or timestamp such as 2019-03-01") from None
    if stamp is pd.NaT:
        raise _fail(where, value, "a bound must be a date or timestamp")
    return stamp.tz_localize(None) if stamp.tzinfo is not None else stamp


def _iso(stamp: Any) -> str:
    return str(stamp.date().isoformat() if stamp == stamp.normalize() else stamp.isoformat())


def bound_seconds(column: LoweredColumn) -> tuple[int, int]:
    """The public bounds as wall-clock seconds since 1970."""
    import pandas as pd

    assert column.bounds is not None
    lo, hi = (int(pd.Timestamp(b).value // 1_000_000_000) for b in column.bounds)
    return lo, hi


def week_of(seconds: float) -> int:
    """The Monday-started week (since 1970) that wall-clock ``seconds`` fall in."""
    return int((seconds // DAY + _WEEK_SHIFT) // 7)


def month_start(cell: int) -> str:
    """The first day of the grid's month ``cell`` (0: 1970-01), as ISO text."""
    year, month = divmod(int(cell), 12)
    return f"{1970 + year:04d}-{month + 1:02d}-01"


def month_cells(days: np.ndarray) -> np.ndarray:
    """Month-grid cell of each day since 1970 (NaN -> -1, counted nowhere; outside the grid: its outermost month)."""
    present = np.isfinite(days)
    months = np.asarray(np.where(present, days, 0.0), dtype=np.int64).astype("datetime64[D]").astype(
        "datetime64[M]").astype(np.int64)
    return np.where(present, np.clip(months, 0, MONTH_CELLS - 1), -1)


def unit_cells(seconds_of_day: np.ndarray) -> np.ndarray:
    """``UNIT_CELLS`` index of each wall-clock time of day in seconds: the coarsest unit it is a multiple of (NaN ->
    -1, counted nowhere)."""
    present = np.isfinite(seconds_of_day)
    whole = np.where(present, np.floor(np.nan_to_num(seconds_of_day)), 1.0).astype(np.int64)
    cells = np.full(len(whole), len(UNIT_CELLS) - 1, dtype=np.int64)
    for index in range(len(UNIT_CELLS) - 2, -1, -1):  # minute, hour, day: the coarsest that divides it wins
        cells[whole % UNITS[UNIT_CELLS[index]] == 0] = index
    return np.where(present, cells, -1)


class Temporal(LoweredKind):
    """What ``datetime``, ``date`` and ``time`` share."""

    #: Which calendar parts the kind has (a datetime on day resolution drops its time of day).
    has_date: ClassVar[bool] = True
    has_time: ClassVar[bool] = True
    default_resolution: ClassVar[str] = "second"
    unreadable: ClassVar[tuple[str, str]] = (
        "not dates or timestamps", "fix the input, or the schema's kind if the column is not a point in time")

    def units(self) -> list[str]:
        """The resolutions the kind takes, finest first."""
        return [u for u in UNITS if self.has_time or u == "day"] if self.has_date else [u for u in UNITS
                                                                                        if u != "day"]

    def _resolution(self, where: str, raw: dict[str, Any]) -> tuple[str, bool]:
        """(the unit, whether it is ``auto``: the finest unit until the estimate sets it)."""
        resolution = raw.get("resolution", self.default_resolution)
        allowed = self.units()
        if resolution == "auto":
            return allowed[0], len(allowed) > 1  # a date has one: auto is day
        if resolution not in allowed:
            raise _fail(where, resolution, f"resolution must be one of {allowed} or auto")
        return str(resolution), False

    def _zone(self, where: str, raw: dict[str, Any]) -> str | None:
        zone = raw.get("timezone")
        if zone is None:
            return None
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(str(zone))
        except (ZoneInfoNotFoundError, ValueError):
            raise _fail(where, zone, "timezone must be an IANA zone name such as Europe/Paris or UTC") from None
        return str(zone)

    def parse(self, where: str, raw: dict[str, Any], position: int) -> tuple[LoweredColumn, list[dict[str, Any]]]:
        unknown = set(raw) - {"name", "kind", "nullable", "bounds", "resolution", "timezone", "description"}
        if unknown:
            raise _fail(where, raw, f"unknown keys {sorted(unknown)} for a {self.name} column (it takes bounds, "
                        "resolution, timezone, nullable)")
        name, nullable = raw["name"], bool(raw.get("nullable", False))
        resolution, resolution_auto = self._resolution(where, raw)
        bounds, bounds_auto = None, (False, False)
        if self.has_date:
            declared = raw.get("bounds")
            declared = ["auto", "auto"] if declared == "auto" else declared
            if not isinstance(declared, list) or len(declared) != 2:
                raise _fail(where, declared, "bounds must be [start, end], the public period the column covers, "
                            "e.g. [2019-03-01, 2019-04-01], or auto (a DP estimate, charged like numeric bounds)")
            bounds_auto = (declared[0] == "auto", declared[1] == "auto")
            ends = [GRID_START if bounds_auto[0] else declared[0], GRID_END if bounds_auto[1] else declared[1]]
            lo, hi = (_timestamp(where, b) for b in ends)
            if not hi > lo:
                raise _fail(where, declared, "bounds must satisfy start < end" if not any(bounds_auto) else
                            f"the public end of half-auto bounds must lie inside the estimate's month grid "
                            f"[{GRID_START}, {GRID_END})")
            bounds = (_iso(lo), _iso(hi))
        elif "bounds" in raw:
            raise _fail(where, raw["bounds"], "a time column takes no bounds: it is a time of day")
        column = LoweredColumn(name, self.name, position, (), nullable, resolution, self._zone(where, raw), bounds,
                               bounds_auto=bounds_auto, resolution_auto=resolution_auto)
        parts = self.parts(column)
        return dataclasses.replace(column, parts=tuple(p["name"] for p in parts)), parts

    def resolved(self, column: LoweredColumn, bounds: tuple[str, str] | None, resolution: str | None
                 ) -> tuple[LoweredColumn, list[dict[str, Any]]]:
        """The column with the DP estimate's ``bounds`` (ISO text; None: as it is) and ``resolution`` (None: as it
        is), no longer ``auto``, and its parts rebuilt for them (the week part follows the bounds, the time part the
        unit; a datetime on day resolution has none). A rule's later column keeps its one offset part."""
        column = dataclasses.replace(
            column, bounds=column.bounds if bounds is None else bounds,
            bounds_auto=column.bounds_auto if bounds is None else (False, False),
            resolution=column.resolution if resolution is None else resolution,
            resolution_auto=column.resolution_auto and resolution is None)
        if column.base is not None:
            return column, []
        parts = self.parts(column)
        return dataclasses.replace(column, parts=tuple(p["name"] for p in parts)), parts

    def parts(self, column: LoweredColumn) -> list[dict[str, Any]]:
        """The ``ColumnSpec`` fields of the column's modelled parts."""
        parts: list[dict[str, Any]] = []
        unit = UNITS[column.resolution or "second"]
        base = {"nullable": column.nullable}
        if self.has_date:
            lo, hi = bound_seconds(column)
            parts.append({"name": f"{column.name}.week", "kind": "integer", **base,
                          "bounds": (float(week_of(lo)), float(week_of(hi - 1)))})  # the end: the period's last second
            parts.append({"name": f"{column.name}.weekday", "kind": "categorical", **base, "categories": WEEKDAYS})
        if self.has_time and unit < DAY:
            parts.append({"name": f"{column.name}.time", "kind": "integer", **base,
                          "bounds": (0.0, float(DAY // unit - 1))})
        return parts

    def to_dict(self, column: LoweredColumn, parts: Mapping[str, ColumnSpec]) -> dict[str, Any]:
        entry: dict[str, Any] = {}
        if column.bounds is not None:
            entry["bounds"] = "auto" if all(column.bounds_auto) else [
                "auto" if auto else end for end, auto in zip(column.bounds, column.bounds_auto)]
        entry["resolution"] = "auto" if column.resolution_auto else column.resolution
        if column.timezone is not None:
            entry["timezone"] = column.timezone
        return entry

    # -- in --------------------------------------------------------------------------------------------------------
    def seconds(self, series: pd.Series, column: LoweredColumn) -> tuple[np.ndarray, np.ndarray]:
        """(wall-clock seconds since 1970 in the column's zone, NaN where missing or unreadable; unreadable)."""
        missing = series.isna().to_numpy()
        stamps = self._stamps(series.reset_index(drop=True), column.timezone)
        ns = stamps.to_numpy(dtype="datetime64[ns]").astype(np.int64)
        unread = ns == np.iinfo(np.int64).min
        seconds = np.where(unread, np.nan, np.floor_divide(ns, 1_000_000_000).astype(np.float64))
        return seconds, unread & ~missing

    def _stamps(self, series: pd.Series, zone: str | None) -> pd.Series:
        """Naive wall-clock timestamps in ``zone`` (UTC without one), NaT where missing or unreadable."""
        import pandas as pd

        if isinstance(series.dtype, pd.DatetimeTZDtype):
            return series.dt.tz_convert(zone or "UTC").dt.tz_localize(None)
        if pd.api.types.is_datetime64_any_dtype(series.dtype):
            return series
        text = series.astype("string").str.strip()
        out = pd.Series(pd.NaT, index=series.index, dtype="datetime64[ns]")
        zoned = text.str.contains(_ZONED, na=False).to_numpy()
        for mask, aware in ((zoned, True), (~zoned & text.notna().to_numpy(), False)):
            if not mask.any():
                continue
            cells = text[mask]
            parsed = pd.to_datetime(cells, errors="coerce", format="ISO8601", utc=aware)
            retry = parsed.isna().to_numpy()
            if retry.any():  # not ISO: any format pandas reads (slower, so only for these cells)
                parsed[retry] = pd.to_datetime(cells[retry], errors="coerce", format="mixed", utc=aware)
            if aware:
                parsed = parsed.dt.tz_convert(zone or "UTC").dt.tz_localize(None)
            out[mask] = parsed.astype("datetime64[ns]")
        return out

    def lower(self, series: pd.Series, column: LoweredColumn) -> tuple[dict[str, Any], np.ndarray | None]:
        seconds, bad = self.seconds(series, column)
        if column.base is not None:
            return {}, seconds
        unit = UNITS[column.resolution or "second"]
        day = np.floor_divide(seconds, DAY)
        cells: dict[str, Any] = {}
        for part in column.parts:
            if part.endswith(".week"):
                cells[part] = part_cells(np.floor_divide(day + _WEEK_SHIFT, 7), bad)
            elif part.endswith(".weekday"):
                weekday = np.mod(day + _WEEK_SHIFT, 7)
                names = np.asarray(WEEKDAYS, dtype=object)[np.nan_to_num(weekday).astype(np.int64)]
                cells[part] = part_cells(np.where(np.isnan(weekday), np.nan, names), bad)
            else:
                cells[part] = part_cells(np.floor_divide(np.mod(seconds, DAY), unit), bad)
        return cells, seconds

    # -- out -------------------------------------------------------------------------------------------------------
    def assemble(self, parts: Mapping[str, pd.Series], column: LoweredColumn, rows: range, seed: int) -> pd.Series:
        seconds = np.zeros(len(rows))
        missing = np.zeros(len(rows), dtype=bool)
        unit = UNITS[column.resolution or "second"]
        for part in column.parts:
            values = parts[part]
            missing |= values.isna().to_numpy()
            if part.endswith(".week"):
                seconds += (values.to_numpy(dtype=np.float64, na_value=0.0) * 7 - _WEEK_SHIFT) * DAY
            elif part.endswith(".weekday"):
                codes = values.cat.codes.to_numpy() if hasattr(values, "cat") else values.map(
                    {w: i for i, w in enumerate(WEEKDAYS)}).to_numpy()
                seconds += np.clip(codes.astype(np.int64), 0, 6) * DAY
            else:
                seconds += values.to_numpy(dtype=np.float64, na_value=0.0) * unit
        return self.from_seconds(seconds, missing, column)

    def from_seconds(self, seconds: np.ndarray, missing: np.ndarray, column: LoweredColumn) -> pd.Series:
        """Wall-clock seconds -> the output column, inside the public bounds, on the resolution."""
        import pandas as pd

        unit = UNITS[column.resolution or "second"]
        seconds = np.floor_divide(seconds, unit) * unit
        if column.bounds is not None:
            lo, hi = bound_seconds(column)
            # A (week, weekday) of the first or last week outside the period moves by whole weeks into it, keeping
            # its weekday and time of day (clipped, those rows would pile up on the bound's instant).
            week = 7 * DAY
            seconds = np.where(seconds < lo, seconds + np.ceil((lo - seconds) / week) * week, seconds)
            seconds = np.where(seconds > hi, seconds - np.ceil((seconds - hi) / week) * week, seconds)
            seconds = np.clip(seconds, lo, hi)
        stamps = pd.Series(pd.to_datetime(np.where(missing, 0, seconds).astype(np.int64), unit="s")).astype(
            "datetime64[us]")
        stamps[missing] = pd.NaT
        if column.timezone is not None:
            stamps = stamps.dt.tz_localize(column.timezone, ambiguous=np.zeros(len(stamps), dtype=bool),
                                           nonexistent="shift_forward")
        return stamps

    def output_dtype(self, column: LoweredColumn) -> str:
        return "datetime64[us]" if column.timezone is None else f"datetime64[us, {column.timezone}]"

    # -- schema init -----------------------------------------------------------------------------------------------
    def recognises(self, present: pd.Series) -> bool:
        import pandas as pd

        if pd.api.types.is_datetime64_any_dtype(present.dtype):
            return self._times_of_day(present) == self.has_time
        if len(present) == 0 or pd.api.types.is_numeric_dtype(present.dtype):
            return False
        text = present.astype(str).str.strip()
        if text.str.fullmatch(r"[-+]?\d+(\.\d*)?").mean() > 0.5:  # numbers, not dates
            return False
        sample = text.iloc[:2_000]
        parsed = pd.to_datetime(sample, errors="coerce", format="mixed")
        if parsed.notna().mean() < 0.95:
            return False
        return self._times_of_day(parsed.dropna()) == self.has_time

    @staticmethod
    def _times_of_day(stamps: pd.Series) -> bool:
        return bool((stamps.dt.normalize() != stamps).any())

    def draft(self, values: pd.Series, from_data: bool) -> dict[str, Any]:
        import pandas as pd

        if not from_data:  # DP estimates (docs/schema.md, `bounds: auto`), charged with the release
            return {"bounds": "auto", "resolution": "auto" if len(self.units()) > 1 else self.default_resolution}
        stamps = self._stamps(values.dropna().reset_index(drop=True), None).dropna()
        start = stamps.min().normalize()  # whole days around the observed period (from the data: under the mark)
        end = stamps.max().normalize() + pd.Timedelta(days=1)
        entry: dict[str, Any] = {"bounds": [start.date().isoformat(), end.date().isoformat()]}
        seconds = stamps.astype("datetime64[ns]").astype(np.int64) // 1_000_000_000
        for unit in ("day", "hour", "minute", "second"):
            if self.has_time and unit == "day":
                continue
            if bool((seconds % UNITS[unit] == 0).all()) or unit == "second":
                entry["resolution"] = unit
                break
        return entry


class Datetime(Temporal):
    name: ClassVar[str] = "datetime"
    draft_order: ClassVar[int | None] = 2


class Date(Temporal):
    name: ClassVar[str] = "date"
    has_time: ClassVar[bool] = False
    default_resolution: ClassVar[str] = "day"
    draft_order: ClassVar[int | None] = 3

class Time(Temporal):
    """A time of day: one part, the time of day in resolution units; written as ``HH:MM:SS`` text."""

    name: ClassVar[str] = "time"
    has_date: ClassVar[bool] = False
    draft_order: ClassVar[int | None] = 1  # before datetime, which reads "14:05" as today at 14:05
    unreadable: ClassVar[tuple[str, str]] = ("not times of day", "fix the input, or the schema's kind")

    def _stamps(self, series: pd.Series, zone: str | None) -> pd.Series:
        import pandas as pd

        if pd.api.types.is_datetime64_any_dtype(series.dtype):
            return super()._stamps(series, zone)
        text = series.astype("string").str.strip()
        since_midnight = pd.to_timedelta(text.where(text.str.match(_TIME_OF_DAY, na=False)), errors="coerce")
        since_midnight = since_midnight.where((since_midnight >= pd.Timedelta(0))
                                              & (since_midnight < pd.Timedelta(days=1)))
        return pd.Timestamp(0) + since_midnight

    def from_seconds(self, seconds: np.ndarray, missing: np.ndarray, column: LoweredColumn) -> pd.Series:
        import pandas as pd

        unit = UNITS[column.resolution or "second"]
        of_day = np.mod(np.floor_divide(seconds, unit) * unit, DAY).astype(np.int64)
        text = [f"{s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}" for s in of_day.tolist()]
        out = pd.Series(text, dtype="string")
        out[missing] = pd.NA
        return out

    def output_dtype(self, column: LoweredColumn) -> str:
        return "string"

    def recognises(self, present: pd.Series) -> bool:
        import pandas as pd

        if len(present) == 0 or pd.api.types.is_numeric_dtype(present.dtype):
            return False
        return bool(present.astype(str).str.strip().str.match(_TIME_OF_DAY).mean() > 0.95)

    def draft(self, values: pd.Series, from_data: bool) -> dict[str, Any]:
        return {"resolution": "second"}
