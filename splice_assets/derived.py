"""Derived columns: a numeric column the schema declares as arithmetic on other numeric columns.

A charge that is minutes times a public tariff, a total that is the sum of its parts, a net amount that is gross
less tax: modelled as columns of their own they would not keep the identity (each is measured and sampled with its
own noise), and they would take a share of the budget for nothing. A derived column is therefore neither measured
nor modelled: the input's copy is dropped like any column outside the schema, and the synthetic value is computed
from the synthetic row (post-processing), so the identity holds in every released row.

The expression language is deliberately small: numbers, column names (in backticks when a name is not a Python
identifier), ``+ - * /`` and parentheses. It is checked when the schema is read, parsed once per process
(cached), and evaluated on whole columns.
"""

from __future__ import annotations

import ast
import functools
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from splice_assets.kinds import kind_of

_OPERATORS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
}
_QUOTED = re.compile(r"`([^`]+)`")


class ExpressionError(ValueError):
    """A derived column's expression is not in the expression language; the message says what is not."""


@dataclass(frozen=True)
class DerivedColumn:
    """A numeric column computed from other columns of the synthetic row; ``position`` is its place among all the
    schema's columns (the output keeps the declared order)."""

    name: str
    #: A registered numeric kind (``continuous``, ``integer``): an ``integral`` one is rounded to integers.
    kind: str
    expression: str
    position: int
    #: Decimals the value is rounded to (continuous columns); integer columns are rounded to integers.
    decimals: int | None = None
    #: Whether a value can be missing: an input is nullable, or the expression divides (by zero, say).
    nullable: bool = field(default=False, compare=False)

    @property
    def inputs(self) -> tuple[str, ...]:
        """The columns the expression reads, in order of first use."""
        return parse_expression(self.expression)[1]

    def values(self, columns: Mapping[str, np.ndarray]) -> np.ndarray:
        """The column on whole input columns (float arrays, NaN for missing): NaN where an input is missing or a
        division has no finite result, then rounded to the column's precision."""
        with np.errstate(divide="ignore", invalid="ignore"):
            out = np.asarray(_evaluate(parse_expression(self.expression)[0], columns), dtype=np.float64)
        out = np.where(np.isfinite(out), out, np.nan)
        if kind_of(self.kind).integral:
            return np.rint(out)
        return out if self.decimals is None else np.round(out, self.decimals)


@functools.lru_cache(maxsize=256)
def parse_expression(text: str) -> tuple[ast.expr, tuple[str, ...]]:
    """The expression's syntax tree (its names are the column names, backticks removed) and the columns it reads."""
    if not isinstance(text, str) or not text.strip():
        raise ExpressionError("the expression must be a non-empty string")
    quoted: list[str] = []

    def placeholder(match: re.Match[str]) -> str:
        quoted.append(match.group(1))
        return f"__column_{len(quoted) - 1}__"

    try:
        tree = ast.parse(_QUOTED.sub(placeholder, text.strip()), mode="eval").body
    except SyntaxError:
        raise ExpressionError("it is not an arithmetic expression") from None
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            name = _column_name(node.id, quoted)
            if name not in names:
                names.append(name)
        elif isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
                raise ExpressionError(f"{node.value!r} is not a number")
        elif isinstance(node, ast.BinOp):
            if type(node.op) not in _OPERATORS:
                raise ExpressionError(f"operator {type(node.op).__name__} is not one of + - * /")
        elif isinstance(node, ast.UnaryOp):
            if not isinstance(node.op, (ast.USub, ast.UAdd)):
                raise ExpressionError(f"operator {type(node.op).__name__} is not a sign")
        elif not isinstance(node, (ast.operator, ast.unaryop, ast.Load)):
            raise ExpressionError(f"{ast.unparse(node)!r} is not allowed (numbers, column names, + - * / only)")
    if not names:
        raise ExpressionError("it reads no column")
    return _with_names(tree, quoted), tuple(names)


def divides(tree: ast.expr) -> bool:
    """Whether an expression divides (a zero divisor leaves the value missing)."""
    return any(isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) for node in ast.walk(tree))


def _column_name(identifier: str, quoted: list[str]) -> str:
    match = re.fullmatch(r"__column_(\d+)__", identifier)
    return quoted[int(match.group(1))] if match else identifier


def _with_names(tree: ast.expr, quoted: list[str]) -> ast.expr:
    """The tree with each placeholder's ``id`` set back to the backticked column name."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            node.id = _column_name(node.id, quoted)
    return tree


def _evaluate(node: ast.expr, columns: Mapping[str, np.ndarray]) -> np.ndarray | float:
    if isinstance(node, ast.Name):
        return np.asarray(columns[node.id], dtype=np.float64)
    if isinstance(node, ast.Constant):
        return float(cast("float", node.value))  # a number: parse_expression refused anything else
    if isinstance(node, ast.UnaryOp):
        value = _evaluate(node.operand, columns)
        return -value if isinstance(node.op, ast.USub) else value
    assert isinstance(node, ast.BinOp)
    return _OPERATORS[type(node.op)](_evaluate(node.left, columns), _evaluate(node.right, columns))
