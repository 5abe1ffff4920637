"""Type inference for programs, given the types of their inputs (∇SD Fig. 4).

`infer(expr, inputs)` returns the type of expr or raises ProgramTypeError at the offending node.
Index extents flow from the inputs so that results can be given a shape.
"""
from __future__ import annotations

from contextvars import ContextVar
from typing import Any, Mapping

from sparsad.errors import DTypeError, ProgramTypeError, ShapeError
from sparsad.lang.functions import FUNCTIONS
from sparsad.lang.syntax import (Binary, Call, Const, EmptyDict, Expr, If, Let, LetTuple, Lookup,
                                 Neg, Not, Range, Singleton, SubArray, Sum, Unique, Var, free_vars)
from sparsad.lang.types import (BOOL, INT, REAL, ZERO, Bool, Dict, Int, Real, Type, Zero,
                                is_additive, type_to_text)


def _error(expr: Expr, message: str) -> ProgramTypeError:
    span = getattr(expr, "span", None)
    return ProgramTypeError(message, span.line if span else None, span.column if span else None)


def _max_extent(a: int | None, b: int | None) -> int | None:
    if a is None or b is None:
        return None
    return max(a, b)


def join(a: Type, b: Type, where: Expr, what: str = "operands") -> Type:
    """The common type of two additive values (Zero joins anything; int widens to real)."""
    if isinstance(a, Zero):
        return b
    if isinstance(b, Zero):
        return a
    if isinstance(a, Int) and isinstance(b, Int):
        return Int(a.dense and b.dense, _max_extent(a.extent, b.extent))
    if isinstance(a, (Int, Real)) and isinstance(b, (Int, Real)):
        return REAL
    if isinstance(a, Bool) and isinstance(b, Bool):
        return BOOL
    if isinstance(a, Dict) and isinstance(b, Dict):
        key = join(a.key, b.key, where, what)
        return Dict(key, join(a.value, b.value, where, what))
    raise _error(where, f"{what} have incompatible types {type_to_text(a)} and {type_to_text(b)}")


def product_type(a: Type, b: Type, where: Expr) -> Type:
    """Type of a * b: scalar product, scaling, or the tensor product real⊗D = D, {I->D1}⊗D2 = {I->D1⊗D2}."""
    if isinstance(a, Zero) or isinstance(b, Zero):
        return ZERO  # zero times anything is the zero, which joins any type
    if isinstance(a, Dict):
        return Dict(a.key, product_type(a.value, b, where))
    if isinstance(a, Bool) or isinstance(b, Bool):
        raise _error(where, "* does not take bool operands; use if/then for a condition")
    if isinstance(b, Dict):
        return Dict(b.key, product_type(a, b.value, where))
    if isinstance(a, Int) and isinstance(b, Int):
        return INT
    return REAL


def value_type(value: Any) -> Type:
    """The type of a run-time input (numbers, numpy/scipy arrays, formats, nested dicts)."""
    if isinstance(value, bool):
        return BOOL
    if isinstance(value, int):
        return INT
    if isinstance(value, float):
        return REAL
    declared = getattr(value, "logical_type", None)
    if callable(declared):
        return declared()
    try:
        import numpy as np

        if isinstance(value, np.generic):
            return value_type(value.item())
        if isinstance(value, np.ndarray):
            leaf = {"b": BOOL, "i": INT, "u": INT}.get(value.dtype.kind, REAL)
            result: Type = leaf
            for extent in reversed(value.shape):
                result = Dict(Int(extent=int(extent)), result)
            return result
    except ImportError:  # pragma: no cover
        pass
    try:
        import scipy.sparse as sp

        if sp.issparse(value):
            return Dict(Int(extent=value.shape[0]), Dict(Int(extent=value.shape[1]), REAL))
    except ImportError:  # pragma: no cover
        pass
    if isinstance(value, dict):
        return _dict_type(value)
    shape = getattr(value, "shape", None)
    if shape is not None:  # torch and pydata/sparse tensors: real-valued, shaped
        result = REAL
        for extent in reversed(tuple(shape)):
            result = Dict(Int(extent=int(extent)), result)
        return result
    raise DTypeError(f"cannot use a {type(value).__name__} as a program input; pass a number, a numpy "
                     f"array, a scipy.sparse matrix, a torch tensor, a StoredTensor or a nested dict")


def _dict_type(value: dict) -> Type:
    if not value:
        return ZERO
    result: Type = ZERO
    for item in value.values():
        item_type = value_type(item)
        result = item_type if isinstance(result, Zero) else _join_plain(result, item_type)
    return Dict(INT, result)


def _join_plain(a: Type, b: Type) -> Type:
    try:
        return join(a, b, Const(0))
    except ProgramTypeError:
        raise DTypeError(f"a dictionary input mixes values of types {type_to_text(a)} and "
                         f"{type_to_text(b)}; give every leaf the same type") from None


