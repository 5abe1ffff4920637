"""Programs as JAX operations: a sparsad program (the typed source language, the level the
interpreter runs) becomes a pure JAX function of its inputs' arrays, so that XLA runs it
instead of a host callback.

The lowering evaluates the program once, symbolically, over *frames*: the iterations of the
enclosing sums, as the axes of arrays. A value in a frame is an array whose leading axes are the
frame's (size 1 where the value does not vary along one) followed by its dictionary levels, which
are dense. A sum over a dense dictionary pushes an axis (its keys are the positions); a sum over a
CSR input pushes an axis over its non-empty rows, and a sum over such a row replaces that axis by
one over the stored entries (a static parent index per entry). Sums reduce those axes again:
`jnp.sum`, `jax.ops.segment_sum` over row ids, or a scatter-add where the body is a singleton
`{k -> v}` keyed by something other than the axis' own keys. Keys drawn from patterns and axes
are static NumPy arrays; the sparse operand's index arrays become XLA constants of static shape.

The subset: sums over dense arrays, CSR inputs and their rows, static ranges; singletons, lookups
in dense arrays and in CSR rows at keys known statically (or at the entries being iterated);
dense arithmetic, comparisons, `if`, the built-in functions; `let`. Anything else, and any value
whose key set the dense representation cannot state exactly (a dictionary iterated after a
conditional may have dropped keys), raises `Unsupported`: `lower_program` then returns None and
the caller keeps the host call. The result never differs from the interpreter's.

Only primal values are lowered: derivatives stay sparsad's own derivative programs (lowered the
same way by the caller), so the masked convention and the derivative rules at kinks are sparsad's.

>>> import numpy as np, jax, jax.numpy as jnp
>>> from sparsad.lang.parse import parse
>>> from sparsad.ops.pattern import CSRPattern
>>> pattern = CSRPattern(np.array([0, 2, 2, 3]), np.array([0, 2, 1]), (3, 3))
>>> spmv = lower_program(parse("sum(<i, r> in A) { i -> sum(<j, a> in r) a * x(j) }"),
...                      {"A": SparseInput(pattern), "x": DenseInput((3,))}, ("dense", (3,)))
>>> with jax.enable_x64(True):
...     spmv({"A": jnp.array([1.0, 2.0, 3.0]), "x": jnp.array([1.0, 10.0, 100.0])}).tolist()
[201.0, 0.0, 30.0]
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from sparsad.lang.syntax import (Binary, Call, Const, EmptyDict, Expr, If, Let, LetTuple, Lookup, Neg, Not,
                                 Range, Singleton, SubArray, Sum, Unique, Var)

#: the most entries a scatter or a dense intermediate of the lowering may hold (else no lowering)
DENSE_LIMIT = 1 << 24


class Unsupported(Exception):
    """The program (or one construct of it) is outside the lowered subset."""


# -- inputs ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SparseInput:
    """A traced CSR input: its static pattern; the function receives its values (nnz,)."""
    pattern: Any
    dtype: Any = np.float64


@dataclass(frozen=True)
class DenseInput:
    """A traced dense array (or scalar, shape ()) input."""
    shape: tuple
    dtype: Any = np.float64


@dataclass(frozen=True)
class ConstantInput:
    """A value fixed at lowering time: a number, a NumPy array or a scipy.sparse matrix."""
    value: Any


# -- frames ----------------------------------------------------------------------------------------
class Frame:
    """The iterations of the enclosing sums: `shape` is the frame's axes. A child either pushes an
    axis (`push`) or replaces the last axis by one over the entries of its rows (`ragged`, with
    the static parent position `index` of each entry)."""

    def __init__(self, parent: "Frame | None", op: str, size: int = 0, index: np.ndarray | None = None):
        self.parent, self.op, self.index = parent, op, index
        if parent is None:
            self.shape: tuple = ()
        elif op == "push":
            self.shape = parent.shape + (size,)
        else:
            self.shape = parent.shape[:-1] + (size,)
        self.rank = len(self.shape)

    def push(self, size: int) -> "Frame":
        return Frame(self, "push", size)

    def ragged(self, index: np.ndarray) -> "Frame":
        return Frame(self, "ragged", int(index.shape[0]), index)

    def entries_of(self, pattern) -> "Frame":
        """The frame over every stored entry of `pattern`, this frame's last axis being over its
        non-empty rows: one frame object per pattern, so that a dictionary built on those entries
        (PatternRows) is read again in the same frame by a later sum over it."""
        cache = self.__dict__.setdefault("_entries", {})
        if id(pattern) not in cache:
            counts = np.diff(pattern.indptr)[_nonempty_rows(pattern)]
            cache[id(pattern)] = (pattern, self.ragged(np.repeat(np.arange(counts.shape[0]), counts)))
        return cache[id(pattern)][1]

    def path_from(self, ancestor: "Frame") -> list["Frame"]:
        """The frames from `ancestor` (excluded) down to self."""
        path, frame = [], self
        while frame is not ancestor:
            if frame is None:
                raise Unsupported("a value used outside the sums it was made in")
            path.append(frame)
            frame = frame.parent
        return path[::-1]


# -- values ----------------------------------------------------------------------------------------
class Zero:
    """The empty dictionary / structural zero."""


ZERO = Zero()


@dataclass
class Arr:
    """A number, key, bool or dense dictionary in `frame`: array shape = frame axes (1 where it
    does not vary) + `vdims` dictionary levels. `present`: the first level's keys, exactly (a bool
    mask), or None when unknown; `deep_full`: every deeper level holds every key. `vanish`: the
    value may be the empty dictionary (a sum over nothing, an `if` without else): a singleton
    holding it is no entry. `iota`: a key equal to its position along that frame axis (a Frame);
    `role`: ("rows" | "cols", pattern, frame) for keys drawn from a CSR pattern."""
    array: Any
    frame: Frame
    vdims: int = 0
    present: np.ndarray | None = None
    deep_full: bool = True
    vanish: bool = False
    iota: Frame | None = None
    role: tuple | None = None

    @property
    def static(self) -> bool:
        return isinstance(self.array, np.ndarray)


@dataclass
class SparseIn:
    """A CSR input: static pattern, values (traced or static); `row_range` (lo, hi) when only
    those rows are kept (a sub-array)."""
    pattern: Any
    values: Any
    row_range: tuple | None = None


@dataclass
class RowHandle:
    """Rows of a CSR input: the rows at static keys `rows` (an Arr); `frame` set when they are
    the rows iterated by that frame's last axis (all non-empty rows, in order)."""
    matrix: SparseIn
    rows: Arr
    frame: Frame | None


