"""Common subexpression elimination up to renaming, operand order and transposition (§5.5).

An einsum is read as a tensor diagram: operands (by their own canonical ids) and the way their
axes are wired. Operands are put in a canonical order (ties between equal operands resolved by
trying their permutations and keeping the smallest wiring), letters are renamed by first
appearance, and the output letters are kept apart: two einsums whose diagrams agree but whose
outputs list the same letters in another order are transposes of each other.
"""
from __future__ import annotations

import itertools
from typing import Sequence

import numpy as np

from sparsad.tensor.graph import rewrite, topological
from sparsad.tensor.nodes import (
    Add, Constant, Einsum, Elementwise, Identity, Node, SampleAt, Scale, Sub, Sum, TensorInverse,
    Transpose, Variable, Zeros,
)

_MAX_ORDERS = 120


class Canonicalizer:
    """Assigns every node a small integer id; structurally equal nodes get the same id."""

    def __init__(self):
        self._table: dict[tuple, int] = {}
        self._ids: dict[int, int] = {}
        self._einsum_forms: dict[int, tuple] = {}

    def _intern(self, key: tuple) -> int:
        return self._table.setdefault(key, len(self._table))

    def id(self, node: Node) -> int:
        if node.uid in self._ids:
            return self._ids[node.uid]
        for n in topological([node]):
            if n.uid not in self._ids:
                self._ids[n.uid] = self._intern(self._key(n))
        return self._ids[node.uid]

    def einsum_form(self, node: Einsum) -> tuple[tuple, str]:
        """(diagram key without output order, output letters in canonical names)."""
        self.id(node)
        return self._einsum_forms[node.uid]

    def _key(self, n: Node) -> tuple:
        ids = [self._ids[c.uid] for c in n.inputs]
        if isinstance(n, Variable):
            return ("var", n.uid)
        if isinstance(n, Identity):
            return ("eye", n.n)
        if isinstance(n, Zeros):
            return ("zeros", n.shape)
        if isinstance(n, Constant):
            if n.value.size <= 4096:
                return ("const", n.value.shape, n.value.dtype.str, n.value.tobytes())
            return ("const-uid", n.uid)
        if isinstance(n, Einsum):
            diagram, out = _einsum_canonical(n.in_subs, n.out_sub, ids)
            self._einsum_forms[n.uid] = (diagram, out)
            return ("einsum", diagram, out)
        if isinstance(n, Add):
            return ("add", tuple(sorted(ids)))
        if isinstance(n, Sub):
            return ("sub", tuple(ids))
        if isinstance(n, Scale):
            return ("scale", float(n.coef), ids[0])
        if isinstance(n, Elementwise):
            return ("fn", n.fn, ids[0])
        if isinstance(n, Sum):
            return ("sum", n.axes, ids[0])
        if isinstance(n, Transpose):
            return ("transpose", n.perm, ids[0])
        if isinstance(n, TensorInverse):
            return ("inv", n.ind, ids[0])
        if isinstance(n, SampleAt):
            return ("sample", ids[0], ids[1])
        return (type(n).__name__, n.uid)


def _relabel(subs: Sequence[str]) -> tuple[tuple[str, ...], dict[str, str]]:
    """Rename letters by first appearance (a, b, ...; <26>, <27>, ... beyond z, unambiguous)."""
    mapping: dict[str, str] = {}
    for ch in "".join(subs):
        if ch not in mapping:
            mapping[ch] = chr(ord("a") + len(mapping)) if len(mapping) < 26 else f"<{len(mapping)}>"
    return tuple("".join(mapping[c] for c in s) for s in subs), mapping


def _refine(in_subs: Sequence[str], out: str, colors: list) -> list[int]:
    """Colour refinement of the operands (Weisfeiler-Lehman on the tensor diagram).

    An operand's new colour is its old colour plus, for each of its axes, whether the letter is
    an output letter and the colours and axes of every other occurrence of the letter. Colours are
    ranks of these invariant signatures, so they never depend on how the letters are spelled or
    in which order the operands are listed, nor on the order of the output letters.
    """
    where: dict[str, list[tuple[int, int]]] = {}
    for k, sub in enumerate(in_subs):
        for axis, ch in enumerate(sub):
            where.setdefault(ch, []).append((k, axis))
    outset = set(out)
    colors = _ranks(colors)
    while True:
        signatures = [
            (colors[k], tuple((ch in outset,
                               tuple(sorted((colors[j], a) for j, a in where[ch] if (j, a) != (k, axis))))
                              for axis, ch in enumerate(sub)))
            for k, sub in enumerate(in_subs)]
        refined = _ranks(signatures)
        if len(set(refined)) == len(set(colors)):
            return refined
        colors = refined


