"""A-normal form (∇SD §5.1): every operand is a constant or a variable.

Sum bodies and if branches stay blocks of their own (nothing is hoisted out of them), so the
program computes exactly what it did, with the same cost.

>>> from sparsad.lang.parse import parse
>>> print(to_anf(parse("a * b + c")))
let _1 = a * b in
let _2 = _1 + c in
_2
"""
from __future__ import annotations

from sparsad.lang.names import Fresh, all_names
from sparsad.lang.syntax import (Binary, Call, Const, EmptyDict, Expr, If, Let, LetTuple, Lookup,
                                 Neg, Not, Range, Singleton, SubArray, Sum, Unique, Var)

ATOMS = (Var, Const, EmptyDict)


def is_atom(expr: Expr) -> bool:
    return isinstance(expr, ATOMS)


def to_anf(expr: Expr, fresh: Fresh | None = None) -> Expr:
    """The program in A-normal form: a chain of lets over atomic operands, ending in an atom."""
    fresh = fresh or Fresh(all_names(expr))
    bindings: list[tuple[str, Expr]] = []
    result = _atomize(expr, bindings, fresh)
    for name, value in reversed(bindings):
        result = Let(name, value, result)
    return result


def _atomize(expr: Expr, out: list, fresh: Fresh) -> Expr:
    """Emit bindings for expr into `out`; return the atom that holds its value."""
    if is_atom(expr):
        return expr
    if isinstance(expr, Let):
        value = _operation(expr.value, out, fresh)
        out.append((expr.name, value))
        return _atomize(expr.body, out, fresh)
    if isinstance(expr, LetTuple):
        for name, value in zip(expr.names, expr.values):
            out.append((name, _operation(value, out, fresh)))
        return _atomize(expr.body, out, fresh)
    operation = _operation(expr, out, fresh)
    name = fresh()
    out.append((name, operation))
    return Var(name)


def _operation(expr: Expr, out: list, fresh: Fresh) -> Expr:
    """expr as one operation over atoms (its operands' bindings go to `out` first)."""
    atom = lambda e: _atomize(e, out, fresh)  # noqa: E731
    match expr:
        case Var() | Const() | EmptyDict():
            return expr
        case Let() | LetTuple():
            return atom(expr)
        case Sum(key=k, val=v, source=s, body=b):
            return Sum(k, v, atom(s), to_anf(b, fresh))
        case If(cond=c, then=t, orelse=e):
            return If(atom(c), to_anf(t, fresh), None if e is None else to_anf(e, fresh))
        case Singleton(key=k, value=v):
            return Singleton(atom(k), atom(v))
        case Lookup(dict=d, key=k):
            return Lookup(atom(d), atom(k))
        case Binary(op=op, left=l, right=r):
            return Binary(op, atom(l), atom(r))
        case Neg(operand=o):
            return Neg(atom(o))
        case Not(operand=o):
            return Not(atom(o))
        case Unique(operand=o):
            return Unique(atom(o))
        case Call(func=f, args=a):
            return Call(f, tuple(atom(x) for x in a))
        case Range(start=s, end=e):
            return Range(atom(s), atom(e))
        case SubArray(array=a, start=s, end=e):
            return SubArray(atom(a), atom(s), atom(e))
    raise TypeError(f"not an expression node: {expr!r}")


def blocks(expr: Expr) -> tuple[list[tuple[str, Expr]], Expr]:
    """Split an ANF block into its bindings and its result atom."""
    bindings = []
    while isinstance(expr, Let):
        bindings.append((expr.name, expr.value))
        expr = expr.body
    return bindings, expr