@dataclass
class Single:
    """`{key -> value}`, kept lazy until a sum reduces it (the key tells how)."""
    key: Arr
    value: Any


@dataclass
class Terms:
    """A sum of lazy dictionaries."""
    terms: list


@dataclass
class PatternRows:
    """In a frame whose last axis runs over a pattern's non-empty rows: each row's dictionary on
    that row's stored columns, values given per entry (`values`, an Arr in the entries frame)."""
    pattern: Any
    values: Arr
    rows_frame: Frame


@dataclass
class PatternMatrix:
    """A dictionary on a pattern: `values` has the frame's axes, then (nnz,) + value levels."""
    pattern: Any
    values: Any
    frame: Frame
    vanish: bool = False  # some entries may be no entry (the empty dictionary)

    def as_input(self, root: Frame) -> "SparseIn | None":
        """The same dictionary as a CSR value of the top level (iterated and looked up as inputs are)."""
        if self.frame is root and not self.vanish and getattr(self.values, "ndim", 0) == 1:
            return SparseIn(self.pattern, self.values)
        return None


def _may_vanish(value: Any) -> bool:
    """Whether a value may be the empty dictionary (a singleton of it is no entry)."""
    if isinstance(value, Zero):
        return True
    if isinstance(value, Arr):
        return value.vanish
    if isinstance(value, Single):
        return _may_vanish(value.value)
    if isinstance(value, Terms):
        return all(_may_vanish(t) for t in value.terms)
    if isinstance(value, PatternRows):
        return value.values.vanish
    return True


def _nonempty(value: Arr) -> bool:
    """Whether `value` is surely an entry where it stands: a number that cannot vanish, or a
    dictionary holding at least one key (`{k -> {}}` is no entry)."""
    if value.vanish:
        return False
    return value.vdims == 0 or (value.present is not None and bool(value.present.any()))


def _nonempty_rows(pattern) -> np.ndarray:
    return np.flatnonzero(np.diff(pattern.indptr)).astype(np.int64)


def _same_pattern(p, q) -> bool:
    return p is q or (p.shape == q.shape and p.nnz == q.nnz and np.array_equal(p.indptr, q.indptr)
                      and np.array_equal(p.indices, q.indices))


# -- array helpers ---------------------------------------------------------------------------------
def _jnp():
    import jax.numpy as jnp

    return jnp


def _xp(*arrays):
    return np if all(isinstance(a, (np.ndarray, np.generic, int, float, bool)) for a in arrays) else _jnp()


def lift(value: Arr, frame: Frame) -> Arr:
    """`value` seen from `frame`, a descendant of its own frame (axes added or gathered)."""
    if value.frame is frame:
        return value
    array = value.array
    for step in frame.path_from(value.frame):
        xp = _xp(array)
        before = step.parent.rank
        if step.op == "push":
            array = xp.expand_dims(array, before)
        elif array.shape[before - 1] != 1:
            array = xp.take(array, step.index, axis=before - 1)
    return Arr(array, frame, value.vdims, value.present, value.deep_full, value.vanish, value.iota, value.role)


def _deepest(*frames: Frame) -> Frame:
    return max(frames, key=lambda f: len(_chain(f)))


def _chain(frame: Frame) -> list:
    out = []
    while frame is not None:
        out.append(frame)
        frame = frame.parent
    return out


def _full(array, shape: tuple):
    """`array` broadcast to `shape` (frame axes at full size)."""
    xp = _xp(array)
    return xp.broadcast_to(array, shape)


def _pad_to(array, rank: int, extents: tuple):
    """Pad the dictionary levels (after `rank` frame axes) with zeros up to `extents`."""
    shape = array.shape[rank:]
    if shape == tuple(extents):
        return array
    if any(s > e for s, e in zip(shape, extents)):
        raise Unsupported("a dictionary larger than its context's extent")
    xp = _xp(array)
    widths = [(0, 0)] * rank + [(0, e - s) for s, e in zip(shape, extents)]
    return xp.pad(array, widths)


def _check_size(n: int) -> None:
    if n > DENSE_LIMIT:
        raise Unsupported(f"an intermediate of {n} entries")


