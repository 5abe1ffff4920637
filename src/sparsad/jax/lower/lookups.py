"""Lookups of the lowered subset: `d(k)` in a dense array (a slice where the keys are an
axis' positions, else a gather), in a lazy dictionary, in a CSR input (its row at a static key,
or the rows being iterated) and in such a row (the entry being iterated, or static keys found
in the pattern).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from sparsad.jax.lower.arrays import _chain, _deepest, _jnp, _number_binary, _xp, gather, lift, take
from sparsad.jax.lower.values import (ZERO, Arr, Frame, PatternMatrix, RowHandle, SparseIn, Single, Terms,
                                      Unsupported, Zero, _same_pattern)


class _Lookups:
    """The lookup cases of the evaluator (a mixin of `lowering._Lowering`)."""

    root: Frame

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
                if f.shape[position] < extent:  # the first keys only
                    array = array[(slice(None),) * (rank - 1) + (slice(0, f.shape[position]),)]
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
                array = d.array[tuple(index) + (keys,)] if d.static else gather(d.array, tuple(index) + (keys,))
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
        gathered = take(values, position)
        xp = _xp(gathered)
        return Arr(xp.where(found, gathered, xp.zeros((), gathered.dtype)), f, vanish=not np.all(found))
