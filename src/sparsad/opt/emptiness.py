"""Empty entries: when a loop may skip them, and a cheap test that a value is an entry.

The language's semantics (the reference interpreter's, docs/language.md): a key whose value is
the empty dictionary `{}` is no entry, at every type. At a number type, `{}` is what an else-less
`if` whose condition fails, a sum over nothing, `{}` itself, and products and sums of only such
values give; a computed or stored `0.0` is a number, so `{k -> 0.0}` is an entry. A physical
definition or an intermediate can still *produce* a key whose value is `{}` -- a CSR matrix's
definition `sum(<_, i> in (0:n)) { unique(i) -> <row i> }` yields `{i -> {}}` for an empty row --
and a rewrite that turns a sum over such entries into a loop with the value let-bound (fusion)
must keep those keys out of the consumer's body unless the body gives zero for an empty value:

    sum(<i, r> in A) 1.0                       counts rows: row i counts only when it has entries
    sum(<i, r> in A) sum(<j, a> in r) a * x(j) vanishes on an empty row: no test needed

`vanishes_on_empty(body, name)` is that static check (conservative: False when unsure), and
`entry_condition(value, types, dense_array)` a bool expression, true exactly when value is an
entry (not `{}`), for the shapes stored levels and their filters take (None when it would need a
loop of its own; the caller then keeps the intermediate, or tests it with a loop).

>>> from sparsad.lang.parse import parse
>>> from sparsad.lang.printer import to_text
>>> vanishes_on_empty(parse("sum(<j, a> in r) a * x(j)"), "r"), vanishes_on_empty(parse("1.0"), "r")
(True, False)
>>> from sparsad.lang.types import Dict, DENSE_INT, INT, REAL
>>> types = {"A_pos": Dict(DENSE_INT, INT), "A_idx": Dict(DENSE_INT, INT), "A_val": Dict(DENSE_INT, REAL), "i": INT}
>>> row = parse("sum(<p, j> in A_idx(A_pos(i):A_pos(i + 1))) { unique(j) -> A_val(p) }")
>>> print(to_text(entry_condition(row, types, lambda name: name in types)))
A_pos(i) < A_pos(i + 1)
>>> print(entry_condition(parse("sum(<j, a> in A_val) if j < 2 then { j -> a }"), types, lambda n: True))
None
"""
from __future__ import annotations

from typing import Callable, Mapping

from sparsad.errors import SparsadError
from sparsad.lang.syntax import (Binary, Call, Const, EmptyDict, Expr, If, Let, Lookup, Neg, Not,
                                 Range, Singleton, SubArray, Sum, Unique, Var, free_vars)
from sparsad.lang.typecheck import infer
from sparsad.lang.types import Dict, Type, Zero

TRUE, FALSE = Const(True), Const(False)


def vanishes_on_empty(body: Expr, name: str) -> bool:
    """Whether body is `{}` (adds nothing, writes no key) whenever `name` is the empty dictionary.

    Conservative: a construct not known to propagate emptiness (a function call, a division, a
    constant, a comparison) does not vanish, so the caller tests the entry first."""
    if name == "_":
        return False
    return _vanishes(body, frozenset({name}))


def _vanishes(e: Expr, empty: frozenset[str]) -> bool:
    match e:
        case EmptyDict():
            return True
        case Var(name=n):
            return n in empty
        case Lookup(dict=d):
            return _vanishes(d, empty)
        case Singleton(value=v) | Unique(operand=v) | Neg(operand=v) | SubArray(array=v):
            return _vanishes(v, empty)
        case Sum(key=k, val=v, source=s, body=b):
            if _vanishes(s, empty):
                return True
            return _vanishes(b, empty - {k, v})
        case Let(name=n, value=x, body=b):
            inner = empty | {n} if _vanishes(x, empty) else empty - {n}
            return _vanishes(b, inner)
        case If(then=t, orelse=o):
            return _vanishes(t, empty) and (o is None or _vanishes(o, empty))
        case Binary(op="*", left=l, right=r):
            return _vanishes(l, empty) or _vanishes(r, empty)
        case Binary(op="+" | "-", left=l, right=r):
            return _vanishes(l, empty) and _vanishes(r, empty)
    return False


def may_be_empty(value: Expr) -> bool:
    """Whether a number-valued expression may be `{}` (syntactically: it holds a sum, an `if`, a
    `{}` or a lookup into something other than a name). A name let-bound to such a value is a
    `suspect` of `entry_condition`."""
    from sparsad.lang.syntax import walk

    return any(isinstance(node, (Sum, If, EmptyDict)) or (isinstance(node, Lookup) and not isinstance(node.dict, Var))
               for node in walk(value))


