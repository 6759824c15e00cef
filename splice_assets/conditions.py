"""Conditions for conditional sampling (``Synthesizer.sample(n, where=...)``, ``splice sample --where``, the MLflow
model's ``where`` param): their validation against the public schema (``parse_where``), the text form the CLI and
Dagster take (``parse_where_text``), and what they are in the model's coordinates (``ColumnCondition``).

A condition names the schema's modelled columns (``schema.columns``): a discrete column (one with ``categories``)
takes one category or a collection of them, a numeric column (one with ``bounds``) a closed range ``(lo, hi)``
(``None`` for an open end) or one value; a datetime or date column a period (``InstantCondition``: the model is
conditioned on the weeks it spans, each row checked on its instant). Conditions on several columns are joined by
"and". Every check a
user's ``where`` goes through is in ``parse_where``: it raises ``ValueError`` naming the column and quoting the bad
value.

How the sampler draws from the model's conditional law is in ``postprocess.draws.condition_model`` and
``sampling.sample_table``. Everything here reads the public schema only.
"""

from __future__ import annotations

import datetime
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from splice_assets.kinds import kind_of
from splice_assets.kinds.fields import category_key
from splice_assets.kinds.lowered import LoweredColumn
from splice_assets.kinds.scales import cube_of
from splice_assets.kinds.temporal import week_of
from splice_assets.layout import EncodingLayout
from splice_assets.lowering import wall_seconds
from splice_assets.schema import ColumnSpec, TableSchema

if TYPE_CHECKING:
    import pandas as pd

#: Below this probability under the model a condition is refused: the model gives it (near) zero probability.
MIN_PROBABILITY = 1e-9


class Range(NamedTuple):
    """A closed range (``None``: an open end) as the text form writes it (``>=``, ``<=``, ``between``). On a numeric
    column it is the same as the tuple (lo, hi); on a discrete column whose categories are numbers (an ordinal's
    codes) it takes the categories inside it, where a plain tuple would be a list of categories."""

    lo: Any
    hi: Any


class ConditionProbabilityError(ValueError):
    """The model gives a condition (near) zero probability: no rows can be drawn under it."""


@dataclass(frozen=True)
class ColumnCondition:
    """One column's condition: the allowed category positions (``levels``, schema order) of a discrete column,
    or the closed range [lo, hi] (data units, inside the bounds) of a numeric one."""

    column: str
    levels: tuple[int, ...] | None = None
    values: tuple[Any, ...] | None = None  # the categories the levels are, for messages
    lo: float | None = None
    hi: float | None = None

    def describe(self) -> str:
        if self.levels is not None:
            assert self.values is not None
            return (f"{self.column} == {self.values[0]!r}" if len(self.values) == 1
                    else f"{self.column} in ({', '.join(repr(v) for v in self.values)})")
        return f"{self.column} between {self.lo:g} and {self.hi:g}"


@dataclass(frozen=True)
class InstantCondition:
    """A datetime or date column's range [lo, hi] (wall-clock seconds since 1970), checked on the assembled rows;
    the model is conditioned on its week part (``parse_where``)."""

    column: str
    lo: float
    hi: float

    def describe(self) -> str:
        import pandas as pd

        lo, hi = (pd.Timestamp(int(v), unit="s") for v in (self.lo, self.hi))
        return f"{self.column} between '{lo}' and '{hi}'"


