"""What a column kind is (``Kind``) and the registry that names them (``kind_of``).

A kind owns everything that differs between kinds: its schema fields and their validation, how a cell is parsed
and when it is unparseable, how a cleaned column is encoded into cube coordinates and decoded back (with its output
dtype), and what ``splice schema init`` drafts for it. The rest of the library asks ``kind_of(spec.kind)``.

A new kind is a subclass registered with ``register`` (``kinds/__init__.py`` registers the five built-in ones); a
test may register a toy kind of its own without touching any other module.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

if TYPE_CHECKING:  # the kinds sit under the schema: its types only, for annotations
    import pandas as pd
    import pandera.pandas as pa

    from splice_assets.schema import ColumnSpec


class Kind(ABC):
    """One column kind. Stateless: its methods read the column's public ``ColumnSpec``."""

    #: The ``kind:`` a schema writes.
    name: ClassVar[str]
    #: A number with public bounds (encoded on a scale), as opposed to one of a list of categories (a grid level).
    numeric: ClassVar[bool]
    #: Integral numbers: exact values and ``step`` are integers, ``step: auto`` is allowed, decoded values rounded.
    integral: ClassVar[bool] = False
    #: Fractional numbers: ``decimals`` (and ``decimals: auto``) and ``float32`` are allowed.
    fractional: ClassVar[bool] = False
    #: The categories have a public order (an ordinal's): the fit reads it (``layout.Coordinate.ordered``).
    ordered: ClassVar[bool] = False
    #: ``splice schema init``: kinds are tried in increasing ``draft_order`` (None: never drafted).
    draft_order: ClassVar[int | None] = None

    @property
    def discrete(self) -> bool:
        return not self.numeric

    # -- the schema ------------------------------------------------------------------------------------------------
    @abstractmethod
    def parse_fields(self, where: str, raw: dict[str, Any]) -> dict[str, Any]:
        """The ``ColumnSpec`` fields (other than name, kind and nullable) of a schema entry; ``SchemaError``
        quoting the entry if one is malformed or does not belong to this kind."""

    @abstractmethod
    def fields_to_dict(self, spec: ColumnSpec) -> dict[str, Any]:
        """The schema entry's kind-specific keys (``schema_to_dict``; round-trips through ``parse_fields``)."""

    # -- parsing a private column (``private.validation``) ------------------------------------------------------------
    def category_index(self, spec: ColumnSpec) -> dict[str, int]:
        """Canonical cell keys (``category_key``) -> 0-based category position (discrete kinds)."""
        raise TypeError(f"a {self.name} column has no categories")

    @abstractmethod
    def wrong_dtype(self, spec: ColumnSpec, dtype: Any, temporal: bool) -> tuple[str, str] | None:
        """(what was declared, the fix) when a typed column's ``dtype`` cannot hold this kind, else None."""

    @abstractmethod
    def parse(self, series: pd.Series, spec: ColumnSpec) -> tuple[np.ndarray, np.ndarray]:
        """(values, was the cell empty) before any repair (numbers, or category codes with ``cells.MISSING``,
        ``cells.UNSEEN``, ``cells.TOO_LONG``)."""

    @abstractmethod
    def tally(self, spec: ColumnSpec, values: np.ndarray, was_missing: np.ndarray) -> tuple[int, int]:
        """(non-empty cells, how many of them are unparseable: counted against ``max_unparseable_share``)."""

    @abstractmethod
    def unparseable(self, spec: ColumnSpec) -> tuple[str, str]:
        """(what the unparseable cells are, what to fix) for the refusal over the share limit."""

    @abstractmethod
    def clean(self, values: np.ndarray, was_missing: np.ndarray, spec: ColumnSpec, counts: Counter[str]
              ) -> pd.Series:
        """The total record-level repair of ``parse``'s output into the column's validated dtype, counting repairs."""

    @abstractmethod
    def pandera_column(self, spec: ColumnSpec) -> pa.Column:
        """The validated column's structural contract."""

    # -- the cube ---------------------------------------------------------------------------------------------------
    @abstractmethod
    def coordinates(self, spec: ColumnSpec) -> list[tuple[str, int, int]]:
        """The column's coordinates as (role, levels, ordered): ``layout.Coordinate``'s fields."""

    @abstractmethod
    def encode(self, series: pd.Series, spec: ColumnSpec) -> list[np.ndarray]:
        """A validated column -> one array in [-1, 1] per coordinate."""

    @abstractmethod
    def decode(self, x: np.ndarray, spec: ColumnSpec) -> pd.Series:
        """The column's coordinates (n, its coordinate count), already in [-1, 1] -> the output column."""

    @abstractmethod
    def output_dtype(self, spec: ColumnSpec) -> str:
        """The pandas dtype of a decoded (and a validated) column."""

    def validated_dtype(self, spec: ColumnSpec) -> str:
        """The pandas dtype of a validated column (what ``encode`` reads): the output dtype unless a kind writes its
        output otherwise."""
        return self.output_dtype(spec)

    def grid_step(self, spec: ColumnSpec) -> float | None:
        """The public grid a (resolved) numeric column's values lie on: its ``step``, else the kind's own unit (1 on
        an ``integral`` kind), else None. The fine cells and the DP frequent-value candidates are its points."""
        return None

    # -- the evaluation ------------------------------------------------------------------------------------------------
    def output_values(self, spec: ColumnSpec) -> list[Any] | None:
        """The values an output column holds (the expectation suite's value set); None for a numeric kind, whose
        output is checked against its bounds."""
        return None

    def output_codes(self, series: pd.Series, spec: ColumnSpec) -> np.ndarray:
        """0-based category position of each value of a validated or synthetic column, -1 for missing (the quality
        metrics' marginal codes; discrete kinds)."""
        raise TypeError(f"a {self.name} column has no categories")

    # -- ``splice schema init`` ----------------------------------------------------------------------------------------
    def recognises(self, present: pd.Series) -> bool:
        """Whether the non-missing cells ``present`` of a column suggest this kind (tried in ``draft_order``)."""
        return False

    def draft(self, values: pd.Series, from_data: bool) -> dict[str, Any]:
        """The kind-specific keys of a drafted entry (placeholders, or with ``from_data`` the observed domain)."""
        return {}


_REGISTRY: dict[str, Kind] = {}


def register(kind: Kind) -> Kind:
    """Make ``kind`` known to schemas by its name (a later registration under the same name replaces it)."""
    _REGISTRY[kind.name] = kind
    return kind


def unregister(name: str) -> None:
    """Forget a registered kind (a test's toy kind)."""
    _REGISTRY.pop(name, None)


def kind_of(name: str) -> Kind:
    """The registered kind named ``name``; ``KeyError`` if none is."""
    return _REGISTRY[name]


def kind_names() -> tuple[str, ...]:
    """Every registered kind's name, in registration order."""
    return tuple(_REGISTRY)


def drafting_kinds() -> list[Kind]:
    """The kinds ``schema init`` may draft, in the order it tries them."""
    drafted = [k for k in _REGISTRY.values() if k.draft_order is not None]
    return sorted(drafted, key=lambda k: k.draft_order or 0)
