"""``splice schema init``: a first schema drafted from an input's header and cell types.

The draft names every column and guesses its kind (boolean, integer, continuous, categorical) and whether it has
missing cells. Those guesses are read from the private rows, so every column carries ``from_data: true``, and
``schema.parse_column`` refuses it until the operator has checked that what it says is public knowledge and removed
the mark. Categories and n_min must come from public knowledge, so they are left as placeholders the loader refuses
until the operator fills them in. A numeric column gets the DP estimates nothing public replaces yet (``Kind.draft``):
``bounds: auto``, ``values: auto`` (its point masses) and, if continuous, ``decimals: auto``, for ``bounds_share`` of
the release's privacy in all. With ``from_data=True`` the draft offers the observed categories and min/max instead
of placeholders and ``bounds: auto``, under the same mark.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from splice_assets.kinds import drafting_kinds, kind_of
from splice_assets.kinds.lowered import drafting_lowered_kinds, lowered_kind_names, lowered_kind_of
from splice_assets.private.bounds import MAX_DECIMALS, decimals_needed
from splice_assets.private.validation import read_table

HEADER = """\
# Draft schema written by `splice schema init` from {source!r}. A schema must hold PUBLIC knowledge only.
# Before a release:
#   - n_min: a public lower bound on the rows (not the observed count);
#   - bounds, values, decimals: 'auto' is drafted on every numeric column (decimals on continuous ones): DP estimates
#     of its range, its frequent exact values (point masses: a 0, a top-code; lost without them) and its precision.
#     Together they take bounds_share (default 5%) of the release's privacy as one DP estimate, its own ledger entry
#     (docs/schema.md, `bounds: auto`): write a public [lo, hi], value list or decimals where you know them; a
#     schema with no 'auto' left spends nothing on it;
#   - categories: the public list of values per categorical column;
#   - from_data: true marks what was read from the data: every column's kind and nullable (and with --from-data
#     its observed categories or min/max): check that they are public, then delete the mark; the loader refuses a
#     column that still carries it.
"""

IDENTITIES = """\
# These columns look derived in the rows (from the data: declare one only if the rule is public knowledge, e.g. a
# published tariff). A derived column is computed in every synthetic row instead of modelled, so the rule holds and
# no budget is spent on it: replace its entry by {name: ..., kind: ..., derived: <expression>} (docs/schema.md).
"""


def infer_kind(values: pd.Series) -> str:
    """The column kind its non-missing cells suggest: the first lowered kind (free text, a date or time, a key:
    ``LoweredKind.draft_order``), else the first modelled kind (boolean, integer, continuous, categorical:
    ``Kind.draft_order``) that recognises them."""
    present = values.dropna()
    for lowered in drafting_lowered_kinds():
        if lowered.recognises(present):
            return lowered.name
    return next(kind.name for kind in drafting_kinds() if kind.recognises(present))


def draft_column(name: str, values: pd.Series, from_data: bool) -> dict[str, Any]:
    kind = infer_kind(values)
    entry: dict[str, Any] = {"name": name, "kind": kind}
    if kind in lowered_kind_names():
        if kind != "id":
            entry["nullable"] = bool(values.isna().any())
        entry.update(lowered_kind_of(kind).draft(values, from_data))
        entry["from_data"] = True
        return entry
    entry["nullable"] = bool(values.isna().any())
    entry.update(kind_of(kind).draft(values, from_data))
    entry["from_data"] = True  # the kind and nullable above were read from the rows, as any observed values
    return entry


#: Share of the rows (all inputs present) an identity must hold in.
IDENTITY_SHARE = 0.999
#: Share of the rows off a column's most common value below which it is too nearly constant to tell an identity.
MIN_VARYING = 0.05
#: Rows an identity is first screened on; every row confirms it.
SCREEN_ROWS = 2_000
#: Numeric columns beyond which sums and differences are not searched (their number grows as the cube).
MAX_SUM_COLUMNS = 60


def derived_candidates(table: pd.DataFrame, kinds: Mapping[str, str] | None = None) -> list[str]:
    """Numeric columns that the rows show to be arithmetic on others, as ``name = expression`` lines: a constant
    multiple of one column (the constant with the fewest significant digits that holds), or else the sum or
    difference of two (``_Identity``). Nearly constant columns (``MIN_VARYING``) are left out: any identity holds on
    them. A fact about the private rows, offered with ``from_data`` only; each line names the later column.
    ``kinds``: each column's kind when already inferred (``infer_kind``)."""
    values, modes = {}, {}
    for column in table.columns:
        kind = kinds[column] if kinds else infer_kind(table[column])
        if kind not in lowered_kind_names() and kind_of(kind).numeric:
            x = pd.to_numeric(table[column], errors="coerce").to_numpy(dtype=np.float64)
            present = x[~np.isnan(x)]
            mode = float(pd.Series(present).mode().iloc[0]) if len(present) else math.nan
            if len(present) and np.mean(present != mode) >= MIN_VARYING:
                values[column], modes[column] = x, mode
    numeric = list(values)
    screen = np.random.default_rng(0).permutation(len(table))[:SCREEN_ROWS]
    found: list[str] = []
    for i, target in enumerate(numeric):
        identity = _Identity(values[target], modes[target], screen)
        multiples = []
        for source in numeric[:i]:
            x = values[source]
            ratios = identity.y[screen] / np.where(x[screen] != 0, x[screen], np.nan)
            if np.all(np.isnan(ratios)):
                continue
            middle = float(np.nanmedian(ratios))
            for digits in range(1, 7):
                k = float(f"{middle:.{digits}g}")
                if k != 0 and identity.holds(k * x):
                    multiples.append(f"{target} = {_name(source)}" + ("" if k == 1 else f" * {k:g}"))
                    break
        found += multiples
        if multiples or not 2 <= i <= MAX_SUM_COLUMNS:
            continue
        sources = np.column_stack([values[c][screen] for c in numeric[:i]])
        first, second = np.triu_indices(i, 1)
        for a, sign, b in ((first, 1.0, second), (first, -1.0, second), (second, -1.0, first)):
            for j in np.flatnonzero(identity.on_screen(sources[:, a] + sign * sources[:, b])):
                u, v = numeric[a[j]], numeric[b[j]]
                if identity.holds(values[u] + sign * values[v]):
                    found.append(f"{target} = {_name(u)} {'+' if sign > 0 else '-'} {_name(v)}")
    return found


