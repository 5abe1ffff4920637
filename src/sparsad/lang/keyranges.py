"""Which lookup keys of a program might fall outside the input axis they index, per call.

The interpreter (`program(...)(...)`) raises ShapeError when a lookup reads outside an input's
shape. Compiled kernels read physical arrays, where such a key silently reads zero (or another
row). `key_checks` finds, once per program and input types, every lookup into an input axis
whose key is not a key drawn from an axis of the same extent (those the type checker already
relates): `B(i)(j + 3)`, `x(n - i)`, `r(k)` with k an int input. Each key gets an interval
built from constants, int inputs, loop ranges and the extents of the axes its variables come
from; `doubtful` evaluates them on a call's scalar inputs. A key whose interval lies within the
axis cannot be out of range; for the others the caller runs the program in the interpreter with
shape checks, which raises the ShapeError exactly when a lookup really reads outside (an
interval is a hull: a key it flags may still stay in range, e.g. under an `if`).

>>> from sparsad.lang.parse import parse
>>> from sparsad.lang.types import tensor
>>> checks = key_checks(parse("sum(<i, a> in x) a * y(i + 1)"), {"x": tensor(1, (4,)), "y": tensor(1, (4,))})
>>> [(c.name, c.axis, c.extent) for c in checks], len(doubtful(checks, {}))
([('y', 0, 4)], 1)
"""
from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral
from typing import Any, Mapping

from sparsad.lang.printer import to_text
from sparsad.lang.syntax import (Binary, Const, Expr, Let, LetTuple, Lookup, Range, SubArray, Sum, Var, children,
                                 free_vars)
from sparsad.lang.types import Int, Type

# An interval expression: ("const", c), ("scalar", name), ("extent", n) = [0, n - 1],
# ("range", start, end) = [start, end - 1], (op, left, right) for + - *; None = unknown.
# A sub-array's check holds ("window", start, end): both ends within [0, extent].
IV = tuple | None


@dataclass(frozen=True)
class KeyCheck:
    """The key of `lookup` must lie in [0, extent) of axis `axis` of input `name`."""
    lookup: str
    name: str
    axis: int
    extent: int
    key: IV

    def message(self) -> str:
        return (f"the key of `{self.lookup}` may fall outside axis {self.axis} of input {self.name!r} "
                f"(extent {self.extent})")


def key_checks(expr: Expr, types: Mapping[str, Type]) -> tuple[KeyCheck, ...]:
    """The lookups of `expr` (given its inputs' types) whose keys need a range check per call."""
    from sparsad.lang.typecheck import RECORD_KEYS, infer

    record: dict = {}
    token = RECORD_KEYS.set(record)
    try:
        infer(expr, types)
    finally:
        RECORD_KEYS.reset(token)
    scalars = {n for n, t in types.items() if isinstance(t, Int)}
    found: list[KeyCheck] = []
    _visit(expr, {n: ("scalar", n) for n in scalars}, record, found)
    return tuple(found)


def _visit(expr: Expr, env: dict, record: dict, found: list) -> None:
    match expr:
        case Sum(key=k, val=v, source=s, body=b):
            _visit(s, env, record, found)
            inner = dict(env)
            if isinstance(s, Range):  # (start:end) is {k -> k}: key and value both in [start, end)
                start, end = _interval(s.start, env), _interval(s.end, env)
                inner[k] = inner[v] = None if start is None or end is None else ("range", start, end)
            else:
                key_type = record.get(id(expr), (None, None))[0]
                extent = getattr(key_type, "extent", None)
                inner[k] = ("extent", extent) if extent is not None else None
                inner[v] = None
            _visit(b, inner, record, found)
            return
        case Let(name=n, value=v, body=b):
            _visit(v, env, record, found)
            _visit(b, {**env, n: _interval(v, env)}, record, found)
            return
        case LetTuple(names=ns, values=vs, body=b):
            inner = dict(env)
            for n, v in zip(ns, vs):
                _visit(v, inner, record, found)
                inner[n] = _interval(v, inner)
            _visit(b, inner, record, found)
            return
        case Lookup(dict=d, key=k):
            entry = record.get(id(expr))
            if entry is not None:
                axis_type, key_type = entry
                check = _check(expr, axis_type, key_type, env)
                if check is not None:
                    found.append(check)
        case SubArray(start=start, end=end):
            axis = record.get(id(expr), (None, None))[0]
            if isinstance(axis, Int) and axis.origin is not None and axis.extent is not None:
                found.append(KeyCheck(" ".join(to_text(expr).split()), axis.origin[0], axis.origin[1],
                                      int(axis.extent), ("window", _interval(start, env), _interval(end, env))))
    for child in children(expr):
        _visit(child, env, record, found)


