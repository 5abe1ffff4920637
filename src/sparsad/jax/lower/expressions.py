"""Expressions of the lowered subset: constants, variables, `let`, arithmetic, the built-in
functions, `if`, singletons, ranges and sub-arrays, and the algebra of lazy dictionaries
(sums of singletons, scaling, masking). Lookups are `lookups`, sums are `sums`.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from sparsad.jax.lower.arrays import _as_arr, _deepest, _functions, _jnp, _number_binary, _pad_to, _real, _xp, lift
from sparsad.jax.lower.values import (ZERO, Arr, Frame, PatternMatrix, PatternRows, SparseIn, Single, Terms,
                                      Unsupported, Zero, _may_vanish, _same_pattern)
from sparsad.lang.syntax import (Binary, Call, Const, EmptyDict, Expr, If, Let, LetTuple, Lookup, Neg, Not,
                                 Range, Singleton, SubArray, Sum, Unique, Var)


class _Expressions:
    """The expression cases of the evaluator (a mixin of `lowering._Lowering`)."""

    root: Frame

    # -- expressions ---------------------------------------------------------------------------
    def eval(self, expr: Expr, env: dict, frame: Frame) -> Any:
        match expr:
            case Const(value=v):
                if isinstance(v, bool):
                    return Arr(np.asarray(v), self.root)
                return Arr(np.asarray(v, dtype=np.int64 if isinstance(v, int) else np.float64), self.root)
            case Var(name=n):
                if n not in env:
                    raise Unsupported(f"free variable {n!r}")
                return env[n]
            case EmptyDict():
                return ZERO
            case Unique(operand=o):
                return self.eval(o, env, frame)
            case Let(name=n, value=v, body=b):
                value = self.eval(v, env, frame)
                return self.eval(b, env if n == "_" else {**env, n: value}, frame)
            case LetTuple(names=ns, values=vs, body=b):
                for n, v in zip(ns, vs):
                    value = self.eval(v, env, frame)
                    env = env if n == "_" else {**env, n: value}
                return self.eval(b, env, frame)
            case Neg(operand=o):
                return self.scale(self.eval(o, env, frame), -1.0, frame)
            case Not(operand=o):
                value = _as_arr(self.eval(o, env, frame), frame)
                return Arr(_xp(value.array).logical_not(value.array), frame)
            case Binary(op=op, left=l, right=r):
                return self.binary(op, self.eval(l, env, frame), self.eval(r, env, frame), frame)
            case Call(func=f, args=args):
                fn = _functions().get(f)
                if fn is None:
                    raise Unsupported(f"function {f}")
                values = []
                for a in args:
                    value = self.eval(a, env, frame)
                    value = Arr(np.asarray(0.0), self.root) if isinstance(value, Zero) else _as_arr(value, frame)
                    if value.vdims:
                        raise Unsupported("a function of a dictionary")
                    values.append(value)
                arrays = [_jnp().asarray(_real(v.array)) for v in values]
                return Arr(fn(*arrays), frame)
            case If(cond=c, then=t, orelse=e):
                return self.conditional(c, t, e, env, frame)
            case Singleton(key=k, value=v):
                key = self.eval(k, env, frame)  # kept in its own frame: where it varies tells how to sum
                if not isinstance(key, Arr):
                    key = _as_arr(key, frame) if not isinstance(key, Zero) else Arr(np.asarray(0), self.root)
                if key.vdims:
                    raise Unsupported("a dictionary as a key")
                value = self.eval(v, env, frame)
                return ZERO if isinstance(value, Zero) else Single(key, value)
            case Lookup(dict=d, key=k):
                return self.lookup(self.eval(d, env, frame), _as_arr(self.eval(k, env, frame), frame), frame)
            case Sum(key=k, val=v, source=s, body=b):
                return self.sum(k, v, self.eval(s, env, frame), b, env, frame)
            case Range(start=lo, end=hi):
                lo, hi = self.static_int(lo, env, frame), self.static_int(hi, env, frame)
                if lo < 0:
                    raise Unsupported("a range with negative keys")
                keys = np.arange(max(hi, 0), dtype=np.int64)
                inside = (keys >= lo) & (keys < hi)
                return Arr(np.where(inside, keys, 0), self.root, 1, inside)
            case SubArray(array=a, start=lo, end=hi):
                return self.sub_array(self.eval(a, env, frame), self.static_int(lo, env, frame),
                                      self.static_int(hi, env, frame))
        raise Unsupported(type(expr).__name__)

    def static_int(self, expr: Expr, env: dict, frame: Frame) -> int:
        value = self.eval(expr, env, frame)
        if isinstance(value, Zero):
            return 0
        if not isinstance(value, Arr) or not value.static or value.array.size != 1 or value.vdims \
                or value.array.dtype.kind not in "iu":
            raise Unsupported("a range bound that is not a constant integer")
        return int(value.array.reshape(()))

    def sub_array(self, value: Any, lo: int, hi: int) -> Any:
        """`d(lo:hi)`: the keys of d's first level in [lo, hi), kept."""
        if isinstance(value, Zero) or lo >= hi:
            return ZERO
        if isinstance(value, SparseIn) and value.row_range is None:
            if lo < 0 or hi > value.pattern.shape[0]:
                raise Unsupported("a sub-array outside the input")  # the host call says why
            return SparseIn(value.pattern, value.values, (lo, hi))
        if not isinstance(value, Arr) or not value.vdims or value.frame is not self.root:
            raise Unsupported("a sub-array of a computed dictionary")
        extent = value.array.shape[0]
        if lo < 0 or hi > extent:
            raise Unsupported("a sub-array outside the input")
        keep = (np.arange(extent) >= lo) & (np.arange(extent) < hi)
        present = None if value.present is None else value.present & keep
        xp = _xp(value.array)
        mask = keep.reshape((extent,) + (1,) * (value.vdims - 1))
        return Arr(xp.where(mask, value.array, xp.zeros((), value.array.dtype)), value.frame, value.vdims, present,
                   value.deep_full)

    def scale(self, value: Any, factor: float, frame: Frame) -> Any:
        if isinstance(value, Zero):
            return ZERO
        if isinstance(value, Arr):
            return Arr(value.array * factor, value.frame, value.vdims, value.present, value.deep_full, value.vanish)
        if isinstance(value, Single):
            return Single(value.key, self.scale(value.value, factor, frame))
        if isinstance(value, Terms):
            return Terms([self.scale(t, factor, frame) for t in value.terms])
        if isinstance(value, PatternMatrix):
            return PatternMatrix(value.pattern, value.values * factor, value.frame)
        raise Unsupported(f"negating a {type(value).__name__}")

    def binary(self, op: str, a: Any, b: Any, frame: Frame) -> Any:
        if op in "+-":
            if isinstance(b, Zero):
                return a
            if isinstance(a, Zero):
                return b if op == "+" else self.scale(b, -1.0, frame)
            if isinstance(a, Arr) and isinstance(b, Arr):
                return _number_binary(op, a, b, frame)
            if isinstance(a, PatternMatrix) and isinstance(b, PatternMatrix) and _same_pattern(a.pattern, b.pattern):
                f = _deepest(a.frame, b.frame)
                x, y = self._lift_pattern(a, f), self._lift_pattern(b, f)
                return PatternMatrix(a.pattern, x + y if op == "+" else x - y, f)
            if op == "-":
                b = self.scale(b, -1.0, frame)
            if isinstance(a, Arr) and not a.vdims or isinstance(b, Arr) and not b.vdims:
                raise Unsupported("adding a number and a dictionary")
            terms = list(a.terms if isinstance(a, Terms) else [a])
            for term in (b.terms if isinstance(b, Terms) else [b]):
                for k, other in enumerate(terms):  # one scatter for terms at the same keys
                    merged = self.merge(other, term, frame)
                    if merged is not None:
                        terms[k] = merged
                        break
                else:
                    terms.append(term)
            return terms[0] if len(terms) == 1 else Terms(terms)
        if op == "*":
            if isinstance(a, Zero) or isinstance(b, Zero):
                return ZERO
            if isinstance(a, Arr) and isinstance(b, Arr):
                return _number_binary(op, a, b, frame)
            number, other = (a, b) if isinstance(a, Arr) and not a.vdims else (b, a) if \
                isinstance(b, Arr) and not b.vdims else (None, None)
            if number is None:
                raise Unsupported("a product of two lazy dictionaries")
            return self.times(other, number, frame, left=number is a)
        if isinstance(a, Zero):
            a = Arr(np.asarray(0), self.root)
        if isinstance(b, Zero):
            b = Arr(np.asarray(0), self.root)
        if not isinstance(a, Arr) or not isinstance(b, Arr):
            raise Unsupported(f"{op} of dictionaries")
        return _number_binary(op, a, b, frame)

    def merge(self, a: Any, b: Any, frame: Frame) -> Any:
        """a + b as one lazy dictionary when both sit at the same keys (singletons at one
        constant key, rows on one pattern's entries), else None."""
        if isinstance(a, Single) and isinstance(b, Single) and a.key.static and b.key.static \
                and a.key.array.size == 1 and b.key.array.size == 1 and int(a.key.array.reshape(())) == \
                int(b.key.array.reshape(())) and not _may_vanish(a.value) and not _may_vanish(b.value):
            inner = self.binary("+", a.value, b.value, frame)
            return Single(a.key, inner)
        if isinstance(a, PatternRows) and isinstance(b, PatternRows) and a.pattern is b.pattern \
                and a.rows_frame is b.rows_frame and a.values.frame is b.values.frame \
                and a.values.vdims == b.values.vdims:
            return PatternRows(a.pattern, _number_binary("+", a.values, b.values, a.values.frame), a.rows_frame)
        return None

    def times(self, value: Any, number: Arr, frame: Frame, left: bool) -> Any:
        """A lazy dictionary scaled by a number (of this frame or an enclosing one)."""
        if isinstance(value, Single):
            return Single(value.key, self.binary("*", number, value.value, frame) if left
                          else self.binary("*", value.value, number, frame))
        if isinstance(value, Terms):
            return Terms([self.times(t, number, frame, left) for t in value.terms])
        raise Unsupported(f"scaling a {type(value).__name__}")

    def _lift_pattern(self, value: PatternMatrix, frame: Frame):
        arr = lift(Arr(value.values, value.frame, value.values.ndim - value.frame.rank), frame)
        return arr.array

    def conditional(self, c: Expr, t: Expr, e: Expr | None, env: dict, frame: Frame) -> Any:
        cond = _as_arr(self.eval(c, env, frame), frame)
        if cond.vdims:
            raise Unsupported("a dictionary as a condition")
        if cond.static and cond.array.size and np.all(cond.array):
            return self.eval(t, env, frame)
        if cond.static and cond.array.size and not np.any(cond.array):
            return ZERO if e is None else self.eval(e, env, frame)
        then = self.eval(t, env, frame)
        other = ZERO if e is None else self.eval(e, env, frame)
        if isinstance(then, Zero) and isinstance(other, Zero):
            return ZERO
        if isinstance(other, Zero) and isinstance(then, (Single, Terms)):
            return self.masked(then, cond, frame)
        if isinstance(then, Zero) and isinstance(other, (Single, Terms)):
            return self.masked(other, Arr(_xp(cond.array).logical_not(cond.array), cond.frame), frame)
        zero_like = then if not isinstance(then, Zero) else other
        if not isinstance(zero_like, Arr):
            raise Unsupported("a conditional dictionary")
        then = then if not isinstance(then, Zero) else Arr(np.zeros((1,) * zero_like.frame.rank + (1,) * zero_like.vdims),
                                                            zero_like.frame, zero_like.vdims, None, False, True)
        other = other if not isinstance(other, Zero) else Arr(np.zeros((1,) * zero_like.frame.rank
                                                                       + (1,) * zero_like.vdims),
                                                               zero_like.frame, zero_like.vdims, None, False, True)
        if not isinstance(then, Arr) or not isinstance(other, Arr) or then.vdims != other.vdims:
            raise Unsupported("a conditional of differently shaped values")
        then, other = lift(then, frame), lift(other, frame)
        rank = frame.rank
        extents = tuple(max(s, o) for s, o in zip(then.array.shape[rank:], other.array.shape[rank:]))
        x, y = _pad_to(then.array, rank, extents), _pad_to(other.array, rank, extents)
        condition = cond.array.reshape(cond.array.shape + (1,) * then.vdims)
        jnp = _jnp()
        if then.vdims:  # which keys exist depends on the condition
            return Arr(jnp.where(condition, x, y), frame, then.vdims, None, False, True)
        return Arr(jnp.where(condition, x, y), frame, vanish=then.vanish or other.vanish)

    def masked(self, value: Any, cond: Arr, frame: Frame) -> Any:
        """`if cond then value` for a lazy dictionary: its entries where cond holds."""
        if isinstance(value, Terms):
            return Terms([self.masked(t, cond, frame) for t in value.terms])
        if isinstance(value, Single):
            inner = value.value
            if isinstance(inner, (Single, Terms)):
                return Single(value.key, self.masked(inner, cond, frame))
            if not isinstance(inner, Arr):
                raise Unsupported("a conditional dictionary")
            inner = lift(inner, frame)
            condition = lift(cond, frame).array
            condition = condition.reshape(condition.shape + (1,) * inner.vdims)
            jnp = _jnp()
            return Single(value.key, Arr(jnp.where(condition, inner.array, jnp.zeros((), inner.array.dtype)), frame,
                                         inner.vdims, None, False, True))
        raise Unsupported("a conditional dictionary")
