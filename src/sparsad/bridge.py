"""Array plumbing shared by the framework bridges (sparsad.torch, sparsad.jax): reading a
program's result (number, dense array or scipy.sparse matrix) as a dense array of a known shape
or as values on a known CSR pattern, and building derivative programs for given input types.

NumPy and SciPy only: the bridges convert to and from their own array types.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from sparsad.errors import UnsupportedError
from sparsad.ops.pattern import CSRPattern


_DENSE_FORMATS: dict[int, Any] = {}


def stored_dense(array: np.ndarray):
    """A C-contiguous array as a dense StoredTensor without copying or re-validating (a dense
    array holds no indices to check). One Format object per order: compiled programs find
    their plan by the format's identity."""
    from sparsad.formats import StoredTensor
    from sparsad.formats.format import dense

    fmt = _DENSE_FORMATS.get(array.ndim)
    if fmt is None:
        fmt = _DENSE_FORMATS[array.ndim] = dense(array.ndim)
    fields = {level.size: int(array.shape[m]) for level, m in zip(fmt.levels, fmt.mode_order)}
    fields[fmt.values] = array.reshape(-1)
    return StoredTensor._trusted(fmt, array.shape, fields)


def stored_csr(pattern: CSRPattern, values: np.ndarray):
    """Values on a CSRPattern (validated when the pattern was made: sorted, unique, in range)
    as a CSR StoredTensor sharing the arrays."""
    from sparsad.formats import CSR, StoredTensor

    if values.shape != (pattern.nnz,):
        raise UnsupportedError(f"{values.shape[0] if values.ndim else 0} values for a pattern of {pattern.nnz} entries")
    return StoredTensor._trusted(CSR, pattern.shape, {"len": pattern.shape[0], "pos": pattern.indptr,
                                                       "idx": pattern.indices, "val": values})


def canonical_csr(matrix) -> sp.csr_matrix:
    csr = sp.csr_matrix(matrix, copy=True)
    csr.sum_duplicates()
    csr.sort_indices()
    return csr


def _holds_no_number(value: Any) -> bool:
    """A dictionary whose leaves are all empty dictionaries (`{i -> {j -> {}}}`): a zero, as the
    interpreter leaves a derivative that is identically zero."""
    return isinstance(value, dict) and all(_holds_no_number(v) for v in value.values())


def values_on(result: Any, pattern: CSRPattern) -> np.ndarray:
    """The entries of `result` (scipy sparse, dense array or a zero) at `pattern`'s positions."""
    if _holds_no_number(result):
        return np.zeros(pattern.nnz)
    if isinstance(result, (int, float, np.floating)) or result is None:
        if result:
            raise UnsupportedError(f"a derivative came back as the number {result} where a matrix was expected")
        return np.zeros(pattern.nnz)
    if sp.issparse(result):
        csr = canonical_csr(result)
        rows = np.repeat(np.arange(csr.shape[0], dtype=np.int64), np.diff(csr.indptr))
        keys = rows * np.int64(pattern.shape[1]) + csr.indices.astype(np.int64)
        pos = np.minimum(np.searchsorted(keys, pattern.keys), max(keys.shape[0] - 1, 0))
        found = keys[pos] == pattern.keys if keys.shape[0] else np.zeros(pattern.nnz, dtype=bool)
        return np.where(found, csr.data[pos] if keys.shape[0] else 0.0, 0.0)
    array = np.asarray(result)
    if array.shape != pattern.shape and not np.any(array):  # an empty result: a zero derivative
        return np.zeros(pattern.nnz)
    if array.shape != pattern.shape:
        raise UnsupportedError(f"a derivative came back with shape {array.shape} where {pattern.shape} was expected")
    return array[pattern.rows, pattern.indices]


def dense_result(result: Any, shape: tuple | None) -> np.ndarray:
    if _holds_no_number(result) and shape is not None:
        return np.zeros(shape)
    if sp.issparse(result):
        return result.toarray()
    if isinstance(result, (int, float, np.floating, np.integer)) and shape:
        if result:
            raise UnsupportedError(f"a derivative came back as the number {result} where an array was expected")
        return np.zeros(shape)
    array = np.asarray(result, dtype=np.float64 if np.asarray(result).dtype.kind in "biu" else None)
    if shape is not None and array.shape != tuple(shape) and not np.any(array):  # empty: zero
        return np.zeros(shape)
    if shape is not None and array.shape != tuple(shape):
        raise UnsupportedError(f"the program returned shape {array.shape} where {tuple(shape)} was expected")
    return array


def derivative_expr(program: Any, kind: str, wrt: str, types: dict, seed: str):
    """The vjp (cotangent input `seed`) or jvp (tangent input `seed`) program of `program` w.r.t.
    `wrt` for the given input types, as an expression; None when it is identically zero."""
    from sparsad.ad.api import Derivative
    from sparsad.lang.program import program as make_program
    from sparsad.lang.syntax import EmptyDict

    mode = "reverse" if kind == "vjp" else "forward"
    maker = Derivative(make_program(program), (wrt,), kind, mode, seed_name=seed)
    expr = maker.exprs(types)[wrt]
    return None if isinstance(expr, EmptyDict) else expr


def fresh_name(base: str, taken: list[str]) -> str:
    while base in taken:
        base += "_"
    return base