# -- the evaluator -----------------------------------------------------------------------------------
def _as_arr(value: Any, frame: Frame) -> Arr:
    if isinstance(value, Arr):
        return lift(value, frame)
    raise Unsupported(f"{type(value).__name__} where a number or dense array is needed")


def _number_binary(op: str, a: Arr, b: Arr, frame: Frame) -> Arr:
    a, b = lift(a, frame), lift(b, frame)
    x, y = a.array, b.array
    rank = frame.rank
    if a.vdims or b.vdims:
        if op not in "+-*":
            raise Unsupported(f"{op} of dictionaries")
        if op in "+-":
            if a.vdims != b.vdims:
                raise Unsupported("adding dictionaries of different orders")
            extents = tuple(max(s, t) for s, t in zip(x.shape[rank:], y.shape[rank:]))
            x, y = _pad_to(x, rank, extents), _pad_to(y, rank, extents)
            present = None
            if a.present is not None and b.present is not None:
                present = np.zeros(extents[0], bool)
                present[:a.present.shape[0]] |= a.present
                present[:b.present.shape[0]] |= b.present
            xp = _xp(x, y)
            return Arr(x + y if op == "+" else x - y, frame, a.vdims, present, a.deep_full and b.deep_full)
        # semi-ring product: scaling, or the outer product of two dictionaries
        xp = _xp(x, y)
        x = xp.reshape(x, x.shape + (1,) * b.vdims)
        y = xp.reshape(y, y.shape[:rank] + (1,) * a.vdims + y.shape[rank:])
        vanish = a.vanish or b.vanish
        if a.vdims and b.vdims:
            present, deep = a.present, a.deep_full and b.present is not None and bool(np.all(b.present)) \
                and b.deep_full
        else:
            d = a if a.vdims else b
            present, deep = d.present, d.deep_full
        if vanish:
            present, deep = None, False
        return Arr(x * y, frame, a.vdims + b.vdims, present, deep)
    xp = _xp(x, y)
    if op == "+":
        return Arr(x + y, frame, vanish=a.vanish and b.vanish)
    if op == "-":
        return Arr(x - y, frame, vanish=a.vanish and b.vanish)
    if op == "*":
        return Arr(x * y, frame, vanish=a.vanish or b.vanish)
    if op == "/":
        return Arr(_real(x) / _real(y), frame)
    if op == "=":
        return Arr(xp.equal(x, y), frame)
    if op == "<":
        return Arr(xp.less(x, y), frame)
    raise Unsupported(op)


def _real(x):
    """Division is on reals (int keys divide as floats, as in the interpreter)."""
    if isinstance(x, np.ndarray) and x.dtype.kind in "biu":
        return x.astype(np.float64)
    return x


_FUNCTIONS: dict[str, Callable] = {}


def _functions() -> dict[str, Callable]:
    if not _FUNCTIONS:
        import jax
        jnp = _jnp()
        _FUNCTIONS.update({
            "exp": jnp.exp, "log": jnp.log, "sin": jnp.sin, "cos": jnp.cos, "tan": jnp.tan, "tanh": jnp.tanh,
            "sinh": jnp.sinh, "cosh": jnp.cosh, "atan": jnp.arctan, "sqrt": jnp.sqrt, "abs": jnp.abs,
            "sigmoid": jax.nn.sigmoid, "log1p": jnp.log1p, "expm1": jnp.expm1,
            "softplus": lambda x: jnp.logaddexp(x, jnp.zeros_like(x)),
            "relu": lambda x: jnp.where(x > 0, x, jnp.zeros_like(x)),  # relu(nan) = 0, as compiled
            "step": lambda x: jnp.where(x > 0, jnp.ones_like(x), jnp.zeros_like(x)),
            "sign": lambda x: jnp.where(x > 0, 1.0, jnp.where(x < 0, -1.0, 0.0)).astype(x.dtype),
            "pow": lambda x, y: jnp.power(x, y),
        })
    return _FUNCTIONS


