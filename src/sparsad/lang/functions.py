"""The built-in functions of the language, as a table: name -> (arity, implementation on floats).

Derivative rules live with AD; this table only says what a function computes.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np


class Builtin(NamedTuple):
    arity: int
    impl: Callable[..., float]
    doc: str


def _sigmoid(x):
    if x >= 0:
        return 1.0 / (1.0 + np.exp(-x))
    z = np.exp(x)
    return z / (1.0 + z)


def _softplus(x):
    return np.maximum(x, 0.0) + np.log1p(np.exp(-np.abs(x)))


def _pow(x, y):
    if x == 0 and y < 0:  # IEEE: +-inf for an odd integer exponent (the zero's sign), else +inf
        odd = y == np.floor(y) and 0.5 * y != np.floor(0.5 * y)
        value = np.copysign(np.inf, x) if odd else np.inf
        return x.dtype.type(value) if isinstance(x, np.floating) else float(value)
    if x < 0 and y != np.floor(y):
        return x.dtype.type(np.nan) if isinstance(x, np.floating) else np.nan  # no complex results
    return np.power(x, y)


def _zero_like(x):
    return x.dtype.type(0) if isinstance(x, np.floating) else 0.0


def _relu(x):
    return x if x > 0 else _zero_like(x)  # relu(NaN) = 0, as in the kernels (codegen.runtime)


def _step(x):
    return _zero_like(x) + (1.0 if x > 0 else 0.0)


def _sign(x):
    return _zero_like(x) + (1.0 if x > 0 else -1.0 if x < 0 else 0.0)


# numpy scalar arithmetic: IEEE results (nan, +-inf, signed zeros) and the argument's precision,
# exactly what the compiled kernels compute (callers silence numpy's floating-point warnings)
FUNCTIONS: dict[str, Builtin] = {
    "exp": Builtin(1, np.exp, "e to the x"),
    "log": Builtin(1, np.log, "natural logarithm"),
    "sin": Builtin(1, np.sin, "sine"),
    "cos": Builtin(1, np.cos, "cosine"),
    "tan": Builtin(1, np.tan, "tangent"),
    "tanh": Builtin(1, np.tanh, "hyperbolic tangent"),
    "sinh": Builtin(1, np.sinh, "hyperbolic sine"),
    "cosh": Builtin(1, np.cosh, "hyperbolic cosine"),
    "atan": Builtin(1, np.arctan, "arc tangent"),
    "sqrt": Builtin(1, np.sqrt, "square root"),
    "abs": Builtin(1, np.abs, "absolute value"),
    "sigmoid": Builtin(1, _sigmoid, "logistic function 1/(1+exp(-x))"),
    "relu": Builtin(1, _relu, "max(x, 0)"),
    "softplus": Builtin(1, _softplus, "log(1+exp(x)), computed stably"),
    "log1p": Builtin(1, np.log1p, "log(1+x)"),
    "expm1": Builtin(1, np.expm1, "exp(x)-1"),
    "pow": Builtin(2, _pow, "x to the power of a constant exponent"),
    "step": Builtin(1, _step, "1 where x > 0, else 0 (the derivative of relu)"),
    "sign": Builtin(1, _sign, "-1, 0 or 1 (the derivative of abs)"),
}

RESERVED_WORDS = frozenset({"sum", "in", "let", "if", "then", "else", "not", "true", "false",
                            "unique"}) | frozenset(FUNCTIONS)
