"""Sorting coordinates into storage order and summing duplicates, for any number of modes.

`build_levels` needs the stored entries in lexicographic storage order with one value per
coordinate. A compiled kernel's n-d result arrives as appended coordinates (often tens of
millions, with duplicates: a Jacobian's entries summed over a row), so the order is found with
one sort of an int64 key instead of a lexicographic sort of every mode:

- the coordinates are flattened to one linear key in storage order (mixed radix of the extents);
- when the key has room, the entry's position is packed into its low bits, so one plain sort
  (NumPy's vectorised sort, several times faster than argsort) yields the permutation, with ties
  kept in the order they came (duplicates are summed in that order, as a stable sort would);
- already sorted input (a kernel emitting in order) is only checked, never sorted.

>>> import numpy as np
>>> rows, values = sort_and_sum([np.array([1, 0, 1]), np.array([2, 0, 2])], (2, 3), np.array([1.0, 2.0, 3.0]))
>>> [r.tolist() for r in rows], values.tolist()
([[0, 1], [0, 2]], [2.0, 4.0])
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

_KEY_BITS = 62  # a linear key below 2**62 stays a positive int64 with room for arithmetic


def sort_and_sum(rows: Sequence[np.ndarray], extents: Sequence[int],
                 values: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
    """(rows, values) sorted lexicographically by rows[0], rows[1], ... with duplicate coordinates
    summed (in the order they came). rows[d] holds the in-range (0 <= c < extents[d]) coordinate
    of mode d of every entry in storage order; the arrays returned may be the ones passed in."""
    count = len(values)
    rows = [np.asarray(r) for r in rows]
    if count == 0 or not rows:
        return [r.astype(np.int64, copy=False) for r in rows], values
    extents = [int(n) for n in extents]
    total = 1
    for n in extents:
        total *= max(n, 1)
    if total > 2**_KEY_BITS:  # too many cells for one int64 key: sort mode by mode
        return _lexicographic(rows, values)
    key = linear_key(rows, extents)
    ascending = key[1:] >= key[:-1]
    if not ascending.all():
        key, values = _sorted_by_key(key, values, total)
        ascending = None
    first = np.empty(count, dtype=bool)
    first[0] = True
    np.not_equal(key[1:], key[:-1], out=first[1:])
    if first.all():
        if ascending is not None:  # in order and unique already: the input arrays as they are
            return [r.astype(np.int64, copy=False) for r in rows], values
    else:
        starts = np.flatnonzero(first)
        values = np.add.reduceat(values, starts)
        key = key[starts]
    return [np.asarray(r, dtype=np.int64) for r in np.unravel_index(key, [max(n, 1) for n in extents])], values


def linear_key(rows: Sequence[np.ndarray], extents: Sequence[int]) -> np.ndarray:
    """rows[0] * (extents[1] * ...) + ... + rows[-1] as one int64 array (the caller knows it fits)."""
    key = np.array(rows[0], dtype=np.int64)
    for row, extent in zip(rows[1:], extents[1:]):
        key *= int(extent)
        key += row
    return key


def _sorted_by_key(key: np.ndarray, values: np.ndarray, total: int) -> tuple[np.ndarray, np.ndarray]:
    """key sorted and values permuted alike; equal keys keep their order (a stable sort)."""
    count = len(key)
    index_bits = max(int(count - 1).bit_length(), 1)
    key_bits = int(total - 1).bit_length()
    if key_bits + index_bits <= 63:
        packed = key  # the key array is ours (linear_key made it): shifted in place
        packed <<= index_bits
        packed |= np.arange(count, dtype=np.int64)
        packed.sort()
        permutation = packed & ((1 << index_bits) - 1)
        packed >>= index_bits
        return packed, values[permutation]
    permutation = np.argsort(key, kind="stable")
    return key[permutation], values[permutation]


def _lexicographic(rows: list[np.ndarray], values: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
    """The general path (more cells than an int64 key holds): a lexicographic sort of every mode."""
    storage = np.stack([r.astype(np.int64, copy=False) for r in rows])
    permutation = np.lexsort(storage[::-1])
    storage, values = storage[:, permutation], values[permutation]
    first = np.ones(len(values), dtype=bool)
    first[1:] = np.any(storage[:, 1:] != storage[:, :-1], axis=0)
    if not first.all():
        starts = np.flatnonzero(first)
        values = np.add.reduceat(values, starts)
        storage = storage[:, starts]
    return list(storage), values


__all__ = ["sort_and_sum", "linear_key"]
