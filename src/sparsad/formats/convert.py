"""Conversion into formats (numpy, scipy.sparse, torch, pydata/sparse) and out of logical dicts.

Every input becomes (shape, coordinates, values) and goes through the one level builder, so each
format gets every input without code of its own. Sparse inputs keep their stored entries
(explicit zeros included: they are the pattern) with duplicates summed and indices sorted; dense
inputs store their non-zeros, or every entry when the target format is dense. torch and
pydata/sparse are imported only when such a value is passed.
"""
from __future__ import annotations

import warnings
from typing import Any, Mapping

import numpy as np

from sparsad.errors import DensifyWarning, FormatError, InputError, UnsupportedError, dense_size_message
from sparsad.formats.format import CSC, CSR, Format, coo, csf, dense, resolve
from sparsad.formats.levels import Dense
from sparsad.formats.tensor import SCIPY_FORMATS, StoredTensor, build_levels, scatter_dense
from sparsad.formats.validate import (check_compressed, check_coordinate_rows, check_range, check_scipy,
                                      check_shape, check_torch_sparse, index_array, validate_fields, value_array)
from sparsad.memory import check_allocation, memory_limit


def from_arrays(fmt: Format | str, shape: Any, name: str | None = None, **fields: Any) -> StoredTensor:
    """A StoredTensor from raw physical arrays, validated (e.g. `from_arrays('csr', (3, 4),
    pos=..., idx=..., val=...)`); dense extents and the root's `len` may be omitted.

    >>> import numpy as np
    >>> t = from_arrays("csr", (2, 3), pos=np.array([0, 1, 2]), idx=np.array([2, 0]), val=np.array([5.0, 6.0]))
    >>> t.to_logical()
    {0: {2: 5.0}, 1: {0: 6.0}}
    """
    if isinstance(fmt, str):
        try:
            fmt = resolve(fmt, len(tuple(shape)) if _is_sequence(shape) else 2)
        except FormatError as error:
            raise FormatError(f"input {name!r} ({fmt}): {error}" if name else str(error)) from None
    shape, checked = validate_fields(fmt, shape, fields, name)
    return StoredTensor._trusted(fmt, shape, checked)


DENSIFY_WARN_BYTES = 1 << 20  # storing a sparse input densely warns from this size on


def from_coordinates(coords: Any, values: Any, shape: Any, fmt: Format | str,
                     name: str | None = None, index_dtype=np.int64) -> StoredTensor:
    """A StoredTensor from coordinates (order x n) and values; duplicates are summed.

    >>> import numpy as np
    >>> t = from_coordinates(np.array([[0, 1, 1], [2, 0, 0]]), np.array([1.0, 2.0, 3.0]), (2, 3), "coo")
    >>> t.to_logical()
    {0: {2: 1.0}, 1: {0: 5.0}}

    Storing them in a dense format of DENSIFY_WARN_BYTES or more warns (DensifyWarning).
    """
    shape_tuple = tuple(int(n) for n in shape)
    fmt = resolve(fmt, len(shape_tuple))
    shape_tuple = check_shape(shape_tuple, fmt, name)
    label = f"input {name!r}" if name else "coordinates"
    if fmt.is_dense:
        itemsize = np.asarray(values).dtype.itemsize
        nbytes = float(np.prod(shape_tuple, dtype=np.float64)) * itemsize
        if nbytes > memory_limit():  # refused before anything is allocated (sparsad.memory)
            check_allocation(nbytes, f"{label}: storing {np.shape(coords)[-1]} entries densely in "
                             f"{fmt.name}", "pick a sparse format ('csr', 'coo', ...)")
        if nbytes >= DENSIFY_WARN_BYTES:
            warnings.warn(f"{label}: storing {np.shape(coords)[-1]} entries densely in {fmt.name} "
                          f"takes {dense_size_message(shape_tuple, itemsize)}; pick a sparse "
                          f"format ('csr', 'coo', ...) to avoid it", DensifyWarning, stacklevel=3)
    coords = np.asarray(coords)
    if coords.ndim != 2 or coords.shape[0] != len(shape_tuple):
        raise FormatError(f"{label}: coordinates must have shape ({len(shape_tuple)}, n), got {coords.shape}")
    if coords.dtype.kind not in "iu":
        raise FormatError(f"{label}: coordinates must be integers, got dtype {coords.dtype}")
    values = value_array(values, f"{label} values")
    if values.shape != (coords.shape[1],):
        raise FormatError(f"{label}: {coords.shape[1]} coordinates but values of shape {values.shape}")
    for mode, extent in enumerate(shape_tuple):
        check_range(coords[mode], extent, f"{label}, mode {mode}")
    if index_dtype == np.int32 and max(shape_tuple + (coords.shape[1],), default=0) >= 2**31 - 1:
        index_dtype = np.int64
    fields = build_levels(fmt, shape_tuple, coords, values, index_dtype)
    return StoredTensor._trusted(fmt, shape_tuple, fields)


