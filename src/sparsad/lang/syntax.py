"""Immutable syntax tree of the tensor language (logical and physical SDQLite, ∇SD Fig. 4).

Every node is a frozen dataclass; `span` (source position) takes no part in equality, so a
parsed tree equals the same tree built in code. Python operators build nodes:
`x + y`, `a * b`, `-a`, `a / b`, `d(k)` (lookup), `arr[st:en]` (sub-array).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Union


@dataclass(frozen=True)
class Span:
    line: int
    column: int


def _span() -> Span | None:
    return field(default=None, compare=False, hash=False, repr=False)


class Expr:
    """Base of all expression nodes; operators build new nodes."""

    __slots__ = ()

    def __add__(self, other): return Binary("+", self, as_expr(other))
    def __radd__(self, other): return Binary("+", as_expr(other), self)
    def __sub__(self, other): return Binary("-", self, as_expr(other))
    def __rsub__(self, other): return Binary("-", as_expr(other), self)
    def __mul__(self, other): return Binary("*", self, as_expr(other))
    def __rmul__(self, other): return Binary("*", as_expr(other), self)
    def __truediv__(self, other): return Binary("/", self, as_expr(other))
    def __rtruediv__(self, other): return Binary("/", as_expr(other), self)
    def __neg__(self): return Neg(self)
    def __call__(self, key): return Lookup(self, as_expr(key))

    def __getitem__(self, item):
        if isinstance(item, slice) and item.step is None:
            return SubArray(self, as_expr(item.start), as_expr(item.stop))
        raise TypeError("use e[st:en] for a sub-array and e(k) for a lookup")

    def eq(self, other) -> "Binary":
        """The discrete comparison `self = other`."""
        return Binary("=", self, as_expr(other))

    def lt(self, other) -> "Binary":
        """The discrete comparison `self < other`."""
        return Binary("<", self, as_expr(other))

    def __str__(self) -> str:
        from sparsad.lang.printer import to_text

        return to_text(self)


def as_expr(value) -> "Expr":
    """Wrap Python numbers and booleans as constants; pass expressions through."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, (bool, int, float)):
        return Const(value)
    try:
        import numpy as np

        if isinstance(value, np.generic):
            return Const(value.item())
    except ImportError:  # pragma: no cover
        pass
    raise TypeError(f"cannot use {type(value).__name__} {value!r} as an expression; "
                    "pass an Expr, a number or a boolean")


@dataclass(frozen=True, eq=False)
class Const(Expr):
    """A real (float), int or bool constant; 1, 1.0 and true are three different constants."""
    value: Union[float, int, bool]
    span: Span | None = _span()

    def __post_init__(self):
        if not isinstance(self.value, (bool, int, float)):
            raise TypeError(f"Const takes a float, int or bool, not {type(self.value).__name__}")

    def __eq__(self, other):
        return (isinstance(other, Const) and type(self.value) is type(other.value)
                and self.value == other.value)

    def __hash__(self):
        return hash((Const, type(self.value), self.value))


@dataclass(frozen=True)
class Var(Expr):
    name: str
    span: Span | None = _span()


@dataclass(frozen=True)
class Sum(Expr):
    """`sum(<key, val> in source) body`: fold body over the entries of source with `+`."""
    key: str
    val: str
    source: Expr
    body: Expr
    span: Span | None = _span()


@dataclass(frozen=True)
class Singleton(Expr):
    """`{ key -> value }`."""
    key: Expr
    value: Expr
    span: Span | None = _span()


@dataclass(frozen=True)
class EmptyDict(Expr):
    """`{}`: the empty dictionary, the additive identity of every type."""
    span: Span | None = _span()


@dataclass(frozen=True)
class Lookup(Expr):
    """`dict(key)`: a missing key gives the zero of the value type."""
    dict: Expr
    key: Expr
    span: Span | None = _span()


@dataclass(frozen=True)
class Let(Expr):
    """`let name = value in body`."""
    name: str
    value: Expr
    body: Expr
    span: Span | None = _span()


@dataclass(frozen=True)
class LetTuple(Expr):
    """`let <n1, ..., nk> = <e1, ..., ek> in body`: sugar for nested lets, kept for printing."""
    names: tuple[str, ...]
    values: tuple[Expr, ...]
    body: Expr
    span: Span | None = _span()

    def __post_init__(self):
        if len(self.names) != len(self.values):
            raise ValueError(f"tupled let binds {len(self.names)} names to {len(self.values)} values")


