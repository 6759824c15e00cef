"""``splice schema init``: a first schema drafted from an input's header and cell types.

The draft names every column and guesses its kind (boolean, integer, continuous, categorical) and whether it has
missing cells: an integer column with few distinct values (``read_as_codes``) or cells with leading zeros is taken
for codes and drafted categorical, with a comment saying how to undo it; a categorical column whose values look
ordered gets a comment that ``kind: ordinal`` needs their public order, which the draft does not know. Those
guesses are read from the private rows, so every column carries ``from_data: true``, and ``schema.parse_column``
refuses it until the operator has checked that what it says is public knowledge and removed the mark. Categories
and n_min must come from public knowledge, so they are left as placeholders the loader refuses until the operator
fills them in. A numeric column gets the DP estimates nothing public replaces yet (``Kind.draft``):
``bounds: auto``, ``values: auto`` (its point masses) and, if continuous, ``decimals: auto``, for ``bounds_share`` of
the release's privacy in all. With ``from_data=True`` the draft offers the observed categories and min/max instead
of placeholders and ``bounds: auto``, under the same mark, and comments: derived columns (``derived_candidates``)
and numeric columns whose rows crowd a few of their bins (``spread_hint``).
"""

from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from splice_assets.kinds import drafting_kinds, kind_of
from splice_assets.kinds.integer import has_leading_zeros
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


#: An integer column with at most this many distinct values, each seen in this many rows on average, is read as codes.
MAX_CODES, MIN_ROWS_PER_CODE = 10, 10
#: Words that say a category has a place in an order (``low``/``medium``/``high``), as whole words of a value.
ORDER_WORDS = frozenset(
    "low lower lowest medium mid middle high higher highest very small large big none some many few poor fair good "
    "better best bad worse worst excellent average never rarely sometimes often always usually strongly agree "
    "disagree neutral mild moderate severe minor major less more least most basic standard premium beginner "
    "intermediate advanced junior senior bronze silver gold platinum".split())


def infer_kind(values: pd.Series) -> str:
    """The column kind its non-missing cells suggest: the first lowered kind (free text, a date or time, a key:
    ``LoweredKind.draft_order``), else categorical for codes (``read_as_codes``), else the first modelled kind
    (boolean, integer, continuous, categorical: ``Kind.draft_order``) that recognises them."""
    present = values.dropna()
    for lowered in drafting_lowered_kinds():
        if lowered.recognises(present):
            return lowered.name
    if read_as_codes(present):
        return "categorical"
    return next(kind.name for kind in drafting_kinds() if kind.recognises(present))


def read_as_codes(present: pd.Series) -> str | None:
    """Why numeric cells are drafted as categorical codes, or None: written with leading zeros (``02139``), or
    integers with at most ``MAX_CODES`` distinct values, each held by ``MIN_ROWS_PER_CODE`` rows on average. A
    column of 0 and 1 only is left to the other kinds (an integer, as before: a flag or a count)."""
    if not len(present) or pd.api.types.is_bool_dtype(present):
        return None  # a typed boolean (Parquet) is a boolean
    numbers = pd.to_numeric(present, errors="coerce")
    if numbers.isna().any():
        return None
    if has_leading_zeros(present):
        return "numbers written with leading zeros, as codes are (a quantity never is)"
    distinct = set(numbers.unique().tolist())
    if not (numbers == numbers.round()).all() or distinct == {0, 1}:
        return None
    if len(distinct) <= MAX_CODES and len(present) >= MIN_ROWS_PER_CODE * len(distinct):
        return f"{len(distinct)} distinct integer{'s' if len(distinct) > 1 else ''}, read as codes"
    return None


def draft_column(name: str, values: pd.Series, from_data: bool) -> dict[str, Any]:
    """The column's drafted entry (``draft_notes`` says why, in comments)."""
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
#: Numeric columns beyond which sums, differences, products and ratios are not searched (they grow as the cube).
MAX_SUM_COLUMNS = 60


def derived_candidates(table: pd.DataFrame, kinds: Mapping[str, str] | None = None) -> list[str]:
    """Numeric columns that the rows show to be arithmetic on others, as ``name = expression`` lines: a constant
    multiple of one column (the constant with the fewest significant digits that holds), or else the sum or
    difference of two, or else their product or ratio (``_Identity``), in the expression language of
    ``splice_assets.derived``. Nearly constant columns (``MIN_VARYING``) are left out: any identity holds on
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
        pairs: list[str] = []
        for a, op, b in ((first, "+", second), (first, "-", second), (second, "-", first), (first, "*", second),
                         (first, "/", second), (second, "/", first)):
            if op == "*" and pairs:
                break  # a sum or difference holds: products and ratios are not searched
            for j in np.flatnonzero(identity.on_screen(_apply(op, sources[:, a], sources[:, b]))):
                u, v = numeric[a[j]], numeric[b[j]]
                if identity.holds(_apply(op, values[u], values[v])):
                    pairs.append(f"{target} = {_name(u)} {op} {_name(v)}")
        found += pairs
    return found


def _apply(op: str, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``x op y`` elementwise; a division by 0 where both are present is infinite, so it never holds (a derived
    ratio is missing there while the column is not)."""
    if op in "+-":
        return x + y if op == "+" else x - y
    if op == "*":
        return x * y
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(y != 0, x / np.where(y != 0, y, 1.0), np.where(np.isnan(x) | np.isnan(y), np.nan, np.inf))


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


