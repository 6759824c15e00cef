"""Rows into the cube by the schema's public layout (``layout``): a table -> [-1, 1]^d, the inverse of
``layout.decode``.

A function of the public schema alone, applied row by row: no row's encoding depends on another row. The private
side encodes the validated private rows with it (``private.encoding``, where the rows are measured); the public
quality summary encodes the synthetic rows with it (``release.quality``: synthetic rows are post-processing, public).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from splice_assets.kinds import kind_of
from splice_assets.kinds.discrete import DiscreteKind
from splice_assets.kinds.numeric import exact_levels as exact_levels
from splice_assets.schema import ColumnSpec, TableSchema


def encode(table: pd.DataFrame, schema: TableSchema) -> np.ndarray:
    """Encode a *validated* table (see ``validation.validate``) into an (n, d) float64 array in [-1, 1]
    (column-major).

    Total on validated input: numeric values are already clipped to the bounds, categories are schema
    categories or missing. Clipping here again guarantees the [-1, 1] range whatever the input.
    """
    n = len(table)
    columns: list[np.ndarray] = []
    for spec in schema.columns:
        columns += kind_of(spec.kind).encode(table[spec.name], spec)
    out = np.empty((n, len(columns)), order="F")  # np.column_stack wrote rows: a third of a batch's preparation
    for j, column in enumerate(columns):
        out[:, j] = column
    return out


def category_codes(series: pd.Series, spec: ColumnSpec) -> np.ndarray:
    """0-based schema position of each value of a discrete column, -1 for missing/unknown."""
    kind = kind_of(spec.kind)
    assert isinstance(kind, DiscreteKind), f"column {spec.name!r} is not discrete"
    return kind.codes(series, spec)
