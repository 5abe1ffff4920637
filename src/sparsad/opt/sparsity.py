"""Sparsity propagation (∇SD Fig. 9, first group): zeros made by differentiation are folded away.

`{}` is the zero of every type, so the rules need no types.
"""
from __future__ import annotations

from sparsad.lang.rebuild import substitute
from sparsad.lang.syntax import (Binary, EmptyDict, Expr, If, Let, Lookup, Neg, Singleton, Sum,
                                 Unique)
from sparsad.lang.types import Type
from sparsad.opt.rewrite import Rule, rewrite_fixpoint

ZERO = EmptyDict()


def _is_zero(e: Expr) -> bool:
    return isinstance(e, EmptyDict)


def _times_zero(e, _):
    if isinstance(e, Binary) and e.op == "*" and (_is_zero(e.left) or _is_zero(e.right)):
        return ZERO


def _plus_zero(e, _):
    if isinstance(e, Binary) and e.op in ("+", "-"):
        if _is_zero(e.right):
            return e.left
        if _is_zero(e.left):
            return e.right if e.op == "+" else Neg(e.right)


def _lookup_zero(e, _):
    if isinstance(e, Lookup) and _is_zero(e.dict):
        return ZERO


def _let_zero(e, _):
    if isinstance(e, Let) and _is_zero(e.value):
        return substitute(e.body, e.name, ZERO)


def _sum_over_zero(e, _):
    if isinstance(e, Sum) and (_is_zero(e.source) or _is_zero(e.body)):
        return ZERO


def _zero_structures(e, _):
    match e:
        case Singleton(value=EmptyDict()) | Neg(operand=EmptyDict()) | Unique(operand=EmptyDict()):
            return ZERO
        case If(then=EmptyDict(), orelse=None | EmptyDict()):
            return ZERO
        case Binary(op="/", left=EmptyDict()):
            return ZERO



RULES = (
    Rule("zero * e = e * zero = zero", _times_zero),
    Rule("e + zero = zero + e = e", _plus_zero),
    Rule("zero(e) = zero", _lookup_zero),
    Rule("let x = zero in e = e[x := zero]", _let_zero),
    Rule("sum over zero (or of zero) = zero", _sum_over_zero),
    Rule("{k -> zero}, -zero, if c then zero, zero / e = zero", _zero_structures),
)


def propagate_sparsity(expr: Expr, types: dict[str, Type] | None = None) -> Expr:
    """Fold the zeros of a derivative program (Fig. 9, first group)."""
    return rewrite_fixpoint(expr, RULES, types or {})
