"""Symbolic integer intervals, evaluated on the inputs just before a kernel runs.

Lowering gives every integer value of a kernel an interval built from the inputs: a constant,
an int input, the smallest and largest entry of an int array, loop ranges and `+ - *` of
those. Each unguarded array read `arr[k]` and each write into a dense output then becomes a
check `interval(k) within [0, extent)`, evaluated in O(size of the int arrays) by numpy before
the kernel starts. A failing check is a malformed input and raises FormatError naming the
array; the kernel itself can then read without bounds checks. Reads whose key has no interval
are generated with a guard instead (a missing key reads as zero, the language's semantics).

An evaluated interval is `(lo, hi)` or None when it is empty (e.g. the entries of an empty
array, or `(0:0)`): an empty interval means the access never happens, so it passes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from sparsad.errors import FormatError


class IV:
    """Base of interval expressions."""

    __slots__ = ()


@dataclass(frozen=True)
class IConst(IV):
    value: int


@dataclass(frozen=True)
class IScalar(IV):
    """An int input: exactly its value."""
    name: str


@dataclass(frozen=True)
class ILen(IV):
    """The length of an input array."""
    name: str


@dataclass(frozen=True)
class IArray(IV):
    """Any entry of an int input array: [min, max]."""
    name: str


@dataclass(frozen=True)
class IRange(IV):
    """A loop variable over (start:end): [lo(start), hi(end) - 1]."""
    start: IV
    end: IV


@dataclass(frozen=True)
class IArith(IV):
    op: str  # "+", "-", "*"
    left: IV
    right: IV


@dataclass(frozen=True)
class IJoin(IV):
    """Either of two intervals (the hull)."""
    left: IV
    right: IV


@dataclass(frozen=True)
class IClamp(IV):
    """The values of `inner` where a guard holds: `at_least <= value` and `value < below` (either
    bound may be absent). A read inside `if lo <= k then if k < hi then x(k)` is checked on
    the keys that reach it, not on every value k takes."""
    inner: IV
    at_least: IV | None = None
    below: IV | None = None


Interval = tuple[int, int] | None


def arith(op: str, left: IV | None, right: IV | None) -> IV | None:
    """`left op right`, or None (unknown) when either side is unknown or op has no rule."""
    if left is None or right is None or op not in ("+", "-", "*"):
        return None
    return IArith(op, left, right)


def clamp(inner: IV | None, at_least: IV | None = None, below: IV | None = None) -> IV | None:
    """inner narrowed by a guard (unknown stays unknown; no bound leaves it as it is)."""
    if inner is None or (at_least is None and below is None):
        return inner
    return IClamp(inner, at_least, below)


def join(left: IV | None, right: IV | None) -> IV | None:
    if left is None or right is None:
        return None
    return left if left == right else IJoin(left, right)


def evaluate(iv: IV, inputs: Mapping[str, Any], memo: dict | None = None) -> Interval:
    """The concrete interval of `iv` on these inputs (None when empty)."""
    memo = {} if memo is None else memo
    # nodes are immutable and outlive the call; hashing them recursively is slow. The [min, max]
    # of an array is shared by every node naming it (one scan per array and call)
    key = ("array", iv.name) if isinstance(iv, IArray) else id(iv)
    if key in memo:
        return memo[key]
    result = _evaluate(iv, inputs, memo)
    memo[key] = result
    return result


# Arithmetic on concrete intervals (None = empty); codegen.guard emits calls to the same functions.
def interval_range(start: Interval, end: Interval) -> Interval:
    """The values of a loop over (start:end)."""
    if start is None or end is None or start[0] > end[1] - 1:
        return None
    return (start[0], end[1] - 1)


def interval_add(a: Interval, b: Interval) -> Interval:
    return None if a is None or b is None else (a[0] + b[0], a[1] + b[1])


def interval_sub(a: Interval, b: Interval) -> Interval:
    return None if a is None or b is None else (a[0] - b[1], a[1] - b[0])


def interval_mul(a: Interval, b: Interval) -> Interval:
    if a is None or b is None:
        return None
    products = (a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1])
    return (min(products), max(products))


def interval_clamp(inner: Interval, at_least: Interval, below: Interval) -> Interval:
    """The part of inner with at_least <= value < below, for some values of the bounds (an
    empty bound interval means the guard is never evaluated: no narrowing from it)."""
    if inner is None:
        return None
    lo = inner[0] if at_least is None else max(inner[0], at_least[0])
    hi = inner[1] if below is None else min(inner[1], below[1] - 1)
    return None if lo > hi else (lo, hi)


def interval_join(a: Interval, b: Interval) -> Interval:
    if a is None or b is None:
        return a if b is None else b
    return (min(a[0], b[0]), max(a[1], b[1]))


INTERVAL_OPS = {"+": interval_add, "-": interval_sub, "*": interval_mul}


def _evaluate(iv: IV, inputs: Mapping[str, Any], memo: dict) -> Interval:
    match iv:
        case IConst(value=v):
            return (v, v)
        case IScalar(name=n):
            v = int(inputs[n])
            return (v, v)
        case ILen(name=n):
            v = int(np.shape(inputs[n])[0])
            return (v, v)
        case IArray(name=n):
            array = inputs[n]
            if len(array) == 0:
                return None
            return (int(array.min()), int(array.max()))
        case IRange(start=s, end=e):
            return interval_range(evaluate(s, inputs, memo), evaluate(e, inputs, memo))
        case IArith(op=op, left=l, right=r):
            return INTERVAL_OPS[op](evaluate(l, inputs, memo), evaluate(r, inputs, memo))
        case IJoin(left=l, right=r):
            return interval_join(evaluate(l, inputs, memo), evaluate(r, inputs, memo))
        case IClamp(inner=i, at_least=lo, below=hi):
            return interval_clamp(evaluate(i, inputs, memo), None if lo is None else evaluate(lo, inputs, memo),
                                  None if hi is None else evaluate(hi, inputs, memo))
    raise TypeError(f"not an interval expression: {iv!r}")


def describe(iv: IV) -> str:
    """A short text of where an index comes from, for error messages."""
    match iv:
        case IConst(value=v):
            return str(v)
        case IScalar(name=n):
            return n
        case ILen(name=n):
            return f"len({n})"
        case IArray(name=n):
            return f"the entries of {n}"
        case IRange(start=s, end=e):
            return f"a loop over ({describe(s)}:{describe(e)})"
        case IArith(op=op, left=l, right=r):
            return f"({describe(l)} {op} {describe(r)})"
        case IJoin(left=l, right=r):
            return f"{describe(l)} or {describe(r)}"
        case IClamp(inner=i, at_least=lo, below=hi):
            limits = ([f">= {describe(lo)}"] if lo is not None else []) + ([f"< {describe(hi)}"] if hi is not None else [])
            return f"{describe(i)} where {' and '.join(limits)}"
    return repr(iv)


@dataclass(frozen=True)
class Check:
    """Every value of `index` must lie in [0, len(array)) (or [0, extent) for outputs)."""
    index: IV
    array: str
    what: str = "reads"


def run_checks(checks: tuple[Check, ...], inputs: Mapping[str, Any], memo: dict,
               extents: Mapping[str, int] | None = None) -> None:
    """Raise FormatError for the first check that fails on these inputs."""
    for check in checks:
        interval = evaluate(check.index, inputs, memo)
        if interval is None:
            continue
        if extents is not None and check.array in extents:
            size = int(extents[check.array])
        else:
            size = int(np.shape(inputs[check.array])[0])
        lo, hi = interval
        if lo < 0 or hi >= size:
            bad = lo if lo < 0 else hi
            fix = ("the program computes this key: keep the keys it writes non-negative"
                   if check.what == "writes" and bad < 0 else
                   "fix the index arrays of the input (or pass the right shape)")
            raise FormatError(
                f"index out of range: {check.what} {check.array} at {bad} (from "
                f"{describe(check.index)}), but {check.array} has {size} entries; {fix}")
