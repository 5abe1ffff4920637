"""Destination-passing style (∇SD §5.5): singleton constructions pushed into the innermost loop,
so that results are written straight into the destination and no intermediate dictionary is
built (valid by the linearity of `{k -> .}`, where the semi-ring's associativity allows).

    { k -> sum(<x, y> in S) b }   ~>  sum(<x, y> in S) { k -> b }      (k does not read x, y)
    { k -> let x = e in b }       ~>  let x = e in { k -> b }          (k does not read x)
    { k -> a + b }                ~>  { k -> a } + { k -> b }
    { k -> if c then a }          ~>  if c then { k -> a }
"""
from __future__ import annotations

from sparsad.lang.syntax import Binary, Expr, If, Let, Singleton, Sum, free_vars
from sparsad.lang.types import Type
from sparsad.opt.rewrite import Rule, rewrite_fixpoint


def _push(e, _):
    if not isinstance(e, Singleton):
        return None
    key, value = e.key, e.value
    key_names = free_vars(key)
    match value:
        case Sum(key=k, val=v, source=s, body=b) if not key_names & {k, v}:
            return Sum(k, v, s, Singleton(key, b))
        case Let(name=n, value=v, body=b) if n not in key_names:
            return Let(n, v, Singleton(key, b))
        case Binary(op="+", left=l, right=r):
            return Binary("+", Singleton(key, l), Singleton(key, r))
        case If(cond=c, then=t, orelse=None):
            return If(c, Singleton(key, t))
    return None


RULES = (Rule("push a singleton into the loop, let, sum or branch it wraps", _push),)


def push_singletons_inward(expr: Expr, types: dict[str, Type] | None = None) -> Expr:
    return rewrite_fixpoint(expr, RULES, types or {})