def _check(expr: Lookup, axis: Int, key: Any, env: dict) -> KeyCheck | None:
    if not isinstance(axis, Int) or axis.origin is None or axis.extent is None:
        return None  # not an input's axis (a local dictionary: a missing key is the zero)
    if isinstance(expr.key, Var) and isinstance(key, Int) and key.origin is not None \
            and key.extent == axis.extent:
        return None  # a key drawn from an axis the type checker relates to this one
    name, index = axis.origin
    return KeyCheck(" ".join(to_text(expr).split()), name, index, int(axis.extent), _interval(expr.key, env))


def _interval(expr: Expr, env: dict) -> IV:
    match expr:
        case Const(value=v) if isinstance(v, int) and not isinstance(v, bool):
            return ("const", v)
        case Var(name=n):
            return env.get(n)
        case Binary(op=op, left=l, right=r) if op in ("+", "-", "*"):
            left, right = _interval(l, env), _interval(r, env)
            return None if left is None or right is None else (op, left, right)
    return None


def evaluate(iv: IV, scalars: Mapping[str, Any]) -> tuple[int, int] | None | str:
    """(lo, hi); None for an empty set of keys; "unknown" when it cannot be bounded."""
    if iv is None:
        return "unknown"
    kind = iv[0]
    if kind == "const":
        return (iv[1], iv[1])
    if kind == "scalar":
        value = scalars.get(iv[1])
        if isinstance(value, bool) or not isinstance(value, int):
            return "unknown"
        return (value, value)
    if kind == "extent":
        return (0, iv[1] - 1) if iv[1] > 0 else None
    parts = [evaluate(part, scalars) for part in iv[1:]]
    if "unknown" in parts:
        return "unknown"
    if None in parts:
        return None
    (a_lo, a_hi), (b_lo, b_hi) = parts
    if kind == "range":
        return (a_lo, b_hi - 1) if a_lo <= b_hi - 1 else None
    if kind == "+":
        return (a_lo + b_lo, a_hi + b_hi)
    if kind == "-":
        return (a_lo - b_hi, a_hi - b_lo)
    products = (a_lo * b_lo, a_lo * b_hi, a_hi * b_lo, a_hi * b_hi)
    return (min(products), max(products))


def doubtful(checks: tuple[KeyCheck, ...], scalars: Mapping[str, Any]) -> list[KeyCheck]:
    """The checks whose key interval, on these scalar inputs, is unknown or leaves the axis."""
    result = []
    for check in checks:
        if check.key is not None and check.key[0] == "window":  # a sub-array (start:end): within [0, extent]
            start, end = evaluate(check.key[1], scalars), evaluate(check.key[2], scalars)
            if start is None or end is None:
                continue
            if "unknown" in (start, end) or start[0] < 0 or end[1] > check.extent:
                result.append(check)
            continue
        interval = evaluate(check.key, scalars)
        if interval is None:
            continue
        if interval == "unknown" or interval[0] < 0 or interval[1] >= check.extent:
            result.append(check)
    return result


def check_lookups(expr: Expr, checks: tuple[KeyCheck, ...], inputs: Mapping[str, Any]) -> list[KeyCheck]:
    """Raise the interpreter's ShapeError when a lookup of `expr` on these inputs really reads
    outside an input's axis. Only the doubtful checks cost anything: then the program runs once
    in the interpreter with shape checks. Returns the doubtful checks (for a warning)."""
    scalars = {n: int(v) for n, v in inputs.items() if isinstance(v, Integral) and not isinstance(v, bool)}
    doubt = doubtful(checks, scalars)
    if doubt:
        from sparsad.lang.interpret import evaluate as run

        names = free_vars(expr)
        run(expr, {n: v for n, v in inputs.items() if n in names}, check_shapes=True)
    return doubt
