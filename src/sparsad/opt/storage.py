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
