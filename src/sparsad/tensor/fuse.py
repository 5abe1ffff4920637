"""Einsum fusion (§5.1): an einsum tree becomes one einsum, by union-find over subscripts.

The tree is linearised on the fly: an Einsum reached along two paths is visited twice, each
visit with its own letters (the paper's clones). Each (visit, letter) pair is a dimension; an
operand's output axis and the consumer's subscript for that axis are the same dimension, so they
are united. Every disjoint set then gets one letter of the fused einsum.
"""
from __future__ import annotations

import itertools
from typing import Hashable, Sequence

from opt_einsum import get_symbol

from sparsad.tensor.graph import rewrite
from sparsad.tensor.nodes import Einsum, Node


class UnionFind:
    """Disjoint sets of hashable items with path halving and union by size."""

    def __init__(self):
        self.parent: dict[Hashable, Hashable] = {}
        self.size: dict[Hashable, int] = {}

    def find(self, item: Hashable) -> Hashable:
        self.parent.setdefault(item, item)
        self.size.setdefault(item, 1)
        while self.parent[item] != item:
            self.parent[item] = self.parent[self.parent[item]]
            item = self.parent[item]
        return item

    def union(self, a: Hashable, b: Hashable) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return
        if self.size[ra] < self.size[rb]:
            ra, rb = rb, ra
        self.parent[rb] = ra
        self.size[ra] += self.size[rb]


def fuse_einsum(node: Einsum) -> Einsum:
    """One einsum equal to the einsum tree rooted at `node` (operands that are Einsums inlined)."""
    if not any(isinstance(op, Einsum) for op in node.inputs):
        return node
    uf = UnionFind()
    leaves: list[tuple[Node, list]] = []
    visits = itertools.count()

    def visit(e: Einsum, tag: int, bound: list | None) -> None:
        if bound is not None:
            for ch, dim in zip(e.out_sub, bound):
                uf.union((tag, ch), dim)
        for sub, op in zip(e.in_subs, e.inputs):
            dims = [(tag, ch) for ch in sub]
            for d in dims:
                uf.find(d)
            if isinstance(op, Einsum):
                visit(op, next(visits), dims)
            else:
                leaves.append((op, dims))

    root_tag = next(visits)
    visit(node, root_tag, None)
    letters: dict[Hashable, str] = {}

    def letter(dim) -> str:
        root = uf.find(dim)
        if root not in letters:
            letters[root] = get_symbol(len(letters))
        return letters[root]

    subs = ["".join(letter(d) for d in dims) for _, dims in leaves]
    out = "".join(letter((root_tag, ch)) for ch in node.out_sub)
    return Einsum(",".join(subs) + "->" + out, *[op for op, _ in leaves])


def fuse(nodes: Sequence[Node]) -> list[Node]:
    """Fuse every einsum tree of the graph into a single Einsum node."""
    return rewrite(list(nodes), lambda n: fuse_einsum(n) if isinstance(n, Einsum) else n)