class _Lowering:
    def __init__(self, root: Frame):
        self.root = root

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

    # -- lookups -------------------------------------------------------------------------------
    def lookup(self, d: Any, key: Arr, frame: Frame) -> Any:
        if key.vdims:
            raise Unsupported("a dictionary as a key")
        if isinstance(d, Zero):
            return ZERO
        if isinstance(d, Terms):
            out: Any = ZERO
            for term in d.terms:
                out = self.binary("+", out, self.lookup(term, key, frame), frame)
            return out
        if isinstance(d, Single):
            equal = _number_binary("=", d.key, key, frame)
            value = d.value
            if equal.static and equal.array.size and np.all(equal.array):
                return value
            if equal.static and equal.array.size and not np.any(equal.array):
                return ZERO
            if isinstance(value, (Single, Terms)):
                return self.masked(value, equal, frame)
            if not isinstance(value, Arr):
                raise Unsupported("a lookup in a lazy nested dictionary")
            value = lift(value, frame)
            condition = equal.array.reshape(equal.array.shape + (1,) * value.vdims)
            jnp = _jnp()
            return Arr(jnp.where(condition, value.array, jnp.zeros((), value.array.dtype)), frame, value.vdims,
                       None, False, True)
        if isinstance(d, Arr):
            return self.dense_lookup(d, key, frame)
        if isinstance(d, PatternMatrix) and d.as_input(self.root) is not None:
            d = d.as_input(self.root)
        if isinstance(d, SparseIn):
            if d.row_range is not None and not (key.static and np.all((key.array >= d.row_range[0])
                                                                       & (key.array < d.row_range[1]))):
                raise Unsupported("a lookup in a sparse sub-array outside its rows")
            if key.role is not None and key.role[0] == "rows" and _same_pattern(key.role[1], d.pattern) \
                    and key.role[2] is frame and d.row_range is None:
                return RowHandle(d, key, frame)
            if key.static:
                return RowHandle(d, lift(key, frame), None)
            raise Unsupported("a lookup in a sparse input at a computed key")
        if isinstance(d, RowHandle):
            return self.sparse_entry(d, key, frame)
        raise Unsupported(f"a lookup in a {type(d).__name__}")

    def dense_lookup(self, d: Arr, key: Arr, frame: Frame) -> Arr:
        if not d.vdims:
            raise Unsupported("a lookup in a number")
        f = _deepest(d.frame, key.frame, frame)
        d, key = lift(d, f), lift(key, f)
        rank = f.rank
        extent = d.array.shape[rank]
        if extent == 0:  # nothing stored: every key is missing
            shape = tuple(max(s, t) for s, t in zip(d.array.shape[:rank], key.array.shape[:rank]))
            return Arr(np.zeros(shape + d.array.shape[rank + 1:]), f, d.vdims - 1, None, False, True)
        deeper = dict(vdims=d.vdims - 1, present=None, deep_full=d.deep_full, vanish=False)
        if d.vdims > 1 and d.deep_full:
            deeper["present"] = np.ones(d.array.shape[rank + 1], bool)
        if d.present is None or not np.all(d.present):
            deeper["vanish"] = True
        axis = key.iota
        if axis is not None and axis in _chain(f):
            position = axis.rank - 1
            # the keys are the positions along one axis of the frame: a slice, no gather
            if position < rank and d.array.shape[position] == 1 and f.shape[position] <= extent \
                    and all(step.op == "push" or step.rank - 1 != position for step in f.path_from(axis)):
                xp = _xp(d.array)
                array = xp.squeeze(d.array, position)
                array = xp.take(array, np.arange(f.shape[position]), axis=rank - 1) \
                    if f.shape[position] < extent else array
                array = xp.moveaxis(array, rank - 1, position)
                return Arr(array, f, **deeper)
        # general gather: d[frame position..., key] (missing keys read as zero)
        jnp = _jnp()
        shape = tuple(max(s, t) for s, t in zip(d.array.shape[:rank], key.array.shape[:rank]))
        index = []
        for t in range(rank):
            if d.array.shape[t] == 1:
                index.append(np.zeros((1,) * rank, np.int64))
            else:
                index.append(np.arange(shape[t]).reshape((1,) * t + (shape[t],) + (1,) * (rank - t - 1)))
        keys = key.array
        if key.static:
            inside = (keys >= 0) & (keys < extent)
            if np.all(inside):
                array = d.array[tuple(index) + (keys,)] if d.static else d.array.at[tuple(index) + (keys,)].get(
                    mode="promise_in_bounds")
                return Arr(array, f, **deeper)
        inside = (keys >= 0) & (keys < extent)
        safe = jnp.where(inside, keys, 0)
        gathered = jnp.asarray(d.array)[tuple(index) + (safe,)]
        inside = jnp.reshape(inside, inside.shape + (1,) * (d.vdims - 1))
        deeper["vanish"] = True
        return Arr(jnp.where(inside, gathered, jnp.zeros((), gathered.dtype)), f, **deeper)

    def sparse_entry(self, row: RowHandle, key: Arr, frame: Frame) -> Arr:
        """`r(j)` for r a row of a CSR input."""
        pattern = row.matrix.pattern
        role = key.role
        if role is not None and role[0] == "cols" and row.frame is not None and role[2].op == "ragged" \
                and role[2].parent is row.frame and _same_pattern(role[1], pattern) and role[2] in _chain(frame):
            # the column of the entry being iterated, in a row of the same pattern: that entry
            values = _jnp().asarray(row.matrix.values) if not isinstance(row.matrix.values, np.ndarray) \
                else row.matrix.values
            entries = role[2]
            return lift(Arr(values.reshape((1,) * (entries.rank - 1) + (pattern.nnz,)), entries), frame)
        if not key.static or not row.rows.static:
            raise Unsupported("a lookup in a sparse row at a computed key")
        f = _deepest(row.rows.frame, key.frame, frame)
        rows, cols = lift(row.rows, f).array, lift(key, f).array
        rows, cols = np.broadcast_arrays(rows, cols)
        ncols = pattern.shape[1]
        wanted = rows.astype(np.int64) * ncols + cols
        inside = (rows >= 0) & (rows < pattern.shape[0]) & (cols >= 0) & (cols < ncols)
        keys = pattern.keys
        position = np.minimum(np.searchsorted(keys, wanted), max(keys.shape[0] - 1, 0))
        found = inside & (keys[position] == wanted) if keys.shape[0] else np.zeros(wanted.shape, bool)
        values = row.matrix.values
        gathered = np.take(values, position) if isinstance(values, np.ndarray) else _jnp().take(values, position)
        xp = _xp(gathered)
        return Arr(xp.where(found, gathered, xp.zeros((), gathered.dtype)), f, vanish=not np.all(found))

    # -- sums ----------------------------------------------------------------------------------
    def sum(self, key_name: str, val_name: str, source: Any, body: Expr, env: dict, frame: Frame) -> Any:
        if isinstance(source, Zero):
            return ZERO
        if isinstance(source, PatternMatrix) and source.as_input(self.root) is not None:
            source = source.as_input(self.root)
        if isinstance(source, Arr):
            child, key, value = self.over_dense(source, frame)
        elif isinstance(source, SparseIn):
            rows = _nonempty_rows(source.pattern)
            lo, hi = source.row_range or (0, source.pattern.shape[0])
            chosen = rows[(rows >= lo) & (rows < hi)]
            child = frame.push(len(chosen))
            if source.row_range is None:
                key = Arr(rows.reshape((1,) * frame.rank + rows.shape), child, role=("rows", source.pattern, child))
                if rows.shape[0] == source.pattern.shape[0]:
                    key.iota = child
                value = RowHandle(source, key, child)
            else:  # some rows only: their entries by static positions
                key = Arr(chosen.reshape((1,) * frame.rank + chosen.shape), child)
                value = RowHandle(source, key, None)
        elif isinstance(source, RowHandle):
            child, key, value = self.over_row(source, frame)
        elif isinstance(source, Single) and not _may_vanish(source.value):
            # a sum over one entry binds its key and value
            inner = dict(env)
            if key_name != "_":
                inner[key_name] = source.key
            if val_name != "_":
                inner[val_name] = source.value
            return self.eval(body, inner, frame)
        elif isinstance(source, PatternRows) and source.rows_frame is frame and not source.values.vanish:
            # a row dictionary built on the pattern's entries, read entry by entry again
            child = frame.entries_of(source.pattern)
            if source.values.frame is not child:
                raise Unsupported("sparse rows built in another frame")
            cols = source.pattern.indices.astype(np.int64)
            key = Arr(cols.reshape((1,) * (child.rank - 1) + cols.shape), child, role=("cols", source.pattern, child))
            value = source.values
        else:
            raise Unsupported(f"a sum over a {type(source).__name__}")
        inner = dict(env)
        if key_name != "_":
            inner[key_name] = key
        if val_name != "_":
            inner[val_name] = value
        return self.reduce(self.eval(body, inner, child), child)

    def over_dense(self, source: Arr, frame: Frame):
        if not source.vdims:
            raise Unsupported("a sum over a number")
        if source.present is None:
            raise Unsupported("a sum over a dictionary whose keys are not known exactly")
        source = lift(source, frame)
        rank = frame.rank
        array = source.array
        extent = array.shape[rank]
        keys = np.arange(extent)
        if not np.all(source.present):
            keys = np.flatnonzero(source.present)
            array = _xp(array).take(array, keys, axis=rank)
        child = frame.push(keys.shape[0])
        present = np.ones(array.shape[rank + 1], bool) if source.vdims > 1 and source.deep_full else None
        value = Arr(array, child, source.vdims - 1, present, source.deep_full)
        key = Arr(keys.reshape((1,) * rank + keys.shape), child)
        if keys.shape[0] == extent:
            key.iota = child
        return child, key, value

    def over_row(self, row: RowHandle, frame: Frame):
        pattern = row.matrix.pattern
        values = row.matrix.values
        if row.frame is not None and row.frame is frame:
            # every non-empty row in order: the entries are all of them, in storage order
            child = frame.entries_of(pattern)
            positions = None
        else:
            rows = lift(row.rows, frame).array
            if not isinstance(rows, np.ndarray):
                raise Unsupported("a sum over a sparse row at a computed key")
            if rows.ndim and any(s != 1 for s in rows.shape[:-1]):
                raise Unsupported("a sum over sparse rows chosen by an outer sum")
            flat = rows.reshape(-1)
            if np.any((flat < 0) | (flat >= pattern.shape[0])):
                raise Unsupported("a sum over a row outside the matrix")
            starts, ends = pattern.indptr[flat], pattern.indptr[flat + 1]
            counts = ends - starts
            positions = np.concatenate([np.arange(s, e) for s, e in zip(starts, ends)]) if flat.size else \
                np.zeros(0, np.int64)
            if rows.ndim == 0 or rows.shape[-1] == 1 and frame.rank == 0 or rows.shape[-1] == 1:
                child = frame.push(int(counts.sum()))
            else:
                child = frame.ragged(np.repeat(np.arange(counts.shape[0]), counts))
        cols = pattern.indices.astype(np.int64) if positions is None else pattern.indices[positions].astype(np.int64)
        lead = (1,) * (child.rank - 1)
        key = Arr(cols.reshape(lead + cols.shape), child, role=("cols", pattern, child) if positions is None else None)
        if positions is None:
            entries = values
        else:
            entries = np.take(values, positions) if isinstance(values, np.ndarray) else _jnp().take(values, positions)
        value = Arr(entries.reshape(lead + (cols.shape[0],)), child, vanish=False)
        return child, key, value

    def reduce(self, value: Any, child: Frame) -> Any:
        """The sum over `child`'s last axis of `value` (a value of that frame)."""
        parent = child.parent
        if isinstance(value, Zero):
            return ZERO
        if isinstance(value, Terms):
            out: Any = ZERO
            for term in value.terms:
                out = self.binary("+", out, self.reduce(term, child), parent)
            return out
        if isinstance(value, Single):
            return self.reduce_single(value, child)
        if isinstance(value, PatternRows):
            return self.reduce_rows(value, child)
        if isinstance(value, PatternMatrix):
            if value.frame is not child:
                arr = Arr(value.values, value.frame, value.values.ndim - value.frame.rank)
                value = PatternMatrix(value.pattern, lift(arr, child).array, child)
            summed = self.reduce(Arr(value.values, child, value.values.ndim - child.rank), child)
            return PatternMatrix(value.pattern, summed.array, parent)
        if not isinstance(value, Arr):
            raise Unsupported(f"a sum of {type(value).__name__} values")
        if value.frame in _chain(parent):
            value = lift(value, child)  # constant along the axis: lift, then count it
        value = lift(value, child)
        array = value.array
        rank = child.rank
        empty_parents = False
        xp = _xp(array)
        if array.dtype.kind == "b":
            raise Unsupported("a sum of booleans")
        if child.op == "push":
            if array.shape[rank - 1] == 1:
                array = xp.squeeze(array, rank - 1) * child.shape[-1]
            else:
                array = xp.sum(array, axis=rank - 1)
            empty_parents = child.shape[-1] == 0
        else:
            segments = parent.shape[-1]
            counts = np.bincount(child.index, minlength=segments)
            empty_parents = bool(np.any(counts == 0))
            if array.shape[rank - 1] == 1:
                shape = (1,) * (rank - 1) + (segments,) + (1,) * value.vdims
                array = xp.squeeze(array, rank - 1)
                array = xp.expand_dims(array, rank - 1) * counts.reshape(shape)
            else:
                array = _segment_sum(array, child.index, segments, rank - 1)
        present = value.present if not (value.vanish or empty_parents) else None
        return Arr(array, parent, value.vdims, present, value.deep_full and not empty_parents,
                   vanish=value.vanish or empty_parents)

    def reduce_single(self, single: Single, child: Frame) -> Any:
        parent = child.parent
        if single.key.frame in _chain(parent):
            # a key from outside this sum (a row's key, under a sum over its entries): one entry
            # per iteration of the enclosing sums, {k -> the sum of the values}
            inner = self.reduce(single.value, child)
            return ZERO if isinstance(inner, Zero) else Single(single.key, inner)
        key = lift(single.key, child)
        rank = child.rank
        if key.array.shape[rank - 1] == 1:  # the key does not vary along the axis: {k -> sum of values}
            inner = self.reduce(single.value, child)
            if isinstance(inner, Zero):
                return ZERO
            # push: drop the axis; ragged: the size-1 axis broadcasts along the rows axis
            array = _xp(key.array).squeeze(key.array, rank - 1) if child.op == "push" else key.array
            # the same keys one level out: what they are drawn from (an axis, a pattern) still holds
            return Single(Arr(array, parent, iota=key.iota, role=key.role), inner)
        value = single.value
        if isinstance(value, (Single, Terms)):
            value = self.materialize_in(value, child)
        if isinstance(value, PatternRows):
            role = key.role
            if role is not None and role[0] == "rows" and role[2] is child and _same_pattern(role[1], value.pattern) \
                    and value.rows_frame is child:
                entries = value.values.array  # at full size along the entries: one value per stored entry
                shape = entries.shape[:rank - 1] + (value.pattern.nnz,) + entries.shape[rank:]
                return PatternMatrix(value.pattern, _full(entries, shape), parent, value.values.vanish)
            raise Unsupported("a dictionary of sparse rows at other keys")
        if not isinstance(value, Arr):
            raise Unsupported(f"a singleton of a {type(value).__name__}")
        value = lift(value, child)
        if key.iota is child and child.op == "push":
            # {k -> v} over the keys k of this axis: the axis becomes the dictionary's first level
            shape = child.shape + value.array.shape[rank:]
            array = _full(value.array, shape) if value.array.shape[rank - 1] == 1 else value.array
            present = np.ones(child.shape[-1], bool) if _nonempty(value) else None
            return Arr(array, parent, value.vdims + 1, present, value.present is not None and
                       bool(np.all(value.present)) and value.deep_full if value.vdims else True)
        if key.role is not None and key.role[0] == "cols" and key.role[2] is child:
            return PatternRows(key.role[1], value, parent)
        return self.scatter(key, value, child)

    def _extent(self, key: Arr) -> int:
        if key.role is not None:
            return int(key.role[1].shape[0 if key.role[0] == "rows" else 1])
        if key.iota is not None:
            return int(key.iota.shape[-1])
        if key.static:
            if key.array.size and key.array.min() < 0:
                raise Unsupported("a negative key")
            return int(key.array.max()) + 1 if key.array.size else 0
        raise Unsupported("a singleton at a computed key")

    def scatter(self, key: Arr, value: Arr, child: Frame) -> Arr:
        """sum over child's last axis of {key -> value}, by a scatter-add into dense rows."""
        parent = child.parent
        rank = child.rank
        extent = self._extent(key)
        vshape = value.array.shape[rank:]
        size = int(np.prod(parent.shape, dtype=np.int64)) * extent * int(np.prod(vshape, dtype=np.int64))
        _check_size(size)
        full = child.shape
        n_parent = int(np.prod(parent.shape, dtype=np.int64))
        if size == 0 or int(np.prod(full, dtype=np.int64)) == 0:  # nothing to scatter
            return Arr(np.zeros(parent.shape + (extent,) + vshape), parent, value.vdims + 1, np.zeros(extent, bool))
        if child.op == "push":
            flat_parent = np.broadcast_to(np.arange(n_parent).reshape(parent.shape + (1,)), full)
        else:
            outer = int(np.prod(parent.shape[:-1], dtype=np.int64))
            flat_parent = (np.arange(outer).reshape(parent.shape[:-1] + (1,)) * parent.shape[-1]
                           + child.index.reshape((1,) * (rank - 1) + child.index.shape))
            flat_parent = np.broadcast_to(flat_parent, full)
        keys = _full(key.array, full)
        target = flat_parent * extent + keys
        data = _full(value.array, full + vshape)
        jnp = _jnp()
        data = jnp.reshape(jnp.asarray(data), (-1,) + vshape)
        summed = _segment_sum(data, jnp.reshape(target, (-1,)) if not isinstance(target, np.ndarray)
                              else target.reshape(-1), n_parent * extent, 0, sorted_=False)
        array = jnp.reshape(summed, parent.shape + (extent,) + vshape)
        present = None
        if key.static and _nonempty(value):
            # the keys each parent receives (static): exact when every parent receives the same
            received = np.zeros((n_parent, extent), bool)
            received[np.asarray(flat_parent).reshape(-1), np.asarray(keys).reshape(-1)] = True
            if np.all(received == received[:1]):
                present = received[0]
        deep = value.vdims == 0 or (value.present is not None and bool(np.all(value.present)) and value.deep_full)
        return Arr(array, parent, value.vdims + 1, present, deep)

    def reduce_rows(self, rows: PatternRows, child: Frame) -> Arr:
        """The sum over the rows axis of each row's dictionary on its columns: scatter by column."""
        if rows.rows_frame is not child:
            raise Unsupported("sparse rows summed in another frame")
        pattern = rows.pattern
        entries = rows.values
        entry_frame = entries.frame
        cols = pattern.indices.astype(np.int64)
        key = Arr(cols.reshape((1,) * (entry_frame.rank - 1) + cols.shape), entry_frame)
        # the entries frame is the child of `child` (rows replaced by entries): reduce over both
        # axes at once by scattering into the rows' parent
        parent = child.parent
        if entry_frame.parent is not child:
            raise Unsupported("sparse rows built in another frame")
        merged = Frame(parent, "push", entry_frame.shape[-1])
        value = Arr(lift(entries, entry_frame).array, merged, entries.vdims, entries.present, entries.deep_full,
                    entries.vanish)
        return self.scatter(Arr(key.array, merged), value, merged)

    def materialize_in(self, value: Any, frame: Frame) -> Arr:
        """A lazy dictionary (singletons) as a dense array in `frame` (a one-hot scatter)."""
        if isinstance(value, Terms):
            out: Any = ZERO
            for term in value.terms:
                out = self.binary("+", out, self.materialize_in(term, frame), frame)
            if not isinstance(out, Arr):
                raise Unsupported("an empty lazy dictionary")
            return out
        if isinstance(value, Single):
            inner = value.value
            if isinstance(inner, (Single, Terms)):
                inner = self.materialize_in(inner, frame)
            if not isinstance(inner, Arr):
                raise Unsupported(f"a singleton of a {type(inner).__name__}")
            key = lift(value.key, frame)
            inner = lift(inner, frame)
            merged = Frame(frame, "push", 1)
            return self.scatter(lift(key, merged), lift(inner, merged), merged)
        if isinstance(value, Arr):
            return value
        raise Unsupported(f"a {type(value).__name__} as a dense dictionary")