def _ranks(keys: Sequence) -> list[int]:
    table = {key: rank for rank, key in enumerate(sorted(set(keys)))}
    return [table[key] for key in keys]


def _tie_groups(colors: Sequence[int]) -> list[list[int]]:
    order = sorted(range(len(colors)), key=lambda k: colors[k])
    return [list(g) for _, g in itertools.groupby(order, key=lambda k: colors[k])]


def _orders(in_subs: Sequence[str], out: str, colors: list, budget: list[int]):
    """Operand orders to try: refine, then single out each operand of the first tied cell in
    turn and recurse (individualisation-refinement, as graph canonisers do). The first branch is
    always followed to a leaf; the others only while `budget` (leaves) lasts."""
    colors = _refine(in_subs, out, colors)
    groups = _tie_groups(colors)
    cell = next((g for g in groups if len(g) > 1), None)
    if cell is None:
        budget[0] -= 1
        yield [g[0] for g in groups]
        return
    for k in cell:
        yield from _orders(in_subs, out, [(c, j != k) for j, c in enumerate(colors)], budget)
        if budget[0] <= 0:
            return


def _einsum_canonical(in_subs: Sequence[str], out: str, ids: Sequence[int]) -> tuple[tuple, str]:
    """Canonical (operand ids, wiring, sorted output letters) and the canonical output string.

    Operands are ordered by id, refined by how they are wired; ties that refinement leaves are
    searched, keeping the order with the smallest wiring. Past `_MAX_ORDERS` orders (very
    symmetric diagrams) the search stops: the key still describes the einsum exactly, so equal
    keys always mean equal einsums, though two spellings may then get different keys.
    """
    best = None
    for perm in _orders(in_subs, out, list(ids), [_MAX_ORDERS]):
        subs, mapping = _relabel([in_subs[k] for k in perm])
        # The output's letters as a set belong to the diagram; their order is the transpose.
        outset = tuple(sorted(mapping[c] for c in out))
        key = (subs, outset, "".join(mapping[c] for c in out))
        if best is None or key < best:
            best = key
    subs, outset, out_canon = best
    return (tuple(sorted(ids)), subs, outset), out_canon


def cse(nodes: Sequence[Node], transposes: bool = True) -> list[Node]:
    """Replace repeated subexpressions by one node; einsums equal up to a transpose share too."""
    canon = Canonicalizer()
    seen: dict[int, Node] = {}
    diagrams: dict[tuple, tuple[Node, str]] = {}

    def visit(node: Node) -> Node:
        key = canon.id(node)
        if key in seen:
            return seen[key]
        if transposes and isinstance(node, Einsum):
            diagram, out = canon.einsum_form(node)
            if diagram in diagrams:
                other, other_out = diagrams[diagram]
                perm = tuple(other_out.index(c) for c in out)
                if len(set(out)) == len(out) and sorted(perm) == list(range(len(out))):
                    result = Transpose(other, perm)
                    seen[key] = result
                    return result
            diagrams[diagram] = (node, out)
        seen[key] = node
        return node

    return rewrite(list(nodes), visit)


def structurally_equal(a: Node, b: Node, canon: Canonicalizer | None = None) -> bool:
    canon = canon or Canonicalizer()
    return canon.id(a) == canon.id(b)


def leaf_equal(a: Node, b: Node) -> bool:
    """Cheap equality for the leaves of fused einsums."""
    if a is b:
        return True
    if isinstance(a, Identity) and isinstance(b, Identity):
        return a.n == b.n
    if isinstance(a, Constant) and isinstance(b, Constant):
        return a.value.shape == b.value.shape and np.array_equal(a.value, b.value)
    return False
