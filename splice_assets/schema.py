"""Public table schemas: the only source of bounds and category lists that may shape a release.

A schema is a versioned YAML file written from public knowledge (never from observed min/max). A column that
``splice schema init`` drafted from the rows (its kind and nullable; with ``--from-data`` its values too) carries
``from_data: true`` and is refused until the operator has confirmed what it says is public and removed the mark.
It is parsed into small frozen dataclasses; any malformed entry raises ``SchemaError`` quoting it.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from splice_assets.derived import DerivedColumn, ExpressionError, divides, parse_expression

ColumnKind = Literal["continuous", "integer", "ordinal", "categorical", "boolean"]
NUMERIC_KINDS: frozenset[str] = frozenset({"continuous", "integer"})
DISCRETE_KINDS: frozenset[str] = frozenset({"ordinal", "categorical", "boolean"})
TASKS: frozenset[str] = frozenset({"classification", "regression"})
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


@dataclass(frozen=True)
class ColumnSpec:
    """One column: its kind and the public domain it lives in."""

    name: str
    kind: ColumnKind
    nullable: bool = False
    bounds: tuple[float, float] | None = None
    categories: tuple[Category, ...] | None = None
    other: Category | None = None
    bounds_auto: bool = False
    #: The public end of half-auto bounds (``[0, auto]``: (0, None)); the DP estimate finds the other one.
    known_end: tuple[float | None, float | None] = (None, None)
    #: Public output precision of a continuous column: synthetic values are rounded to this many decimals.
    decimals: int | None = None
    #: ``decimals: auto``: the precision is not public; a DP estimate (``private.bounds``, charged with the DP
    #: bounds) sets ``decimals``.
    decimals_auto: bool = False
    #: Public exact values a numeric column takes with positive probability (a sentinel, 0, a top code): each is a
    #: fine cell of its own, measured and reproduced exactly.
    values: tuple[float, ...] = ()
    #: ``values: auto``: the column's frequent exact values are not public; a DP selection among its public
    #: candidates finds them (``private.bounds``, charged with the DP bounds) and adds them to ``values``.
    values_auto: bool = False
    #: Public values a numeric column may hold often (a share at 1/2 or 2/3): each is a fine cell of its own in the
    #: measurement, drawn exactly where its noisy count clears the noise (``fine_cells.candidate_z``) and read as
    #: empty elsewhere. A ``values: auto`` selection leaves the candidates it did not find here.
    candidates: tuple[float, ...] = ()
    #: The column's values are single-precision floats (written out with float64 digits, as 0.6666666865348816 for
    #: 2/3): synthetic values are rounded to float32 too, so an exact value reads as the data write it.
    float32: bool = False
    #: Public codes a numeric column holds that are not quantities (not tested, unknown): exact values that also get
    #: a coordinate of their own, so their relations to other columns are measured and kept.
    sentinels: tuple[float, ...] = ()
    #: Public rounding grid of a numeric column (values are multiples of it); synthetic values are rounded to it.
    step: float | None = None
    #: ``step: auto`` (integer columns): the grid is not public; a DP estimate (``private.bounds``, charged with the
    #: DP bounds) sets ``step`` when nearly every nonzero value is a multiple of one (an even-only sensor).
    step_auto: bool = False
    #: Public scale of a numeric column's encoding: "linear"; "log" (log(1 + v - lo)) for a skewed column whose
    #: mass sits near its lower bound; "symlog" (asinh(v)) for a signed column with heavy tails on both sides of
    #: 0; "logit" for a proportion whose mass may sit next to either bound (a share of rare or of near-universal
    #: traits). The equal-width bins of the encoding then resolve where the mass is.
    scale: str = "linear"
    #: Where the coarse bins' edges lie (values, lo first and hi last, strictly increasing): the encoding on
    #: ``scale`` is then mapped piecewise linearly so that these values land on the edges (``layout.cube_of``).
    knots: tuple[float, ...] = ()
    #: ``knots: auto``: the edges follow a DP estimate of the column's quantiles (``private.bounds``, charged with
    #: the DP bounds), so that the bins resolve a column whose mass sits anywhere inside wide public bounds.
    knots_auto: bool = False

    @property
    def exact_values(self) -> tuple[float, ...]:
        """Every declared exact value, sentinels included, sorted."""
        return tuple(sorted(self.values + self.sentinels))

    @property
    def is_numeric(self) -> bool:
        return self.kind in NUMERIC_KINDS

    @property
    def is_discrete(self) -> bool:
        return self.kind in DISCRETE_KINDS

    def category_index(self) -> dict[str, int]:
        """Map canonical category keys to their 0-based position in the schema order."""
        assert self.categories is not None
        return {category_key(c): i for i, c in enumerate(self.categories)}


@dataclass(frozen=True)
class TableSchema:
    """A dataset's public schema."""

    name: str
    version: int
    columns: tuple[ColumnSpec, ...]
    n_min: int
    target: str | None = None
    task: str | None = None
    description: str = ""
    #: Columns computed from the others in every synthetic row (``derived``): neither measured nor modelled.
    derived: tuple[DerivedColumn, ...] = ()

    @property
    def column_names(self) -> tuple[str, ...]:
        """The modelled columns (what is measured, and what a validated input holds)."""
        return tuple(c.name for c in self.columns)

    @property
    def output_names(self) -> tuple[str, ...]:
        """Every column of a synthetic table, derived ones included, in the declared order."""
        names = list(self.column_names)
        for column in sorted(self.derived, key=lambda d: d.position):
            names.insert(column.position, column.name)
        return tuple(names)

    def column(self, name: str) -> ColumnSpec:
        for spec in self.columns:
            if spec.name == name:
                return spec
        raise KeyError(name)


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


