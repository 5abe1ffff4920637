"""The reference interpreter: the semi-ring semantics, slow and obviously right.

Every pass and every compiled kernel is tested against `evaluate`.

>>> from sparsad.lang.parse import parse
>>> evaluate(parse("sum(<i, a> in V) a * a"), {"V": {0: 1.0, 3: 2.0}})
5.0
"""
from __future__ import annotations

from typing import Any, Mapping

from sparsad.errors import InputError, ProgramError
from sparsad.lang import values as V
from sparsad.lang.functions import FUNCTIONS
from sparsad.lang.syntax import (Binary, Call, Const, EmptyDict, Expr, If, Let, LetTuple, Lookup,
                                 Neg, Not, Range, Singleton, SubArray, Sum, Unique, Var)


def evaluate(expr: Expr, env: Mapping[str, Any] | None = None) -> Any:
    """Value of `expr` with its free variables taken from `env` (numbers, arrays, dicts, formats)."""
    prepared = {name: V.from_input(value, name) for name, value in (env or {}).items()}
    return _eval(expr, prepared)


def _fail(expr: Expr, message: str) -> ProgramError:
    span = getattr(expr, "span", None)
    return ProgramError(message, span.line if span else None, span.column if span else None)


def _bind(env: dict, name: str, value: Any) -> dict:
    if name == "_":
        return env
    extended = dict(env)
    extended[name] = value
    return extended


def _eval(expr: Expr, env: dict) -> Any:
    match expr:
        case Const(value=v):
            return v
        case Var(name=n):
            if n not in env:
                raise InputError(f"no value for the variable {n!r}; pass it as an input")
            return env[n]
        case EmptyDict():
            return V.ZERO
        case Singleton(key=k, value=v):
            return {V.as_key(_eval(k, env)): _eval(v, env)}
        case Lookup(dict=d, key=k):
            return V.lookup(_eval(d, env), _eval(k, env))
        case Sum(key=k, val=v, source=s, body=b):
            source = _eval(s, env)
            if not isinstance(source, dict):
                raise _fail(expr, f"sum iterates over a dictionary, got the scalar {source!r}")
            total: Any = V.ZERO
            for key, value in source.items():
                inner = _bind(_bind(env, k, key), v, value)
                total = V.add(total, _eval(b, inner))
            return total
        case Let(name=n, value=v, body=b):
            return _eval(b, _bind(env, n, _eval(v, env)))
        case LetTuple(names=ns, values=vs, body=b):
            for n, v in zip(ns, vs):
                env = _bind(env, n, _eval(v, env))
            return _eval(b, env)
        case If(cond=c, then=t, orelse=e):
            condition = _eval(c, env)
            if not isinstance(condition, bool):
                raise _fail(expr, f"the condition of if must be a bool, got {condition!r}")
            if condition:
                return _eval(t, env)
            return V.ZERO if e is None else _eval(e, env)
        case Not(operand=o):
            value = _eval(o, env)
            if not isinstance(value, bool):
                raise _fail(expr, f"not takes a bool, got {value!r}")
            return not value
        case Neg(operand=o):
            return V.neg(_eval(o, env))
        case Binary(op=op, left=l, right=r):
            return _binary(expr, op, _eval(l, env), _eval(r, env))
        case Call(func=f, args=args):
            builtin = FUNCTIONS.get(f)
            if builtin is None:
                raise _fail(expr, f"unknown function {f!r}")
            numbers = [float(V.as_number(_eval(a, env))) for a in args]
            return builtin.impl(*numbers)
        case Unique(operand=o):
            return _eval(o, env)
        case Range(start=s, end=e):
            lo, hi = V.as_key(_eval(s, env)), V.as_key(_eval(e, env))
            return {k: k for k in range(lo, hi)}
        case SubArray(array=a, start=s, end=e):
            array = _eval(a, env)
            lo, hi = V.as_key(_eval(s, env)), V.as_key(_eval(e, env))
            return {k: array[k] for k in range(lo, hi) if k in array}
    raise TypeError(f"not an expression node: {expr!r}")


def _binary(expr: Expr, op: str, a: Any, b: Any) -> Any:
    if op == "+":
        return V.add(a, b)
    if op == "-":
        return V.add(a, V.neg(b))
    if op == "*":
        return V.mul(a, b)
    if op == "/":
        x, y = V.as_number(a), V.as_number(b)
        if y == 0:
            return float("nan") if x == 0 else float("inf") if x > 0 else float("-inf")
        return x / y
    if op == "=":
        return _discrete(a) == _discrete(b)
    if op == "<":
        return _discrete(a) < _discrete(b)
    raise _fail(expr, f"unknown operator {op!r}")


def _discrete(value: Any) -> Any:
    if isinstance(value, dict):
        return V.as_key(value)
    return value
