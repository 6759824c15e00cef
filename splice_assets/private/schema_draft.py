"""``splice schema init``: a first schema drafted from an input's header and cell types.

The draft names every column and guesses its kind (boolean, integer, continuous, categorical) and whether it has
missing cells. Bounds, categories and n_min must come from public knowledge, so by default they are left as
placeholders the loader refuses until the operator fills them in. With ``from_data=True`` the draft offers the
observed categories and min/max instead: those are facts about the private rows, so each such column carries
``from_data: true``, and ``schema.parse_column`` refuses it until the operator has checked that the values are
public and removed the mark.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from splice_assets.private.validation import read_table

_BOOLEAN_WORDS = frozenset({"true", "false"})

HEADER = """\
# Draft schema written by `splice schema init` from {source!r}. A schema must hold PUBLIC knowledge only.
# Before a release:
#   - n_min: a public lower bound on the rows (not the observed count);
#   - bounds: a public [lo, hi] per numeric column, or 'auto' (a DP estimate that costs epsilon);
#   - categories: the public list of values per categorical column;
#   - from_data: true marks values copied from the data (observed categories or min/max): check that they are
#     public, then delete the mark; the loader refuses a column that still carries it.
"""


def infer_kind(values: pd.Series) -> str:
    """The column kind its non-missing cells suggest: boolean, integer, continuous or categorical."""
    present = values.dropna()
    if pd.api.types.is_bool_dtype(present) or (
        len(present) and set(present.astype(str).str.strip().str.lower()) <= _BOOLEAN_WORDS
    ):
        return "boolean"
    numbers = pd.to_numeric(present, errors="coerce")
    if len(present) == 0 or numbers.isna().any():
        return "categorical"
    return "integer" if bool((numbers == numbers.round()).all()) else "continuous"


def _number(value: float, kind: str) -> int | float:
    return int(value) if kind == "integer" else float(value)


def draft_column(name: str, values: pd.Series, from_data: bool) -> dict[str, Any]:
    kind = infer_kind(values)
    entry: dict[str, Any] = {"name": name, "kind": kind, "nullable": bool(values.isna().any())}
    if kind in ("integer", "continuous"):
        numbers = pd.to_numeric(values.dropna())
        entry["bounds"] = [_number(numbers.min(), kind), _number(numbers.max(), kind)] if from_data else None
    elif kind == "categorical":
        observed = sorted({str(v).strip() for v in values.dropna()})
        entry["categories"] = observed if from_data else []
    if from_data and kind != "boolean":
        entry["from_data"] = True
    return entry


def draft_schema(path: str | Path, name: str | None = None, from_data: bool = False) -> str:
    """The draft schema YAML text for an input file (CSV, optionally .gz, or Parquet)."""
    table = read_table(path)
    stem = Path(path).name.split(".")[0]
    raw = {
        "name": name or stem,
        "version": 1,
        "n_min": None,
        "description": f"Drafted from {Path(path).name}; review every entry.",
        "columns": [draft_column(str(c), table[c], from_data) for c in table.columns],
    }
    body = yaml.safe_dump(raw, sort_keys=False, allow_unicode=True, default_flow_style=None, width=120)
    return HEADER.format(source=Path(path).name) + body
