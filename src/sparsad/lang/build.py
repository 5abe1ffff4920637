"""A Python builder for programs: the same trees the parser makes, written in code.

>>> from sparsad.lang.build import var, sum_over, single
>>> A, x = var("A"), var("x")
>>> print(sum_over(A, lambda i, row: single(i, sum_over(row, lambda j, a: a * x(j)))))
sum(<i, row> in A)
  { i -> sum(<j, a> in row)
    a * x(j) }
"""
from __future__ import annotations

import inspect
from typing import Callable

from sparsad.lang.functions import FUNCTIONS
from sparsad.lang.syntax import (Call, Const, EmptyDict, Expr, If, Let, LetTuple, Not, Range,
                                 Singleton, Sum, Unique, Var, as_expr)


def var(name: str) -> Var:
    return Var(name)


def const(value: float | int | bool) -> Const:
    return Const(value)


def empty() -> EmptyDict:
    """`{}`, the zero of every type."""
    return EmptyDict()


def single(key, value) -> Singleton:
    """`{ key -> value }`."""
    return Singleton(as_expr(key), as_expr(value))


def _param_names(fn: Callable, count: int) -> list[str]:
    names = list(inspect.signature(fn).parameters)
    if len(names) != count:
        raise TypeError(f"the body function must take {count} parameters, it takes {len(names)}")
    return names


def sum_over(source, body: Callable[[Var, Var], Expr]) -> Sum:
    """`sum(<k, v> in source) body(k, v)`; the binder names are the lambda's parameter names."""
    key, val = _param_names(body, 2)
    return Sum(key, val, as_expr(source), as_expr(body(Var(key), Var(val))))


def let(value, body: Callable[[Var], Expr], name: str | None = None) -> Let:
    """`let name = value in body(name)`; the name defaults to the lambda's parameter."""
    name = name or _param_names(body, 1)[0]
    return Let(name, as_expr(value), as_expr(body(Var(name))))


def let_tuple(values, body: Callable[..., Expr]) -> LetTuple:
    names = _param_names(body, len(values))
    return LetTuple(tuple(names), tuple(as_expr(v) for v in values),
                    as_expr(body(*(Var(n) for n in names))))


def if_(cond, then, orelse=None) -> If:
    return If(as_expr(cond), as_expr(then), None if orelse is None else as_expr(orelse))


def not_(operand) -> Not:
    return Not(as_expr(operand))


def unique(operand) -> Unique:
    return Unique(as_expr(operand))


def range_(start, end) -> Range:
    """`(start:end)`."""
    return Range(as_expr(start), as_expr(end))


def call(func: str, *args) -> Call:
    if func not in FUNCTIONS:
        raise ValueError(f"unknown function {func!r}; known: {', '.join(sorted(FUNCTIONS))}")
    if len(args) != FUNCTIONS[func].arity:
        raise TypeError(f"{func} takes {FUNCTIONS[func].arity} argument(s), got {len(args)}")
    return Call(func, tuple(as_expr(a) for a in args))


def _function(name: str):
    def apply(*args) -> Call:
        return call(name, *args)

    apply.__name__ = name
    apply.__doc__ = f"`{name}(...)`: {FUNCTIONS[name].doc}."
    return apply


exp, log, sin, cos, tan, tanh = (_function(n) for n in ("exp", "log", "sin", "cos", "tan", "tanh"))
sqrt, sigmoid, relu, softplus = (_function(n) for n in ("sqrt", "sigmoid", "relu", "softplus"))
pow_ = _function("pow")


def singletons(keys, leaf) -> Expr:
    """{ k1 -> { k2 -> ... leaf } }."""
    result = as_expr(leaf)
    for key in reversed(list(keys)):
        result = Singleton(as_expr(key), result)
    return result


def lookups(tensor, keys) -> Expr:
    """tensor(k1)(k2)...: the entry of a nested dictionary."""
    result = as_expr(tensor)
    for key in keys:
        result = result(key)
    return result


def over_levels(source, keys: list[str], values: list[str], leaf: Callable[[list[Var], Var], Expr],
                interleave: bool = False) -> Expr:
    """Iterate the first len(keys) levels of `source`:

        sum(<k1, v1> in source) sum(<k2, v2> in v1) ... leaf([k1, ...], v_last)

    With `interleave`, each level also builds its key: sum(<k1, v1> in source) { k1 -> ... }.
    `values[-1]` may be `_` when the leaf does not read the innermost value.
    """
    if len(keys) != len(values) or not keys:
        raise ValueError("over_levels needs as many value names as key names, at least one")
    key_vars = [Var(k) for k in keys]
    body = as_expr(leaf(key_vars, Var(values[-1])))
    sources = [as_expr(source)] + [Var(v) for v in values[:-1]]
    for key, value, level_source in reversed(list(zip(keys, values, sources))):
        if interleave:
            body = Singleton(Var(key), body)
        body = Sum(key, value, level_source, body)
    return body