def as_format(value: Any, format: Format | str | None = None, name: str | None = None) -> StoredTensor:
    """Store `value` (numpy, scipy.sparse, torch, pydata/sparse, StoredTensor) in `format`.

    Without a format: numpy and torch dense -> dense row-major; scipy csr/csc/coo -> CSR/CSC/COO
    (other scipy formats -> CSR); torch sparse COO/CSR/CSC -> COO/CSR/CSC; pydata/sparse -> COO.
    An n-d COO StoredTensor stored as CSF keeps its entries' order and shares its values array.

    >>> import scipy.sparse as sp
    >>> as_format(sp.identity(3, format="csr"))
    StoredTensor(csr, shape=(3, 3), stored=3, dtype=float64)
    >>> as_format(sp.identity(3, format="csr"), "csc").format.name
    'csc'
    """
    label = f"input {name!r}" if name else "value"
    if isinstance(value, StoredTensor):
        if format is None or resolve(format, value.ndim) == value.format:
            return value
        target = resolve(format, value.ndim)
        if value.format.is_dense and target.is_dense:
            return _from_numpy(value.to_numpy(), target, name, label)
        if target == csf(value.ndim) and value.ndim >= 2 and value.values.dtype.kind == "f":
            from sparsad.formats.pattern import csf_of_sorted, sorted_unique

            if sorted_unique(value.format):  # an n-d COO: its entries are CSF's, in the same order
                return csf_of_sorted(value)
        coords, values = value.coordinates()
        if isinstance(value.format.levels[-1], Dense) and not target.is_dense:
            keep = values != 0
            coords, values = coords[:, keep], values[keep]
        return from_coordinates(coords, values, value.shape, format, name, _index_dtype(value))
    module = type(value).__module__.split(".")[0]
    if module == "torch":
        return _from_torch(value, format, name, label)
    if module == "sparse" and hasattr(value, "asformat"):
        return _from_pydata(value, format, name, label)
    if module == "jax" and type(value).__name__ in ("BCOO", "BCSR"):
        return _from_jax_sparse(value, format, name, label)
    try:
        import scipy.sparse as sp
    except ImportError:  # pragma: no cover
        sp = None
    if sp is not None and sp.issparse(value):
        return _from_scipy(value, format, name, label)
    if isinstance(value, dict):
        raise FormatError(f"{label}: a nested dict needs a shape; use "
                          f"sparsad.formats.from_logical(value, shape, format)")
    if isinstance(value, (np.ndarray, list, tuple, np.generic, float, int)) or hasattr(value, "__array__"):
        return _from_numpy(np.asarray(value), format, name, label)  # also jax and other array types
    raise FormatError(f"{label}: cannot store a {type(value).__name__} in a format; pass a numpy "
                      f"array, a scipy.sparse matrix, a torch tensor or a pydata/sparse array")


