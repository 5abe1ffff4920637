"""Results on the pattern of a stored input: one value per stored entry, the input's own index arrays.

A derivative with respect to a sparse input of order 3 or more (a gradient, a vjp, the Jacobian
of a scalar program) is defined on that input's entries (the masked gradient). It comes back as
a `StoredTensor` in the input's format that shares the input's index arrays and holds one value
per stored entry, in the input's storage order: `on_pattern(like, result)` builds it from what
the compiled kernel or the interpreter produced.

- A kernel that wrote straight into a values array aligned with the entries of the input it
  iterated (`codegen.outputs`, output "entries") returns an `EntryValues`; when the input's own
  storage order is that of its entries' coordinates (COO and CSF: sorted, unique), the values
  are taken as they are: O(1), no re-sort, no hashing.
- Anything else (a dense array, another stored tensor, the interpreter's nested dict, a zero)
  is read at the input's coordinates: O(nnz) (a search in the sorted keys of a sparse result).

>>> import numpy as np
>>> from sparsad.formats import from_coordinates
>>> T = from_coordinates(np.array([[0, 1], [1, 0], [2, 2]]), np.array([3.0, 4.0]), (2, 2, 3), "coo")
>>> G = on_pattern(T, {0: {1: {2: 6.0}}, 1: {0: {2: 8.0}}})
>>> G.format.name, G.values.tolist(), G["idx2"] is T["idx2"]
('coo 3-d', [6.0, 8.0], True)
"""
from __future__ import annotations

from typing import Any

import numpy as np

from sparsad.errors import ShapeError
from sparsad.formats.definition import key_plan
from sparsad.formats.format import Format, csf
from sparsad.formats.immutable import frozen
from sparsad.formats.levels import Dense
from sparsad.formats.tensor import StoredTensor


class EntryValues(StoredTensor):
    """A CSF result of a kernel whose values are aligned with the entries of the input it
    iterated (the kernel's own index arrays are that input's, or its CSF conversion's)."""

    __slots__ = ()


_CSF: dict[int, Format] = {}
_SORTED_UNIQUE: dict[int, tuple[Format, bool]] = {}  # id -> (the format, kept alive; the answer)


def csf_format(order: int) -> Format:
    """`formats.csf(order)`, made once per order (results are built on every call)."""
    fmt = _CSF.get(order)
    if fmt is None:
        fmt = _CSF[order] = csf(order)
    return fmt


def sorted_unique(fmt: Format) -> bool:
    """Whether every tensor stored in `fmt` keeps its entries in the lexicographic order of
    their logical coordinates, each coordinate tuple once (COO and CSF; not CSC, dense levels)."""
    known = _SORTED_UNIQUE.get(id(fmt))
    if known is not None and known[0] is fmt:
        return known[1]
    answer = (fmt.mode_order == tuple(range(fmt.order)) and not fmt.is_dense
              and not any(isinstance(level, Dense) for level in fmt.levels)
              and all(level.ordered for level in fmt.levels) and key_plan(fmt)[-1].unique)
    _SORTED_UNIQUE[id(fmt)] = (fmt, answer)
    return answer


def on_pattern(like: StoredTensor, result: Any) -> StoredTensor:
    """`result` (shaped like `like`) read on `like`'s stored entries, as a StoredTensor in
    `like`'s format sharing its index arrays (see the module doc)."""
    if isinstance(result, EntryValues) and result.shape == like.shape and result.nnz == like.nnz \
            and sorted_unique(like.format) and sorted_unique(result.format):
        return with_values(like, result.values)
    coords, _ = like.coordinates()
    return with_values(like, values_at(result, coords, like.shape))


def with_values(like: StoredTensor, values: np.ndarray) -> StoredTensor:
    """`like` with other values (one per stored entry), sharing its index arrays."""
    values = np.asarray(values)
    if values.shape != like.values.shape:
        raise ShapeError(f"{like.nnz} stored entries but {values.shape} values")
    fields = dict(like._fields)
    fields[like.format.values] = values
    return built(StoredTensor, like.format, like.shape, fields)


def built(cls: type, fmt: Format, shape: tuple[int, ...], fields: dict) -> StoredTensor:
    """A tensor of arrays built or checked already, with `shape` a tuple of ints and `fields` a
    dict of its own (`StoredTensor._trusted` without normalising them again: per-call cost)."""
    tensor = cls.__new__(cls)
    tensor.format, tensor.shape, tensor._fields = fmt, shape, fields
    return tensor


