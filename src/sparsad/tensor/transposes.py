"""Transposes folded away (§5.5's follow-up): no node of an optimized graph only permutes axes.

A pure transpose (a Transpose node, or a one-operand einsum that renames no axis away) costs a
dispatch and often a copy, yet an einsum can read any operand in any axis order and produce its
result in any order. So a transpose is folded

* into its consumers: an einsum operand that is a transpose of s becomes s with its subscripts
  permuted (chains of transposes compose);
* into its producer: an einsum whose value is wanted transposed is re-oriented to produce that
  order, when every other consumer is an einsum that can read the new order instead;
* into a copy of its producer, when that einsum sums nothing (an outer or elementwise product:
  computing it in the other order costs what the transpose would);
* away: a permutation within the declared symmetry of its source (Identity, symmetric Variables)
  is the source itself.

A transpose survives only where non-einsum users (sums, graph outputs) need one contracted value
in two axis orders (then a transpose is the cheapest way to get the second), or where its
source is not an einsum (a Variable added to its own transpose).
"""
from __future__ import annotations

from typing import Sequence

from sparsad.tensor.graph import fresh_letters, rewrite, topological
from sparsad.tensor.nodes import Einsum, Node, Transpose

Perm = tuple[int, ...]


def transpose_parts(node: Node) -> tuple[Node, Perm] | None:
    """(source, perm) when node == source transposed (out axis i is source axis perm[i]), else None."""
    if isinstance(node, Transpose):
        return node.inputs[0], node.perm
    if isinstance(node, Einsum) and len(node.inputs) == 1:
        sub, out = node.in_subs[0], node.out_sub
        if len(set(sub)) == len(sub) and sorted(sub) == sorted(out):
            return node.inputs[0], tuple(sub.index(c) for c in out)
    return None


def within_symmetry(node: Node, perm: Perm) -> bool:
    """perm moves every axis of node only inside its symmetry group: node transposed is node."""
    group_of = {a: k for k, g in enumerate(node.symmetry) for a in g}
    return all(p == i or (i in group_of and group_of.get(p) == group_of[i]) for i, p in enumerate(perm))


def resolve(node: Node) -> tuple[Node, Perm]:
    """Follow chains of transposes to a source that is not one: node == source transposed by perm."""
    perm: Perm = tuple(range(node.ndim))
    while True:
        parts = transpose_parts(node)
        if parts is None:
            break
        source, p = parts
        perm = tuple(p[i] for i in perm)            # node axis i = source axis p[perm[i]]
        node = source
    if within_symmetry(node, perm):
        perm = tuple(range(node.ndim))
    return node, perm


def read_through(sub: str, perm: Perm) -> str:
    """Subscripts for a source whose transpose by perm was read with `sub`."""
    letters = [""] * len(sub)
    for i, p in enumerate(perm):
        letters[p] = sub[i]
    return "".join(letters)


def _fold_into_consumers(node: Node) -> Node:
    if isinstance(node, Transpose):             # spelled as the einsum it is, so one rule fits all
        letters = "".join(fresh_letters(node.ndim))
        node = Einsum(f"{letters}->{''.join(letters[p] for p in node.perm)}", node.inputs[0])
    parts = transpose_parts(node)
    if parts is not None:
        source, perm = resolve(node)
        if perm == tuple(range(len(perm))):
            return source
        if isinstance(source, Einsum) and set("".join(source.in_subs)) == set(source.out_sub):
            # an outer or elementwise product sums nothing: producing it in the other order costs
            # what the transpose would
            return Einsum(",".join(source.in_subs) + "->" + "".join(source.out_sub[p] for p in perm),
                          *source.inputs)
        return node
    if not isinstance(node, Einsum):
        return node
    subs, ops, changed = [], [], False
    for sub, op in zip(node.in_subs, node.inputs):
        source, perm = resolve(op)
        if source is not op:
            sub, op, changed = read_through(sub, perm), source, True
        subs.append(sub)
        ops.append(op)
    if not changed:
        return node
    return Einsum(",".join(subs) + "->" + node.out_sub, *ops)


def _reorientations(nodes: Sequence[Node]) -> dict[int, Perm]:
    """Einsums to produce in another axis order: wanted transposed by perm, and every other
    consumer an einsum (which reads any order) and not a graph output."""
    outputs = {n.uid for n in nodes}
    users: dict[int, list[Node]] = {}
    for n in topological(nodes):
        for c in n.inputs:
            users.setdefault(c.uid, []).append(n)
    chosen: dict[int, Perm] = {}
    for n in topological(nodes):
        parts = transpose_parts(n)
        if parts is None:
            continue
        source, perm = parts
        if not isinstance(source, Einsum) or source.uid in outputs or source.uid in chosen:
            continue
        if all(u is n or (isinstance(u, Einsum) and transpose_parts(u) is None) for u in users[source.uid]):
            chosen[source.uid] = perm
    return chosen


def fold_transposes(nodes: Sequence[Node]) -> list[Node]:
    """The graph with its pure transposes folded into consumers and producers (same values)."""
    graph = rewrite(list(nodes), _fold_into_consumers)
    chosen = _reorientations(graph)
    return _relink(graph, chosen) if chosen else graph


def _relink(graph: list[Node], chosen: dict[int, Perm]) -> list[Node]:
    """Re-orient the chosen einsums; their einsum consumers read the new order (so the transposes
    that asked for it become identity permutations and disappear)."""
    new: dict[int, Node] = {}
    orient: dict[int, Perm] = {}         # new node's value = old value transposed by perm
    for node in topological(graph):
        args = [new[c.uid] for c in node.inputs]
        if isinstance(node, Einsum) and any(c.uid in orient for c in node.inputs):
            subs = []
            for sub, c in zip(node.in_subs, node.inputs):
                if c.uid in orient:
                    perm = orient[c.uid]             # new axis j = old axis perm[j]
                    sub = "".join(sub[p] for p in perm)
                subs.append(sub)
            rebuilt = Einsum(",".join(subs) + "->" + node.out_sub, *args)
        else:
            rebuilt = node.with_inputs(args) if node.inputs else node
        if node.uid in chosen:
            perm = chosen[node.uid]
            rebuilt = Einsum(",".join(rebuilt.in_subs) + "->" + "".join(rebuilt.out_sub[p] for p in perm),
                             *rebuilt.inputs)
            orient[node.uid] = perm
        new[node.uid] = _fold_into_consumers(rebuilt)
    return [new[n.uid] for n in graph]
