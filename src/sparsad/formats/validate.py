"""Validation at the boundary: raw arrays offered as a format's fields, checked once.

Every failure raises FormatError (or DTypeError for unusable value dtypes) naming the input,
the field and the fix. Accepted: index arrays of any integer dtype (int32/int64 kept, others
widened to int64) or integer-valued floats; values float64 or float32 (kept), integers and
bools widened to float64.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from sparsad.errors import DTypeError, FormatError
from sparsad.formats.format import Format
from sparsad.formats.levels import Compressed, Dense


def where(fmt: Format, name: str | None, field: str | None = None) -> str:
    """'input 'A' (csr), field 'idx'' — the prefix of every message."""
    text = f"input {name!r} ({fmt.name})" if name else f"format {fmt.name!r}"
    return f"{text}, field {field!r}" if field else text


def check_shape(shape: Any, fmt: Format, name: str | None = None) -> tuple[int, ...]:
    try:
        result = tuple(int(n) for n in shape)
        if any(int(n) != n for n in shape):
            raise ValueError
    except (TypeError, ValueError):
        raise FormatError(f"{where(fmt, name)}: shape must be a tuple of ints, got {shape!r}") from None
    if len(result) != fmt.order:
        raise FormatError(f"{where(fmt, name)}: shape {result} has {len(result)} modes but the "
                          f"format stores {fmt.order}")
    if any(n < 0 for n in result):
        raise FormatError(f"{where(fmt, name)}: shape {result} has a negative extent")
    return result


def value_array(values: Any, label: str) -> np.ndarray:
    """Values as float64 or float32; DTypeError for complex and non-numeric dtypes."""
    array = np.asarray(values)
    kind = array.dtype.kind
    if kind == "c":
        raise DTypeError(f"{label}: complex values ({array.dtype}) are not supported; "
                         f"pass the real part and the imaginary part as two real tensors")
    if kind in "biu":
        return array.astype(np.float64)
    if kind == "f":
        if array.dtype == np.float64 or array.dtype == np.float32:
            return array
        if array.dtype.itemsize < 4:
            return array.astype(np.float32)
        raise DTypeError(f"{label}: dtype {array.dtype} is not supported; use float64 or float32")
    raise DTypeError(f"{label}: dtype {array.dtype} is not a real number type; use float64 or float32")


def index_array(raw: Any, label: str) -> np.ndarray:
    """A 1-D integer index array (int32/int64 kept); FormatError for NaN, fractions, bools."""
    array = np.asarray(raw)
    if array.ndim != 1:
        raise FormatError(f"{label}: index array must be 1-D, got shape {array.shape}")
    kind = array.dtype.kind
    if array.dtype == np.int32 or array.dtype == np.int64:
        return array
    if kind == "i" or (kind == "u" and array.dtype.itemsize < 8):
        return array.astype(np.int64)
    if kind == "u":
        if array.size and array.max() > np.iinfo(np.int64).max:
            raise FormatError(f"{label}: index {array.max()} does not fit in int64")
        return array.astype(np.int64)
    if kind == "f":
        bad = np.flatnonzero(~np.isfinite(array))
        if bad.size:
            raise FormatError(f"{label}: index array holds {array[bad[0]]} at entry {bad[0]}; "
                              f"indices must be finite integers")
        fractional = np.flatnonzero(array != np.round(array))
        if fractional.size:
            raise FormatError(f"{label}: index array holds the non-integer {array[fractional[0]]} "
                              f"at entry {fractional[0]}; indices must be integers (int32 or int64)")
        return array.astype(np.int64)
    raise FormatError(f"{label}: index array has dtype {array.dtype}; use int32 or int64")


def check_range(array: np.ndarray, extent: int, label: str, what: str = "index") -> None:
    if not array.size:
        return
    negative = np.flatnonzero(array < 0)
    if negative.size:
        raise FormatError(f"{label}: negative {what} {array[negative[0]]} at entry {negative[0]}")
    too_big = np.flatnonzero(array >= extent)
    if too_big.size:
        raise FormatError(f"{label}: {what} {array[too_big[0]]} at entry {too_big[0]} is out of "
                          f"range; it must be below the extent {extent}")


def _scalar(raw: Any, label: str) -> int:
    if isinstance(raw, (bool, np.bool_)) or not isinstance(raw, (int, np.integer)):
        raise FormatError(f"{label}: must be an int, got {raw!r}")
    return int(raw)


def validate_fields(fmt: Format, shape: Any, raw: Mapping[str, Any],
                    name: str | None = None) -> tuple[tuple[int, ...], dict[str, Any]]:
    """Check raw fields against the format and shape; return (shape, normalised fields).

    Sizes (dense extents, the root's `len`) may be omitted; they are then derived.
    """
    shape = check_shape(shape, fmt, name)
    expected = fmt.fields()
    unknown = sorted(set(raw) - set(expected))
    if unknown:
        raise FormatError(f"{where(fmt, name)}: unknown field(s) {unknown}; the fields are {list(expected)}")
    optional = {level.size for level in fmt.levels if isinstance(level, Dense)}
    if isinstance(fmt.levels[0], Compressed):
        optional.add(fmt.levels[0].count)
    missing = [f for f in expected if f not in raw and f not in optional]
    if missing:
        raise FormatError(f"{where(fmt, name)}: missing field(s) {missing}; the fields are {list(expected)}")

    fields: dict[str, Any] = {}
    prefix: list[np.ndarray] = []  # storage-order coordinates of every position so far
    parent_count = 1
    ancestors_ordered = True
    for depth, level in enumerate(fmt.levels):
        extent = shape[fmt.mode_order[depth]]
        if isinstance(level, Dense):
            label = where(fmt, name, level.size)
            if level.size in raw and _scalar(raw[level.size], label) != extent:
                raise FormatError(f"{label}: is {raw[level.size]} but shape{shape} gives {extent} "
                                  f"for mode {fmt.mode_order[depth]}")
            fields[level.size] = extent
            prefix = [np.repeat(a, extent) for a in prefix]
            prefix.append(np.tile(np.arange(extent, dtype=np.int64), parent_count))
            parent_count *= extent
            continue
        crd_label = where(fmt, name, level.crd)
        crd = index_array(raw[level.crd], crd_label)
        if isinstance(level, Compressed) and depth == 0:
            if level.count in raw:
                count = _scalar(raw[level.count], where(fmt, name, level.count))
                if count != len(crd):
                    raise FormatError(f"{where(fmt, name, level.count)}: is {count} but "
                                      f"{level.crd!r} has {len(crd)} entries; they must agree")
            fields[level.count] = len(crd)
            prefix = [crd]
        elif isinstance(level, Compressed):
            pos_label = where(fmt, name, level.pos)
            pos = index_array(raw[level.pos], pos_label)
            if len(pos) != parent_count + 1:
                raise FormatError(f"{pos_label}: has {len(pos)} entries but must have "
                                  f"{parent_count + 1} (one per position of the level above, "
                                  f"{parent_count}, plus one)")
            if pos[0] != 0:
                raise FormatError(f"{pos_label}: must start at 0, starts at {pos[0]}")
            steps = np.diff(pos.astype(np.int64))
            down = np.flatnonzero(steps < 0)
            if down.size:
                k = down[0]
                raise FormatError(f"{pos_label}: must be non-decreasing, but entry {k} is "
                                  f"{pos[k]} and entry {k + 1} is {pos[k + 1]}")
            if pos[-1] != len(crd):
                raise FormatError(f"{pos_label}: its last entry {pos[-1]} must equal the number of "
                                  f"entries of {level.crd!r}, {len(crd)}")
            fields[level.pos] = pos
            prefix = [np.repeat(a, steps) for a in prefix]
            prefix.append(crd)
        else:
            if len(crd) != parent_count:
                raise FormatError(f"{crd_label}: has {len(crd)} entries but must have one per "
                                  f"position of the level above, {parent_count}")
            prefix = prefix + [crd]
        check_range(crd, extent, crd_label)
        _check_order(level, prefix, ancestors_ordered, crd_label, fmt)
        fields[level.crd] = crd
        ancestors_ordered = ancestors_ordered and level.ordered
        parent_count = len(crd)

    values_label = where(fmt, name, fmt.values)
    values = value_array(raw[fmt.values], values_label)
    if values.ndim != 1:
        raise FormatError(f"{values_label}: must be 1-D, got shape {values.shape}")
    if len(values) != parent_count:
        raise FormatError(f"{values_label}: has {len(values)} entries but the levels have "
                          f"{parent_count} positions; give one value per stored entry")
    fields[fmt.values] = values
    return shape, fields


def _check_order(level, prefix: list[np.ndarray], ancestors_ordered: bool, label: str,
                 fmt: Format) -> None:
    """Sortedness and uniqueness of coordinates under the same ancestors."""
    if len(prefix[-1]) < 2 or not (level.ordered or level.unique):
        return
    if level.ordered and ancestors_ordered:
        same_ancestors = np.ones(len(prefix[-1]) - 1, dtype=bool)
        for array in prefix[:-1]:
            same_ancestors &= array[1:] == array[:-1]
        step = np.diff(prefix[-1].astype(np.int64))
        bad = np.flatnonzero(same_ancestors & ((step <= 0) if level.unique else (step < 0)))
        if bad.size:
            k = bad[0]
            a, b = prefix[-1][k], prefix[-1][k + 1]
            if a == b:
                raise FormatError(f"{label}: the index {a} appears twice under the same parent "
                                  f"(entries {k} and {k + 1}); {fmt.name} stores each entry once: "
                                  f"sum the duplicates first (scipy: A.sum_duplicates())")
            raise FormatError(f"{label}: indices under the same parent are not sorted (entry {k} "
                              f"is {a}, entry {k + 1} is {b}); sort them (scipy: A.sort_indices()) "
                              f"or convert with sparsad.formats.as_format, which sorts")
        return
    if level.unique:
        order = np.lexsort(prefix[::-1])
        stacked = np.stack([a[order] for a in prefix])
        equal = np.all(stacked[:, 1:] == stacked[:, :-1], axis=0)
        if equal.any():
            k = order[np.flatnonzero(equal)[0]]
            raise FormatError(f"{label}: the coordinate tuple {tuple(int(a[k]) for a in prefix)} "
                              f"is stored twice; {fmt.name} stores each entry once: sum the duplicates")


# ----- foreign containers, checked before any library call trusts their arrays -----

def check_compressed(pointers: Any, indices: Any, outer: int, inner: int, label: str,
                     pointer_name: str = "indptr", index_name: str = "indices") -> tuple[np.ndarray, np.ndarray]:
    """Raw compressed arrays (CSR/CSC/BSR) checked in O(nnz): pointers of length outer + 1 from 0,
    non-decreasing, ending within `indices`; every used index in [0, inner). Returns both as int arrays.
    """
    pointers = index_array(pointers, f"{label}, {pointer_name}")
    indices = index_array(indices, f"{label}, {index_name}")
    if len(pointers) != outer + 1:
        raise FormatError(f"{label}: {pointer_name} has {len(pointers)} entries but must have {outer + 1} "
                          f"(one per row/column, {outer}, plus one)")
    if pointers[0] != 0:
        raise FormatError(f"{label}: {pointer_name} must start at 0, starts at {pointers[0]}")
    steps = np.diff(pointers.astype(np.int64))
    down = np.flatnonzero(steps < 0)
    if down.size:
        k = int(down[0])
        raise FormatError(f"{label}: {pointer_name} must be non-decreasing, but entry {k} is "
                          f"{pointers[k]} and entry {k + 1} is {pointers[k + 1]}; rebuild the matrix "
                          f"from coordinates (scipy: coo_matrix((data, (row, col))).tocsr())")
    if pointers[-1] > len(indices):
        raise FormatError(f"{label}: {pointer_name} ends at {pointers[-1]} but {index_name} has only "
                          f"{len(indices)} entries")
    check_range(indices[:int(pointers[-1])], inner, f"{label}, {index_name}")
    return pointers, indices


def check_coordinate_rows(coords: Any, shape: tuple[int, ...], label: str) -> np.ndarray:
    """A coordinate array (order x n) checked against shape: integer, in range. Returns it as int64."""
    coords = np.asarray(coords)
    if coords.ndim != 2 or coords.shape[0] != len(shape):
        raise FormatError(f"{label}: coordinates must have shape ({len(shape)}, n), got {coords.shape}")
    for mode, extent in enumerate(shape):
        row = index_array(coords[mode], f"{label}, mode {mode}")
        check_range(row, int(extent), f"{label}, mode {mode}")
    return coords.astype(np.int64, copy=False)


def check_scipy(matrix: Any, label: str) -> None:
    """The arrays of a scipy.sparse matrix/array, checked before scipy converts or sums them
    (scipy's constructors check little; its C++ routines trust the rest and may crash)."""
    shape = tuple(int(n) for n in matrix.shape)
    if any(n < 0 for n in shape):
        raise FormatError(f"{label}: negative extent in shape {shape}")
    kind = matrix.format
    data = np.asarray(matrix.data) if kind != "dok" else None
    if kind in ("csr", "csc"):
        outer, inner = (shape[0], shape[1]) if kind == "csr" else (shape[1], shape[0])
        pointers, _ = check_compressed(matrix.indptr, matrix.indices, outer, inner, label)
        if data.ndim != 1 or len(data) < pointers[-1]:
            raise FormatError(f"{label}: data has shape {data.shape} but the {kind} arrays store "
                              f"{pointers[-1]} entries")
    elif kind == "bsr":
        rows, cols = matrix.blocksize
        if rows <= 0 or cols <= 0 or shape[0] % rows or shape[1] % cols:
            raise FormatError(f"{label}: block size {matrix.blocksize} does not divide shape {shape}")
        pointers, _ = check_compressed(matrix.indptr, matrix.indices, shape[0] // rows,
                                       shape[1] // cols, label)
        if data.ndim != 3 or len(data) < pointers[-1] or data.shape[1:] != (rows, cols):
            raise FormatError(f"{label}: data has shape {data.shape} but the bsr arrays store "
                              f"{pointers[-1]} blocks of {matrix.blocksize}")
    elif kind == "lil":  # scipy's conversion reads the per-row lists without checking them
        rows, values = matrix.rows, matrix.data
        if len(rows) != shape[0] or len(values) != shape[0]:
            raise FormatError(f"{label}: lil rows/data have {len(rows)}/{len(values)} lists for {shape[0]} rows")
        for row, (columns, entries) in enumerate(zip(rows, values)):
            if len(columns) != len(entries):
                raise FormatError(f"{label}: lil row {row} has {len(columns)} column indices but "
                                  f"{len(entries)} values; rebuild it with item assignment (A[i, j] = v)")
            if columns:
                check_range(index_array(np.asarray(columns), f"{label}, row {row}"), shape[1], f"{label}, row {row}")
    elif kind == "coo":
        coords = list(matrix.coords) if hasattr(matrix, "coords") else [matrix.row, matrix.col]
        lengths = {len(np.asarray(c)) for c in coords} | {len(data)}
        if len(lengths) != 1 or data.ndim != 1:
            raise FormatError(f"{label}: coo arrays differ in length ({sorted(lengths)}); give one "
                              f"coordinate per mode and one value per entry")
        for mode, (array, extent) in enumerate(zip(coords, shape)):
            check_range(index_array(array, f"{label}, mode {mode}"), extent, f"{label}, mode {mode}")


def check_torch_sparse(tensor: Any, label: str) -> None:
    """Indices of a torch sparse tensor (COO, CSR, CSC, BSR, BSC), checked before torch
    coalesces or converts it: torch does neither check by default and may crash on bad input."""
    layout = str(tensor.layout).replace("torch.", "")
    shape = tuple(int(n) for n in tensor.shape)
    sparse_dims = tensor.sparse_dim()

    def numpy(t):
        return t.detach().cpu().numpy()

    if layout == "sparse_coo":
        indices = numpy(tensor._indices())
        values = tensor._values()
        if indices.ndim != 2 or indices.shape[0] != sparse_dims or values.shape[0] != indices.shape[1]:
            raise FormatError(f"{label}: torch COO indices of shape {indices.shape} do not match "
                              f"{values.shape[0]} values and {sparse_dims} sparse dimensions")
        check_coordinate_rows(indices, shape[:sparse_dims], label)
        return
    if layout in ("sparse_csr", "sparse_bsr"):
        pointers, indices, transposed = tensor.crow_indices(), tensor.col_indices(), False
        names = ("crow_indices", "col_indices")
    elif layout in ("sparse_csc", "sparse_bsc"):
        pointers, indices, transposed = tensor.ccol_indices(), tensor.row_indices(), True
        names = ("ccol_indices", "row_indices")
    else:
        raise FormatError(f"{label}: torch layout {layout} is not a sparse layout sparsad reads")
    if pointers.ndim != 1:
        raise FormatError(f"{label}: batched torch {layout} tensors are not supported; pass one matrix")
    outer, inner = (shape[1], shape[0]) if transposed else (shape[0], shape[1])
    if layout in ("sparse_bsr", "sparse_bsc"):
        block = tuple(tensor.values().shape[1:3])
        if len(block) != 2 or 0 in block:
            raise FormatError(f"{label}: torch {layout} values of shape {tuple(tensor.values().shape)}")
        block = block[::-1] if transposed else block
        outer, inner = outer // block[0], inner // block[1]
    check_compressed(numpy(pointers), numpy(indices), outer, inner, label, *names)