def infer(expr: Expr, inputs: Mapping[str, Type] | None = None) -> Type:
    """The type of expr given the types of its free variables.

    When a key drawn from one input's axis looks up another input's axis, their extents must
    agree (ShapeError naming both otherwise): `sum(<j, a> in r) a * x(j)` relates A's columns
    to x's length.
    """
    return _infer(expr, {name: _with_origins(t, name) for name, t in (inputs or {}).items()})


def _with_origins(t: Type, name: str, axis: int = 0) -> Type:
    """Logical axes only: physical arrays (dense_int keys) relate by design, e.g. pos(i + 1)."""
    if not isinstance(t, Dict) or not isinstance(t.key, Int) or t.key.dense:
        return t
    key = t.key if t.key.origin is not None else Int(t.key.dense, t.key.extent, (name, axis))
    return Dict(key, _with_origins(t.value, name, axis + 1))


def _check_axes_agree(lookup: Expr, key: Type, axis: Int) -> None:
    """A key drawn from one input's axis that indexes another axis must have the same extent."""
    if not isinstance(key, Int) or key.origin is None or axis.origin is None:
        return
    if key.extent is None or axis.extent is None or key.extent == axis.extent:
        return
    (source, source_axis), (target, target_axis) = key.origin, axis.origin
    span = getattr(lookup, "span", None)
    where = f"line {span.line}, column {span.column}: " if span else ""
    raise ShapeError(f"{where}keys drawn from axis {source_axis} of {source!r} (extent {key.extent}) "
                     f"look up axis {target_axis} of {target!r} (extent {axis.extent}); the program "
                     f"relates these axes, so their sizes must agree: check the shapes of "
                     f"{source!r} and {target!r}")


def _bind(env: dict, name: str, t: Type) -> dict:
    if name == "_":
        return env
    extended = dict(env)
    extended[name] = t
    return extended


def _index(t: Type, where: Expr, what: str) -> Int:
    if isinstance(t, Zero):
        return INT
    if isinstance(t, Bool):
        return INT  # booleans index as 0/1 nowhere; reject below
    if not isinstance(t, Int):
        raise _error(where, f"{what} must be an int, got {type_to_text(t)}")
    return t


# While `lang.keyranges` asks for it: Lookup and Sum nodes (by id) -> the key type of the
# dictionary they read, so it can tell which input axis a lookup key must lie within.
RECORD_KEYS: ContextVar[dict | None] = ContextVar("sparsad_record_keys", default=None)