@dataclass(frozen=True)
class Conditions:
    """A validated ``where``: one ``ColumnCondition`` per modelled column and one ``InstantCondition`` per datetime
    or date column, all of them to hold."""

    columns: tuple[ColumnCondition, ...] = ()
    instants: tuple[InstantCondition, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.columns) or bool(self.instants)

    def describe(self) -> str:
        """The conditions as a user wrote them (a datetime's period, not the weeks ``parse_where`` adds for it)."""
        weeks = {f"{t.column}.week" for t in self.instants}
        return " and ".join([*(c.describe() for c in self.columns if c.column not in weeks),
                             *(c.describe() for c in self.instants)])

    def holds(self, frame: pd.DataFrame, schema: TableSchema) -> np.ndarray:
        """Which rows of ``frame`` (``layout.decode``'s modelled frame) meet every condition."""
        import pandas as pd

        specs = {spec.name: spec for spec in schema.columns}
        keep = np.ones(len(frame), dtype=bool)
        for c in self.columns:
            if c.column not in frame.columns:  # a part of a lowered column, assembled away by decode: its condition
                continue  # holds by construction (the model's draws are conditioned on it)
            series = frame[c.column]
            present = series.notna().to_numpy()
            if c.levels is not None:
                index = specs[c.column].category_index()
                found, distinct = pd.factorize(series)  # each distinct value keyed once, not each row
                keys = np.array([index.get(category_key(v), -1) for v in distinct] + [-1], dtype=np.int64)
                codes = keys[found]  # factorize marks a missing value -1: the appended "no category"
                keep &= np.isin(codes, np.asarray(c.levels, dtype=np.int64))
            else:
                values = series.to_numpy(dtype=np.float64, na_value=np.nan)
                with np.errstate(invalid="ignore"):
                    keep &= present & (values >= c.lo) & (values <= c.hi)
        for t in self.instants:
            seconds = wall_seconds(frame[t.column])
            with np.errstate(invalid="ignore"):
                keep &= (seconds >= t.lo) & (seconds <= t.hi)
        return keep

    def level_weights(self, schema: TableSchema, layout: EncodingLayout) -> dict[int, np.ndarray]:
        """Coordinate of ``layout`` (the model's: discrete and binned coordinates) -> weight of each of its levels
        in [0, 1]: the share of the level that meets the condition (a binned level: the share of its width inside
        the range on the column's encoded scale; a category or sentinel level: 0 or 1). A range also requires the
        value present (a nullable column's missing indicator at level 0)."""
        specs = {spec.name: spec for spec in schema.columns}
        out: dict[int, np.ndarray] = {}
        for c in self.columns:
            spec = specs[c.column]
            for i, coord in enumerate(layout.coordinates):
                if coord.column != c.column:
                    continue
                if coord.levels <= 0:
                    raise ValueError(f"conditional sampling needs a model with histogram numerics; column "
                                     f"{c.column!r} is modelled as a continuous (Gaussian) coordinate")
                w = np.zeros(coord.levels)
                if c.levels is not None:  # a discrete column's one coordinate: its category levels
                    w[list(c.levels)] = 1.0
                elif coord.role == "missing":
                    w[0] = 1.0  # level 0: the value is present
                elif coord.role == "exact":  # level 0: another value; level i: the i-th sentinel
                    w[0] = 1.0
                    for s, value in enumerate(spec.sentinels, start=1):
                        w[s] = float(c.lo <= value <= c.hi)  # type: ignore[operator]
                else:  # the binned value coordinate (an integer column's: the values that round into the range)
                    lo, hi = self.cube_range(c, spec, rounded=kind_of(spec.kind).integral)
                    edges = -1.0 + 2.0 * np.arange(coord.levels + 1) / coord.levels
                    w = np.clip((np.minimum(edges[1:], hi) - np.maximum(edges[:-1], lo)) * coord.levels / 2.0, 0.0, 1.0)
                    if hi <= lo:  # one value: the level that holds it
                        w[min(int((lo + 1.0) * coord.levels / 2.0), coord.levels - 1)] = 1.0
                out[i] = w
        return out

    @staticmethod
    def cube_range(c: ColumnCondition, spec: ColumnSpec, rounded: bool = False) -> tuple[float, float]:
        """A range condition on the column's encoded scale [-1, 1]; ``rounded``: of the values that round to an
        integer inside it, [ceil(lo) - 1/2, floor(hi) + 1/2] (an integer column's values are rounded when decoded)."""
        assert spec.bounds is not None and c.lo is not None and c.hi is not None
        lo, hi = (math.ceil(c.lo) - 0.5, math.floor(c.hi) + 0.5) if rounded else (c.lo, c.hi)
        lo, hi = max(lo, spec.bounds[0]), min(hi, spec.bounds[1])
        z = cube_of(np.array([lo, hi]), spec.bounds[0], spec.bounds[1], spec.scale, spec.knots)
        return float(np.clip(z[0], -1.0, 1.0)), float(np.clip(z[1], -1.0, 1.0))

    def ranges(self) -> dict[str, tuple[float, float]]:
        """Column -> (lo, hi) of every range condition (data units)."""
        return {c.column: (float(c.lo), float(c.hi)) for c in self.columns  # type: ignore[arg-type]
                if c.levels is None}