_COLUMN_KEYS = {
    "name", "kind", "nullable", "bounds", "categories", "other", "decimals", "values", "sentinels", "step", "scale",
    "knots", "description", "from_data", "candidates", "float32",
}
SCALES: tuple[str, ...] = ("linear", "log", "symlog", "logit")


def _column_entry(raw: Any, position: int, keys: set[str], hint: str = "") -> tuple[str, str]:
    """(name, where) of a column entry: a mapping of known ``keys`` with a non-empty name."""
    where = f"columns[{position}]"
    if not isinstance(raw, dict):
        raise _fail(where, raw, "a column must be a mapping")
    unknown = set(raw) - keys
    if unknown:
        raise _fail(where, raw, f"unknown keys {sorted(unknown)}{hint}")
    name = raw.get("name")
    if not isinstance(name, str) or not name.strip():
        raise _fail(where, raw, "name must be a non-empty string")
    return name, f"column {name!r}"


def parse_column(raw: Any, position: int) -> ColumnSpec:
    name, where = _column_entry(raw, position, _COLUMN_KEYS)
    if raw.get("from_data", False) is not False:
        # `splice schema init` read the kind and nullable (and with --from-data categories, min/max) from the private
        # rows: they may shape a release only once the operator has confirmed they are public knowledge.
        raise _fail(where, {"from_data": raw["from_data"]},
                    "its kind, nullable, bounds or categories were taken from the data (from_data: true); check that "
                    "they are public knowledge, then delete the from_data mark")
    kind = raw.get("kind")
    if kind not in NUMERIC_KINDS | DISCRETE_KINDS:
        raise _fail(where, kind, f"kind must be one of {sorted(NUMERIC_KINDS | DISCRETE_KINDS)}")
    nullable = raw.get("nullable", False)
    if not isinstance(nullable, bool):
        raise _fail(where, nullable, "nullable must be true or false")
    bounds, auto = None, False
    known_end: tuple[float | None, float | None] = (None, None)
    categories: tuple[Category, ...] | None = None
    other = raw.get("other")
    if kind in NUMERIC_KINDS:
        if "bounds" not in raw:
            raise _fail(where, raw, "a numeric column needs public bounds [lo, hi] (or 'auto')")
        if "categories" in raw or other is not None:
            raise _fail(where, raw, "a numeric column takes no categories or other")
        bounds, auto, known_end = _parse_bounds(where, raw["bounds"])
    elif kind == "boolean":
        if "bounds" in raw or "categories" in raw:
            raise _fail(where, raw, "a boolean column takes no bounds or categories")
        categories = (False, True)
    else:
        if "bounds" in raw:
            raise _fail(where, raw, "a categorical/ordinal column takes no bounds")
        categories = _parse_categories(where, raw.get("categories"))
        if other is not None:
            if category_key(other) not in {category_key(c) for c in categories}:
                categories = (*categories, other)
    decimals = raw.get("decimals")
    decimals_auto = decimals == "auto"
    if decimals_auto:
        if kind != "continuous":
            raise _fail(where, decimals, "decimals: auto belongs to continuous columns")
        decimals = None
    if decimals is not None and (
        kind != "continuous" or isinstance(decimals, bool) or not isinstance(decimals, int) or not 0 <= decimals <= 12
    ):
        raise _fail(where, decimals, "decimals (output precision) must be an integer in [0, 12] or 'auto', on a "
                    "continuous column")
    # `values: auto`, or `auto` among declared values (`values: [500001, auto]`): a DP selection adds the rest.
    declared = raw.get("values", [])
    values_auto = declared == "auto" or (isinstance(declared, list) and "auto" in declared)
    if values_auto and kind not in NUMERIC_KINDS:
        raise _fail(where, declared, "values: auto belongs to numeric columns")
    if values_auto:
        declared = [] if declared == "auto" else [v for v in declared if v != "auto"]
    step_auto = raw.get("step") == "auto"
    if step_auto and kind != "integer":
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
    if not isinstance(float32, bool) or (float32 and kind != "continuous"):
        raise _fail(where, float32, "float32 must be true or false, on a continuous column")
    scale = raw.get("scale", "linear")
    if scale not in SCALES or ("scale" in raw and kind not in NUMERIC_KINDS):
        raise _fail(where, scale, f"scale must be one of {list(SCALES)}, on a numeric column")
    knots, knots_auto = _parse_knots(where, raw.get("knots"), kind, bounds, auto)
    return ColumnSpec(
        name=name, kind=kind, nullable=nullable, bounds=bounds, categories=categories, other=other, bounds_auto=auto,
        decimals=decimals, values=values, sentinels=sentinels, step=step, scale=scale, values_auto=values_auto,
        known_end=known_end, decimals_auto=decimals_auto, step_auto=step_auto, knots=knots, knots_auto=knots_auto,
        candidates=candidates, float32=float32,
    )


