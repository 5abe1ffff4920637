"""Sums of the lowered subset: the frame a sum pushes (over a dense dictionary, a CSR input's
non-empty rows, a row's entries, a dictionary on a pattern's entries) and the reduction that
ends it: `jnp.sum`, a segment sum over row ids, or a scatter-add where the body is a singleton
keyed by something other than the axis' own keys.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from sparsad.jax.lower.arrays import _check_size, _chain, _full, _jnp, _segment_sum, _xp, lift, take
from sparsad.jax.lower.values import (ZERO, Arr, Frame, PatternMatrix, PatternRows, RowHandle, SparseIn, Single,
                                      Terms, Unsupported, Zero, _may_vanish, _nonempty, _nonempty_rows,
                                      _same_pattern)
from sparsad.lang.syntax import Expr


class _Sums:
    """The sum cases of the evaluator (a mixin of `lowering._Lowering`)."""

    root: Frame

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
            array = take(array, keys, axis=rank)
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
            entries = take(values, positions)
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