def draft_notes(entry: Mapping[str, Any], values: pd.Series, from_data: bool) -> list[str]:
    """Comment lines (without ``# ``) for a drafted entry: why a numeric column was drafted as codes, that a
    categorical column's values look ordered, that a 0/1 column may be a boolean; with ``from_data`` the spread hint."""
    name, kind = entry["name"], entry["kind"]
    present = values.dropna()
    notes = []
    codes = read_as_codes(present) if kind == "categorical" else None
    if codes:
        notes.append(f"{name}: {codes}: drafted categorical. If they count or measure something, write `kind: "
                     "integer` with bounds instead of categories; if the codes are ordered, `kind: ordinal` with the "
                     "categories in their public order (the draft's is numeric, not a known one).")
    elif kind == "categorical" and entry.get("categories") != "auto":
        order = _looks_ordered(present)
        if order:
            listed = "numeric" if order == "numbers" else "alphabetical"
            notes.append(f"{name}: its values look ordered ({order}). `kind: ordinal` needs them in their public "
                         f"order: the draft's is {listed}, not a known one.")
    if kind == "integer" and set(pd.to_numeric(present).unique().tolist()) == {0, 1}:
        notes.append(f"{name}: only 0 and 1: a yes/no flag is `kind: boolean` (no bounds or values).")
    if from_data and kind not in lowered_kind_names() and kind_of(kind).numeric:
        notes += spread_hint(name, pd.to_numeric(present).to_numpy(dtype=np.float64))
    return notes


def _looks_ordered(present: pd.Series) -> str | None:
    """What makes a column's values look ordered: all numbers, or at least half of them (two or more) holding a
    number (``18-25``) or an order word (``ORDER_WORDS``)."""
    observed = {str(v).strip() for v in present}
    if not observed:
        return None
    if not pd.to_numeric(pd.Series(sorted(observed)), errors="coerce").isna().any():
        return "numbers" if len(observed) > 1 else None
    words = [set(re.findall(r"[a-z]+", v.lower())) for v in observed]
    ordered = sum(bool(w & ORDER_WORDS) for w in words)
    if ordered >= 2 and 2 * ordered >= len(observed):
        return "words such as low/high"
    numbered = sum(bool(re.search(r"\d", v)) for v in observed)
    if numbered >= 2 and 2 * numbered >= len(observed):
        return "numbers in the labels"
    return None


#: Share of a numeric column's observed range below which its central 90% of rows count as crowded (3 of 16 bins).
CROWDED_SHARE = 3 / 16
#: Ratio of the 99% to the 50% quantile of the positive values above which a column spans orders of magnitude.
SKEWED_RATIO = 20.0


def spread_hint(name: str, x: np.ndarray) -> list[str]:
    """Comment lines for a numeric column whose central 90% of rows (5% to 95% quantile) lie in less than
    ``CROWDED_SHARE`` of its observed range, so two or three of its 16 coarse bins would hold them: ``scale: log``
    where its positive values span orders of magnitude (p99/p50 above ``SKEWED_RATIO``: a count or amount, the
    public choice docs/schema.md names), and ``knots: auto`` where the rows crowd on that scale too, with what
    decision 0039 measured (not a default)."""
    lo, hi = (float(x.min()), float(x.max())) if len(x) else (0.0, 0.0)
    points, counts = np.unique(x, return_counts=True)
    if hi <= lo or len(points) <= MAX_CODES:
        return []
    if counts.max() >= 0.1 * len(x):  # a point mass (a 0) is kept by `values: auto`: the bins see the rest
        x = x[x != points[counts.argmax()]]
    p05, p95 = np.quantile(x, [0.05, 0.95])
    if p95 - p05 >= CROWDED_SHARE * (hi - lo):
        return []
    lines = [f"{name}: 90% of its rows lie in {(p95 - p05) / (hi - lo):.1%} of its observed range: a few of its 16 "
             "bins hold them."]
    positive = x[x > 0]
    p50, p99 = np.quantile(positive, [0.5, 0.99]) if len(positive) else (0.0, 0.0)
    crowded = True
    if lo >= 0 and p50 > 0 and p99 > SKEWED_RATIO * p50:
        lines.append(f" Its positive values span orders of magnitude (p99/p50 = {p99 / p50:.0f}): if it is a count "
                     "or an amount, `scale: log` (docs/schema.md).")
        logged = np.log1p(x - lo)
        l05, l95 = np.quantile(logged, [0.05, 0.95])
        crowded = l95 - l05 < CROWDED_SHARE * float(logged.max())
    if crowded:
        lines.append(" `knots: auto` puts its bins at DP quantiles (docs/decisions/0039-knots-auto.md): it gained on "
                     "magic and fars, lost on pol, churn and coil2000's small integer grids: not a default, compare "
                     "it on your table.")
    return lines


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
    }
    body = _dump({**raw, "columns": []}).replace("columns: []\n", "columns:\n" if columns else "columns: []\n")
    for column, key in zip(columns, table.columns, strict=True):
        entry = _dump({"columns": [column]}).removeprefix("columns:\n")  # as in the whole mapping: block, flow lists
        notes = draft_notes(column, table[key], from_data)
        body += "".join(f"# {line}\n" for note in notes for line in textwrap.wrap(note, 116, subsequent_indent=" "))
        body += entry
    identities = derived_candidates(table, {c["name"]: c["kind"] for c in columns}) if from_data else []
    if identities:
        body += IDENTITIES + "".join(f"#   {line}\n" for line in identities)
    return HEADER.format(source=Path(path).name) + body


def _dump(data: object) -> str:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, default_flow_style=None, width=120)
