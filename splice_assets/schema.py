"""Public table schemas: the only source of bounds and category lists that may shape a release.

A schema is a versioned YAML file written from public knowledge (never from observed min/max). A column that
``splice schema init`` drafted from the rows (its kind and nullable; with ``--from-data`` its values too) carries
``from_data: true`` and is refused until the operator has confirmed what it says is public and removed the mark.
It is parsed into small frozen dataclasses; any malformed entry raises ``SchemaError`` quoting it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from splice_assets.derived import DerivedColumn, ExpressionError, divides, parse_expression
from splice_assets.kinds import kind_names, kind_of
from splice_assets.kinds.fields import SCALES as SCALES
from splice_assets.kinds.fields import Category as Category
from splice_assets.kinds.fields import SchemaError as SchemaError
from splice_assets.kinds.fields import _fail
from splice_assets.kinds.fields import category_key as category_key
from splice_assets.kinds.lowered import LoweredColumn, lowered_kind_names, lowered_kind_of

TASKS: frozenset[str] = frozenset({"classification", "regression"})


@dataclass(frozen=True)
class ColumnSpec:
    """One column: its kind and the public domain it lives in."""

    name: str
    #: The name of a registered kind (``kinds.kind_names``): what the rest of the library asks ``kind_of``.
    kind: str
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
        return kind_of(self.kind).numeric

    @property
    def is_discrete(self) -> bool:
        return kind_of(self.kind).discrete

    def category_index(self) -> dict[str, int]:
        """Map canonical cell keys to their 0-based category position in the schema order (a boolean also reads
        1/0)."""
        return kind_of(self.kind).category_index(self)


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
    #: Columns held by modelled parts or generated (``kinds.lowered``: datetimes, ids, a rule's later column).
    lowered: tuple[LoweredColumn, ...] = ()
    #: The rules every synthetic row satisfies, as written (``parse_rule``); each lowers its later column.
    rules: tuple[Rule, ...] = ()

    @property
    def column_names(self) -> tuple[str, ...]:
        """The modelled columns (what is measured, and what a validated input holds)."""
        return tuple(c.name for c in self.columns)

    @property
    def output_names(self) -> tuple[str, ...]:
        """Every column of a synthetic table, derived and lowered ones included (their parts not), in the declared
        order."""
        parts = {p for column in self.lowered for p in column.parts}
        names = [n for n in self.column_names if n not in parts]
        placed: list[DerivedColumn | LoweredColumn] = [*self.derived, *self.lowered]
        for column in sorted(placed, key=lambda d: d.position):
            names.insert(column.position, column.name)
        return tuple(names)

    @property
    def input_names(self) -> tuple[str, ...]:
        """The columns an input must hold: the modelled ones that are not parts, and the lowered ones that have
        parts (an ``id`` column is never read)."""
        parts = {p for column in self.lowered for p in column.parts}
        read = [c.name for c in self.lowered if c.parts or c.base is not None]
        return tuple(n for n in self.column_names if n not in parts) + tuple(read)

    def owner(self, name: str) -> LoweredColumn | None:
        """The lowered column that modelled column ``name`` is a part of, if any."""
        return next((c for c in self.lowered if name in c.parts), None)

    def column(self, name: str) -> ColumnSpec:
        for spec in self.columns:
            if spec.name == name:
                return spec
        raise KeyError(name)


_COLUMN_KEYS = {
    "name", "kind", "nullable", "bounds", "categories", "other", "decimals", "values", "sentinels", "step", "scale",
    "knots", "description", "from_data", "candidates", "float32", "max_categories",
}
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
    if not isinstance(kind, str) or kind not in kind_names():
        raise _fail(where, kind, f"kind must be one of {sorted(kind_names())}")
    nullable = raw.get("nullable", False)
    if not isinstance(nullable, bool):
        raise _fail(where, nullable, "nullable must be true or false")
    return ColumnSpec(name=name, kind=kind, nullable=nullable, **kind_of(kind).parse_fields(where, raw))


_SCHEMA_KEYS = {"name", "version", "description", "columns", "n_min", "target", "task", "source", "license", "rules"}


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
    modelled: list[ColumnSpec] = []
    lowered: list[LoweredColumn] = []
    for i, c in enumerate(columns_raw):
        if is_derived[i]:
            continue
        if isinstance(c, dict) and c.get("kind") in lowered_kind_names():
            column, parts = parse_lowered(c, i)
            lowered.append(column)
            modelled.extend(parts)
        else:
            modelled.append(parse_column(c, i))
    parsed_rules = [parse_rule(r, i) for i, r in enumerate(_rule_entries(raw.get("rules")))]
    order = [c.get("name") if isinstance(c, dict) else None for c in columns_raw]
    columns, lowered = _apply_rules(parsed_rules, tuple(modelled), tuple(lowered), order)
    rules = tuple(rule for rule, _ in parsed_rules)
    derived_names = {c.get("name") for c, flag in zip(columns_raw, is_derived) if flag}
    derived = tuple(parse_derived(c, i, columns, derived_names, tuple(lowered))
                    for i, c in enumerate(columns_raw) if is_derived[i])
    names = [c.name for c in columns] + [d.name for d in derived] + [c.name for c in lowered]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise _fail("schema", repeated, "column names repeat")
    target, task = raw.get("target"), raw.get("task")
    if target is not None and target not in names:
        raise _fail("schema", target, "target is not one of the columns")
    if target is not None and any(d.name == target for d in derived):
        raise _fail("schema", target, "the target must be a modelled column, not a derived one")
    if target is not None and any(c.name == target for c in lowered):
        raise _fail("schema", target, "the target must be a modelled numeric or categorical column")
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
        lowered=tuple(lowered),
        rules=rules,
    )


def parse_lowered(raw: dict[str, Any], position: int) -> tuple[LoweredColumn, list[ColumnSpec]]:
    """A column of a lowered kind (``kinds.lowered``) and its modelled parts."""
    name, where = _column_entry(raw, position, set(raw) | {"name"})
    if raw.get("from_data", False) is not False:
        raise _fail(where, {"from_data": raw["from_data"]},
                    "its kind or bounds were taken from the data (from_data: true); check that they are public "
                    "knowledge, then delete the from_data mark")
    nullable = raw.get("nullable", False)
    if not isinstance(nullable, bool):
        raise _fail(where, nullable, "nullable must be true or false")
    entry = {k: v for k, v in raw.items() if k != "from_data"}
    column, parts = lowered_kind_of(raw["kind"]).parse(where, entry, position)
    return column, [ColumnSpec(**part) for part in parts]


@dataclass(frozen=True)
class Rule:
    """``later >= earlier`` between two columns of the same type, every synthetic row satisfies it: the later
    column is modelled as its non-negative offset from the earlier one (``offset``, a modelled part named
    ``"later - earlier"`` whose public fields the rule entry may set: bounds, knots, scale, decimals)."""

    later: str
    earlier: str

    @property
    def text(self) -> str:
        return f"{self.later} >= {self.earlier}"

    @property
    def offset(self) -> str:
        """The modelled part that holds the later column."""
        return f"{self.later} - {self.earlier}"


_RULE = re.compile(r"^\s*(?P<a>.+?)\s*(?P<op>>=|<=|>|<)\s*(?P<b>.+?)\s*$")
_OFFSET_KEYS = {"rule", "bounds", "knots", "scale", "decimals", "step", "values", "description"}


def _rule_entries(raw: Any) -> list[Any]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise _fail("schema", raw, "rules must be a list such as ['dropoff >= pickup']")
    return raw


def parse_rule(raw: Any, position: int) -> tuple[Rule, ColumnSpec]:
    """``"a >= b"`` (or ``<=``, ``>``, ``<``: a strict rule is kept as its closure), or a mapping ``{rule: ...}`` with
    the offset's public fields (default ``bounds: [0, auto]`` and ``knots: auto``: DP estimates of its range and
    quantiles)."""
    where = f"rules[{position}]"
    entry = {"rule": raw} if isinstance(raw, str) else raw
    if not isinstance(entry, dict) or not isinstance(entry.get("rule"), str):
        raise _fail(where, raw, "a rule is text such as 'dropoff >= pickup', or a mapping with such a rule")
    unknown = set(entry) - _OFFSET_KEYS
    if unknown:
        raise _fail(where, raw, f"unknown keys {sorted(unknown)} (a rule takes {sorted(_OFFSET_KEYS)})")
    match = _RULE.match(entry["rule"])
    if match is None:
        raise _fail(where, entry["rule"], "a rule compares two columns: 'later >= earlier'")
    a, op, b = match["a"], match["op"], match["b"]
    later, earlier = (a, b) if op in (">=", ">") else (b, a)
    fields = {"bounds": [0, "auto"], "knots": "auto", **{k: v for k, v in entry.items() if k != "rule"}}
    rule = Rule(later, earlier)
    return rule, ColumnSpec(rule.offset, "continuous", False, **kind_of("continuous").parse_fields(where, fields))


def _apply_rules(
    rules: list[tuple[Rule, ColumnSpec]], columns: tuple[ColumnSpec, ...], lowered: tuple[LoweredColumn, ...],
    order: list[Any],
) -> tuple[tuple[ColumnSpec, ...], list[LoweredColumn]]:
    """Each rule's later column lowered to its offset from the earlier one (of the later column's kind: an integer
    number of resolution units for a datetime or date)."""
    from splice_assets.kinds.temporal import Temporal

    modelled = {c.name: c for c in columns}
    out_columns, out_lowered = list(columns), list(lowered)
    for position, (rule, offset) in enumerate(rules):
        where = f"rules[{position}]"
        by_name = {c.name: c for c in out_lowered}
        later, earlier = by_name.get(rule.later), by_name.get(rule.earlier)
        if rule.later == rule.earlier:
            raise _fail(where, rule.text, "a rule compares two different columns")
        if later is not None and later.base is not None:
            raise _fail(where, rule.text, f"{rule.later!r} is already the later column of a rule")
        temporal = [isinstance(lowered_kind_of(c.kind), Temporal) if c is not None and c.spec is None else False
                    for c in (later, earlier)]
        numeric = [name in modelled and modelled[name].is_numeric for name in (rule.later, rule.earlier)]
        if all(temporal):
            assert later is not None and earlier is not None
            if "time" in (later.kind, earlier.kind):
                raise _fail(where, rule.text, "a rule compares datetime or date columns (a time of day has no order "
                            "across days)")
            if any(later.bounds_auto) or later.resolution_auto:
                raise _fail(where, rule.text, f"the later column {rule.later!r} needs the public period it covers as "
                            "bounds and a declared resolution (it is modelled as its offset from the earlier column, "
                            "so the DP estimate does not read it): write e.g. [2019-03-01, 2019-05-01]")
            fields = kind_of("integer").parse_fields(where, {**kind_of("continuous").fields_to_dict(offset)})
            offset = ColumnSpec(offset.name, "integer", later.nullable or earlier.nullable, **fields)
            index = next(i for i, c in enumerate(out_columns) if c.name in later.parts)
            out_columns = [c for c in out_columns if c.name not in later.parts]
            out_columns.insert(index, offset)
            out_lowered[out_lowered.index(later)] = dataclasses.replace(later, base=rule.earlier,
                                                                        parts=(offset.name,))
        elif all(numeric) and not any(c.name == rule.later for c in out_lowered):
            spec = modelled[rule.later]
            nullable = spec.nullable or modelled[rule.earlier].nullable
            offset = dataclasses.replace(offset, kind=spec.kind, nullable=nullable, decimals=spec.decimals,
                                         decimals_auto=spec.decimals_auto, float32=spec.float32)
            index = [c.name for c in out_columns].index(rule.later)
            out_columns[index] = offset
            out_lowered.append(LoweredColumn(rule.later, spec.kind, order.index(rule.later), (offset.name,),
                                             spec.nullable, base=rule.earlier, spec=spec))
        else:
            raise _fail(where, rule.text, "a rule compares two numeric, two datetime or two date columns of the "
                        "schema")
    return tuple(out_columns), out_lowered


def with_resolved_lowered(schema: TableSchema, name: str, bounds: tuple[str, str] | None, resolution: str | None
                          ) -> TableSchema:
    """``schema`` with its lowered column ``name`` given the DP estimate's ``bounds`` and ``resolution`` (None: as
    they are; ``kinds.temporal.Temporal.resolved``): its modelled parts are rebuilt for them, in place of the ones
    laid out for the ``auto`` placeholders, so the schema is the one its plain entry parses to."""
    column = next(c for c in schema.lowered if c.name == name)
    kind = lowered_kind_of(column.kind)
    resolved, parts = kind.resolved(column, bounds, resolution)  # type: ignore[attr-defined]
    columns = list(schema.columns)
    if parts:
        index = next(i for i, c in enumerate(columns) if c.name in column.parts)
        columns = [c for c in columns if c.name not in column.parts]
        columns[index:index] = [ColumnSpec(**part) for part in parts]
    lowered = tuple(resolved if c.name == name else c for c in schema.lowered)
    return dataclasses.replace(schema, columns=tuple(columns), lowered=lowered)


_DERIVED_KEYS = {"name", "kind", "derived", "decimals"}


def parse_derived(
    raw: dict[str, Any], position: int, columns: tuple[ColumnSpec, ...], derived_names: Collection[Any] = (),
    lowered: tuple[LoweredColumn, ...] = (),
) -> DerivedColumn:
    """A derived column (``{name, kind, derived: expression, decimals}``) whose expression reads only numeric
    ``columns`` and the ``lowered`` ones that hold a number (a rule's later column) or a point in time (read as
    seconds since 1970: ``dropoff - pickup`` is a duration in seconds)."""
    name, where = _column_entry(raw, position, _DERIVED_KEYS, f" (a derived column takes {sorted(_DERIVED_KEYS)})")
    kind = raw.get("kind")
    numeric_kinds = frozenset(k for k in kind_names() if kind_of(k).numeric)
    if kind not in numeric_kinds:
        raise _fail(where, kind, f"a derived column's kind must be one of {sorted(numeric_kinds)}")
    expression = raw["derived"]
    if not isinstance(expression, str):
        raise _fail(where, expression, "derived must be an arithmetic expression, written as text")
    try:
        tree, inputs = parse_expression(expression)
    except ExpressionError as exc:
        raise _fail(where, expression, f"derived: {exc}") from None
    parts = {p for c in lowered for p in c.parts}
    numeric = {c.name for c in columns if c.is_numeric and c.name not in parts}
    numeric |= {c.name for c in lowered if c.kind in ("datetime", "date") or c.spec is not None}
    for column in inputs:
        if column not in numeric:
            problem = ("is derived itself" if column in derived_names else "is not numeric"
                       if column in {c.name for c in columns} else "is not a column of the schema")
            raise _fail(where, expression, f"derived: {column!r} {problem}; an expression reads modelled numeric "
                        "columns only")
    decimals = raw.get("decimals")
    if decimals is not None and (not kind_of(kind).fractional or isinstance(decimals, bool)
                                 or not isinstance(decimals, int) or not 0 <= decimals <= 12):
        raise _fail(where, decimals, "decimals must be an integer in [0, 12], on a continuous column")
    nullable = divides(tree) or any(c.nullable for c in columns if c.name in inputs) or any(
        c.nullable for c in lowered if c.name in inputs)
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
    parts = {p for column in schema.lowered for p in column.parts}
    columns = []
    for c in schema.columns:
        if c.name not in parts:
            columns.append(_column_dict(c))
    placed: list[DerivedColumn | LoweredColumn] = [*schema.derived, *schema.lowered]
    for item in sorted(placed, key=lambda d: d.position):
        entry: dict[str, Any]
        if isinstance(item, DerivedColumn):
            entry = {"name": item.name, "kind": item.kind, "derived": item.expression}
            if item.decimals is not None:
                entry["decimals"] = item.decimals
        elif item.spec is not None:  # a numeric column a rule lowered: its own entry
            entry = _column_dict(item.spec)
        else:
            entry = {"name": item.name, "kind": item.kind}
            if item.nullable:
                entry["nullable"] = True
            specs = {c.name: c for c in schema.columns}
            entry.update(lowered_kind_of(item.kind).to_dict(item, specs))
        columns.insert(item.position, entry)
    out: dict[str, Any] = {"name": schema.name, "version": schema.version, "n_min": schema.n_min, "columns": columns}
    if schema.rules:
        offsets = {c.name: c for c in schema.columns}
        out["rules"] = [{"rule": r.text, **kind_of("continuous").fields_to_dict(offsets[r.offset])}
                        for r in schema.rules]
    if schema.description:
        out["description"] = schema.description
    if schema.target is not None:
        out["target"] = schema.target
    if schema.task is not None:
        out["task"] = schema.task
    return out


def _column_dict(c: ColumnSpec) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": c.name, "kind": c.kind, "nullable": c.nullable}
    entry.update(kind_of(c.kind).fields_to_dict(c))
    return entry