def _segment_sum(array, index, segments: int, axis: int, sorted_: bool = True):
    import jax

    jnp = _jnp()
    array = jnp.moveaxis(jnp.asarray(array), axis, 0)
    summed = jax.ops.segment_sum(array, index, num_segments=segments, indices_are_sorted=sorted_)
    return jnp.moveaxis(summed, 0, axis)


# -- the result --------------------------------------------------------------------------------------
def _result(lowering: _Lowering, value: Any, layout: tuple, dtype) -> Any:
    jnp = _jnp()
    root = lowering.root
    kind, target = layout
    if kind == "pattern":
        shape = target.shape
        if isinstance(value, PatternMatrix) and _same_pattern(value.pattern, target) and value.frame is root:
            return jnp.asarray(value.values, dtype)
        if isinstance(value, SparseIn) and _same_pattern(value.pattern, target):
            return jnp.asarray(value.values, dtype)
        if isinstance(value, Zero):
            return jnp.zeros((target.nnz,), dtype)
        dense = _dense_result(lowering, value, shape, dtype)
        return dense[target.rows, target.indices.astype(np.int64)]
    return _dense_result(lowering, value, tuple(target), dtype)


def _dense_result(lowering: _Lowering, value: Any, shape: tuple, dtype) -> Any:
    jnp = _jnp()
    root = lowering.root
    if isinstance(value, Zero):
        return jnp.zeros(shape, dtype)
    if isinstance(value, PatternMatrix):
        if value.frame is not root or len(shape) != 2 or value.pattern.shape != shape:
            raise Unsupported("a sparse result of another shape")
        _check_size(shape[0] * shape[1])
        return jnp.zeros(shape, dtype).at[value.pattern.rows, value.pattern.indices.astype(np.int64)].add(
            jnp.asarray(value.values, dtype))
    if isinstance(value, SparseIn):
        return _dense_result(lowering, PatternMatrix(value.pattern, value.values, root), shape, dtype)
    if isinstance(value, (Single, Terms)):
        return _materialize_root(value, shape, dtype)
    if not isinstance(value, Arr) or value.frame is not root:
        raise Unsupported(f"a result of kind {type(value).__name__}")
    if value.vdims != len(shape):
        raise Unsupported("a result of another order than its type's")
    array = jnp.asarray(_pad_to(value.array, 0, shape), dtype)
    return array