def _infer(expr: Expr, env: dict) -> Type:
    match expr:
        case Const(value=v):
            return BOOL if isinstance(v, bool) else INT if isinstance(v, int) else REAL
        case Var(name=n):
            if n not in env:
                raise _error(expr, f"unbound variable {n!r}: bind it with let or pass it as an input")
            return env[n]
        case EmptyDict():
            return ZERO
        case Singleton(key=k, value=v):
            key = _infer(k, env)
            if isinstance(key, Bool) or not isinstance(key, (Int, Zero)):
                raise _error(k, f"dictionary keys must be int, got {type_to_text(key)}")
            value = _infer(v, env)
            if isinstance(value, Zero):  # {k -> {}} holds only a zero: it is the zero (of any type)
                return ZERO
            return Dict(Int(extent=key.extent, origin=key.origin) if isinstance(key, Int) else INT, value)
        case Lookup(dict=d, key=k):
            container = _infer(d, env)
            key = _index(_infer(k, env), k, "a lookup key")
            if isinstance(container, Zero):
                return ZERO
            if not isinstance(container, Dict):
                raise _error(expr, f"cannot look up a key in a value of type {type_to_text(container)}")
            _check_axes_agree(expr, key, container.key)
            record = RECORD_KEYS.get()
            if record is not None:
                record[id(expr)] = (container.key, key)
            return container.value
        case Sum(key=k, val=v, source=s, body=b):
            source = _infer(s, env)
            if isinstance(source, Zero):
                return ZERO
            if not isinstance(source, Dict):
                raise _error(expr, f"sum iterates over a dictionary, got {type_to_text(source)}")
            record = RECORD_KEYS.get()
            if record is not None:
                record[id(expr)] = (source.key, None)
            body = _infer(b, _bind(_bind(env, k, source.key), v, source.value))
            if not is_additive(body):
                raise _error(b, f"the body of sum must be a number or a dictionary of numbers, got {type_to_text(body)}")
            return body
        case Let(name=n, value=v, body=b):
            return _infer(b, _bind(env, n, _infer(v, env)))
        case LetTuple(names=ns, values=vs, body=b):
            for n, v in zip(ns, vs):
                env = _bind(env, n, _infer(v, env))
            return _infer(b, env)
        case If(cond=c, then=t, orelse=e):
            cond = _infer(c, env)
            if not isinstance(cond, Bool):
                raise _error(c, f"the condition of if must be a bool, got {type_to_text(cond)}")
            then = _infer(t, env)
            if e is None:
                if not is_additive(then):
                    raise _error(t, "if without else needs a number or dictionary branch (its zero is the else)")
                return then
            return join(then, _infer(e, env), expr, "the branches of if")
        case Not(operand=o):
            if not isinstance(_infer(o, env), Bool):
                raise _error(expr, "not takes a bool")
            return BOOL
        case Neg(operand=o):
            t = _infer(o, env)
            if not is_additive(t):
                raise _error(expr, f"unary minus takes a number or a dictionary, got {type_to_text(t)}")
            return t
        case Binary(op=op, left=l, right=r):
            return _binary(expr, op, _infer(l, env), _infer(r, env))
        case Call(func=f, args=args):
            if f not in FUNCTIONS:
                raise _error(expr, f"unknown function {f!r}")
            for arg in args:
                t = _infer(arg, env)
                if not isinstance(t, (Real, Int, Zero)):
                    raise _error(arg, f"{f} takes a real, got {type_to_text(t)}; map over a "
                                      "dictionary with sum(<k, v> in d) {{ k -> {f}(v) }}")
            if f == "pow" and free_vars(args[1]):
                raise _error(args[1], "pow takes a constant exponent")
            return REAL
        case Unique(operand=o):
            return _infer(o, env)
        case Range(start=s, end=e):
            start_t = _index(_infer(s, env), s, "the start of a range")
            _index(_infer(e, env), e, "the end of a range")
            extent = None
            if isinstance(s, Const) and isinstance(e, Const):
                extent = max(int(e.value), 0)
            del start_t
            return Dict(Int(dense=True, extent=extent), INT)
        case SubArray(array=a, start=s, end=e):
            array = _infer(a, env)
            _index(_infer(s, env), s, "the start of a sub-array")
            _index(_infer(e, env), e, "the end of a sub-array")
            if isinstance(array, Zero):  # a window of the empty dictionary is empty (zero tangents)
                return array
            record = RECORD_KEYS.get()
            if record is not None and isinstance(array, Dict):
                record[id(expr)] = (array.key, None)
            if not isinstance(array, Dict):
                raise _error(expr, f"a sub-array needs an array, got {type_to_text(array)}")
            return Dict(Int(array.key.dense, array.key.extent), array.value)  # keys: a part of the axis
    raise TypeError(f"not an expression node: {expr!r}")


def _reach(expr: Expr, t: Int) -> int | None:
    """One past the largest key an int operand reaches: its extent, or c + 1 for a literal c >= 0."""
    if isinstance(expr, Const) and isinstance(expr.value, int) and not isinstance(expr.value, bool):
        return expr.value + 1 if expr.value >= 0 else None
    return t.extent if t.extent is not None and t.extent > 0 else None


def _key_arithmetic(expr: Binary, a: Int, b: Int) -> Int:
    """The extent of a computed key, from the keys its operands reach (both paths size results by it).

    i + j over extents m and n reaches m + n - 2 and i * j reaches (m - 1)(n - 1); taking the larger
    extent, as a join of two key sets does, would size a result too small. i - j may be negative.
    """
    m, n = _reach(expr.left, a), _reach(expr.right, b)
    if m is None or n is None or expr.op == "-":
        return Int(False, None)
    if expr.op == "+":
        return Int(a.dense and b.dense, m + n - 1)
    return Int(False, (m - 1) * (n - 1) + 1)


def _binary(expr: Expr, op: str, a: Type, b: Type) -> Type:
    if op in ("+", "-"):
        if not (is_additive(a) and is_additive(b)):
            raise _error(expr, f"{op} takes numbers or dictionaries, got {type_to_text(a)} and {type_to_text(b)}")
        if isinstance(a, Int) and isinstance(b, Int) and isinstance(expr, Binary):
            return _key_arithmetic(expr, a, b)
        return join(a, b, expr, f"the operands of {op}")
    if op == "*":
        if isinstance(a, Int) and isinstance(b, Int) and isinstance(expr, Binary):
            return _key_arithmetic(expr, a, b)
        return product_type(a, b, expr)
    if op == "/":
        for t in (a, b):
            if not isinstance(t, (Real, Int, Zero)):
                raise _error(expr, f"/ divides reals, got {type_to_text(t)}")
        return REAL
    # = and < compare discrete values
    for t in (a, b):
        if not isinstance(t, (Int, Bool, Zero)):
            raise _error(expr, f"{op} compares discrete values (int or bool), got {type_to_text(t)}")
    if op == "<" and (isinstance(a, Bool) or isinstance(b, Bool)):
        raise _error(expr, "< compares ints, not bools")
    return BOOL