def _parse_knots(where: str, raw: Any, kind: str, bounds: tuple[float, float] | None, bounds_auto: bool
                 ) -> tuple[tuple[float, ...], bool]:
    """A numeric column's ``knots``: ``auto``, or public values from lo to hi (explicit bounds), strictly
    increasing, at least 3."""
    if raw is None:
        return (), False
    if kind not in NUMERIC_KINDS:
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
    where: str, raw: dict[str, Any], kind: str, bounds: tuple[float, float] | None
) -> tuple[tuple[float, ...], float | None]:
    """A numeric column's declared exact ``values`` (numbers inside explicit bounds; integers on an integer column)
    and its rounding ``step`` (a positive number; an integer on an integer column)."""
    values_raw, step = raw.get("values", []), raw.get("step")
    if ("values" in raw or step is not None) and kind not in NUMERIC_KINDS:
        raise _fail(where, raw, "values, sentinels and step belong to numeric columns")
    if not isinstance(values_raw, list):
        raise _fail(where, values_raw, "values must be a list of numbers or 'auto'")
    values = []
    for value in values_raw:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise _fail(where, value, "an exact value must be a finite number")
        if kind == "integer" and value != int(value):
            raise _fail(where, value, "an integer column's exact values must be integers")
        if bounds is not None and not bounds[0] <= value <= bounds[1]:
            raise _fail(where, value, f"an exact value must lie inside the bounds {list(bounds)}")
        values.append(float(value))
    if len(set(values)) != len(values):
        raise _fail(where, values_raw, "exact values repeat")
    if step is not None:
        if isinstance(step, bool) or not isinstance(step, (int, float)) or not math.isfinite(step) or step <= 0:
            raise _fail(where, step, "step must be a positive number or 'auto' (integer columns)")
        if kind == "integer" and step != int(step):
            raise _fail(where, step, "an integer column's step must be an integer")
        step = float(step)
    return tuple(sorted(values)), step


_SCHEMA_KEYS = {"name", "version", "description", "columns", "n_min", "target", "task", "source", "license"}


def parse_schema(raw: Any) -> TableSchema:
    """Build a ``TableSchema`` from a parsed YAML mapping, rejecting anything malformed."""
    if not isinstance(raw, dict):
        raise SchemaError(f"schema must be a mapping, got {type(raw).__name__}")
    unknown = set(raw) - _SCHEMA_KEYS
    if unknown:
        raise SchemaError(f"schema: unknown top-level keys {sorted(unknown)}")
    name = raw.get("name")
    if not isinstance(name, str) or not name.strip():
        raise _fail("schema", name, "name must be a non-empty string")
    version = raw.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise _fail("schema", version, "version must be a positive integer")
    n_min = raw.get("n_min")
    if not isinstance(n_min, int) or isinstance(n_min, bool) or n_min < 1:
        raise _fail("schema", n_min, "n_min must be a positive integer (a public lower bound on rows)")
    columns_raw = raw.get("columns")
    if not isinstance(columns_raw, list) or not columns_raw:
        raise _fail("schema", columns_raw, "columns must be a non-empty list")
    is_derived = [isinstance(c, dict) and "derived" in c for c in columns_raw]
    columns = tuple(parse_column(c, i) for i, c in enumerate(columns_raw) if not is_derived[i])
    derived_names = {c.get("name") for c, flag in zip(columns_raw, is_derived) if flag}
    derived = tuple(parse_derived(c, i, columns, derived_names) for i, c in enumerate(columns_raw) if is_derived[i])
    names = [c.name for c in columns] + [d.name for d in derived]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise _fail("schema", repeated, "column names repeat")
    target, task = raw.get("target"), raw.get("task")
    if target is not None and target not in names:
        raise _fail("schema", target, "target is not one of the columns")
    if target is not None and any(d.name == target for d in derived):
        raise _fail("schema", target, "the target must be a modelled column, not a derived one")
    if task is not None and task not in TASKS:
        raise _fail("schema", task, f"task must be one of {sorted(TASKS)}")
    return TableSchema(
        name=name,
        version=version,
        columns=columns,
        n_min=n_min,
        target=target,
        task=task,
        description=str(raw.get("description", "")),
        derived=derived,
    )


