"""A cost model for einsum graphs: floating-point operations plus a fixed charge per node.

The optimizer's passes are heuristics (distribution multiplies terms, fusion clones shared
einsums), so `optimize` compares what it built with the plainly planned graph under this model
and keeps the cheaper. An einsum costs what its default contraction path costs (`paths.choose_path`, the
plan the executor follows); an inverse of an n×n matricization costs n³;
every other node touches each element of its output once.
"""
from __future__ import annotations

from math import prod
from typing import Iterable

from sparsad.tensor.executor import canonical_subscripts
from sparsad.tensor.graph import topological
from sparsad.tensor.nodes import Einsum, Node, TensorInverse
from sparsad.tensor.paths import choose_path

NODE_COST = 1000    # about a microsecond of executor dispatch, in flops


def node_cost(node: Node) -> int:
    """Estimated flops of evaluating `node` from its inputs."""
    if isinstance(node, Einsum):
        if len(node.inputs) == 1:
            return prod(node.inputs[0].shape)
        subs = canonical_subscripts(node.in_subs, node.out_sub)
        return choose_path(subs, [op.shape for op in node.inputs])[1]
    if isinstance(node, TensorInverse):
        return prod(node.shape[:node.ndim - node.ind]) ** 3
    return prod(node.shape) if node.inputs else 0


def graph_cost(outputs: Iterable[Node]) -> int:
    """Estimated cost of evaluating every node reachable from `outputs` once."""
    return sum(node_cost(n) + NODE_COST for n in topological(outputs) if n.inputs)
