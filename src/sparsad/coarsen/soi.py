"""Reuse-aware selection of segments of interest (§5, Fig. 7).

Elevation works bottom-up over the def-use tree (operands before users, loop regions as units
with their exit φ).  A node whose symbolic expression stays within the size limit ``L`` is
merged into its user; when it exceeds ``L`` it is split, and the split point is the operand that
the program reuses most (its derivative will then be computed once and shared by every user,
which is the reuse that coarsening would otherwise destroy); ties go to the larger operand.
Loops whose closed forms exceed ``L`` become segments of their own.
"""
from __future__ import annotations

from typing import Callable, Sequence

import sympy as sp

from sparsad.coarsen import ssa


def use_counts(graph: ssa.Graph) -> dict[int, int]:
    """How many users each node has, loop bodies included (keyed by node id)."""
    counts: dict[int, int] = {}
    seen: set[int] = set()
    stack = list(graph.outputs)
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        operands = list(ssa.children(node))
        if isinstance(node, ssa.Loop):
            operands += list(ssa.body_nodes(node))
        for child in operands:
            counts[id(child)] = counts.get(id(child), 0) + 1
            stack.append(child)
    return counts


def choose_cut(operands: Sequence[ssa.Node], values: Sequence[sp.Expr], uses: dict[int, int],
               size: Callable[[sp.Expr], int]) -> int | None:
    """Index of the operand to make its own segment, or None when every operand is already atomic."""
    best, best_key = None, None
    for position, (node, value) in enumerate(zip(operands, values)):
        if not isinstance(value, sp.Expr) or value.is_Atom:
            continue
        key = (uses.get(id(node), 1), size(value))
        if best_key is None or key > best_key:
            best, best_key = position, key
    return best
