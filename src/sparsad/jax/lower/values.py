"""What the lowering computes with: the inputs' descriptions, frames (the iterations of the
enclosing sums, as array axes) and the symbolic values an expression evaluates to (dense arrays
in a frame, CSR inputs and their rows, lazy singletons and sums of them, dictionaries on a
pattern's entries). See `sparsad.jax.lower` for the scheme.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

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