def _from_numpy(array: np.ndarray, format, name, label) -> StoredTensor:
    if array.ndim == 0:
        raise FormatError(f"{label}: a 0-d array is a scalar; pass it as a Python float")
    values = value_array(array, label)
    fmt = resolve(format if format is not None else dense(values.ndim), values.ndim)
    if fmt.is_dense:
        stored = np.ascontiguousarray(values.transpose(fmt.mode_order)).reshape(-1)
        fields = {level.size: int(values.shape[m]) for level, m in zip(fmt.levels, fmt.mode_order)}
        fields[fmt.values] = stored
        return StoredTensor._trusted(fmt, values.shape, fields)
    coords = np.array(np.nonzero(values), dtype=np.int64).reshape(values.ndim, -1)
    return from_coordinates(coords, values[tuple(coords)], values.shape, fmt, name)


def _from_scipy(matrix, format, name, label) -> StoredTensor:
    value_array(np.zeros(0, matrix.dtype), label)  # dtype check before any work
    check_scipy(matrix, label)  # before scipy sums or converts: its C++ routines trust the arrays
    if format is None:
        kind = matrix.format
        format = {"csr": CSR, "csc": CSC}.get(kind) if matrix.ndim == 2 else None
        if format is None:
            format = coo(matrix.ndim) if kind == "coo" or matrix.ndim != 2 else CSR
    if isinstance(format, str):
        format = resolve(format, matrix.ndim)
    same_layout = (matrix.format == "csr" and format == CSR) or (matrix.format == "csc" and format == CSC)
    if same_layout and matrix.has_canonical_format:
        # the arrays are already the format's own: validate them and share them, no re-sorting
        return from_arrays(format, matrix.shape, name, len=matrix.shape[0 if format is CSR else 1],
                           pos=matrix.indptr, idx=matrix.indices, val=matrix.data)
    index_dtype = np.int64
    if matrix.format in ("csr", "csc", "bsr", "coo"):
        arrays = [matrix.indices] if matrix.format != "coo" else list(matrix.coords)
        if all(a.dtype == np.int32 for a in arrays):
            index_dtype = np.int32
    try:
        as_coo = matrix.tocoo()
    except ValueError as error:  # scipy's own consistency checks (indices out of range, ...)
        raise FormatError(f"{label}: inconsistent scipy.sparse {matrix.format} matrix: {error}") from None
    coords = np.array(as_coo.coords, dtype=np.int64).reshape(len(matrix.shape), -1)
    return from_coordinates(coords, as_coo.data, matrix.shape, format, name, index_dtype)


def _from_torch(tensor, format, name, label) -> StoredTensor:
    import torch

    if tensor.requires_grad and torch.is_grad_enabled():  # never drop a gradient silently
        raise InputError(f"{label} is a torch tensor that requires grad, and this call would drop its gradient; "
                         f"use sparsad.torch.compile_program(...) to differentiate through the program, or pass "
                         f"{name or 'it'}.detach() (or call under torch.no_grad())")
    tensor = tensor.detach()
    if tensor.layout != torch.strided:
        check_torch_sparse(tensor, label)  # before coalesce/to_sparse_coo/.to, which trust the indices
    if tensor.is_complex():
        value_array(np.zeros(0, np.complex128), label)
    if tensor.dtype in (torch.float16, torch.bfloat16):
        tensor = tensor.to(torch.float32)
    layout = tensor.layout
    if layout == torch.strided:
        return _from_numpy(tensor.cpu().resolve_conj().numpy(), format, name, label)
    if tensor.dense_dim() > 0:
        raise UnsupportedError(f"{label}: hybrid sparse torch tensors (dense trailing dimensions) "
                               f"are not supported; convert with .to_dense() or flatten the values")
    if format is None:
        format = {torch.sparse_csr: "csr", torch.sparse_csc: "csc"}.get(layout) or (
            "csr" if tensor.dim() == 2 and layout != torch.sparse_coo else "coo")
    if layout != torch.sparse_coo:
        tensor = tensor.to_sparse_coo()
    tensor = tensor.coalesce().cpu()
    coords = tensor.indices().numpy().astype(np.int64, copy=False)
    return from_coordinates(coords, tensor.values().numpy(), tuple(tensor.shape), format, name)


