"""Reusing the stored form of an unchanged input across calls of a compiled program.

Converting a scipy.sparse matrix or an n-d COO tensor to the format a kernel walks validates it
(sorted, in range, consistent pointers) and, for a COO, builds its CSF levels: O(nnz) NumPy
passes that cost more than a small kernel. A compiled program keeps, per input name, the last
object it was given and what it became (`ConversionCache`). The next call reuses that stored form
only when the input still holds everything the stored form was made from:

- the same object, with the same array objects (by identity), each with the same shape, strides
  and dtype, the checked ones (below) at the same address (an array `resize`d with
  refcheck=False moves its buffer: a view the stored form held of the old one would dangle);
- the same contents of every array the stored form does not share: the index arrays always (an
  index changed in place must be validated and converted again), values only when the stored form
  holds a copy of them (values changed in place in a buffer the stored form shares are read by the
  kernel anyway: fresh, never stale). An array that nothing can write (`formats.immutable`: the
  frozen index arrays of every tensor sparsad builds, read-only over a `bytes` buffer) holds the
  same contents as long as it is the same object, which the entry keeps alive: it is not read at
  all. So a tensor from `from_coordinates` costs a few identity checks per call, where the four
  index arrays of a 46k-entry order-4 COO cost a 20 µs pass when they are the caller's own.

Why this cannot go stale: the stored form is a function of those arrays' contents (and the
shape, format and key), all of which are compared. Contents are compared through a 64-bit
fingerprint computed in ONE Numba pass over all checked arrays (`_fingerprint`): each array's
bytes, read as 64-bit words (the last < 8 bytes as one element each), contribute
`mix(word + position * golden)` to its sum, where `mix` (the splitmix64 finalizer) is a
bijection of 64-bit words. Changing any ONE word therefore always changes its term, hence the
sum (a sum modulo 2^64 changes when exactly one addend does), hence the fingerprint; the length
is mixed in; several changes cancel only if their mixed differences sum to zero modulo 2^64
(probability ~2^-64). The checked arrays are read where they are on every call (no cached
views: a buffer moved by `resize(refcheck=False)` is read at its new place, and its new address
changes the fingerprint). The pass is bound by memory bandwidth: for the four index arrays of a 46k-entry
order-4 COO, 20 µs, where a comparison against a private copy (twice the bytes) took 27 µs, a
weaker one-multiply mix 15 µs and a bare sum 13 µs.

The stored form's arrays that are the checked arrays themselves, immutable arrays, or the
conversion's own (they share no memory with the input), cannot change while the entry holds
(`ConversionCache.proven`):
nothing but the stored form holds the latter, and nothing writes to a stored form (results that
share index arrays share the user's own, `formats.pattern.with_values`, or copies). A repeated
call may then reuse the kernel guard's answer for them (`fastcall.RepeatCall.passed`).

The cache holds strong references to the last input of each name and to its arrays, so that
their ids stay their own.
"""
from __future__ import annotations

from operator import attrgetter, is_
from typing import Any, Callable

import numpy as np
from numba import literal_unroll, njit

from sparsad.formats.immutable import immutable

_GOLDEN = 0x9E3779B97F4A7C15
_ADDRESS_KEY = 0xD6E8FEB86659FD93  # keeps an array's address term apart from its contents' term


@njit(cache=True, nogil=True, inline="always")
def _mix(x):  # pragma: no cover - compiled
    # the splitmix64 finalizer: a bijection of 64-bit words that spreads every input bit
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


@njit(cache=True, nogil=True, inline="always")
def _sum_of(a):  # pragma: no cover - compiled
    # a C-contiguous 1-D integer array: the sum over positions of mix(word + position * golden),
    # its bytes read as 64-bit words (the last < 8 bytes one element each, after them); each term
    # depends on one word only, so the loop vectorizes (~0.1 ns per word)
    golden = np.uint64(_GOLDEN)
    n = a.shape[0]
    per_word = 8 // a.itemsize  # (a constant of the compiled type)
    m = n // per_word
    words = a[:m * per_word].view(np.uint64)
    h = np.uint64(0)
    for i in range(m):
        h += _mix(words[i] + np.uint64(i) * golden)
    for i in range(m * per_word, n):  # (none for 8-byte elements)
        h += _mix(np.uint64(a[i]) + np.uint64(m + i) * golden)
    return _mix(h ^ np.uint64(n))


@njit(cache=True, nogil=True)
def _fingerprint(n_placed, *arrays):  # pragma: no cover - compiled
    # every array (1-D, C-contiguous, integer) by contents; the first `n_placed` (the input's own
    # arrays, not word views made per call) by address too
    golden = np.uint64(_GOLDEN)
    h = np.uint64(0)
    k = 0
    for a in literal_unroll(arrays):
        salt = np.uint64(k + 1) * golden
        h += _mix(_sum_of(a) + salt)
        if k < n_placed:
            h += _mix((np.uint64(a.ctypes.data) ^ np.uint64(_ADDRESS_KEY)) + salt)
        k += 1
    return h


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


def _summable(array: np.ndarray) -> bool:
    """Whether `_fingerprint` reads `array` itself: 1-D, C-contiguous, of an integer dtype."""
    return array.ndim == 1 and array.dtype.kind in "iu" and array.flags.c_contiguous


def _parts(array: np.ndarray) -> tuple[np.ndarray]:
    """What `_fingerprint` reads of `array`'s contents: the array itself when `_summable`, else
    (made on each call, so it follows the array's contents) a contiguous copy of a strided
    integer array, or the bytes of any other array (a view when contiguous)."""
    if _summable(array):
        return (array,)
    flat = np.ascontiguousarray(array).reshape(-1)
    return (flat,) if flat.dtype.kind in "iu" else (flat.view(np.uint8),)


