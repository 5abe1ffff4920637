"""Index arrays that nothing can write: what lets a cache trust them without reading them.

The index arrays of a tensor this package builds (`from_coordinates`, `as_format`'s conversions,
`pattern.with_values` results, which share them) are `frozen`: read-only NumPy arrays over an
immutable `bytes` buffer. NumPy refuses to make such an array writeable again (`flags.writeable
= True` and `setflags(write=True)` raise, as the buffer itself is read-only), refuses to `resize`
it (it does not own its memory), and every view of it is read-only too. Python code has no
way to change their contents, so `immutable(array)` certifies an array's contents for as long as
the array object lives: a conversion cache holding the object (`codegen.reuse`) knows that it
still holds what it held, with no pass over it.

What is NOT immutable: any writeable array; a read-only array that owns its memory (its owner
may set it writeable again) or views a writeable one; memory-mapped files (the file can change).
Those keep being checksummed. Values arrays are never frozen: values are the part users update
in place (and caches never hold them unread).

Freezing costs one copy of the index arrays where a copy was made anyway (`frozen` of a
temporary), and changes one behaviour: writing into the index arrays of a tensor built by
sparsad raises `ValueError: assignment destination is read-only`. To edit a pattern in place,
build the tensor from your own arrays (`formats.from_arrays`, which keeps and validates them:
writes to those are seen, by checksum, on the next call).

>>> import numpy as np
>>> a = frozen(np.array([3, 1, 2]))
>>> immutable(a), immutable(a[1:]), immutable(np.array([3, 1, 2]))
(True, True, False)
>>> a[0] = 5
Traceback (most recent call last):
    ...
ValueError: assignment destination is read-only
"""
from __future__ import annotations

from typing import Any

import numpy as np


def frozen(array: Any, dtype: Any = None) -> np.ndarray:
    """A 1-D copy of `array` (as `dtype`, default its own) over an immutable `bytes` buffer: one
    copy of the bytes (none more when `array` already has the dtype)."""
    array = np.asarray(array, dtype=dtype)
    if array.ndim != 1:
        raise ValueError(f"frozen: index arrays are 1-D, got shape {array.shape}")
    return np.frombuffer(array.tobytes(), dtype=array.dtype)


def immutable(array: Any) -> bool:
    """Whether no Python code can change `array`'s contents while it lives: a read-only ndarray
    whose chain of bases is read-only down to a `bytes` object (or a read-only memoryview of one)."""
    base = array
    while isinstance(base, np.ndarray):
        if base.flags.writeable:
            return False
        base = base.base
    if type(base) is memoryview:
        return base.readonly and type(base.obj) is bytes
    return type(base) is bytes


__all__ = ["frozen", "immutable"]