def parse_where(where: Conditions | Mapping[str, Any] | str | None, schema: TableSchema) -> Conditions:
    """A user's ``where`` checked against ``schema`` and translated to ``Conditions`` (the one place it is done).

    ``where`` is a mapping column -> condition, or its text form (``parse_where_text``). A discrete column takes
    one category or a list/tuple/set of them; a numeric column a range ``(lo, hi)`` (closed; ``None`` for an open
    end, which takes the public bound) or one number. Raises ``ValueError`` naming the column and quoting the bad
    value: an unknown column, a value that is not one of the column's categories, an empty or inverted range, a
    range outside the column's public bounds, or a column with no public domain to condition on."""
    if where is None:
        return Conditions()
    if isinstance(where, Conditions):
        return where
    if isinstance(where, str):
        where = parse_where_text(where)
    if not isinstance(where, Mapping):
        raise ValueError(f"where must be a mapping column -> condition or a condition text, got {where!r}")
    specs = {spec.name: spec for spec in schema.columns}
    out: list[ColumnCondition] = []
    instants: list[InstantCondition] = []
    temporal = {c.name: c for c in schema.lowered if c.kind in ("datetime", "date")}
    for name, value in where.items():
        if name in temporal:
            instant = _instant_condition(temporal[name], value)
            instants.append(instant)
            week = f"{name}.week"
            if week in specs:  # the model is conditioned on the weeks the range spans
                out.append(_range_condition(specs[week], (float(week_of(instant.lo)), float(week_of(instant.hi)))))
            continue
        if name not in specs:
            raise ValueError(f"where: unknown column {name!r} (the schema's columns: {', '.join(specs)})")
        spec = specs[name]
        if spec.categories is not None:
            out.append(_category_condition(spec, value))
        elif spec.bounds is not None:
            out.append(_range_condition(spec, value))
        else:
            raise ValueError(f"where: column {name!r} ({spec.kind}) has neither categories nor bounds to condition on")
    return Conditions(tuple(out), tuple(instants))


