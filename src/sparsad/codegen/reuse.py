"""Reusing the stored form of an unchanged input across calls of a compiled program.

Converting a scipy.sparse matrix to a storage format validates it (sorted, in range, consistent
pointers): O(nnz) NumPy passes that cost more than a small kernel. A compiled program keeps, per
input name, the last object it was given and what it became. The next call reuses that only when
it is the same object with the same array objects (shape, strides, dtype) and the same contents
of every array the stored form does not share: index arrays are always checksummed (an index
changed in place must be validated again), values only when the stored form holds a copy (a
value changed in place in a shared buffer is seen by the kernel anyway). One Numba pass per
checksummed array; the kernel's guard still checks every read against its bounds on every call.

The cache holds strong references to the last input of each name and to its arrays (so that
their ids stay their own, and an ndarray cannot `resize` its buffer away while we hold it;
NumPy 2 refuses assignments to `.data`).
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
from numba import njit

_GOLDEN = 0x9E3779B97F4A7C15


@njit(cache=True, nogil=True, inline="always")
def _mix(x):  # pragma: no cover - compiled
    # the splitmix64 finalizer: a bijection of 64-bit words that spreads every input bit
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


@njit(cache=True, nogil=True)
def _checksum_words(words, tail):  # pragma: no cover - compiled
    # sum over positions of mix(word + position * golden): each term depends on one word only,
    # so the loop vectorizes (~0.1 ns per word; a multiply chain such as FNV costs 0.5 ns), and
    # since mix is a bijection a change of any one word always changes the sum; several
    # changes cancel with probability ~2^-64
    golden = np.uint64(_GOLDEN)
    n = words.shape[0]
    h = np.uint64(0)
    for i in range(n):
        h += _mix(words[i] + np.uint64(i) * golden)
    if tail.shape[0]:  # the last < 8 bytes, as one more word
        last = np.uint64(0)
        for k in range(tail.shape[0]):
            last |= np.uint64(tail[k]) << np.uint64(8 * k)
        h += _mix(last + np.uint64(n) * golden)
    return _mix(h ^ np.uint64(8 * n + tail.shape[0]))


_NO_TAIL = np.zeros(0, np.uint8)


@njit(cache=True, nogil=True)
def _equal_1d(a, b):  # pragma: no cover - compiled
    bad = 0
    for i in range(a.shape[0]):  # branch-free count (vectorized)
        bad += a[i] != b[i]
    return bad == 0


def same_contents(a: np.ndarray, b: np.ndarray) -> bool:
    """`np.array_equal(a, b)` for arrays; one Numba pass (a tenth of NumPy's per-call cost on
    small arrays) for two 1-D integer arrays of the same length, the index arrays of a pattern."""
    if a.ndim == 1 and b.ndim == 1 and a.dtype.kind in "iu" and b.dtype.kind in "iu" and a.shape == b.shape:
        if a.dtype.kind != b.dtype.kind:  # signed vs unsigned: values compare as NumPy does
            return bool(np.array_equal(a, b))
        return bool(_equal_1d(a, b))
    return bool(np.array_equal(a, b))


def content_hash(array: np.ndarray) -> int:
    """A 64-bit checksum of an array's bytes (read as 64-bit words) that changes whenever any
    one word, or the length, does."""
    words, tail = _words(array)
    return int(_checksum_words(words, tail))


def _words(array: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The array's bytes as (64-bit words, the last < 8 bytes): views of its own buffer when it
    is contiguous (then they follow its contents), else of a copy."""
    flat = array if array.ndim == 1 and array.flags.c_contiguous else np.ascontiguousarray(array).reshape(-1)
    if flat.nbytes % 8 == 0:
        return flat.view(np.uint64), _NO_TAIL
    raw = flat.view(np.uint8)
    cut = raw.shape[0] - raw.shape[0] % 8
    return raw[:cut].view(np.uint64), raw[cut:]