def _from_jax_sparse(matrix, format, name, label) -> StoredTensor:
    """A jax.experimental.sparse BCOO or BCSR (no batch or dense dimensions), its index arrays
    checked before use. BCOO pads with indices equal to the extent (JAX ignores those entries):
    they are dropped; any other index out of range is a FormatError."""
    kind = type(matrix).__name__
    if matrix.n_batch or matrix.n_dense:
        raise UnsupportedError(f"{label}: a {kind} with batch or dense dimensions (n_batch={matrix.n_batch}, "
                               f"n_dense={matrix.n_dense}) is not supported; pass one unbatched matrix")
    shape = tuple(int(n) for n in matrix.shape)
    data = value_array(np.asarray(matrix.data), label)
    if kind == "BCOO":
        indices = np.asarray(matrix.indices)
        if indices.ndim != 2 or indices.shape != (len(data), len(shape)):
            raise FormatError(f"{label}: BCOO indices of shape {indices.shape} do not match {len(data)} "
                              f"values of a {len(shape)}-d array")
        coords = index_array(indices.reshape(-1), f"{label}, indices").reshape(indices.shape).T
        padding = np.any(coords == np.asarray(shape, dtype=np.int64)[:, None], axis=0)
        coords, data = coords[:, ~padding], data[~padding]
        coords = check_coordinate_rows(coords, shape, label)
        return from_coordinates(coords, data, shape, format if format is not None else coo(len(shape)), name)
    pointers, indices = check_compressed(np.asarray(matrix.indptr), np.asarray(matrix.indices), shape[0],
                                         shape[1], label)
    count = int(pointers[-1])
    if len(data) < count:
        raise FormatError(f"{label}: BCSR data has {len(data)} entries but indptr stores {count}")
    rows = np.repeat(np.arange(shape[0], dtype=np.int64), np.diff(pointers.astype(np.int64)))
    coords = np.stack([rows, indices[:count].astype(np.int64)])
    return from_coordinates(coords, data[:count], shape, format if format is not None else CSR, name)


def _from_pydata(array, format, name, label) -> StoredTensor:
    if getattr(array, "format", None) == "coo":  # checked before pydata's numba routines read them
        check_coordinate_rows(array.coords, tuple(array.shape), label)
    elif hasattr(array, "indptr") and hasattr(array, "compressed_axes"):  # GCXS, CSR, CSC
        _check_pydata_compressed(array, label)
    as_coo = array.asformat("coo")
    if np.any(as_coo.fill_value != 0):
        raise FormatError(f"{label}: pydata/sparse array has fill value {as_coo.fill_value}; "
                          f"only a zero fill value maps onto a format")
    value_array(as_coo.data, label)
    fmt = format if format is not None else coo(as_coo.ndim)
    coords = np.asarray(as_coo.coords, dtype=np.int64).reshape(as_coo.ndim, -1)
    return from_coordinates(coords, as_coo.data, as_coo.shape, fmt, name)


def _check_pydata_compressed(array, label: str) -> None:
    """A pydata GCXS (or CSR/CSC) is a CSR matrix of shape (product of the compressed axes'
    extents, product of the others'): its indptr and indices are checked as such."""
    shape = tuple(int(n) for n in array.shape)
    axes = tuple(int(a) for a in (array.compressed_axes or ()))
    if any(not 0 <= a < len(shape) for a in axes):
        raise FormatError(f"{label}: compressed_axes {axes} outside the {len(shape)} axes")
    outer = int(np.prod([shape[a] for a in axes], dtype=np.int64))
    inner = int(np.prod([n for a, n in enumerate(shape) if a not in axes], dtype=np.int64))
    pointers, _ = check_compressed(array.indptr, array.indices, outer, inner, label)
    if len(np.asarray(array.data)) < pointers[-1]:
        raise FormatError(f"{label}: data has {len(np.asarray(array.data))} entries but indptr stores {pointers[-1]}")


def _index_dtype(stored: StoredTensor):
    for field in stored.format.fields()[:-1]:
        value = stored[field]
        if isinstance(value, np.ndarray):
            return value.dtype
    return np.int64


