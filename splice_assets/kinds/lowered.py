"""Columns a table holds that the model does not hold as such: a *lowered* kind turns its column into modelled parts
on the way in and assembles it from them on the way out.

A ``datetime`` column becomes three modelled parts (its week, weekday and time of day: ``temporal``); an ``id``
column none (its keys are generated from a public format: ``identifier``); a column that a schema rule puts after
another (``dropoff >= pickup``) becomes its non-negative offset from it. The parts are ordinary ``ColumnSpec``s of
the schema's ``columns``, so everything between the input and the output (validation, the DP estimate, the
measurement, the fit, the evaluation) reads them like any other column; ``splice_assets.lowering`` does the two
conversions for a whole table.

A lowered kind is registered by name (``register_lowered``), as a modelled kind is in ``base``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

    from splice_assets.schema import ColumnSpec

#: What a lowered part holds where the input cell could not be read (counted as unparseable by the part's kind).
UNPARSEABLE = "unparseable"


@dataclass(frozen=True)
class LoweredColumn:
    """A schema column held by modelled ``parts`` (or, with none, generated). Public: from the schema only."""

    name: str
    kind: str
    #: Where the column sits among the output columns.
    position: int
    #: The modelled columns that hold it, in the schema's ``columns``.
    parts: tuple[str, ...]
    nullable: bool = False
    #: ``temporal``: the unit its values are on ("second", "minute", "hour", "day").
    resolution: str | None = None
    #: ``temporal``: the IANA zone its wall-clock parts are read in and its output is written in (None: naive; a
    #: zone-aware input is then normalised to UTC).
    timezone: str | None = None
    #: ``temporal``: public bounds, as ISO text (seconds since 1970 on the wall clock: ``bound_seconds``).
    bounds: tuple[str, str] | None = None
    #: ``temporal``: which ends of ``bounds`` are ``auto`` (``bounds: auto`` or ``[2019-01-01, auto]``): until the DP
    #: estimate resolves them (``private.bounds``), such an end holds the end of the estimate's public month grid
    #: (a placeholder the week part's bounds follow), never a value read from the data.
    bounds_auto: tuple[bool, bool] = (False, False)
    #: ``temporal``: ``resolution: auto``: the unit is not public; until the DP estimate sets it, ``resolution`` holds
    #: the finest unit (second), which the parts are laid out for.
    resolution_auto: bool = False
    #: ``id``: the public key format ("sequence", "uuid" or a pattern such as ``ORD{6}``) and a sequence's start.
    format: str | None = None
    start: int = 1
    #: A rule's earlier column: this column is modelled as its non-negative offset from ``base`` (its one part).
    base: str | None = None
    #: ... and, where the rule bounds the difference, the public largest offset (in the column's units).
    max_offset: float | None = None
    #: A numeric column that a rule lowered: its own public entry (bounds, precision) for the output.
    spec: ColumnSpec | None = None


class LoweredKind(ABC):
    """One lowered kind. Stateless: its methods read the column's public ``LoweredColumn``."""

    name: ClassVar[str]
    #: ``splice schema init`` tries lowered kinds before modelled ones, in increasing ``draft_order``.
    draft_order: ClassVar[int | None] = None
    #: What an unreadable cell of the column is, and the fix (the refusal over the share limit).
    unreadable: ClassVar[tuple[str, str]] = ("unreadable", "fix the input or the schema's kind")

    @abstractmethod
    def parse(self, where: str, raw: dict[str, Any], position: int) -> tuple[LoweredColumn, list[dict[str, Any]]]:
        """The column and its modelled parts (each as ``ColumnSpec`` fields: the kinds sit under the schema) from a
        schema entry; ``SchemaError`` quoting a malformed one."""

    @abstractmethod
    def to_dict(self, column: LoweredColumn, parts: Mapping[str, ColumnSpec]) -> dict[str, Any]:
        """The schema entry's kind-specific keys (round-trips through ``parse``)."""

    def lower(self, series: pd.Series, column: LoweredColumn) -> tuple[dict[str, Any], np.ndarray | None]:
        """An input column -> (its parts' input cells by part name, its values on the kind's own axis for a rule's
        later column, or None). A part cell is NaN where the input is missing and ``UNPARSEABLE`` where it cannot
        be read."""
        return {}, None

    @abstractmethod
    def assemble(self, parts: Mapping[str, pd.Series], column: LoweredColumn, rows: range, seed: int) -> pd.Series:
        """The decoded parts of rows ``rows`` (their positions in the whole synthetic table) -> the output column."""

    @abstractmethod
    def output_dtype(self, column: LoweredColumn) -> str:
        """The pandas dtype of the output column."""

    def recognises(self, present: pd.Series) -> bool:
        """Whether the non-missing cells of a column suggest this kind (``splice schema init``)."""
        return False

    def draft(self, values: pd.Series, from_data: bool) -> dict[str, Any]:
        """The kind-specific keys of a drafted entry."""
        return {}


_LOWERED: dict[str, LoweredKind] = {}


def register_lowered(kind: LoweredKind) -> LoweredKind:
    _LOWERED[kind.name] = kind
    return kind


def lowered_kind_of(name: str) -> LoweredKind:
    """The registered lowered kind named ``name``; ``KeyError`` if none is."""
    return _LOWERED[name]


def lowered_kind_names() -> tuple[str, ...]:
    return tuple(_LOWERED)


def drafting_lowered_kinds() -> list[LoweredKind]:
    drafted = [k for k in _LOWERED.values() if k.draft_order is not None]
    return sorted(drafted, key=lambda k: k.draft_order or 0)


def part_cells(values: np.ndarray, unreadable: np.ndarray) -> Any:
    """A part's input cells: ``values`` (NaN: missing), with ``UNPARSEABLE`` where the input could not be read (as
    text then, so that the part's own parse counts those cells; float64 otherwise, parsed fast)."""
    if not unreadable.any():
        return values
    cells = values.astype(object)
    cells[unreadable] = UNPARSEABLE
    return cells
