"""The built-in functions of the language, as a table: name -> (arity, implementation on floats).

Derivative rules live with AD; this table only says what a function computes.
"""
from __future__ import annotations

import math
from typing import Callable, NamedTuple


class Builtin(NamedTuple):
    arity: int
    impl: Callable[..., float]
    doc: str


def _safe(fn: Callable[[float], float], below: float | None = None, at_edge: float = float("nan")):
    def call(x: float) -> float:
        try:
            return fn(x)
        except (ValueError, ZeroDivisionError):
            return at_edge if (below is not None and x == below) else float("nan")
        except OverflowError:
            return float("inf")
    return call


def _sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)
    return z / (1.0 + z)


def _softplus(x: float) -> float:
    return max(x, 0.0) + math.log1p(math.exp(-abs(x)))


def _pow(x: float, y: float) -> float:
    try:
        return math.pow(x, y)
    except (ValueError, ZeroDivisionError):
        return float("nan") if x < 0 else float("inf")
    except OverflowError:
        return float("inf")


FUNCTIONS: dict[str, Builtin] = {
    "exp": Builtin(1, _safe(math.exp), "e to the x"),
    "log": Builtin(1, _safe(math.log, below=0.0, at_edge=float("-inf")), "natural logarithm"),
    "sin": Builtin(1, math.sin, "sine"),
    "cos": Builtin(1, math.cos, "cosine"),
    "tan": Builtin(1, math.tan, "tangent"),
    "tanh": Builtin(1, math.tanh, "hyperbolic tangent"),
    "sinh": Builtin(1, _safe(math.sinh), "hyperbolic sine"),
    "cosh": Builtin(1, _safe(math.cosh), "hyperbolic cosine"),
    "atan": Builtin(1, math.atan, "arc tangent"),
    "sqrt": Builtin(1, _safe(math.sqrt), "square root"),
    "abs": Builtin(1, abs, "absolute value"),
    "sigmoid": Builtin(1, _sigmoid, "logistic function 1/(1+exp(-x))"),
    "relu": Builtin(1, lambda x: x if x > 0 else 0.0, "max(x, 0)"),
    "softplus": Builtin(1, _softplus, "log(1+exp(x)), computed stably"),
    "log1p": Builtin(1, _safe(math.log1p, below=-1.0, at_edge=float("-inf")), "log(1+x)"),
    "expm1": Builtin(1, _safe(math.expm1), "exp(x)-1"),
    "pow": Builtin(2, _pow, "x to the power of a constant exponent"),
    "step": Builtin(1, lambda x: 1.0 if x > 0 else 0.0, "1 where x > 0, else 0 (the derivative of relu)"),
    "sign": Builtin(1, lambda x: (x > 0) - (x < 0) + 0.0, "-1, 0 or 1 (the derivative of abs)"),
}

RESERVED_WORDS = frozenset({"sum", "in", "let", "if", "then", "else", "not", "true", "false",
                            "unique"}) | frozenset(FUNCTIONS)
