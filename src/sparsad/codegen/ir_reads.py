"""What loop-IR expressions read, and the affine index algebra the dense-loop rewrites need.

Shared by `codegen.dense_loops` (interchange, dot products) and `codegen.matvec` (matrix-vector
products): which names an expression depends on, whether an index is `base + var` (a stride-1
read), the factors of a product, substitution of an assigned name, a loop's trip count.

>>> from sparsad.codegen.ir import Op, Ref, Num
>>> affine_base(Op("+", Ref("i"), Ref("k")), "k")
Ref(name='i')
>>> affine_base(Op("*", Ref("k"), Num(2)), "k") is None
True
>>> sorted(reads(Op("*", Ref("a"), Ref("b"))))
['a', 'b']
"""
from __future__ import annotations

from sparsad.codegen.ir import (Choose, Fn, For, HasKey, IRExpr, Length, Load, LocalGet, Num, Op, Ref, RowGet,
                                RowOf, Unary)

UNKNOWN = "<unknown>"  # what an expression this module does not know reads: everything


def reads(e: IRExpr) -> frozenset[str]:
    """Every name an IR expression reads: variables, arrays and local containers."""
    match e:
        case Num():
            return frozenset()
        case Ref(name=n) | Length(array=n):
            return frozenset({n})
        case Op(left=l, right=r):
            return reads(l) | reads(r)
        case Unary(operand=o):
            return reads(o)
        case Fn(args=args):
            return frozenset().union(*(reads(a) for a in args))
        case Load(array=a, index=i):
            return frozenset({a}) | reads(i)
        case LocalGet(container=c, key=k) | HasKey(container=c, key=k) | RowOf(container=c, key=k):
            return frozenset({c}) | reads(k)
        case RowGet(container=c, row_key=r, key=k):
            return frozenset({c}) | reads(r) | reads(k)
        case Choose(cond=c, then=t, orelse=o):
            return reads(c) | reads(t) | reads(o)
        case _ if hasattr(e, "names_read"):  # nodes of the rewrites (dense_loops.Dot, matvec.MatVec)
            return e.names_read(reads)
    return frozenset({UNKNOWN})


def affine_base(index: IRExpr, var: str) -> IRExpr | None:
    """`base` when index == base + var with base free of var (a stride-1 read in var), else None."""
    if index == Ref(var):
        return Num(0)
    match index:
        case Op(op="+", left=l, right=r):
            if var not in reads(r):
                base = affine_base(l, var)
                return None if base is None else plus(base, r)
            if var not in reads(l):
                base = affine_base(r, var)
                return None if base is None else plus(l, base)
        case Op(op="-", left=l, right=r) if var not in reads(r):
            base = affine_base(l, var)
            return None if base is None else Op("-", base, r)
    return None


def plus(a: IRExpr, b: IRExpr) -> IRExpr:
    """a + b, without adding a literal zero."""
    if a == Num(0):
        return b
    if b == Num(0):
        return a
    return Op("+", a, b)


def times(a: IRExpr, b: IRExpr) -> IRExpr:
    """a * b, without multiplying by a literal one or zero."""
    if a == Num(0) or b == Num(0):
        return Num(0)
    if a == Num(1):
        return b
    if b == Num(1):
        return a
    return Op("*", a, b)


def trips(loop: For) -> IRExpr:
    """The trip count of a loop (end - start)."""
    return loop.end if loop.start == Num(0) else Op("-", loop.end, loop.start)


def factors(e: IRExpr) -> list[IRExpr]:
    """The factors of a product, left to right."""
    if isinstance(e, Op) and e.op == "*":
        return factors(e.left) + factors(e.right)
    return [e]


def substitute(e: IRExpr, name: str, value: IRExpr) -> IRExpr | None:
    """e with Ref(name) replaced by value (None inside expressions this module does not know)."""
    match e:
        case Ref(name=n):
            return value if n == name else e
        case Num() | Length():
            return e
        case Op(op=op, left=l, right=r):
            left, right = substitute(l, name, value), substitute(r, name, value)
            return None if left is None or right is None else Op(op, left, right)
        case Unary(op=op, operand=o):
            inner = substitute(o, name, value)
            return None if inner is None else Unary(op, inner)
        case Fn(name=f, args=args):
            new = [substitute(a, name, value) for a in args]
            return None if any(a is None for a in new) else Fn(f, tuple(new))
        case Load(array=a, index=i, guarded=g):
            index = substitute(i, name, value)
            return None if index is None else Load(a, index, g)
        case LocalGet(container=c, key=k, proven=p):
            key = substitute(k, name, value)
            return None if key is None else LocalGet(c, key, p)
    return None


__all__ = ["UNKNOWN", "affine_base", "factors", "plus", "reads", "substitute", "times", "trips"]
