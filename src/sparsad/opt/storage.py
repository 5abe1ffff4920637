"""Storage composition (∇SD §5.3, Fig. 10): bind each input to its format's physical definition.

    let A = <physical definition of A over A_len, A_pos, A_idx, A_val> in program
"""
from __future__ import annotations

from typing import Any, Mapping

from sparsad.lang.syntax import Expr, Let, free_vars
from sparsad.lang.types import Type


def compose_storage(expr: Expr, stored: Mapping[str, Any]) -> Expr:
    """expr with every input named in `stored` (name -> StoredTensor) defined from its arrays."""
    for name in sorted(set(stored) & free_vars(expr), reverse=True):
        expr = Let(name, stored[name].physical_definition(name), expr)
    return expr


def physical_inputs(stored: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Type]]:
    """The arrays and their types that replace the stored inputs."""
    arrays: dict[str, Any] = {}
    types: dict[str, Type] = {}
    for name, tensor in stored.items():
        arrays.update(tensor.physical_arrays(name))
        types.update(tensor.physical_types(name))
    return arrays, types


def loop_sizes(stored: Mapping[str, Any]) -> dict[str, float]:
    """Size estimates for the cost model: each scalar extent, and the mean length of a compressed
    segment (`<name>_<idx>:row`, the number of stored entries per parent)."""
    import numpy as np

    sizes: dict[str, float] = {}
    for name, tensor in stored.items():
        arrays = tensor.physical_arrays(name)
        for field, value in arrays.items():
            if isinstance(value, (int, np.integer)):
                sizes[field] = float(value)
        nnz = max(int(getattr(tensor, "nnz", 1)), 1)
        parents = max(int(tensor.shape[0]) if tensor.shape else 1, 1)
        for field, value in arrays.items():
            if isinstance(value, np.ndarray) and value.dtype.kind in "iu":
                sizes[field + ":row"] = nnz / parents
    return sizes