def let_suspects(expr: Expr) -> frozenset[str]:
    """The names that lets in expr bind to values that `may_be_empty`."""
    from sparsad.lang.syntax import walk

    return frozenset(node.name for node in walk(expr) if isinstance(node, Let) and may_be_empty(node.value))


def entry_condition(value: Expr, types: Mapping[str, Type], dense_array: Callable[[str], bool],
                    suspects: frozenset[str] = frozenset()) -> Expr | None:
    """A bool expression (in value's scope) true exactly when value is not `{}`; TRUE when it
    always is an entry; None when no loop-free test is known.

    `types`: the types of value's free names; `dense_array(name)`: whether a free name is a
    physical array (keys 0..len-1, each with a number), whose lookups are numbers and whose
    sub-array `a(lo:hi)` of in-range bounds has entries iff lo < hi. `suspects`: free names
    bound (by lets outside value) to numbers that may be `{}`: no claim about them."""
    try:
        return _entry(value, dict(types), {n: None for n in suspects}, dense_array)
    except SparsadError:
        return None  # a name whose type is not known here: no claim


def _entry(e: Expr, types: dict, lets: dict, dense_array) -> Expr | None:
    match e:
        case Const() | Not() | Call() | Binary(op="/" | "=" | "<"):
            return TRUE
        case EmptyDict():
            return FALSE
        case Unique(operand=o) | Neg(operand=o) | Singleton(value=o):
            return _entry(o, types, lets, dense_array)
        case Var(name=n):
            if n in lets:
                return lets[n]
            return None if isinstance(infer(e, types), (Dict, Zero)) else TRUE
        case Lookup(dict=Var(name=n)) if dense_array(n) and n not in lets:
            return TRUE
        case Range(start=lo, end=hi) | SubArray(array=Var(), start=lo, end=hi) \
                if isinstance(e, Range) or (dense_array(e.array.name) and e.array.name not in lets):
            return Binary("<", lo, hi)
        case Let(name=n, value=x, body=b):
            inner_types = {**types, n: infer(x, types)}
            inner = _entry(b, inner_types, {**lets, n: _entry(x, types, lets, dense_array)}, dense_array)
            if inner is None or inner in (TRUE, FALSE) or n not in free_vars(inner):
                return inner
            return Let(n, x, inner)
        case If(cond=c, then=t, orelse=o):
            then = _entry(t, types, lets, dense_array)
            orelse = FALSE if o is None else _entry(o, types, lets, dense_array)
            if then is None or orelse is None:
                return None
            if then == orelse:
                return then
            if then == TRUE and orelse == FALSE:
                return c
            return If(c, then, orelse)
        case Binary(op="+" | "-", left=l, right=r):
            return _either(_entry(l, types, lets, dense_array), _entry(r, types, lets, dense_array))
        case Binary(op="*", left=l, right=r):
            return _both(_entry(l, types, lets, dense_array), _entry(r, types, lets, dense_array))
        case Sum(key=k, val=v, source=s, body=b):
            source_type = infer(s, types)
            if not isinstance(source_type, Dict):
                return FALSE
            inner_types = {**types, k: source_type.key, v: source_type.value}
            inner_types.pop("_", None)
            inner_lets = {n: c for n, c in lets.items() if n not in (k, v)}
            body = _entry(b, inner_types, inner_lets, dense_array)
            if body == FALSE:
                return FALSE
            if body is None or free_vars(body) & {k, v}:
                return None  # some entries of s may give nothing: only a loop could tell
            return _both(_entry(s, types, lets, dense_array), body)  # body's test is the same for all
    return None


def _either(a: Expr | None, b: Expr | None) -> Expr | None:
    if a == TRUE or b == TRUE:
        return TRUE
    if a is None or b is None:
        return None
    if a == FALSE:
        return b
    if b == FALSE:
        return a
    return If(a, TRUE, b)


def _both(a: Expr | None, b: Expr | None) -> Expr | None:
    if a == FALSE or b == FALSE:
        return FALSE
    if a is None or b is None:
        return None
    if a == TRUE:
        return b
    if b == TRUE:
        return a
    return If(a, b, FALSE)


def entry_guard(value: Expr, body: Expr, name: str, types: Mapping[str, Type],
                dense_array: Callable[[str], bool], suspects: frozenset[str] = frozenset()) -> Expr | None | bool:
    """What a loop that binds `name` to value (an entry's value) needs before running body:
    False when nothing (value is always an entry, or body vanishes when it is not), a bool
    expression to test first, or None when only a loop could tell whether value is `{}`."""
    if vanishes_on_empty(body, name):
        return False
    condition = entry_condition(value, types, dense_array, suspects)
    if condition == TRUE:
        return False
    return condition