def content_hash(array: np.ndarray) -> int:
    """A 64-bit checksum of an array's contents that changes whenever any one 64-bit word of its
    bytes does, or its length does (the address of its buffer plays no part)."""
    return int(_fingerprint(0, *_parts(array)))


def source_arrays(value: Any) -> tuple[tuple[np.ndarray, ...], int] | None:
    """(arrays, how many of them lead as index arrays) of a scipy.sparse matrix, numpy array or
    StoredTensor (the values last), else None."""
    if type(value) is np.ndarray:  # the common cases first (this runs on every call)
        return (value,), 0
    if type(value) is _stored_tensor_class():
        return _stored_arrays(value)
    fmt = getattr(value, "format", None)
    if fmt in ("csr", "csc") and hasattr(value, "indptr"):
        return (value.indptr, value.indices, value.data), 2
    if fmt == "coo" and hasattr(value, "row"):
        return (value.row, value.col, value.data), 2
    if isinstance(value, np.ndarray):
        return (value,), 0
    if isinstance(value, _stored_tensor_class()):
        return _stored_arrays(value)
    return None


def _stored_arrays(value: Any) -> tuple[tuple[np.ndarray, ...], int]:
    values = value._fields[value.format.values]
    indices = tuple(a for a in value._fields.values() if isinstance(a, np.ndarray) and a is not values)
    return indices + (values,), len(indices)


_STORED_TENSOR: list = []


def _stored_tensor_class() -> type:
    if not _STORED_TENSOR:  # formats imports codegen lazily: imported on first use
        from sparsad.formats import StoredTensor

        _STORED_TENSOR.append(StoredTensor)
    return _STORED_TENSOR[0]


def _shared(array: np.ndarray, stored_values: np.ndarray) -> bool:
    return array.dtype == stored_values.dtype and array.size == stored_values.size and \
        array.__array_interface__["data"][0] == stored_values.__array_interface__["data"][0] and \
        array.flags.c_contiguous


_layout = attrgetter("shape", "strides", "dtype")


class _Entry:
    """The last input of one name: the object, its arrays, their layouts and the fingerprint of
    their contents (the checked ones) and addresses (all), and the stored form."""

    __slots__ = ("value", "key", "shape", "arrays", "layouts", "checked", "fixed", "print", "stored", "proven")

    def __init__(self, value: Any, key: Any, arrays: tuple, checked: tuple[int, ...], stored: Any):
        self.value, self.key, self.stored = value, key, stored
        self.shape = getattr(value, "shape", None)
        self.arrays = arrays  # kept alive: their ids stay theirs
        self.layouts = tuple(map(_layout, arrays))
        self.checked = checked
        # what _fingerprint reads, fixed when every checked array is read as it is (the same
        # objects as the input's while `holds` finds them identical): no per-call tuple building
        self.fixed = self._arguments(arrays) if all(_summable(arrays[i]) for i in checked) else None
        self.print = self._fingerprint(self.fixed or self._arguments(arrays))
        self.proven = _proven_fields(stored, arrays, checked)

    def _arguments(self, arrays: tuple) -> tuple:
        """(how many lead as the input's own arrays, then what `_fingerprint` reads): the input's
        own checked arrays first, then word views (made now) of the others."""
        own = [arrays[i] for i in self.checked if _summable(arrays[i])]
        made = [part for i in self.checked if not _summable(arrays[i]) for part in _parts(arrays[i])]
        return (len(own), *own, *made)

    @staticmethod
    def _fingerprint(arguments: tuple) -> int:
        return int(_fingerprint(*arguments)) if len(arguments) > 1 else 0

    def holds(self, value: Any, key: Any, arrays: tuple) -> bool:
        """Whether `value` is still what this entry was made from (see the module docstring)."""
        if value is not self.value or key != self.key or len(arrays) != len(self.arrays) or \
                getattr(value, "shape", None) != self.shape or not all(map(is_, arrays, self.arrays)) or \
                tuple(map(_layout, arrays)) != self.layouts:
            return False
        return self._fingerprint(self.fixed or self._arguments(arrays)) == self.print


def _proven_fields(stored: Any, arrays: tuple, checked: tuple[int, ...]) -> frozenset:
    """The fields of the stored form whose contents stay what they are while the entry holds: a
    checked array itself (its fingerprint is compared), an `immutable` array (nothing can write
    it), or an array of the conversion's own (it shares no memory with any array of the input:
    nothing but the stored form holds it, and nothing writes to a stored form). Not the shared
    values, nor any writeable view into the input."""
    fields = getattr(stored, "_fields", None)
    if not isinstance(fields, dict):
        return frozenset()
    proven = []
    for field, array in fields.items():
        if not isinstance(array, np.ndarray):
            continue
        if any(array is arrays[i] for i in checked) or immutable(array) or \
                not any(np.may_share_memory(array, source) for source in arrays):
            proven.append(field)
    return frozenset(proven)


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

    def proven(self, name: str, stored: Any) -> frozenset:
        """The fields of `stored` (the stored form `reused` just returned for `name`) whose
        contents are unchanged since its conversion (see `_proven_fields`); empty if it is not
        this cache's stored form of `name`."""
        entry = self._entries.get(name)
        return entry.proven if entry is not None and entry.stored is stored else frozenset()

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
        checked = tuple(i for i in range(n_index) if not immutable(arrays[i])) + tuple(
            i for i in range(n_index, len(arrays))
            if not immutable(arrays[i]) and (stored_values is None or not _shared(arrays[i], stored_values)))
        self._entries[name] = _Entry(value, key, arrays, checked, stored)
        return stored
