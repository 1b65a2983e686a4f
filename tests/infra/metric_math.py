"""A small evaluator of CloudWatch metric math, one datapoint at a time, so tests check what an expression
computes rather than how it is spelled.

Covers what the stack uses: numbers, metric IDs, `+ - * /`, comparisons, `AND`/`OR`, `SUM([...])`,
`IF(cond, a, b)`, `FILL(x, value)`, `PERIOD(id)`. `None` is a missing datapoint: arithmetic and comparisons
with it are missing, `SUM` adds up the values that are there (missing if none is), `FILL` replaces it, and an
`IF` on a missing condition is missing. Division by zero raises: an expression must guard against it.
"""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Callable, Mapping
from typing import Any

Value = float | None

_BINARY: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}
_COMPARE: dict[type[ast.cmpop], Callable[[float, float], bool]] = {
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
}


def evaluate(expression: str, values: Mapping[str, Value], periods: Mapping[str, int] | None = None) -> Value:
    """The value of `expression` at one timestamp where metric ID `x` has the datapoint `values[x]`."""
    python = re.sub(r"\bAND\b", "and", re.sub(r"\bOR\b", "or", expression))
    tree = ast.parse(python, mode="eval")
    return _Evaluator(values, periods or {}).value(tree.body)


class _Evaluator:
    def __init__(self, values: Mapping[str, Value], periods: Mapping[str, int]) -> None:
        self.values = values
        self.periods = periods

    def value(self, node: ast.expr) -> Value:
        result = self._eval(node)
        if isinstance(result, list):
            raise AssertionError("an expression's result must be one series, not an array")
        return None if result is None else float(result)

    def _eval(self, node: ast.expr) -> Any:
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return float(node.value)
        if isinstance(node, ast.Name):
            if node.id not in self.values:
                raise AssertionError(f"metric ID {node.id!r} has no value in this test")
            return self.values[node.id]
        if isinstance(node, ast.List):
            return [self._eval(element) for element in node.elts]
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            left, right = self._eval(node.left), self._eval(node.right)
            return None if left is None or right is None else _BINARY[type(node.op)](left, right)
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE:
            left, right = self._eval(node.left), self._eval(node.comparators[0])
            return None if left is None or right is None else _COMPARE[type(node.ops[0])](left, right)
        if isinstance(node, ast.BoolOp):
            operands = [self._eval(operand) for operand in node.values]
            if any(operand is None for operand in operands):
                return None
            return all(operands) if isinstance(node.op, ast.And) else any(operands)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            return self._call(node.func.id, node.args)
        raise AssertionError(f"unsupported metric math: {ast.unparse(node)}")

    def _call(self, function: str, args: list[ast.expr]) -> Any:
        if function == "IF":
            condition = self._eval(args[0])
            if condition is None:
                return None
            # Only the branch taken is evaluated, datapoint by datapoint, as CloudWatch does.
            return self._eval(args[1] if condition else args[2])
        if function == "SUM":
            (array,) = (self._eval(arg) for arg in args)
            present = [item for item in array if item is not None]
            return sum(present) if present else None
        if function == "FILL":
            filled = self._eval(args[0])
            return self._eval(args[1]) if filled is None else filled
        if function == "PERIOD":
            (name,) = args
            assert isinstance(name, ast.Name), "PERIOD takes a metric ID"
            return float(self.periods[name.id])
        raise AssertionError(f"unsupported metric math function {function}")