def _instant_condition(column: LoweredColumn, value: Any) -> InstantCondition:
    """A datetime or date column's range: ``(start, end)`` timestamps or dates (``None`` for an open end), or one
    date (its whole day), inside the column's public period."""
    import pandas as pd

    from splice_assets.kinds.temporal import DAY, bound_seconds

    lo_bound, hi_bound = bound_seconds(column)
    single = not isinstance(value, (tuple, list, Range))
    ends = (value, value) if single else tuple(value)
    if len(ends) != 2:
        raise ValueError(f"where: column {column.name!r}: a range is (start, end), got {value!r}")
    seconds: list[float] = []
    for k, end in enumerate(ends):
        if end is None:
            seconds.append(float(lo_bound if k == 0 else hi_bound))
            continue
        try:
            stamp = pd.Timestamp(end)
        except (TypeError, ValueError):
            raise ValueError(f"where: column {column.name!r}: {end!r} is not a date or timestamp") from None
        at = float((stamp.tz_localize(None) if stamp.tzinfo else stamp).value // 1_000_000_000)
        date_only = isinstance(end, datetime.date) and not isinstance(end, datetime.datetime) or (
            isinstance(end, str) and len(end.strip()) <= 10)
        if k == 1 and (single or date_only):
            at += DAY - 1  # a date as the end takes its whole day
        seconds.append(at)
    lo, hi = max(seconds[0], lo_bound), min(seconds[1], hi_bound)
    if not lo <= hi:
        raise ValueError(f"where: column {column.name!r}: the range {value!r} is empty or outside the public period "
                         f"{column.bounds}")
    return InstantCondition(column.name, lo, hi)


def _category_condition(spec: ColumnSpec, value: Any) -> ColumnCondition:
    if isinstance(value, Range):
        return _category_range(spec, value)
    values = list(value) if isinstance(value, (list, tuple, set, frozenset)) else [value]
    if not values:
        raise ValueError(f"where: column {spec.name!r}: an empty set of categories {value!r}")
    index = spec.category_index()
    assert spec.categories is not None
    levels: list[int] = []
    for v in values:
        level = None if v is None else index.get(category_key(v))
        if level is None:
            raise ValueError(f"where: column {spec.name!r}: {v!r} is not one of its categories "
                             f"({', '.join(repr(c) for c in spec.categories)})")
        if level not in levels:
            levels.append(level)
    return ColumnCondition(spec.name, levels=tuple(levels), values=tuple(spec.categories[i] for i in levels))


def _category_range(spec: ColumnSpec, value: Range) -> ColumnCondition:
    """The categories of a discrete column with numeric categories that lie in a closed range."""
    assert spec.categories is not None
    numbers = [c for c in spec.categories if isinstance(c, (int, float)) and not isinstance(c, bool)]
    if len(numbers) != len(spec.categories):
        raise ValueError(f"where: column {spec.name!r} has categories that are not numbers: a range {tuple(value)!r} "
                         "does not apply (name its categories with == or in)")
    lo = -math.inf if value.lo is None else _number(spec, value.lo, tuple(value))
    hi = math.inf if value.hi is None else _number(spec, value.hi, tuple(value))
    if lo > hi:
        raise ValueError(f"where: column {spec.name!r}: the range {tuple(value)!r} is empty (lo > hi)")
    inside = [c for c in numbers if lo <= float(c) <= hi]
    if not inside:
        raise ValueError(f"where: column {spec.name!r}: no category lies in the range {tuple(value)!r} "
                         f"({', '.join(repr(c) for c in spec.categories)})")
    return _category_condition(spec, inside)


def _number(spec: ColumnSpec, value: Any, raw: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        try:
            value = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"where: column {spec.name!r}: {raw!r} is not a number or a range (lo, hi)") from None
    number = float(value)
    if math.isnan(number):
        raise ValueError(f"where: column {spec.name!r}: {raw!r} is not a number")
    return number


def _range_condition(spec: ColumnSpec, value: Any) -> ColumnCondition:
    assert spec.bounds is not None
    b_lo, b_hi = float(spec.bounds[0]), float(spec.bounds[1])
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise ValueError(f"where: column {spec.name!r}: a range is (lo, hi), got {value!r}")
        lo = b_lo if value[0] is None else _number(spec, value[0], value)
        hi = b_hi if value[1] is None else _number(spec, value[1], value)
    else:
        lo = hi = _number(spec, value, value)
    if lo > hi:
        raise ValueError(f"where: column {spec.name!r}: the range {value!r} is empty (lo > hi)")
    if lo < b_lo or hi > b_hi:
        raise ValueError(f"where: column {spec.name!r}: {value!r} reaches outside its bounds [{b_lo:g}, {b_hi:g}] "
                         "(a range takes None for an open end)")
    return ColumnCondition(spec.name, lo=lo, hi=hi)


# -- the text form ---------------------------------------------------------------------------------------------------

_NAME = r"(?:`(?P<qname>[^`]+)`|(?P<name>[A-Za-z_][\w.]*))"
_VALUE = r"(?:'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|true|false|True|False)"
_CLAUSE = re.compile(
    rf"\s*{_NAME}\s*(?:"
    rf"(?P<op>==|>=|<=)\s*(?P<value>{_VALUE})"
    rf"|(?i:in)\s*\(\s*(?P<items>{_VALUE}(?:\s*,\s*{_VALUE})*)\s*,?\s*\)"
    rf"|(?i:between)\s+(?P<lo>{_VALUE})\s+(?i:and)\s+(?P<hi>{_VALUE})"
    rf")\s*"
)
_AND = re.compile(r"(?i:and)\b")
_ITEM = re.compile(_VALUE)


def _literal(text: str) -> Any:
    if text[0] in "'\"":
        return re.sub(r"\\(.)", r"\1", text[1:-1])
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    number = float(text)
    return int(number) if re.fullmatch(r"[-+]?\d+", text) else number


def parse_where_text(text: str) -> dict[str, Any]:
    """The mapping ``parse_where`` takes, from clauses joined by ``and``: ``col == 'x'``, ``col in ('a', 'b')``,
    ``col >= 3``, ``col <= 5``, ``col between 1 and 2`` (strings quoted, numbers bare, a column name bare or in
    backquotes). ``>=`` and ``<=`` on one column combine into one range. Anything else is refused, quoting it."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"where: an empty condition {text!r}")
    out: dict[str, Any] = {}
    bounds: dict[str, list[Any]] = {}
    position = 0
    while True:
        match = _CLAUSE.match(text, position)
        if match is None:
            rest = text[position:].strip()
            raise ValueError(f"where: cannot read {rest!r} in {text!r}: write clauses such as col == 'x', "
                             "col in ('a', 'b'), col >= 3, col <= 5 or col between 1 and 2, joined by 'and'")
        name = match.group("qname") or match.group("name")
        if match.group("op") == "==":
            _set(out, name, _literal(match.group("value")), text)
        elif match.group("op"):
            pair = bounds.setdefault(name, [None, None])  # >= and <= clauses: one Range
            side = 0 if match.group("op") == ">=" else 1
            if pair[side] is not None:
                raise ValueError(f"where: column {name!r} has two {match.group('op')} clauses in {text!r}")
            pair[side] = _literal(match.group("value"))
        elif match.group("items") is not None:
            _set(out, name, [_literal(v) for v in _ITEM.findall(match.group("items"))], text)
        else:
            _set(out, name, Range(_literal(match.group("lo")), _literal(match.group("hi"))), text)
        position = match.end()
        if position == len(text):
            break
        joined = _AND.match(text, position)
        if joined is None:
            raise ValueError(f"where: cannot read {text[position:].strip()!r} in {text!r}: join clauses with 'and'")
        position = joined.end()
    for name, (lo, hi) in bounds.items():
        _set(out, name, Range(lo, hi), text)
    return out


def _set(out: dict[str, Any], name: str, value: Any, text: str) -> None:
    if name in out:
        raise ValueError(f"where: column {name!r} has more than one condition in {text!r}")
    out[name] = value


__all__ = ("MIN_PROBABILITY", "ColumnCondition", "ConditionProbabilityError", "Conditions", "Range", "parse_where",
           "parse_where_text")
