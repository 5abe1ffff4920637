"""Rebuild a node with transformed children: the one generic traversal passes share."""
from __future__ import annotations

from typing import Callable

from sparsad.lang.syntax import (Binary, Call, Const, EmptyDict, Expr, If, Let, LetTuple, Lookup,
                                 Neg, Not, Range, Singleton, SubArray, Sum, Unique, Var)


def map_children(expr: Expr, fn: Callable[[Expr], Expr]) -> Expr:
    """The same node with fn applied to each direct child (spans kept)."""
    span = getattr(expr, "span", None)
    match expr:
        case Const() | Var() | EmptyDict():
            return expr
        case Sum(key=k, val=v, source=s, body=b):
            return Sum(k, v, fn(s), fn(b), span=span)
        case Singleton(key=k, value=v):
            return Singleton(fn(k), fn(v), span=span)
        case Lookup(dict=d, key=k):
            return Lookup(fn(d), fn(k), span=span)
        case Let(name=n, value=v, body=b):
            return Let(n, fn(v), fn(b), span=span)
        case LetTuple(names=ns, values=vs, body=b):
            return LetTuple(ns, tuple(fn(v) for v in vs), fn(b), span=span)
        case If(cond=c, then=t, orelse=e):
            return If(fn(c), fn(t), None if e is None else fn(e), span=span)
        case Not(operand=o):
            return Not(fn(o), span=span)
        case Neg(operand=o):
            return Neg(fn(o), span=span)
        case Unique(operand=o):
            return Unique(fn(o), span=span)
        case Binary(op=op, left=l, right=r):
            return Binary(op, fn(l), fn(r), span=span)
        case Call(func=f, args=a):
            return Call(f, tuple(fn(x) for x in a), span=span)
        case Range(start=s, end=e):
            return Range(fn(s), fn(e), span=span)
        case SubArray(array=a, start=s, end=e):
            return SubArray(fn(a), fn(s), fn(e), span=span)
    raise TypeError(f"not an expression node: {expr!r}")


def substitute(expr: Expr, name: str, replacement: Expr) -> Expr:
    """expr with free occurrences of `name` replaced (replacement's free names must not be rebound
    inside expr; callers use fresh names to guarantee it)."""
    match expr:
        case Var(name=n):
            return replacement if n == name else expr
        case Sum(key=k, val=v, source=s, body=b):
            body = b if name in (k, v) else substitute(b, name, replacement)
            return Sum(k, v, substitute(s, name, replacement), body, span=expr.span)
        case Let(name=n, value=v, body=b):
            body = b if n == name else substitute(b, name, replacement)
            return Let(n, substitute(v, name, replacement), body, span=expr.span)
        case LetTuple(names=ns, values=vs, body=b):
            values, shadowed = [], False
            for n, v in zip(ns, vs):
                values.append(v if shadowed else substitute(v, name, replacement))
                shadowed = shadowed or n == name
            body = b if shadowed else substitute(b, name, replacement)
            return LetTuple(ns, tuple(values), body, span=expr.span)
    return map_children(expr, lambda c: substitute(c, name, replacement))
