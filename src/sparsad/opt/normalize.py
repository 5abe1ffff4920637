"""Multiplication normalization (∇SD Fig. 9, second group): outer products and scalings become
sums of scalar products, so that fusion can remove the intermediate tensors.

    e1 * e2  ~>  sum(<i1, v2> in e1) ... sum(<in, v> in vn) { i1 -> ... { in -> v * e2 } }   (e1: tensor n)
    e1 * e2  ~>  sum(<i1, v2> in e2) ... sum(<in, v> in vn) { i1 -> ... { in -> e1 * v } }   (e1 scalar, e2: tensor n)
"""
from __future__ import annotations

import itertools

from sparsad.lang.build import over_levels, singletons
from sparsad.lang.syntax import Binary, Expr, Singleton, Sum
from sparsad.lang.types import Dict, Type
from sparsad.opt.rewrite import Rule, Scope, rewrite_fixpoint

_counter = itertools.count(1)


def _fresh(hint: str) -> str:
    return f"_{hint}{next(_counter)}"


def _order(t: Type) -> int:
    order = 0
    while isinstance(t, Dict):
        order, t = order + 1, t.value
    return order


def iterate_leaves(tensor: Expr, order: int, leaf) -> Expr:
    """sum(<i1, v2> in tensor) ... { i1 -> ... { in -> leaf(v) } }."""
    keys = [_fresh("i") for _ in range(order)]
    values = [_fresh("v") for _ in range(order)]
    return over_levels(tensor, keys, values, lambda ks, v: singletons(ks, leaf(v)))


def _normalize_product(e: Expr, scope: Scope):
    if not (isinstance(e, Binary) and e.op == "*"):
        return None
    left_order = _order(scope.type_of(e.left))
    if left_order > 0:
        return iterate_leaves(e.left, left_order, lambda v: Binary("*", v, e.right))
    right_order = _order(scope.type_of(e.right))
    if right_order > 0:
        return iterate_leaves(e.right, right_order, lambda v: Binary("*", e.left, v))
    return None


def _scalar_into_structure(e: Expr, scope: Scope):
    """s * sum(..) b (b a dictionary), s * {k -> v}, s * let x = a in b (and mirrored): move the
    scalar inside."""
    from sparsad.lang.syntax import Let, free_vars

    if not (isinstance(e, Binary) and e.op == "*"):
        return None
    for scalar, other, scalar_left in ((e.left, e.right, True), (e.right, e.left, False)):
        if _order(scope.type_of(scalar)) != 0:
            continue
        names = free_vars(scalar)

        def times(x: Expr) -> Expr:
            return Binary("*", scalar, x) if scalar_left else Binary("*", x, scalar)

        # a scalar sum (a reduction) keeps its factor outside: inside, the factor (an exp, a
        # dot product) would be evaluated once per term, and there is no dictionary to fuse
        if isinstance(other, Sum) and not names & {other.key, other.val} and _order(scope.type_of(other)) > 0:
            return Sum(other.key, other.val, other.source, times(other.body))
        if isinstance(other, Singleton):
            return Singleton(other.key, times(other.value))
        if isinstance(other, Let) and other.name not in names:
            return Let(other.name, other.value, times(other.body))
    return None


def _unit(e: Expr, _scope):
    from sparsad.lang.syntax import Const

    if isinstance(e, Binary) and e.op == "*":
        for one, other in ((e.left, e.right), (e.right, e.left)):
            if isinstance(one, Const) and not isinstance(one.value, bool) and one.value == 1:
                return other
    return None


RULES = (
    Rule("1 * e = e * 1 = e", _unit),
    Rule("move a scalar factor into a sum, singleton or let", _scalar_into_structure),
    Rule("normalize tensor products into sums of scalar products", _normalize_product),
)


def normalize_products(expr: Expr, types: dict[str, Type]) -> Expr:
    """Every `*` with a dictionary operand rewritten as a sum of scalar products."""
    return rewrite_fixpoint(expr, RULES, types)
