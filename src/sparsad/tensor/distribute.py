"""Einsum distribution (§5.1): push Add, Sub and Scale out of einsum operands.

    Einsum(dist_op(g1, g2), g3) = dist_op(Einsum(g1, g3), Einsum(g2, g3))

Sum and Transpose are first rewritten as the einsums they are, so every linear node downstream
is an Einsum, Add, Sub or Scale.

Distribution multiplies terms: an einsum of operands with t1, t2, ... terms becomes t1·t2·...
einsums, and nested derivatives of inverses compound that exponentially. An einsum whose
expansion would exceed `max_terms` keeps its sum operands (it is still correct, only less fused).
"""
from __future__ import annotations

from math import prod
from typing import Sequence

from sparsad.tensor.graph import einsum_view, fold, is_linear, rewrite
from sparsad.tensor.nodes import Add, Einsum, Node, SampleAt, Scale, Sub, Sum, Transpose


def as_einsum(node: Node) -> Node:
    """Sum and Transpose nodes as Einsum nodes; other nodes unchanged."""
    if isinstance(node, (Sum, Transpose)):
        ins, out = einsum_view(node)
        return Einsum(",".join(ins) + "->" + out, *node.inputs)
    return node


def _distribute_one(node: Node) -> Node:
    if isinstance(node, SampleAt):       # sampling is linear: push it onto each term
        x, pattern = node.inputs
        if isinstance(x, (Add, Sub)):
            return type(x)(_distribute_one(SampleAt(x.inputs[0], pattern)),
                           _distribute_one(SampleAt(x.inputs[1], pattern)))
        if isinstance(x, Scale):
            return Scale(x.coef, _distribute_one(SampleAt(x.inputs[0], pattern)))
        return node
    if not isinstance(node, Einsum):
        return node
    for k, operand in enumerate(node.inputs):
        if isinstance(operand, (Add, Sub)):
            left = list(node.inputs)
            right = list(node.inputs)
            left[k], right[k] = operand.inputs
            a = _distribute_one(Einsum(node.subscripts, *left))
            b = _distribute_one(Einsum(node.subscripts, *right))
            return type(operand)(a, b)
        if isinstance(operand, Scale):
            inner = list(node.inputs)
            inner[k] = operand.inputs[0]
            return Scale(operand.coef, _distribute_one(Einsum(node.subscripts, *inner)))
    return node


MAX_TERMS = 64


def term_counter():
    """How many terms a node is a linear combination of (with repeats), memoised by node."""
    memo: dict[int, int] = {}

    def count(n: Node) -> int:
        return sum(memo[c.uid] for c in n.inputs) if is_linear(n) else 1

    return lambda node: fold(node, memo, is_linear, count)


def distribute(nodes: Sequence[Node], max_terms: int = MAX_TERMS) -> list[Node]:
    """Rewrite so that no Einsum has an Add, Sub or Scale operand, unless its expansion would
    have more than `max_terms` terms."""
    terms = term_counter()

    def one(node: Node) -> Node:
        node = as_einsum(node)
        if isinstance(node, Einsum) and prod(terms(op) for op in node.inputs) > max_terms:
            return node
        return _distribute_one(node)

    return rewrite(list(nodes), one)