_DERIVED_KEYS = {"name", "kind", "derived", "decimals"}


def parse_derived(
    raw: dict[str, Any], position: int, columns: tuple[ColumnSpec, ...], derived_names: Collection[Any] = (),
) -> DerivedColumn:
    """A derived column (``{name, kind, derived: expression, decimals}``) whose expression reads only modelled
    numeric ``columns``."""
    name, where = _column_entry(raw, position, _DERIVED_KEYS, f" (a derived column takes {sorted(_DERIVED_KEYS)})")
    kind = raw.get("kind")
    if kind not in NUMERIC_KINDS:
        raise _fail(where, kind, f"a derived column's kind must be one of {sorted(NUMERIC_KINDS)}")
    expression = raw["derived"]
    if not isinstance(expression, str):
        raise _fail(where, expression, "derived must be an arithmetic expression, written as text")
    try:
        tree, inputs = parse_expression(expression)
    except ExpressionError as exc:
        raise _fail(where, expression, f"derived: {exc}") from None
    numeric = {c.name for c in columns if c.is_numeric}
    for column in inputs:
        if column not in numeric:
            problem = ("is derived itself" if column in derived_names else "is not numeric"
                       if column in {c.name for c in columns} else "is not a column of the schema")
            raise _fail(where, expression, f"derived: {column!r} {problem}; an expression reads modelled numeric "
                        "columns only")
    decimals = raw.get("decimals")
    if decimals is not None and (kind != "continuous" or isinstance(decimals, bool) or not isinstance(decimals, int)
                                 or not 0 <= decimals <= 12):
        raise _fail(where, decimals, "decimals must be an integer in [0, 12], on a continuous column")
    nullable = divides(tree) or any(c.nullable for c in columns if c.name in inputs)
    return DerivedColumn(name, kind, expression.strip(), position, decimals, nullable)


def load_schema(path: str | Path) -> TableSchema:
    """Read and parse a schema YAML file."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SchemaError(f"cannot read schema file {str(path)!r}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise SchemaError(f"schema file {str(path)!r} is not valid YAML: {exc}") from None
    return parse_schema(raw)


def schema_to_dict(schema: TableSchema) -> dict[str, Any]:
    """The schema as a plain mapping (for release manifests); round-trips through ``parse_schema``."""
    columns = []
    for c in schema.columns:
        entry: dict[str, Any] = {"name": c.name, "kind": c.kind, "nullable": c.nullable}
        if c.is_numeric:
            entry["bounds"] = list(c.bounds or ()) if not c.bounds_auto else (
                "auto" if c.known_end == (None, None) else ["auto" if end is None else end for end in c.known_end])
            if c.decimals is not None or c.decimals_auto:
                entry["decimals"] = "auto" if c.decimals_auto else c.decimals
            for key, declared in (("values", c.values), ("sentinels", c.sentinels), ("candidates", c.candidates)):
                if declared:
                    entry[key] = [int(v) if c.kind == "integer" else v for v in declared]
            if c.values_auto:
                entry["values"] = [*entry.get("values", []), "auto"] if c.values else "auto"
            if c.step_auto:
                entry["step"] = "auto"
            elif c.step is not None:
                entry["step"] = int(c.step) if c.kind == "integer" else c.step
            if c.scale != "linear":
                entry["scale"] = c.scale
            if c.float32:
                entry["float32"] = True
            if c.knots_auto or c.knots:
                entry["knots"] = "auto" if c.knots_auto else list(c.knots)
        elif c.kind != "boolean":
            entry["categories"] = list(c.categories or ())
            if c.other is not None:
                entry["other"] = c.other
        columns.append(entry)
    for d in sorted(schema.derived, key=lambda d: d.position):
        entry = {"name": d.name, "kind": d.kind, "derived": d.expression}
        if d.decimals is not None:
            entry["decimals"] = d.decimals
        columns.insert(d.position, entry)
    out: dict[str, Any] = {"name": schema.name, "version": schema.version, "n_min": schema.n_min, "columns": columns}
    if schema.description:
        out["description"] = schema.description
    if schema.target is not None:
        out["target"] = schema.target
    if schema.task is not None:
        out["task"] = schema.task
    return out
