"""Types of the language: real, int, bool, dense_int and dictionaries {I -> D} (∇SD Fig. 4).

Index types may carry an extent (the number of valid keys) taken from the inputs; it never
takes part in type equality, only in choosing the shape of a result.
`tensor n` is sugar: tensor 0 = real, tensor n = {int -> tensor (n-1)}.
"""
from __future__ import annotations

from dataclasses import dataclass, field


class Type:
    __slots__ = ()

    def __str__(self) -> str:
        return type_to_text(self)


@dataclass(frozen=True)
class Real(Type):
    pass


@dataclass(frozen=True)
class Bool(Type):
    pass


@dataclass(frozen=True)
class Int(Type):
    """An integer; `dense=True` is dense_int, the key of a physical array (keys 0..extent-1).

    `origin` (input name, axis) says which input's axis a key was drawn from: the type checker
    compares the extents of two axes that a program relates through a lookup."""
    dense: bool = False
    extent: int | None = field(default=None, compare=False, hash=False)
    origin: tuple[str, int] | None = field(default=None, compare=False, hash=False, repr=False)


@dataclass(frozen=True)
class Dict(Type):
    key: Int
    value: Type


@dataclass(frozen=True)
class Zero(Type):
    """The type of `{}` before its context is known: the zero of any additive type."""


REAL, BOOL, INT, DENSE_INT, ZERO = Real(), Bool(), Int(), Int(dense=True), Zero()
# A result of order >= 3 is a dense array when every extent is known from the types and it has at
# most this many entries, else a nested dict: one rule for the interpreter and compiled code.
DENSE_AUTO_LIMIT = 1 << 20
MAX_ORDER = 32  # a type names at most this many modes (the parser's nesting limit is larger)


def tensor(order: int, extents: tuple[int | None, ...] | None = None) -> Type:
    """`tensor n`: n nested int-keyed dictionaries over reals, optionally with extents."""
    if order < 0:
        raise ValueError(f"tensor order must be >= 0, got {order}")
    extents = extents or (None,) * order
    result: Type = REAL
    for extent in reversed(extents):
        result = Dict(Int(extent=extent), result)
    return result


def tensor_order(t: Type) -> int | None:
    """n if t is tensor n (int keys, real leaves), else None."""
    order = 0
    while isinstance(t, Dict):
        order += 1
        t = t.value
    return order if isinstance(t, Real) else None


def extents(t: Type) -> tuple[int | None, ...]:
    """The key extents of a nested dictionary type, outermost first."""
    result = []
    while isinstance(t, Dict):
        result.append(t.key.extent)
        t = t.value
    return tuple(result)


def is_additive(t: Type) -> bool:
    """Real, int and dictionaries of them form semi-rings; bool does not add here, nor do dicts of bools."""
    if isinstance(t, Dict):
        return is_additive(t.value)
    return isinstance(t, (Real, Int, Zero))


def is_discrete(t: Type) -> bool:
    return isinstance(t, (Int, Bool))


def type_to_text(t: Type) -> str:
    match t:
        case Real():
            return "real"
        case Bool():
            return "bool"
        case Int(dense=True):
            return "dense_int"
        case Int():
            return "int"
        case Zero():
            return "zero"
        case Dict(key=k, value=v):
            order = tensor_order(t)
            if order is not None and order >= 1 and all(not isinstance(x, Int) or not x.dense
                                                         for x in _keys(t)):
                return f"tensor {order}"
            return f"{{{type_to_text(k)} -> {type_to_text(v)}}}"
    raise TypeError(f"not a type: {t!r}")


def _keys(t: Type):
    while isinstance(t, Dict):
        yield t.key
        t = t.value


def parse_type(text: str) -> Type:
    """Read a type: `real`, `int`, `bool`, `dense_int`, `tensor 2`, `{int -> {int -> real}}`.

    >>> parse_type("{int -> real}") == tensor(1)
    True
    """
    from sparsad.errors import ProgramError

    tokens = text.replace("{", " { ").replace("}", " } ").replace("->", " -> ").split()
    position = 0

    def fail(message: str):
        raise ProgramError(f"in type {text!r}: {message}")

    def take() -> str:
        nonlocal position
        if position >= len(tokens):
            fail("unexpected end")
        position += 1
        return tokens[position - 1]

    def read() -> Type:
        token = take()
        if token == "real":
            return REAL
        if token == "bool":
            return BOOL
        if token == "int":
            return INT
        if token == "dense_int":
            return DENSE_INT
        if token == "tensor":
            order = take()
            if not order.isdigit():
                fail(f"'tensor' needs an order such as 'tensor 2', got {order!r}")
            if int(order) > MAX_ORDER:
                fail(f"'tensor {order}' has more than {MAX_ORDER} modes; no program here needs that many")
            return tensor(int(order))
        if token == "{":
            key = read()
            if not isinstance(key, Int):
                fail(f"dictionary keys must be int or dense_int, got {type_to_text(key)}")
            if take() != "->":
                fail("expected '->' in a dictionary type")
            value = read()
            if take() != "}":
                fail("expected '}' to close a dictionary type")
            return Dict(key, value)
        fail(f"unknown type word {token!r}; expected real, int, bool, dense_int, tensor N or {{...}}")

    result = read()
    if position != len(tokens):
        fail(f"unexpected {tokens[position]!r} after the type")
    return result
