"""A tensor stored in a format: the physical arrays of each level plus the values.

`StoredTensor` is what `as_format` returns. It yields the physical definition, arrays and
types that the compiler binds (`{name}_{field}`), and converts back to numpy, scipy.sparse or
the logical nested dictionary. The level machinery on arrays (building levels from sorted
coordinates and expanding them back) lives here, written once for every format.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from sparsad.errors import DTypeError, FormatError
from sparsad.formats.format import Format
from sparsad.formats.levels import Compressed, Dense, Singleton
from sparsad.lang.types import REAL, Dict, Int, Type, tensor

SCIPY_FORMATS = ("csr", "csc", "coo", "bsr", "dia", "lil", "dok")


class StoredTensor:
    """A tensor of logical `shape` stored in `format`; `fields` maps field names to arrays/ints.

    Build one with `sparsad.formats.as_format(value, format)` or, from raw arrays,
    `sparsad.formats.from_arrays(format, shape, **fields)`. Direct construction validates the
    arrays like from_arrays (indices in range, pointers monotone, lengths and dtypes; O(nnz))
    and raises FormatError naming the field:

    >>> import numpy as np
    >>> from sparsad.formats import CSR, as_format
    >>> StoredTensor(CSR, (2, 2), {"len": 2, "pos": np.array([0, 1, 2]), "idx": np.array([0, 1]),
    ...                            "val": np.array([1.0, 2.0])}).nnz
    2
    >>> t = as_format(np.array([[1.0, 0.0], [0.0, 2.0]]), "csr")
    >>> t
    StoredTensor(csr, shape=(2, 2), stored=2, dtype=float64)
    >>> t.to_logical()
    {0: {0: 1.0}, 1: {1: 2.0}}
    """

    __slots__ = ("format", "shape", "_fields")

    def __init__(self, fmt: Format | str, shape: tuple[int, ...], fields: Mapping[str, Any]):
        from sparsad.formats.format import resolve
        from sparsad.formats.validate import validate_fields

        try:
            if isinstance(fmt, str):
                fmt = resolve(fmt, len(tuple(shape)))
            if not isinstance(fmt, Format):
                raise FormatError(f"fmt must be a Format or a format name, got {type(fmt).__name__}")
            if not isinstance(fields, Mapping):
                raise FormatError(f"fields must be a mapping of field names to arrays, got {type(fields).__name__}")
            shape, fields = validate_fields(fmt, shape, fields)
        except FormatError as error:
            raise FormatError(f"StoredTensor: {error}") from None
        except DTypeError as error:
            raise DTypeError(f"StoredTensor: {error}") from None
        except TypeError as error:  # a shape that is not a sequence
            raise FormatError(f"StoredTensor: shape must be a tuple of ints, got {shape!r} ({error})") from None
        self._set(fmt, shape, fields)

    @classmethod
    def _trusted(cls, fmt: Format, shape: tuple[int, ...], fields: Mapping[str, Any]) -> "StoredTensor":
        """For arrays this package built or already validated (no second O(nnz) pass)."""
        stored = cls.__new__(cls)
        stored._set(fmt, shape, fields)
        return stored

    def _set(self, fmt: Format, shape: tuple[int, ...], fields: Mapping[str, Any]) -> None:
        self.format = fmt
        self.shape = tuple(int(n) for n in shape)
        self._fields = dict(fields)

    def __getstate__(self) -> tuple:
        # which index arrays are frozen (formats.immutable): NumPy unpickles every array writeable
        from sparsad.formats.immutable import immutable

        frozen_fields = tuple(f for f, a in self._fields.items() if isinstance(a, np.ndarray) and immutable(a))
        return self.format, self.shape, self._fields, frozen_fields

    def __setstate__(self, state: tuple) -> None:
        from sparsad.formats.immutable import frozen, immutable

        self.format, self.shape, fields, frozen_fields = state
        self._fields = {f: frozen(a) if f in frozen_fields and not immutable(a) else a for f, a in fields.items()}

    # ----- basic facts -----
    @property
    def fields(self) -> dict[str, Any]:
        """A copy of the field mapping (arrays are shared, not copied)."""
        return dict(self._fields)

    def __getitem__(self, field: str) -> Any:
        return self._fields[field]

    @property
    def values(self) -> np.ndarray:
        return self._fields[self.format.values]

    @property
    def dtype(self) -> np.dtype:
        return self.values.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nnz(self) -> int:
        """Number of stored values (for dense formats, every entry)."""
        return int(self.values.shape[0])

    def __repr__(self) -> str:
        return (f"StoredTensor({self.format.name}, shape={self.shape}, stored={self.nnz}, "
                f"dtype={self.dtype})")

    def logical_type(self) -> Type:
        """`tensor n` with the extents of `shape` (used by the type checker)."""
        return tensor(self.ndim, self.shape)

    # ----- physical view (Fig. 10) -----
    def physical_definition(self, name: str):
        """The Physical SDQLite expression over `{name}_{field}` (see formats.definition)."""
        return self.format.physical_definition(name)

    def physical_arrays(self, name: str) -> dict[str, Any]:
        """`{name}_{field}` -> numpy array (index or value array) or Python int (sizes)."""
        return {f"{name}_{field}": self._fields[field] for field in self.format.fields()}

    def physical_types(self, name: str) -> dict[str, Type]:
        """`{name}_{field}` -> its type: int sizes, `{dense_int -> int}` indices, `{dense_int -> real}`."""
        types: dict[str, Type] = {}
        counts = level_sizes(self.format, self._fields)
        parent_count = 1
        for depth, level in enumerate(self.format.levels):
            extent = self.shape[self.format.mode_order[depth]]
            if isinstance(level, Dense):
                types[level.size] = Int()
            else:
                if isinstance(level, Compressed) and depth == 0:
                    types[level.count] = Int()
                elif isinstance(level, Compressed):
                    types[level.pos] = _array_type(parent_count + 1, Int(extent=counts[depth] + 1))
                types[level.crd] = _array_type(counts[depth], Int(extent=extent))
            parent_count = counts[depth]
        types[self.format.values] = _array_type(self.nnz, REAL)
        return {f"{name}_{field}": types[field] for field in self.format.fields()}

    # ----- conversions out -----
    def coordinates(self) -> tuple[np.ndarray, np.ndarray]:
        """(coords, values): coords[m] is the mode-m coordinate of every stored value."""
        return leaf_coordinates(self.format, self._fields), self.values

    def to_numpy(self) -> np.ndarray:
        """The dense array (duplicates of non-unique formats are added)."""
        if self.format.is_dense:
            order = self.format.mode_order
            stored = self.values.reshape([self.shape[m] for m in order])
            return np.ascontiguousarray(stored.transpose(np.argsort(order)))
        coords, values = self.coordinates()
        return scatter_dense(coords, values, self.shape)

    def to_scipy(self, fmt: str = "csr", array: bool = False):
        """A scipy.sparse matrix (or sparse array if `array`) in the named format.

        Entries stored by a sparse last level are kept even when zero (they are the pattern);
        positions filled by a trailing dense level are kept only when non-zero.
        """
        import scipy.sparse as sp

        if fmt not in SCIPY_FORMATS:
            raise FormatError(f"to_scipy: unknown scipy format {fmt!r}; expected one of {SCIPY_FORMATS}")
        if self.format.is_dense and self.ndim == 2:
            make = sp.coo_array if array else sp.coo_matrix
            return make(self.to_numpy()).asformat(fmt)
        coords, values = self.coordinates()
        if isinstance(self.format.levels[-1], Dense):
            keep = values != 0
            coords, values = coords[:, keep], values[keep]
        if self.ndim != 2:
            if not array or fmt != "coo":
                raise FormatError(f"to_scipy: a {self.ndim}-d tensor converts only to a scipy "
                                  f"coo_array (fmt='coo', array=True)")
            return sp.coo_array((values, tuple(coords)), shape=self.shape)
        make = sp.coo_array if array else sp.coo_matrix
        return make((values, (coords[0], coords[1])), shape=self.shape).asformat(fmt)

    def to_logical(self) -> dict:
        """The logical nested dict {i: {j: v}} of Python floats, as the physical definition gives.

        Sparse levels give only stored entries; a dense level gives every key (and a dense
        format every entry, zeros included).
        """
        return logical_dict(self.format, self._fields)


def _array_type(length: int, value: Type) -> Type:
    return Dict(Int(dense=True, extent=int(length)), value)


# ----- the level machinery on arrays -----

def level_sizes(fmt: Format, fields: Mapping[str, Any]) -> list[int]:
    """Number of positions of each level."""
    sizes, count = [], 1
    for depth, level in enumerate(fmt.levels):
        if isinstance(level, Dense):
            count *= int(fields[level.size])
        elif isinstance(level, Compressed):
            count = len(fields[level.crd])
        sizes.append(count)
    return sizes


def expand_levels(fmt: Format, fields: Mapping[str, Any]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per level, the parent position and the coordinate of every position of that level."""
    parents, coords, count = [], [], 1
    for depth, level in enumerate(fmt.levels):
        if isinstance(level, Dense):
            size = int(fields[level.size])
            parents.append(np.repeat(np.arange(count, dtype=np.int64), size))
            coords.append(np.tile(np.arange(size, dtype=np.int64), count))
            count *= size
        elif isinstance(level, Compressed):
            crd = np.asarray(fields[level.crd])
            if depth == 0:
                parents.append(np.zeros(len(crd), dtype=np.int64))
            else:
                pos = np.asarray(fields[level.pos], dtype=np.int64)
                parents.append(np.repeat(np.arange(count, dtype=np.int64), np.diff(pos)))
            coords.append(crd.astype(np.int64, copy=False))
            count = len(crd)
        else:
            parents.append(np.arange(count, dtype=np.int64))
            coords.append(np.asarray(fields[level.crd]).astype(np.int64, copy=False))
    return parents, coords