def source_arrays(value: Any) -> tuple[tuple[np.ndarray, ...], int] | None:
    """(arrays, how many of them lead as index arrays) of a scipy.sparse matrix, numpy array or
    StoredTensor (the values last), else None."""
    if type(value) is np.ndarray:  # the common cases first (this runs on every call)
        return (value,), 0
    fmt = getattr(value, "format", None)
    if fmt in ("csr", "csc") and hasattr(value, "indptr"):
        return (value.indptr, value.indices, value.data), 2
    if fmt == "coo" and hasattr(value, "row"):
        return (value.row, value.col, value.data), 2
    if isinstance(value, np.ndarray):
        return (value,), 0
    from sparsad.formats import StoredTensor

    if isinstance(value, StoredTensor):
        indices = tuple(a for a in value.fields.values() if isinstance(a, np.ndarray) and a is not value.values)
        return indices + (value.values,), len(indices)
    return None


def _shared(array: np.ndarray, stored_values: np.ndarray) -> bool:
    return array.dtype == stored_values.dtype and array.size == stored_values.size and \
        array.__array_interface__["data"][0] == stored_values.__array_interface__["data"][0] and \
        array.flags.c_contiguous


class _Entry:
    """The last input of one name: the object, its arrays and their layouts, the checksums of
    the arrays the stored form does not share, and the stored form."""

    __slots__ = ("value", "key", "shape", "arrays", "layouts", "checked", "views", "sums", "stored")

    def __init__(self, value: Any, key: Any, arrays: tuple, checked: tuple[int, ...], stored: Any):
        self.value, self.key, self.stored = value, key, stored
        self.shape = getattr(value, "shape", None)
        self.arrays = arrays  # kept alive: their ids stay theirs
        self.layouts = tuple((a.shape, a.strides, a.dtype) for a in arrays)
        self.checked = checked
        # word views of the checked arrays, made once: an array that is the same object with the
        # same layout has the same buffer, so the views read its current contents (a copy, for
        # a non-contiguous array, would not: those are viewed again on every call)
        self.views = tuple(_words(arrays[i]) if arrays[i].flags.c_contiguous else None for i in checked)
        self.sums = tuple(int(_checksum_words(*(v or _words(arrays[i])))) for i, v in zip(checked, self.views))

    def holds(self, value: Any, key: Any, arrays: tuple) -> bool:
        """Whether `value` is still what this entry was made from (see the module docstring)."""
        if value is not self.value or key != self.key or len(arrays) != len(self.arrays) or \
                getattr(value, "shape", None) != self.shape:
            return False
        for array, old, (shape, strides, dtype) in zip(arrays, self.arrays, self.layouts):
            if array is not old or array.shape != shape or array.strides != strides or \
                    (array.dtype is not dtype and array.dtype != dtype):
                return False
        for i, views, expected in zip(self.checked, self.views, self.sums):
            if _checksum_words(*(views or _words(arrays[i]))) != expected:
                return False
        return True


class ConversionCache:
    """Per input name: the last object, its fingerprint and its stored form."""

    def __init__(self):
        self._entries: dict[str, _Entry] = {}

    def reused(self, name: str, value: Any, key: Any) -> Any:
        """The stored form of `value` when it is unchanged since its conversion (as `stored` would
        return it without converting), else None: the check alone, for a repeated call."""
        entry = self._entries.get(name)
        if entry is None or entry.value is not value:
            return None
        found = source_arrays(value)
        return entry.stored if found is not None and entry.holds(value, key, found[0]) else None

    def stored(self, name: str, value: Any, key: Any, convert: Callable[[], Any]) -> Any:
        """convert() once for an unchanged `value` (same object, same `key`, same fingerprint)."""
        found = source_arrays(value)
        if found is None:
            return convert()
        arrays, n_index = found
        entry = self._entries.get(name)
        if entry is not None and entry.holds(value, key, arrays):
            return entry.stored
        stored = convert()
        stored_values = getattr(stored, "values", None)
        checked = tuple(range(n_index)) + tuple(
            i for i in range(n_index, len(arrays))
            if stored_values is None or not _shared(arrays[i], stored_values))
        self._entries[name] = _Entry(value, key, arrays, checked, stored)
        return stored
