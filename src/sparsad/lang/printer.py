"""Syntax tree -> text that parses back to the same tree.

Layout is readable (nested sums and lets on their own lines); parentheses are added exactly
where the grammar needs them.
"""
from __future__ import annotations

import math

from sparsad.lang.syntax import (Binary, Call, Const, EmptyDict, Expr, If, Let, LetTuple, Lookup,
                                 Neg, Not, Range, Singleton, SubArray, Sum, Unique, Var)

# binding strength: prefix forms (let/sum/if) 0, comparison 1, additive 2, multiplicative 3,
# unary 4, postfix/atom 5
_LEVEL = {"=": 1, "<": 1, "+": 2, "-": 2, "*": 3, "/": 3}
_PREFIX = (Let, LetTuple, Sum, If)


def to_text(expr: Expr, indent: str = "  ") -> str:
    """Pretty-printed program text."""
    return _Printer(indent).show(expr, 0)


def _const(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"the constant {value} has no text form; compute it, e.g. 1.0 / 0.0")
        text = repr(value)
        return text if any(c in text for c in ".e") else text + ".0"
    return str(value)


def _level(expr: Expr) -> int:
    match expr:
        case Let() | LetTuple() | Sum() | If():
            return 0
        case Binary(op=op):
            return _LEVEL[op]
        case Neg() | Not():
            return 4
        case Const(value=v) if not isinstance(v, bool) and v < 0:
            return 4
    return 5


class _Printer:
    def __init__(self, indent: str):
        self.indent = indent

    def show(self, expr: Expr, depth: int) -> str:
        pad = "\n" + self.indent * (depth + 1)
        match expr:
            case Const(value=v):
                return _const(v)
            case Var(name=n):
                return n
            case EmptyDict():
                return "{}"
            case Singleton(key=k, value=v):
                return "{ " + self.show(k, depth) + " -> " + self.show(v, depth) + " }"
            case Lookup(dict=d, key=k):
                return self.operand(d, 5, depth) + "(" + self.show(k, depth) + ")"
            case SubArray(array=a, start=s, end=e):
                return (self.operand(a, 5, depth) + "(" + self.show(s, depth) + ":"
                        + self.show(e, depth) + ")")
            case Range(start=s, end=e):
                return "(" + self.show(s, depth) + ":" + self.show(e, depth) + ")"
            case Unique(operand=o):
                return "unique(" + self.show(o, depth) + ")"
            case Call(func=f, args=args):
                return f + "(" + ", ".join(self.show(a, depth) for a in args) + ")"
            case Sum(key=k, val=v, source=s, body=b):
                return (f"sum(<{k}, {v}> in {self.show(s, depth)})" + pad
                        + self.show(b, depth + 1))
            case Let(name=n, value=v, body=b):
                return (f"let {n} = {self.show(v, depth + 1)} in" + "\n" + self.indent * depth
                        + self.show(b, depth))
            case LetTuple(names=ns, values=vs, body=b):
                shown = ", ".join(self.operand(v, 2, depth + 1) for v in vs)
                return (f"let <{', '.join(ns)}> = <{shown}> in" + "\n" + self.indent * depth
                        + self.show(b, depth))
            case If(cond=c, then=t, orelse=e):
                then = self.operand(t, 1, depth + 1) if isinstance(t, _PREFIX) else self.show(t, depth + 1)
                text = f"if {self.show(c, depth + 1)} then {then}"
                if e is not None:
                    text += f" else {self.show(e, depth + 1)}"
                return text
            case Not(operand=o):
                return "not " + self.operand(o, 4, depth)
            case Neg(operand=o):
                inner = self.operand(o, 4, depth)
                if inner[:1].isdigit() or inner[:1] == ".":
                    inner = "(" + inner + ")"  # keep -(2) and -(2(i)) apart from the literal -2
                return "-" + inner
            case Binary(op=op, left=l, right=r):
                level = _LEVEL[op]
                left = self.operand(l, level if level > 1 else 2, depth)
                right = self.operand(r, level + 1, depth)
                return f"{left} {op} {right}"
        raise TypeError(f"not an expression node: {expr!r}")

    def operand(self, expr: Expr, needed: int, depth: int) -> str:
        """Show expr where the grammar needs binding strength `needed`; wrap in parentheses if weaker."""
        text = self.show(expr, depth)
        if _level(expr) < needed or (isinstance(expr, _PREFIX) and needed > 0):
            return "(" + text + ")"
        return text
