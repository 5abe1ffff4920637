"""Elementary algebraic simplification with SymPy (§5.2).

A tree of Add, Sub and Scale nodes is a linear combination of terms. Each structurally distinct
term (by the CSE canonical id, so equal einsums spelled differently coincide) gets an exact SymPy
coefficient, like terms are collected, and the combination is rebuilt with the zero terms gone:
0.5·T + 0.5·T' - A + A (T' a renaming of T) becomes T.

Combinations are memoised by node, so a graph whose sums share sub-sums (as derivative graphs
do) is walked once, not once per path through it.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Sequence

import sympy

from sparsad.tensor.cse import Canonicalizer
from sparsad.tensor.graph import fold, is_linear, topological
from sparsad.tensor.nodes import Add, Node, Scale, Sub, is_zero, zeros

Combination = dict[int, sympy.Expr]     # canonical term id -> exact coefficient


@lru_cache(maxsize=4096)
def _float_coefficient(value: float) -> sympy.Expr:
    # nsimplify is slow and coefficients repeat across a graph, hence the cache
    if value != value or value in (float("inf"), float("-inf")):
        return sympy.Float(value)
    return sympy.nsimplify(value, rational=True)


def _coefficient(value) -> sympy.Expr:
    if isinstance(value, sympy.Expr):
        return value
    return _float_coefficient(float(value))


def _combine(left: Combination, right: Combination, sign: int) -> Combination:
    out = dict(left)
    for key, coef in right.items():
        out[key] = out.get(key, sympy.Integer(0)) + sign * coef
    return out


class LinearTerms:
    """Linear combinations of the Add/Sub/Scale trees of one graph, memoised by node."""

    def __init__(self, canon: Canonicalizer):
        self.canon = canon
        self.terms: dict[int, Node] = {}
        self._memo: dict[int, Combination] = {}

    def of(self, node: Node) -> Combination:
        """The combination under `node`; terms are looked up in `self.terms`."""
        return fold(node, self._memo, is_linear, self._combination)

    def _combination(self, n: Node) -> Combination:
        if isinstance(n, Add):
            return _combine(self._memo[n.inputs[0].uid], self._memo[n.inputs[1].uid], 1)
        if isinstance(n, Sub):
            return _combine(self._memo[n.inputs[0].uid], self._memo[n.inputs[1].uid], -1)
        if isinstance(n, Scale):
            coef = _coefficient(n.coef)
            return {k: coef * c for k, c in self._memo[n.inputs[0].uid].items()}
        if is_zero(n):
            return {}
        key = self.canon.id(n)
        self.terms.setdefault(key, n)
        return {key: sympy.Integer(1)}


def rebuild(combination: Combination, terms: dict[int, Node], shape: tuple[int, ...]) -> Node:
    """The Add/Sub/Scale tree of a combination, without its zero terms."""
    result = None
    for key, coef in combination.items():
        if coef == 0:
            continue
        term = terms[key]
        negative = bool(coef.is_negative)
        magnitude = -coef if negative else coef
        part = term if magnitude == 1 else Scale(float(magnitude), term)
        if result is None:
            result = Scale(-1, part) if negative else part
        else:
            result = Sub(result, part) if negative else Add(result, part)
    return zeros(shape) if result is None else result


def simplify_linear(node: Node, linear: LinearTerms) -> Node:
    if not is_linear(node):
        return node
    return rebuild(linear.of(node), linear.terms, node.shape)


def simplify(nodes: Sequence[Node]) -> list[Node]:
    """Collect like terms of every linear combination in the graph.

    Only the roots of Add/Sub/Scale trees (outputs, or operands of other nodes) are rebuilt: the
    sums inside a tree are folded into its root's combination.
    """
    order = topological(nodes)
    roots = {n.uid for n in nodes} | {c.uid for n in order if not is_linear(n) for c in n.inputs}
    linear = LinearTerms(Canonicalizer())
    new: dict[int, Node] = {}
    for node in order:
        rebuilt = node.with_inputs([new[c.uid] for c in node.inputs]) if node.inputs else node
        new[node.uid] = simplify_linear(rebuilt, linear) if node.uid in roots else rebuilt
    return [new[n.uid] for n in nodes]
