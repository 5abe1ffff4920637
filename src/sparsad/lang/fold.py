"""Constant arithmetic folded where the language needs a constant: the exponent of `pow`.

`pow(s, 1.0 / 3.0)` takes a constant exponent; passes that name subexpressions (A-normal form,
common subexpressions) would otherwise bind `1.0 / 3.0` to a variable, which the type checker
rejects. Folding computes what the interpreter and compiled code compute (IEEE float64 for
reals, Python ints for ints), so no value changes.

>>> from sparsad.lang.parse import parse
>>> from sparsad.lang.printer import to_text
>>> to_text(fold_exponents(parse("pow(x, 1.0 / 4.0)")))
'pow(x, 0.25)'
"""
from __future__ import annotations

import numpy as np

from sparsad.lang.rebuild import map_children
from sparsad.lang.syntax import Binary, Call, Const, Expr, Neg


def fold_exponents(expr: Expr) -> Expr:
    """Every constant arithmetic exponent of `pow` (such as `1.0 / 3.0`) folded to its value:
    A-normal form would otherwise bind it to a name, and pow takes a constant exponent. The value
    is the one the interpreter and compiled code compute (IEEE float64), so nothing changes."""
    expr = map_children(expr, fold_exponents)
    if isinstance(expr, Call) and expr.func == "pow" and len(expr.args) == 2 \
            and not isinstance(expr.args[1], Const):
        value = _constant_value(expr.args[1])
        if value is not None:
            return Call("pow", (expr.args[0], Const(value)), span=expr.span)
    return expr


def _constant_value(expr: Expr) -> int | float | None:
    """The number a constant arithmetic expression (+ - * / and unary minus of numbers) denotes."""
    match expr:
        case Const(value=v) if not isinstance(v, bool):
            return v
        case Neg(operand=o):
            value = _constant_value(o)
            return None if value is None else -value
        case Binary(op="+" | "-" | "*" | "/" as op, left=l, right=r):
            a, b = _constant_value(l), _constant_value(r)
            if a is None or b is None:
                return None
            if op == "/":
                with np.errstate(all="ignore"):
                    return float(np.float64(a) / np.float64(b))
            if isinstance(a, int) and isinstance(b, int):
                return {"+": a + b, "-": a - b, "*": a * b}[op]
            a, b = np.float64(a), np.float64(b)
            return float({"+": a + b, "-": a - b, "*": a * b}[op])
    return None
