"""The schema fields the kinds share and their validation: numeric bounds, category lists, and the public
precision, exact values, scale and knots of a number. Each kind's ``parse_fields`` (``kinds/*.py``) reads its own
domain and then ``value_fields``, which refuses what does not belong to the kind with the same message whatever it is.
Moved from ``schema`` (which re-exports ``SchemaError``, ``category_key`` and ``SCALES``).
"""

from __future__ import annotations

import math
import unicodedata
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from splice_assets.kinds.base import Kind

Category = str | int | float | bool


class SchemaError(ValueError):
    """A schema file or entry is malformed; the message quotes the offending entry."""


def category_key(value: Any) -> str:
    """Canonical matching key for a category value.

    Unicode variants (NFKC), surrounding white space and case are normalised; numbers compare by
    value (``1``, ``1.0`` and ``"1"`` are the same category). Total: never raises.
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    text = unicodedata.normalize("NFKC", str(value)).strip().casefold()
    try:
        number = float(text)
    except ValueError:
        return text
    if math.isfinite(number) and number == int(number) and abs(number) < 2**53:
        return str(int(number))
    return repr(number)



def _fail(where: str, entry: Any, problem: str) -> SchemaError:
    return SchemaError(f"{where}: {problem} (entry: {entry!r})")


def _parse_bounds(where: str, raw: Any) -> tuple[tuple[float, float] | None, bool, tuple[float | None, float | None]]:
    """(bounds, auto, the public end of a half-auto pair such as ``[0, auto]``)."""
    if raw == "auto":
        return None, True, (None, None)
    if not isinstance(raw, (list, tuple)) or len(raw) != 2:
        raise _fail(where, raw, "bounds must be a list [lo, hi], 'auto', or one end auto: [0, auto]")
    if list(raw).count("auto") == 1:
        known = raw[1] if raw[0] == "auto" else raw[0]
        if isinstance(known, bool) or not isinstance(known, (int, float)) or not math.isfinite(known):
            raise _fail(where, raw, "the public end of half-auto bounds must be a finite number")
        return None, True, (None, float(known)) if raw[0] == "auto" else (float(known), None)
    try:
        lo, hi = float(raw[0]), float(raw[1])
    except (TypeError, ValueError):
        raise _fail(where, raw, "bounds must be numbers") from None
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo >= hi:
        raise _fail(where, raw, "bounds must be finite with lo < hi")
    return (lo, hi), False, (None, None)


def _parse_categories(where: str, raw: Any) -> tuple[Category, ...]:
    if not isinstance(raw, list) or not raw:
        raise _fail(where, raw, "categories must be a non-empty list")
    for value in raw:
        if not isinstance(value, (str, int, float, bool)) or (isinstance(value, float) and not math.isfinite(value)):
            raise _fail(where, value, "a category must be a string, number or boolean")
    keys = [category_key(v) for v in raw]
    duplicates = sorted({k for k in keys if keys.count(k) > 1})
    if duplicates:
        raise _fail(where, raw, f"categories repeat after normalisation: {duplicates}")
    return tuple(raw)



SCALES: tuple[str, ...] = ("linear", "log", "symlog", "logit")



def _parse_knots(where: str, raw: Any, kind: Kind, bounds: tuple[float, float] | None, bounds_auto: bool
                 ) -> tuple[tuple[float, ...], bool]:
    """A numeric column's ``knots``: ``auto``, or public values from lo to hi (explicit bounds), strictly
    increasing, at least 3."""
    if raw is None:
        return (), False
    if not kind.numeric:
        raise _fail(where, raw, "knots belong to numeric columns")
    if raw == "auto":
        return (), True
    message = "knots must be 'auto' or at least 3 strictly increasing numbers from the lower to the upper bound"
    if bounds_auto or bounds is None:
        raise _fail(where, raw, "declared knots need explicit bounds (use knots: auto with auto bounds)")
    if (not isinstance(raw, list) or len(raw) < 3
            or not all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in raw)):
        raise _fail(where, raw, message)
    knots = tuple(float(v) for v in raw)
    if any(b <= a for a, b in zip(knots, knots[1:])) or knots[0] != bounds[0] or knots[-1] != bounds[1]:
        raise _fail(where, raw, message)
    return knots, False


def _parse_exact_values(
    where: str, raw: dict[str, Any], kind: Kind, bounds: tuple[float, float] | None
) -> tuple[tuple[float, ...], float | None]:
    """A numeric column's declared exact ``values`` (numbers inside explicit bounds; integers on an integer column)
    and its rounding ``step`` (a positive number; an integer on an integer column)."""
    values_raw, step = raw.get("values", []), raw.get("step")
    if ("values" in raw or step is not None) and not kind.numeric:
        raise _fail(where, raw, "values, sentinels and step belong to numeric columns")
    if not isinstance(values_raw, list):
        raise _fail(where, values_raw, "values must be a list of numbers or 'auto'")
    values = []
    for value in values_raw:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise _fail(where, value, "an exact value must be a finite number")
        if kind.integral and value != int(value):
            raise _fail(where, value, "an integer column's exact values must be integers")
        if bounds is not None and not bounds[0] <= value <= bounds[1]:
            raise _fail(where, value, f"an exact value must lie inside the bounds {list(bounds)}")
        values.append(float(value))
    if len(set(values)) != len(values):
        raise _fail(where, values_raw, "exact values repeat")
    if step is not None:
        if isinstance(step, bool) or not isinstance(step, (int, float)) or not math.isfinite(step) or step <= 0:
            raise _fail(where, step, "step must be a positive number or 'auto' (integer columns)")
        if kind.integral and step != int(step):
            raise _fail(where, step, "an integer column's step must be an integer")
        step = float(step)
    return tuple(sorted(values)), step


def value_fields(where: str, raw: dict[str, Any], kind: Kind, bounds: tuple[float, float] | None, auto: bool
                 ) -> dict[str, Any]:
    """The precision, exact-value, scale and knot fields of an entry (``ColumnSpec``'s names): numeric kinds take
    them (``decimals`` and ``float32`` on a ``fractional`` kind, ``step: auto`` on an ``integral`` one); any other
    kind is refused them, field by field in this order."""
    decimals = raw.get("decimals")
    decimals_auto = decimals == "auto"
    if decimals_auto:
        if not kind.fractional:
            raise _fail(where, decimals, "decimals: auto belongs to continuous columns")
        decimals = None
    if decimals is not None and (
        not kind.fractional or isinstance(decimals, bool) or not isinstance(decimals, int) or not 0 <= decimals <= 12
    ):
        raise _fail(where, decimals, "decimals (output precision) must be an integer in [0, 12] or 'auto', on a "
                    "continuous column")
    # `values: auto`, or `auto` among declared values (`values: [500001, auto]`): a DP selection adds the rest.
    declared = raw.get("values", [])
    values_auto = declared == "auto" or (isinstance(declared, list) and "auto" in declared)
    if values_auto and not kind.numeric:
        raise _fail(where, declared, "values: auto belongs to numeric columns")
    if values_auto:
        declared = [] if declared == "auto" else [v for v in declared if v != "auto"]
    step_auto = raw.get("step") == "auto"
    if step_auto and not kind.integral:
        raise _fail(where, raw["step"], "step: auto belongs to integer columns (declare a continuous column's step)")
    parsed = {**raw, "values": declared} if "values" in raw else dict(raw)
    if step_auto:
        del parsed["step"]
    values, step = _parse_exact_values(where, parsed, kind, bounds)
    sentinels: tuple[float, ...] = ()
    if "sentinels" in raw:  # parsed by the same rules as values
        sentinels, _ = _parse_exact_values(where, {"values": raw["sentinels"]}, kind, bounds)
    if set(values) & set(sentinels):
        raise _fail(where, raw, "a value is declared both in values and in sentinels")
    candidates: tuple[float, ...] = ()
    if "candidates" in raw:  # parsed by the same rules as values
        candidates, _ = _parse_exact_values(where, {"values": raw["candidates"]}, kind, bounds)
    if set(candidates) & set(values + sentinels):
        raise _fail(where, raw, "a value is declared both as a candidate and in values or sentinels")
    float32 = raw.get("float32", False)
    if not isinstance(float32, bool) or (float32 and not kind.fractional):
        raise _fail(where, float32, "float32 must be true or false, on a continuous column")
    scale = raw.get("scale", "linear")
    if scale not in SCALES or ("scale" in raw and not kind.numeric):
        raise _fail(where, scale, f"scale must be one of {list(SCALES)}, on a numeric column")
    knots, knots_auto = _parse_knots(where, raw.get("knots"), kind, bounds, auto)
    return dict(decimals=decimals, decimals_auto=decimals_auto, values=values, values_auto=values_auto,
                sentinels=sentinels, candidates=candidates, step=step, step_auto=step_auto, float32=float32,
                scale=scale, knots=knots, knots_auto=knots_auto)


#: ``categories: auto``: the public cap on the values a selection may add when ``max_categories`` is not written.
DEFAULT_MAX_CATEGORIES = 100
#: The largest ``max_categories`` a schema may write.
MAX_CATEGORIES_LIMIT = 10_000


class OpenCategories(str):
    """The ``auto`` entry of an open-domain categorical (``categories: auto`` or ``[a, b, auto]``), carrying its
    public cap ``max_categories``. The DP estimate (``private.bounds.select_categories``) replaces it by the frequent
    values it selects, so a resolved schema holds a plain list. It reads as the text "auto" but equals only an entry
    with the same cap (never a declared category), and it is never a category of a validated column."""

    max_categories: int

    def __new__(cls, max_categories: int = DEFAULT_MAX_CATEGORIES) -> OpenCategories:
        entry = super().__new__(cls, "auto")
        entry.max_categories = int(max_categories)
        return entry

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OpenCategories) and other.max_categories == self.max_categories

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash(("auto", self.max_categories))

    def __reduce__(self) -> tuple[type[OpenCategories], tuple[int]]:
        return OpenCategories, (self.max_categories,)

    def __repr__(self) -> str:
        return f"OpenCategories(max_categories={self.max_categories})"


def open_entry(categories: tuple[Any, ...] | None) -> OpenCategories | None:
    """The ``auto`` entry of a column's categories, or None when the list is closed (or resolved)."""
    return next((c for c in categories or () if isinstance(c, OpenCategories)), None)


def _parse_open_categories(where: str, raw: dict[str, Any]) -> tuple[Category, ...]:
    """``categories: auto`` or ``[a, b, auto]`` with a required ``other`` and an optional ``max_categories``: the
    public categories with an ``OpenCategories`` entry where ``auto`` was written."""
    declared = raw.get("categories")
    listed = [] if declared == "auto" or not isinstance(declared, list) else [v for v in declared if v != "auto"]
    if raw.get("other") is None:
        raise _fail(where, raw, "categories: auto needs an other: the label that every value the selection does "
                    "not keep becomes")
    cap = raw.get("max_categories", DEFAULT_MAX_CATEGORIES)
    if isinstance(cap, bool) or not isinstance(cap, int) or not 1 <= cap <= MAX_CATEGORIES_LIMIT:
        raise _fail(where, cap, f"max_categories must be an integer in [1, {MAX_CATEGORIES_LIMIT:,}] (the public cap "
                    "on the values categories: auto may add)")
    if isinstance(declared, list) and declared.count("auto") > 1:
        raise _fail(where, declared, "auto may appear once in categories")
    public = _parse_categories(where, listed) if listed else ()
    if any(category_key(v) == "auto" for v in public):
        raise _fail(where, declared, "a declared category cannot be named auto (it opens the list)")
    at = len(listed) if not isinstance(declared, list) else declared.index("auto")
    return (*public[:at], OpenCategories(cap), *public[at:])


def is_open(raw: dict[str, Any]) -> bool:
    """Whether a schema entry writes ``categories: auto`` or ``auto`` among its categories."""
    declared = raw.get("categories")
    return declared == "auto" or (isinstance(declared, list) and "auto" in declared)