def leaf_coordinates(fmt: Format, fields: Mapping[str, Any]) -> np.ndarray:
    """coords[m, e]: the logical mode-m coordinate of stored value e (an int64 array)."""
    parents, coords = expand_levels(fmt, fields)
    count = len(coords[-1])
    result = np.empty((fmt.order, count), dtype=np.int64)
    position = np.arange(count, dtype=np.int64)
    for depth in reversed(range(fmt.order)):
        result[fmt.mode_order[depth]] = coords[depth][position]
        position = parents[depth][position]
    return result


def scatter_dense(coords: np.ndarray, values: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The dense array with values added at coords (duplicates add up); sized by the memory guard."""
    from sparsad.memory import check_allocation, dense_bytes

    check_allocation(dense_bytes(shape, values.dtype.itemsize),
                     f"a dense array of shape {tuple(int(n) for n in shape)}",
                     "keep the result sparse (out_format='csr'/'coo'/'dict', or to_scipy())", stacklevel=4)
    out = np.zeros(shape, dtype=values.dtype)
    if coords.shape[1]:
        np.add.at(out, tuple(coords), values)
    return out


def build_levels(fmt: Format, shape: tuple[int, ...], coords: np.ndarray, values: np.ndarray,
                 index_dtype=np.int64) -> dict[str, Any]:
    """The fields of `fmt` holding `values` at in-range `coords` (order x n); duplicates add up.
    The index arrays are the tensor's own and `frozen` (formats.immutable); the values a copy."""
    from sparsad.formats.assemble import sort_and_sum
    from sparsad.formats.immutable import frozen

    # one int64 key per entry, sorted once (not a lexicographic sort of every mode: formats.assemble)
    storage, values = sort_and_sum([coords[m] for m in fmt.mode_order],
                                   [shape[m] for m in fmt.mode_order], values)
    count = len(values)
    fields: dict[str, Any] = {}
    # parent[e]: the position of entry e's parent in the level above; None while it is e itself
    # (below a level that keeps every entry, as COO's: no array, no check)
    parent: np.ndarray | None = np.zeros(count, dtype=np.int64)
    parent_count = 1
    for depth, level in enumerate(fmt.levels):
        coordinate = storage[depth]
        extent = int(shape[fmt.mode_order[depth]])
        if isinstance(level, Dense):
            fields[level.size] = extent
            parent = (np.arange(count, dtype=np.int64) if parent is None else parent) * extent + coordinate
            parent_count *= extent
        elif isinstance(level, Compressed):
            new = None  # every entry starts a position of this level
            if level.unique and count and parent is not None:
                new = np.ones(count, dtype=bool)
                new[1:] = (parent[1:] != parent[:-1]) | (coordinate[1:] != coordinate[:-1])
                if new.all():
                    new = None
            kept = count if new is None else int(new.sum())
            if depth == 0:
                fields[level.count] = kept
            elif parent is None:
                fields[level.pos] = frozen(np.arange(count + 1, dtype=index_dtype))
            else:
                per_parent = np.bincount(parent if new is None else parent[new], minlength=parent_count)
                fields[level.pos] = frozen(np.concatenate(([0], np.cumsum(per_parent))), index_dtype)
            fields[level.crd] = frozen(coordinate if new is None else coordinate[new], index_dtype)
            parent = None if new is None else np.cumsum(new) - 1
            parent_count = kept
        else:
            if parent is not None and (parent_count != count or (count and np.any(np.diff(parent) != 1))):
                raise FormatError(f"format {fmt.name!r} cannot hold this tensor: its singleton level "
                                  f"{depth} allows one entry per parent position, but some parent "
                                  f"has several; put a non-unique compressed level above it (as COO)")
            parent = None
            fields[level.crd] = frozen(coordinate, index_dtype)
    if parent is None:  # one stored value per entry, in order (a copy: values may view a larger buffer)
        stored = np.array(values, copy=True)
    else:
        stored = np.zeros(parent_count, dtype=values.dtype)
        stored[parent] = values
    fields[fmt.values] = stored
    return fields


def logical_dict(fmt: Format, fields: Mapping[str, Any]) -> dict:
    """Evaluate the physical definition on the arrays, building the nested dict directly."""
    from sparsad.formats.definition import key_plan

    emit_after: list[list[int]] = [[] for _ in fmt.levels]
    for key in key_plan(fmt):
        emit_after[key.after_level].append(key.mode)
    levels = fmt.levels
    lists = {name: (value.tolist() if isinstance(value, np.ndarray) else int(value))
             for name, value in fields.items()}
    values = lists[fmt.values]
    cast = np.float32 if np.asarray(fields[fmt.values]).dtype == np.float32 else float  # keep float32
    last_mode = fmt.order - 1
    coords: list[int] = [0] * fmt.order
    result: dict = {}

    def children(depth: int, parent: int):
        level = levels[depth]
        if isinstance(level, Dense):
            size = lists[level.size]
            return ((parent * size + c, c) for c in range(size))
        crd = lists[level.crd]
        if isinstance(level, Singleton):
            return ((parent, crd[parent]),)
        if depth == 0:
            return ((p, crd[p]) for p in range(lists[level.count]))
        pos = lists[level.pos]
        return ((p, crd[p]) for p in range(pos[parent], pos[parent + 1]))

    def walk(depth: int, parent: int, container: dict) -> None:
        for position, coordinate in children(depth, parent):
            coords[fmt.mode_order[depth]] = coordinate
            inner = container
            for mode in emit_after[depth]:
                if mode == last_mode:
                    key = coords[mode]
                    inner[key] = inner.get(key, cast(0.0)) + cast(values[position])
                else:
                    inner = inner.setdefault(coords[mode], {})
            if depth + 1 < len(levels):
                walk(depth + 1, position, inner)

    walk(0, 0, result)
    return result


__all__ = ["StoredTensor", "SCIPY_FORMATS", "build_levels", "expand_levels", "leaf_coordinates",
           "level_sizes", "logical_dict", "scatter_dense"]