class _Identity:
    """Whether a column ``y`` equals an estimate of it: an integer exactly once rounded, other values to within one
    unit of their last decimal (a charge computed from unrounded minutes), in ``IDENTITY_SHARE`` of the rows where
    both are present and of those off ``y``'s most common value ``mode``; on the ``screen`` rows first, then on all."""

    def __init__(self, y: np.ndarray, mode: float, screen: np.ndarray) -> None:
        self.y, self.screen = y, screen
        self.varying = y != mode
        places = int(decimals_needed(y[~np.isnan(y)]).max(initial=0))
        self.unit = 10.0 ** -min(places, MAX_DECIMALS) * (0.5 if places == 0 else 1 + 1e-9)

    def holds(self, estimate: np.ndarray) -> bool:
        """``estimate`` on every row."""
        return bool(self.on_screen(estimate[self.screen][:, None])[0]) and bool(
            self._hold(estimate[:, None], self.y, self.varying)[0])

    def on_screen(self, estimates: np.ndarray) -> np.ndarray:
        """Which columns of ``estimates`` (screen rows x candidates) hold on the screen rows."""
        return self._hold(estimates, self.y[self.screen], self.varying[self.screen])

    def _hold(self, estimates: np.ndarray, y: np.ndarray, varying: np.ndarray) -> np.ndarray:
        close = np.abs(estimates - y[:, None]) <= self.unit  # False where either is missing
        present = ~np.isnan(estimates) & ~np.isnan(y)[:, None]
        off_mode = present & varying[:, None]
        n_present, n_off = present.sum(axis=0), off_mode.sum(axis=0)
        return ((n_off >= 10) & ((close & present).sum(axis=0) >= IDENTITY_SHARE * n_present)
                & ((close & off_mode).sum(axis=0) >= IDENTITY_SHARE * n_off))


def _name(column: str) -> str:
    return column if column.isidentifier() else f"`{column}`"


def draft_schema(path: str | Path, name: str | None = None, from_data: bool = False) -> str:
    """The draft schema YAML text for an input file (CSV, optionally .gz, or Parquet)."""
    table = read_table(path)
    stem = Path(path).name.split(".")[0]
    columns = [draft_column(str(c), table[c], from_data) for c in table.columns]
    raw = {
        "name": name or stem,
        "version": 1,
        "n_min": None,
        "description": f"Drafted from {Path(path).name}; review every entry.",
        "columns": columns,
    }
    body = yaml.safe_dump(raw, sort_keys=False, allow_unicode=True, default_flow_style=None, width=120)
    identities = derived_candidates(table, {c["name"]: c["kind"] for c in columns}) if from_data else []
    if identities:
        body += IDENTITIES + "".join(f"#   {line}\n" for line in identities)
    return HEADER.format(source=Path(path).name) + body
