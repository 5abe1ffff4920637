"""Derivative rules of the built-in functions, as a table: name -> f'(x) as an expression.

Forward and reverse mode both read this table; a function without an entry is an error
naming the function, never a silent zero.
"""
from __future__ import annotations

from typing import Callable

from sparsad.errors import DerivativeRuleError
from sparsad.lang.syntax import Binary, Call, Const, Expr, Neg


def _call(name: str, *args: Expr) -> Call:
    return Call(name, tuple(args))


def _one_plus(e: Expr) -> Expr:
    return Binary("+", Const(1.0), e)


def _square(e: Expr) -> Expr:
    return Binary("*", e, e)


# f'(x) for unary functions
UNARY_DERIVATIVES: dict[str, Callable[[Expr], Expr]] = {
    "exp": lambda x: _call("exp", x),
    "log": lambda x: Binary("/", Const(1.0), x),
    "sin": lambda x: _call("cos", x),
    "cos": lambda x: Neg(_call("sin", x)),
    "tan": lambda x: _one_plus(_square(_call("tan", x))),
    "tanh": lambda x: Binary("-", Const(1.0), _square(_call("tanh", x))),
    "sinh": lambda x: _call("cosh", x),
    "cosh": lambda x: _call("sinh", x),
    "atan": lambda x: Binary("/", Const(1.0), _one_plus(_square(x))),
    "sqrt": lambda x: Binary("/", Const(0.5), _call("sqrt", x)),
    "abs": lambda x: _call("sign", x),
    "sigmoid": lambda x: Binary("*", _call("sigmoid", x), Binary("-", Const(1.0), _call("sigmoid", x))),
    "relu": lambda x: _call("step", x),  # relu'(0) = 0
    "softplus": lambda x: _call("sigmoid", x),
    "log1p": lambda x: Binary("/", Const(1.0), _one_plus(x)),
    "expm1": lambda x: _call("exp", x),
    "step": lambda x: Const(0.0),
    "sign": lambda x: Const(0.0),
}


def derivative_of(call: Call) -> Expr:
    """d/dx f(x, ...) at the call's first argument (the exponent of pow is a constant)."""
    if call.func == "pow":
        base, exponent = call.args
        lowered = Binary("-", exponent, Const(1.0))
        if isinstance(exponent, Const):
            lowered = Const(float(exponent.value) - 1.0)
        return Binary("*", exponent, _call("pow", base, lowered))
    rule = UNARY_DERIVATIVES.get(call.func)
    if rule is None:
        raise DerivativeRuleError(f"no derivative rule for the function {call.func!r}; add one to "
                                  "sparsad.ad.rules.UNARY_DERIVATIVES")
    return rule(call.args[0])
