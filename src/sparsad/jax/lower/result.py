"""The lowered program's result in its layout: a dense array of the type's shape, or the values
on a CSR pattern (lazy singletons and dictionaries on patterns materialised at the top level).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from sparsad.jax.lower.arrays import _check_size, _jnp, _pad_to
from sparsad.jax.lower.values import Arr, PatternMatrix, SparseIn, Single, Terms, Unsupported, Zero, _same_pattern

def _result(lowering, value: Any, layout: tuple, dtype) -> Any:
    jnp = _jnp()
    root = lowering.root
    kind, target = layout
    if kind == "pattern":
        shape = target.shape
        if isinstance(value, PatternMatrix) and _same_pattern(value.pattern, target) and value.frame is root:
            return jnp.asarray(value.values, dtype)
        if isinstance(value, SparseIn) and _same_pattern(value.pattern, target):
            return jnp.asarray(value.values, dtype)
        if isinstance(value, Zero):
            return jnp.zeros((target.nnz,), dtype)
        dense = _dense_result(lowering, value, shape, dtype)
        return dense[target.rows, target.indices.astype(np.int64)]
    return _dense_result(lowering, value, tuple(target), dtype)


def _dense_result(lowering, value: Any, shape: tuple, dtype) -> Any:
    jnp = _jnp()
    root = lowering.root
    if isinstance(value, Zero):
        return jnp.zeros(shape, dtype)
    if isinstance(value, PatternMatrix):
        if value.frame is not root or len(shape) != 2 or value.pattern.shape != shape:
            raise Unsupported("a sparse result of another shape")
        _check_size(shape[0] * shape[1])
        return jnp.zeros(shape, dtype).at[value.pattern.rows, value.pattern.indices.astype(np.int64)].add(
            jnp.asarray(value.values, dtype))
    if isinstance(value, SparseIn):
        return _dense_result(lowering, PatternMatrix(value.pattern, value.values, root), shape, dtype)
    if isinstance(value, (Single, Terms)):
        return _materialize_root(value, shape, dtype)
    if not isinstance(value, Arr) or value.frame is not root:
        raise Unsupported(f"a result of kind {type(value).__name__}")
    if value.vdims != len(shape):
        raise Unsupported("a result of another order than its type's")
    array = jnp.asarray(_pad_to(value.array, 0, shape), dtype)
    return array


def _materialize_root(value: Any, shape: tuple, dtype):
    """A lazy dictionary at the top level as a dense array of `shape`."""
    jnp = _jnp()
    if isinstance(value, Zero):
        return jnp.zeros(shape, dtype)
    if isinstance(value, Terms):
        out = jnp.zeros(shape, dtype)
        for term in value.terms:
            out = out + _materialize_root(term, shape, dtype)
        return out
    if isinstance(value, Single):
        if not shape:
            raise Unsupported("a dictionary where a number was expected")
        key = value.key.array
        inner = _materialize_root(value.value, shape[1:], dtype) if not isinstance(value.value, Arr) else \
            jnp.asarray(_pad_to(value.value.array, 0, shape[1:]), dtype)
        if isinstance(value.value, Arr) and value.value.vdims != len(shape) - 1:
            raise Unsupported("a result of another order than its type's")
        if isinstance(key, np.ndarray) and not (0 <= int(key) < shape[0]):
            raise Unsupported("a key outside the result")
        if not isinstance(key, np.ndarray):
            raise Unsupported("a top-level key computed from data")
        return jnp.zeros(shape, dtype).at[int(key)].add(inner)
    if isinstance(value, Arr):
        if value.vdims != len(shape):
            raise Unsupported("a result of another order than its type's")
        return jnp.asarray(_pad_to(value.array, 0, shape), dtype)
    raise Unsupported(f"a result of kind {type(value).__name__}")