@dataclass(frozen=True)
class If(Expr):
    """`if cond then a else b`; without else the result is the zero of a's type."""
    cond: Expr
    then: Expr
    orelse: Expr | None = None
    span: Span | None = _span()


@dataclass(frozen=True)
class Not(Expr):
    operand: Expr
    span: Span | None = _span()


BINARY_OPS = ("+", "-", "*", "/", "=", "<")


@dataclass(frozen=True)
class Binary(Expr):
    """`left op right` for op in + - * / = <."""
    op: str
    left: Expr
    right: Expr
    span: Span | None = _span()

    def __post_init__(self):
        if self.op not in BINARY_OPS:
            raise ValueError(f"unknown binary operator {self.op!r}; expected one of {BINARY_OPS}")


@dataclass(frozen=True)
class Neg(Expr):
    """Unary minus."""
    operand: Expr
    span: Span | None = _span()


@dataclass(frozen=True)
class Call(Expr):
    """A built-in function applied to arguments: `exp(x)`, `pow(x, 2.0)`."""
    func: str
    args: tuple[Expr, ...]
    span: Span | None = _span()


@dataclass(frozen=True)
class Unique(Expr):
    """`unique(e)`: an annotation that the keys built from e are distinct; the identity."""
    operand: Expr
    span: Span | None = _span()


@dataclass(frozen=True)
class Range(Expr):
    """`(start:end)`: the dense array {k -> k} for start <= k < end."""
    start: Expr
    end: Expr
    span: Span | None = _span()


@dataclass(frozen=True)
class SubArray(Expr):
    """`arr(start:end)`: the entries of arr with start <= key < end, keys kept."""
    array: Expr
    start: Expr
    end: Expr
    span: Span | None = _span()


NODE_TYPES = (Const, Var, Sum, Singleton, EmptyDict, Lookup, Let, LetTuple, If, Not, Binary, Neg,
              Call, Unique, Range, SubArray)


def children(expr: Expr) -> tuple[Expr, ...]:
    """The direct sub-expressions of a node, in source order."""
    match expr:
        case Const() | Var() | EmptyDict():
            return ()
        case Sum(source=s, body=b):
            return (s, b)
        case Singleton(key=k, value=v):
            return (k, v)
        case Lookup(dict=d, key=k):
            return (d, k)
        case Let(value=v, body=b):
            return (v, b)
        case LetTuple(values=vs, body=b):
            return (*vs, b)
        case If(cond=c, then=t, orelse=e):
            return (c, t) if e is None else (c, t, e)
        case Not(operand=o) | Neg(operand=o) | Unique(operand=o):
            return (o,)
        case Binary(left=l, right=r):
            return (l, r)
        case Call(args=a):
            return a
        case Range(start=s, end=e):
            return (s, e)
        case SubArray(array=a, start=s, end=e):
            return (a, s, e)
    raise TypeError(f"not an expression node: {expr!r}")


def walk(expr: Expr) -> Iterator[Expr]:
    """Every node of the tree, parents before children."""
    stack = [expr]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(children(node)))


def has_loop(expr: Expr) -> bool:
    """Whether a sum (a loop) occurs anywhere in the tree."""
    return any(isinstance(node, Sum) for node in walk(expr))


def free_vars(expr: Expr) -> frozenset[str]:
    """Names used in expr but not bound inside it."""
    match expr:
        case Var(name=n):
            return frozenset() if n == "_" else frozenset({n})
        case Sum(key=k, val=v, source=s, body=b):
            return free_vars(s) | (free_vars(b) - {k, v})
        case Let(name=n, value=v, body=b):
            return free_vars(v) | (free_vars(b) - {n})
        case LetTuple(names=ns, values=vs, body=b):
            # sequential: each value sees the names bound before it
            result, bound = set(), set()
            for n, v in zip(ns, vs):
                result |= free_vars(v) - bound
                bound.add(n)
            return frozenset(result | (free_vars(b) - bound))
    result: frozenset[str] = frozenset()
    for child in children(expr):
        result |= free_vars(child)
    return result