def _materialize_root(value: Any, shape: tuple, dtype):
    """A lazy dictionary at the top level as a dense array of `shape`."""
    jnp = _jnp()
    if isinstance(value, Zero):
        return jnp.zeros(shape, dtype)
    if isinstance(value, Terms):
        out = jnp.zeros(shape, dtype)
        for term in value.terms:
            out = out + _materialize_root(term, shape, dtype)
        return out
    if isinstance(value, Single):
        if not shape:
            raise Unsupported("a dictionary where a number was expected")
        key = value.key.array
        inner = _materialize_root(value.value, shape[1:], dtype) if not isinstance(value.value, Arr) else \
            jnp.asarray(_pad_to(value.value.array, 0, shape[1:]), dtype)
        if isinstance(value.value, Arr) and value.value.vdims != len(shape) - 1:
            raise Unsupported("a result of another order than its type's")
        if isinstance(key, np.ndarray) and not (0 <= int(key) < shape[0]):
            raise Unsupported("a key outside the result")
        if not isinstance(key, np.ndarray):
            raise Unsupported("a top-level key computed from data")
        return jnp.zeros(shape, dtype).at[int(key)].add(inner)
    if isinstance(value, Arr):
        if value.vdims != len(shape):
            raise Unsupported("a result of another order than its type's")
        return jnp.asarray(_pad_to(value.array, 0, shape), dtype)
    raise Unsupported(f"a result of kind {type(value).__name__}")


