"""Elementary algebraic simplification with SymPy (§5.2).

A tree of Add, Sub and Scale nodes is a linear combination of terms. Each structurally distinct
term (by the CSE canonical id, so equal einsums spelled differently coincide) becomes a SymPy
symbol, SymPy collects the coefficients, and the combination is rebuilt with the zero terms gone:
0.5·T + 0.5·T' - A + A (T' a renaming of T) becomes T.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import sympy

from sparsad.tensor.cse import Canonicalizer
from sparsad.tensor.graph import rewrite
from sparsad.tensor.nodes import Add, Constant, Node, Scale, Sub, zeros


def _coefficient(value) -> sympy.Expr:
    if isinstance(value, sympy.Expr):
        return value
    return sympy.nsimplify(value, rational=True) if float(value) == float(value) else sympy.Float(value)


def _is_zero(node: Node) -> bool:
    return isinstance(node, Constant) and node.value.size <= 4096 and not np.any(node.value)


def linear_terms(node: Node, canon: Canonicalizer) -> tuple[sympy.Expr, dict[sympy.Symbol, Node]]:
    """The Add/Sub/Scale tree under `node` as a SymPy linear combination of term symbols."""
    terms: dict[sympy.Symbol, Node] = {}

    def walk(n: Node) -> sympy.Expr:
        if isinstance(n, Add):
            return walk(n.inputs[0]) + walk(n.inputs[1])
        if isinstance(n, Sub):
            return walk(n.inputs[0]) - walk(n.inputs[1])
        if isinstance(n, Scale):
            return _coefficient(n.coef) * walk(n.inputs[0])
        if _is_zero(n):
            return sympy.Integer(0)
        symbol = sympy.Symbol(f"t{canon.id(n)}")
        terms.setdefault(symbol, n)
        return symbol

    return walk(node), terms


def simplify_linear(node: Node, canon: Canonicalizer) -> Node:
    if not isinstance(node, (Add, Sub, Scale)):
        return node
    expr, terms = linear_terms(node, canon)
    expr = sympy.expand(expr)
    pieces = []
    for symbol, term in terms.items():
        coef = expr.coeff(symbol)
        if coef != 0:
            pieces.append((coef, term))
    if not pieces:
        return zeros(node.shape)
    result = None
    for coef, term in pieces:
        negative = coef.is_negative
        magnitude = -coef if negative else coef
        part = term if magnitude == 1 else Scale(float(magnitude), term)
        if result is None:
            result = Scale(-1, part) if negative else part
        else:
            result = Sub(result, part) if negative else Add(result, part)
    return result


def simplify(nodes: Sequence[Node]) -> list[Node]:
    """Collect like terms of every linear combination in the graph."""
    canon = Canonicalizer()
    return rewrite(list(nodes), lambda n: simplify_linear(n, canon))