def _is_sequence(value: Any) -> bool:
    try:
        tuple(value)
        return True
    except TypeError:
        return False


# ----- logical nested dicts -> arrays -----

def logical_coordinates(value: Any, shape: tuple[int, ...], label: str = "value"
                        ) -> tuple[np.ndarray, np.ndarray]:
    """(coords, values) of the leaves of a nested dict of numbers, checked against shape.

    >>> coords, values = logical_coordinates({0: {2: 5.0}, 1: {0: 6.0}}, (2, 3))
    >>> coords.tolist(), values.tolist()
    ([[0, 1], [2, 0]], [5.0, 6.0])
    """
    order = len(shape)
    keys: list[list[int]] = [[] for _ in range(order)]
    leaves: list[float] = []
    path: list[int] = []

    def visit(node: Any, depth: int) -> None:
        if depth == order:
            if isinstance(node, dict):
                if node:
                    raise FormatError(f"{label}: nested deeper than the {order} modes of shape "
                                      f"{shape} at keys {path}")
                return  # `{}` is the zero of every type
            if isinstance(node, (bool, np.bool_)) or not isinstance(node, (int, float, np.number)):
                raise FormatError(f"{label}: leaf at keys {path} is {node!r}, not a number")
            for mode, key in enumerate(path):
                keys[mode].append(key)
            leaves.append(node)
            return
        if not isinstance(node, dict):
            if node == 0:
                return  # a scalar zero stands for an empty sub-dictionary
            raise FormatError(f"{label}: expected a dictionary at depth {depth} (keys {path}) for "
                              f"shape {shape}, got {node!r}")
        for key, item in node.items():
            if isinstance(key, (bool, np.bool_)) or not isinstance(key, (int, np.integer)):
                raise FormatError(f"{label}: key {key!r} at depth {depth} is not an integer")
            if not 0 <= key < shape[depth]:
                raise FormatError(f"{label}: key {key} at depth {depth} (keys {path}) is outside "
                                  f"0..{shape[depth] - 1}, the extent of mode {depth}")
            path.append(int(key))
            visit(item, depth + 1)
            path.pop()

    visit(value, 0)
    coords = np.array(keys, dtype=np.int64).reshape(order, len(leaves))
    single = leaves and all(isinstance(leaf, np.float32) for leaf in leaves)  # float32 stays float32
    return coords, np.array(leaves, dtype=np.float32 if single else np.float64)


def from_logical(value: Any, shape: Any, out_format: Format | str = "dense"):
    """A logical nested dict `{i: {j: v}}` of `shape` as numpy or scipy, in the named format.

    `out_format`: 'dense' or 'numpy' -> numpy array; 'csr', 'csc', 'coo', 'bsr', 'dia', 'lil',
    'dok' -> scipy.sparse matrix (2-d only; stored entries kept, zeros included); any other
    format name or a Format -> StoredTensor.

    >>> from_logical({0: {2: 5.0}, 1: {0: 6.0}}, (2, 3))
    array([[0., 0., 5.],
           [6., 0., 0.]])
    >>> from_logical({0: {2: 5.0}}, (2, 3), "csr").nnz
    1
    """
    shape = tuple(int(n) for n in shape)
    if not shape:
        raise FormatError("from_logical: shape is empty; a 0-d result is a Python float")
    coords, values = logical_coordinates(value, shape)
    if out_format in ("dense", "numpy"):
        return scatter_dense(coords, values, shape)
    if isinstance(out_format, str) and out_format in SCIPY_FORMATS and len(shape) == 2:
        import scipy.sparse as sp

        matrix = sp.coo_matrix((values, (coords[0], coords[1])), shape=shape)
        return matrix.asformat(out_format)
    return from_coordinates(coords, values, shape, out_format)


def as_logical(value: Any) -> Mapping:
    """The logical nested dict of any value as_format accepts.

    >>> import numpy as np
    >>> as_logical(np.array([[1.0, 0.0], [0.0, 2.0]]))
    {0: {0: 1.0, 1: 0.0}, 1: {0: 0.0, 1: 2.0}}
    """
    return as_format(value).to_logical()