# -- entry point -------------------------------------------------------------------------------------
def lower_program(expr: Expr, inputs: dict[str, Any], layout: tuple, dtype: Any = None
                  ) -> Callable[[dict], Any] | None:
    """A JAX function computing `expr`, or None when the program is outside the lowered subset.

    inputs: name -> SparseInput | DenseInput | ConstantInput. layout: ("dense", shape) for a
    dense result (shape () for a number) or ("pattern", CSRPattern) for the values of a result on
    that pattern. The function takes {name: array} for the traced inputs (a sparse input's
    values) and returns the result array (of `dtype`, default the inputs' result type). The
    program is tried once on abstract inputs: None is returned before any use."""
    import jax

    def run(arrays: dict) -> Any:
        root = Frame(None, "root")
        lowering = _Lowering(root)
        env = {}
        for name, spec in inputs.items():
            if isinstance(spec, SparseInput):
                env[name] = SparseIn(spec.pattern, arrays[name])
            elif isinstance(spec, DenseInput):
                array = arrays[name]
                # every key of a dense array is stored, but a level of extent 0 below is no entry
                full = np.full(spec.shape[0], 0 not in spec.shape[1:]) if len(spec.shape) else None
                env[name] = Arr(array, root, len(spec.shape), full, 0 not in spec.shape)
            else:
                env[name] = _constant(spec.value, root)
        value = lowering.eval(expr, env, root)
        out_dtype = dtype if dtype is not None else _result_dtype(arrays)
        return _result(lowering, value, layout, out_dtype)

    abstract = {}
    for name, spec in inputs.items():
        if isinstance(spec, SparseInput):
            abstract[name] = jax.ShapeDtypeStruct((spec.pattern.nnz,), spec.dtype)
        elif isinstance(spec, DenseInput):
            abstract[name] = jax.ShapeDtypeStruct(tuple(spec.shape), spec.dtype)
    try:
        out = jax.eval_shape(run, abstract)
    except Unsupported as why:
        logging.getLogger(__name__).debug("not lowered (%s): %s", why, expr)
        return None
    except Exception as error:  # noqa: BLE001 - a gap in the lowering must not break the call: host path
        logging.getLogger(__name__).warning("sparsad.jax.lower failed (%s: %s); the program runs as a host "
                                            "call: %s", type(error).__name__, error, expr)
        return None
    expected = (layout[1].nnz,) if layout[0] == "pattern" else tuple(layout[1])
    if tuple(out.shape) != expected:
        logging.getLogger(__name__).debug("not lowered (result shape %s, expected %s): %s", out.shape, expected, expr)
        return None
    return run


def _result_dtype(arrays: dict):
    jnp = _jnp()
    floats = [a.dtype for a in arrays.values() if jnp.issubdtype(a.dtype, jnp.floating)]
    return jnp.result_type(*floats) if floats else jnp.float64


def _constant(value: Any, root: Frame) -> Any:
    import scipy.sparse as sp

    if sp.issparse(value):
        from sparsad.bridge import canonical_csr
        from sparsad.ops.pattern import CSRPattern

        csr = canonical_csr(value)
        return SparseIn(CSRPattern(csr.indptr, csr.indices, csr.shape, check=False), np.asarray(csr.data))
    if isinstance(value, (bool, int, float, np.generic)):
        return Arr(np.asarray(value), root)
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "biuf":
            raise Unsupported(f"a constant of dtype {value.dtype}")
        full = np.full(value.shape[0], 0 not in value.shape[1:]) if value.ndim else None
        return Arr(value, root, value.ndim, full, 0 not in value.shape)
    raise Unsupported(f"a constant {type(value).__name__}")