def csf_of_sorted(tensor: StoredTensor) -> StoredTensor:
    """`tensor` (a format with `sorted_unique` entries, e.g. an n-d COO) in CSF, sharing its
    values array: the same entries in the same order, so no sort and no copy of the values (a
    compiled program's conversion cache then need not checksum them, and a gradient written on
    the CSF's entries is on the tensor's own; its index arrays are `frozen`). O(nnz) passes over
    the coordinates."""
    coords, values = tensor.coordinates()
    order, count = coords.shape
    index_dtype = next((tensor[f].dtype for f in tensor.format.fields()
                        if isinstance(tensor[f], np.ndarray) and tensor[f] is not tensor.values), np.int64)
    new = np.zeros(count, dtype=bool)  # a new key path starts at this entry, at this level or above
    if count:
        new[0] = True
    fields: dict[str, Any] = {}
    parents = None
    for d in range(order):
        if count > 1:
            new[1:] |= coords[d][1:] != coords[d][:-1]
        starts = np.flatnonzero(new)
        if d == 0:
            fields["len"] = int(starts.size)
        else:  # pos: where each parent's run of children starts, by parent position
            owner = np.searchsorted(parents, starts, side="right") - 1
            fields[f"pos{d}"] = frozen(np.concatenate(([0], np.cumsum(np.bincount(owner, minlength=parents.size)))),
                                       index_dtype)
        fields[f"idx{d}"] = frozen(coords[d][starts], index_dtype)
        parents = starts
    fields["val"] = tensor.values
    return StoredTensor._trusted(csf_format(order), tensor.shape, fields)


def values_at(result: Any, coords: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The values of `result` (dense array, StoredTensor, nested dict, or a zero number) at
    coordinates `coords` (order x n); keys `result` does not hold read as zero."""
    count = coords.shape[1]
    if isinstance(result, (int, float, np.number)) and result == 0:
        return np.zeros(count)
    if isinstance(result, np.ndarray):
        if result.shape != tuple(shape):
            raise ShapeError(f"a result of shape {result.shape} on the pattern of a tensor of shape {shape}")
        return result[tuple(coords)]
    if isinstance(result, StoredTensor):
        if result.shape != tuple(shape):
            raise ShapeError(f"a result of shape {result.shape} on the pattern of a tensor of shape {shape}")
        if result.format.is_dense:
            return result.to_numpy()[tuple(coords)]
        where, values = result.coordinates()
        return _lookup(where, values, coords, shape)
    if isinstance(result, dict):
        out = np.zeros(count)
        for e, key in enumerate(coords.T.tolist()):
            node: Any = result
            for k in key:
                node = node.get(k) if isinstance(node, dict) else None
                if node is None:
                    break
            if node is not None:
                out[e] = float(node)
        return out
    raise ShapeError(f"a result of type {type(result).__name__} cannot be read on a tensor's pattern")


def _lookup(where: np.ndarray, values: np.ndarray, coords: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """values at coords of a sparse result stored at `where` (duplicates add up): a binary
    search in its sorted linear keys (or in its sorted coordinate rows when the key overflows)."""
    out = np.zeros(coords.shape[1], dtype=values.dtype if values.dtype.kind == "f" else np.float64)
    if where.shape[1] == 0 or coords.shape[1] == 0:
        return out
    if float(np.prod(shape, dtype=np.float64)) < 2.0 ** 62:
        keys = np.ravel_multi_index(tuple(where), shape)
        wanted = np.ravel_multi_index(tuple(coords), shape)
    else:  # ranks of the coordinate rows among both sets, as linear keys
        both = np.concatenate([where, coords], axis=1)
        _, ranks = np.unique(both, axis=1, return_inverse=True)
        ranks = ranks.reshape(-1)
        keys, wanted = ranks[:where.shape[1]], ranks[where.shape[1]:]
    order = np.argsort(keys, kind="stable")
    keys, summed = keys[order], values[order]
    first = np.ones(len(keys), dtype=bool)
    first[1:] = keys[1:] != keys[:-1]
    starts = np.flatnonzero(first)
    keys, summed = keys[starts], np.add.reduceat(summed, starts)
    at = np.minimum(np.searchsorted(keys, wanted), len(keys) - 1)
    hit = keys[at] == wanted
    out[hit] = summed[at[hit]]
    return out


__all__ = ["EntryValues", "built", "csf_of_sorted", "csf_format", "on_pattern", "sorted_unique", "values_at", "with_values"]
