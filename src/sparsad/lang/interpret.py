"""The reference interpreter: the semi-ring semantics, slow and obviously right.

Every pass and every compiled kernel is tested against `evaluate`.

>>> from sparsad.lang.parse import parse
>>> evaluate(parse("sum(<i, a> in V) a * a"), {"V": {0: 1.0, 3: 2.0}})
5.0
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from sparsad.errors import InputError, ProgramError, ShapeError
from sparsad.lang import values as V
from sparsad.lang.functions import FUNCTIONS
from sparsad.lang.syntax import (Binary, Call, Const, EmptyDict, Expr, If, Let, LetTuple, Lookup,
                                 Neg, Not, Range, Singleton, SubArray, Sum, Unique, Var)


def evaluate(expr: Expr, env: Mapping[str, Any] | None = None, check_shapes: bool = False) -> Any:
    """Value of `expr` with its free variables taken from `env` (numbers, arrays, dicts, formats).

    check_shapes: a lookup outside an input's shape is a ShapeError (what `program(...)(...)`
    asks for: inputs are logical tensors); without it such a key reads as missing, zero (the
    semantics of physical arrays, which compiled kernels read with a guarded load).
    """
    prepared = {name: V.from_input(value, name, check_shapes) for name, value in (env or {}).items()}
    with np.errstate(all="ignore"):  # IEEE results (nan, inf), as compiled code gives, silently
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
            key, value = V.as_key(_eval(k, env)), _eval(v, env)
            # {k -> {}} is the zero dictionary: a key whose value is the empty dictionary is no entry
            return V.ZERO if isinstance(value, dict) and not value else {key: value}
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
            numbers = _reals([V.as_number(_eval(a, env)) for a in args])
            return builtin.impl(*numbers)
        case Unique(operand=o):
            return _eval(o, env)
        case Range(start=s, end=e):
            lo, hi = V.as_key(_eval(s, env)), V.as_key(_eval(e, env))
            return {k: k for k in range(lo, hi)}
        case SubArray(array=a, start=s, end=e):
            array = _eval(a, env)
            lo, hi = V.as_key(_eval(s, env)), V.as_key(_eval(e, env))
            shape = getattr(array, "shape", None)
            if shape is not None and lo < hi and (lo < 0 or hi > shape[0]):
                raise ShapeError(f"the sub-array ({lo}:{hi}) reaches outside axis {array.axis} of input "
                                 f"{array.name!r}, whose extent is {shape[0]}")
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
        x, y = _reals([V.as_number(a), V.as_number(b)])
        return x / y  # numpy scalars: nan for 0/0 and nan/0, -inf for 1/-0.0
    if op == "=":
        return _discrete(a) == _discrete(b)
    if op == "<":
        return _discrete(a) < _discrete(b)
    raise _fail(expr, f"unknown operator {op!r}")


def _reals(numbers: list) -> list:
    """Arguments as numpy floats: float32 when all are float32, else float64 (as compiled)."""
    if all(isinstance(n, np.float32) for n in numbers):
        return numbers
    return [np.float64(n) for n in numbers]


def _discrete(value: Any) -> Any:
    if isinstance(value, dict):
        return V.as_key(value)
    return value
