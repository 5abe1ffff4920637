"""Common subexpression elimination up to renaming, operand order and transposition (§5.5).

Transposes are seen through (an einsum reading a transposed operand is keyed as reading the
source with permuted subscripts; a transpose of an einsum is that einsum with its output
reordered), and an operand's declared symmetry (Identity, symmetric Variables) lets its axes be
read in any order within a group, so I[a,b] and I[b,a] key alike.

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

from sparsad.tensor.graph import fresh_letters, rewrite, topological
from sparsad.tensor.transposes import read_through, resolve, transpose_parts
from sparsad.tensor.nodes import (
    Add, Constant, Einsum, Elementwise, Identity, Node, Power, SampleAt, Scale, Sub, Sum, TensorInverse,
    Transpose, Variable, Zeros,
)

_MAX_ORDERS = 120


class Canonicalizer:
    """Assigns every node a small integer id; structurally equal nodes get the same id."""

    def __init__(self):
        self._table: dict[tuple, int] = {}
        self._ids: dict[int, int] = {}
        self._keys: dict[int, tuple] = {}
        self._einsum_forms: dict[int, tuple] = {}
        self._items: dict[int, tuple] = {}     # einsum uid -> (subs, ids, syms, out) read through transposes

    def _intern(self, key: tuple) -> int:
        return self._table.setdefault(key, len(self._table))

    def id(self, node: Node) -> int:
        if node.uid in self._ids:
            return self._ids[node.uid]
        for n in topological([node]):
            if n.uid not in self._ids:
                key = self._key(n)
                self._keys[n.uid] = key
                self._ids[n.uid] = self._intern(key)
        return self._ids[node.uid]

    def einsum_form(self, node: Einsum) -> tuple[tuple, str] | None:
        """(diagram key without output order, output letters in canonical names); None for an
        einsum that only restates its operand."""
        self.id(node)
        return self._einsum_forms.get(node.uid)

    def _einsum_items(self, n: Node) -> tuple | None:
        """An einsum or transpose as (subscripts, operand ids, operand symmetries, output), its
        operands read through transposes; None when n is its source unpermuted."""
        if transpose_parts(n) is not None:
            source, perm = resolve(n)
            if perm == tuple(range(len(perm))):
                return None
            if source.uid in self._items:            # the source einsum with its output reordered
                subs, ids, syms, out = self._items[source.uid]
                items = (subs, ids, syms, "".join(out[p] for p in perm))
                self._items[n.uid] = items
                return items
            letters = "".join(fresh_letters(source.ndim))
            items = ((letters,), (self._ids[source.uid],), (source.symmetry,),
                     "".join(letters[p] for p in perm))
            self._items[n.uid] = items
            return items
        subs, ids, syms = [], [], []
        for sub, op in zip(n.in_subs, n.inputs):
            source, perm = resolve(op)
            sub = read_through(sub, perm)
            form = self._einsum_forms.get(source.uid)
            if form is not None:
                # an einsum operand is its diagram read in canonical axis order: operands that
                # are transposes of one another then look alike
                diagram, out_canon = form
                order = sorted(range(len(sub)), key=lambda i: out_canon[i])
                subs.append("".join(sub[i] for i in order))
                ids.append(self._intern(("diagram", diagram)))
                syms.append(())
                continue
            subs.append(sub)
            ids.append(self._ids[source.uid])
            syms.append(source.symmetry)
        items = (tuple(subs), tuple(ids), tuple(syms), n.out_sub)
        self._items[n.uid] = items
        return items

    def _key(self, n: Node) -> tuple:
        ids = [self._ids[c.uid] for c in n.inputs]
        if isinstance(n, Variable):
            return ("var", n.uid)
        if isinstance(n, Sum):        # the einsum it is
            ins, out = n.as_einsum()
            diagram, out_canon = _einsum_canonical(ins, out, ids, [n.inputs[0].symmetry])
            return ("einsum", diagram, out_canon)
        if isinstance(n, Identity):
            return ("eye", n.n)
        if isinstance(n, Zeros):
            return ("zeros", n.shape)
        if isinstance(n, Constant):
            if n.value.size <= 4096:
                return ("const", n.value.shape, n.value.dtype.str, n.value.tobytes())
            return ("const-uid", n.uid)
        if isinstance(n, (Einsum, Transpose)):
            items = self._einsum_items(n)
            if items is None:                      # the identity permutation of its source
                return self._keys[resolve(n)[0].uid]
            subs, ids, syms, out = items
            diagram, out_canon = _einsum_canonical(subs, out, ids, syms)
            self._einsum_forms[n.uid] = (diagram, out_canon)
            return ("einsum", diagram, out_canon)
        if isinstance(n, Add):
            return ("add", tuple(sorted(ids)))
        if isinstance(n, Sub):
            return ("sub", tuple(ids))
        if isinstance(n, Scale):
            return ("scale", float(n.coef), ids[0])
        if isinstance(n, Elementwise):
            return ("fn", n.fn, ids[0])
        if isinstance(n, Power):
            return ("pow", n.exponent, ids[0])
        if isinstance(n, TensorInverse):
            return ("inv", n.ind, ids[0])
        if isinstance(n, SampleAt):
            return ("sample", ids[0], ids[1])
        return (type(n).__name__, n.uid)


def _name(k: int) -> str:
    return chr(ord("a") + k) if k < 26 else f"<{k}>"


def _relabel(subs: Sequence[str], syms: Sequence[tuple] = (), out: str = "") -> tuple[tuple[str, ...], dict[str, str]]:
    """Rename letters by first appearance (a, b, ...; <26>, <27>, ... beyond z, unambiguous).

    Within a symmetry group of an operand the letters are first put in a canonical order (named
    ones by name, then new ones by where they appear next, then by their place in the output):
    reading a symmetric operand's axes in another order within a group does not change its value.
    """
    mapping: dict[str, str] = {}
    order: dict[str, int] = {}
    result = []
    for k, sub in enumerate(subs):
        groups = syms[k] if k < len(syms) else ()
        if groups:
            later = "".join(subs[k + 1:])
            letters = list(sub)

            def rank(ch):
                if ch in order:
                    return (0, order[ch])
                nxt = later.find(ch)
                return (1, nxt if nxt >= 0 else len(later) + (out.find(ch) if ch in out else len(out)))

            for g in groups:
                for axis, ch in zip(g, sorted((letters[a] for a in g), key=rank)):
                    letters[axis] = ch
            sub = "".join(letters)
        for ch in sub:
            if ch not in mapping:
                order[ch] = len(mapping)
                mapping[ch] = _name(len(mapping))
        result.append("".join(mapping[c] for c in sub))
    return tuple(result), mapping


def _axis_classes(in_subs: Sequence[str], syms: Sequence[tuple]) -> list[list[int]]:
    """Each operand axis's position, or its symmetry group's first axis (symmetric axes alike)."""
    classes = []
    for k, sub in enumerate(in_subs):
        first = {a: min(g) for g in (syms[k] if k < len(syms) else ()) for a in g}
        classes.append([first.get(a, a) for a in range(len(sub))])
    return classes


def _refine(in_subs: Sequence[str], out: str, colors: list, syms: Sequence[tuple] = ()) -> list[int]:
    """Colour refinement of the operands (Weisfeiler-Lehman on the tensor diagram).

    An operand's new colour is its old colour plus, for each of its axes, whether the letter is
    an output letter and the colours and axes of every other occurrence of the letter. Colours are
    ranks of these invariant signatures, so they never depend on how the letters are spelled or
    in which order the operands are listed, nor on the order of the output letters.
    """
    where: dict[str, list[tuple[int, int]]] = {}
    classes = _axis_classes(in_subs, syms)
    for k, sub in enumerate(in_subs):
        for axis, ch in enumerate(sub):
            where.setdefault(ch, []).append((k, classes[k][axis]))
    outset = set(out)
    colors = _ranks(colors)
    while True:
        signatures = [
            (colors[k], tuple((ch in outset,
                               tuple(sorted((colors[j], a) for j, a in where[ch] if (j, a) != (k, classes[k][axis]))))
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


def _orders(in_subs: Sequence[str], out: str, colors: list, budget: list[int], syms: Sequence[tuple] = ()):
    """Operand orders to try: refine, then single out each operand of the first tied cell in
    turn and recurse (individualisation-refinement, as graph canonisers do). The first branch is
    always followed to a leaf; the others only while `budget` (leaves) lasts."""
    colors = _refine(in_subs, out, colors, syms)
    groups = _tie_groups(colors)
    cell = next((g for g in groups if len(g) > 1), None)
    if cell is None:
        budget[0] -= 1
        yield [g[0] for g in groups]
        return
    for k in cell:
        yield from _orders(in_subs, out, [(c, j != k) for j, c in enumerate(colors)], budget, syms)
        if budget[0] <= 0:
            return


def _einsum_canonical(in_subs: Sequence[str], out: str, ids: Sequence[int],
                      syms: Sequence[tuple] = ()) -> tuple[tuple, str]:
    """Canonical (operand ids, wiring, sorted output letters) and the canonical output string.

    Operands are ordered by id, refined by how they are wired; ties that refinement leaves are
    searched, keeping the order with the smallest wiring. Past `_MAX_ORDERS` orders (very
    symmetric diagrams) the search stops: the key still describes the einsum exactly, so equal
    keys always mean equal einsums, though two spellings may then get different keys.
    """
    best = None
    syms = list(syms) + [()] * (len(in_subs) - len(syms))
    for perm in _orders(in_subs, out, list(ids), [_MAX_ORDERS], syms):
        subs, mapping = _relabel([in_subs[k] for k in perm], [syms[k] for k in perm], out)
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
        form = canon.einsum_form(node) if isinstance(node, Einsum) else None
        if transposes and form is not None:
            diagram, out = form
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
