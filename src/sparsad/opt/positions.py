"""An intermediate matrix written and read only on a stored pattern becomes a vector over positions.

A reverse-mode derivative with respect to a sparse input B ends by reading its adjoint on B's own
pattern (the masked-gradient convention), and the adjoint is often built by iterating B itself
(SpGEMM's `dB = (A^T C) ∘ pattern(B)`):

    let D = ... sum(<p, c> in IDX(POS(r):POS(r + 1))) ... { r -> { c -> v } } ... in
    ... sum(<q, j> in IDX(POS(i):POS(i + 1))) ... D(i)(j) ...

Each entry `(r, c)` written is the entry at position p of the pattern (POS, IDX), and each read
`(i, j)` the entry at position q, so D is a vector keyed by position:

    let D = ... { p -> v } ... in ... D(q) ...

which code generation fills as a dense workspace instead of hash-map rows and reads by index.
The rewrite needs the pattern's columns distinct within a row (the storage says `unique`: the
physical programs of CSR inputs iterate canonical rows) and every use of D to be such a read; a
program where any write or read has another form is left unchanged.

>>> from sparsad.lang.parse import parse
>>> from sparsad.lang.printer import to_text
>>> program = parse('''let D = sum(<_, r> in (0:n)) sum(<p, c> in I(P(r):P(r + 1))) { r -> { unique(c) -> V(p) } } in
...     sum(<_, i> in (0:n)) sum(<q, j> in I(P(i):P(i + 1))) D(i)(j)''')
>>> "D(q)" in to_text(index_by_position(program))
True
"""
from __future__ import annotations

from typing import Mapping

from sparsad.lang.names import Fresh, all_names
from sparsad.lang.rebuild import map_children
from sparsad.lang.syntax import (Binary, Call, Const, EmptyDict, Expr, Let, Lookup, Neg, Range, Singleton,
                                 SubArray, Sum, Unique, Var, free_vars)
from sparsad.lang.types import Dict, Type


def _bare(e: Expr) -> Expr:
    while isinstance(e, Unique):
        e = e.operand
    return e


def _row_slice(source: Expr, aliases: dict[str, Expr]) -> tuple[str, str, Expr] | None:
    """(POS, IDX, row) when source is IDX(POS(row):POS(row + 1)) (names let-bound to such a slice
    or to `row + 1` resolved through `aliases`)."""
    if isinstance(source, Var) and source.name in aliases:
        source = aliases[source.name]
    if not (isinstance(source, SubArray) and isinstance(source.array, Var)
            and isinstance(source.start, Lookup) and isinstance(source.end, Lookup)
            and isinstance(source.start.dict, Var) and source.start.dict == source.end.dict):
        return None
    row, after = source.start.key, source.end.key
    if isinstance(after, Var) and after.name in aliases:
        after = aliases[after.name]
    if after != Binary("+", row, Const(1)) and after != Binary("+", Const(1), row):
        return None
    return source.start.dict.name, source.array.name, row


class _Mismatch(Exception):
    """A write or read of the intermediate that is not at a position of one pattern."""


def _scalar(e: Expr, scalars: frozenset[str], arrays: frozenset[str]) -> bool:
    """Whether e is known to be a number: constants, names known to be numbers, reads of the
    physical input arrays (vectors of numbers) and arithmetic of those."""
    match e:
        case Const():
            return True
        case Var(name=n):
            return n in scalars
        case Lookup(dict=Var(name=n), key=k):
            return n in arrays and _scalar(k, scalars, arrays)
        case Binary(left=l, right=r):
            return _scalar(l, scalars, arrays) and _scalar(r, scalars, arrays)
        case Neg(operand=o):
            return _scalar(o, scalars, arrays)
        case Call(args=a):
            return all(_scalar(x, scalars, arrays) for x in a)
    return False


def _without(loops: dict, names: tuple[str, ...]) -> dict:
    """The loops whose column and position names are not rebound by `names`."""
    return {c: loop for c, loop in loops.items() if c not in names and loop[3] not in names}


def _rewrite_writes(e: Expr, patterns: list, aliases: dict, loops: dict, scalars: frozenset[str],
                    arrays: frozenset[str], fresh: Fresh) -> Expr:
    """e with each `{ r -> { unique(c) -> v } }` on its result path, c the column of an enclosing
    loop over row r of a pattern, as `{ p -> v }`; `loops`: column -> (POS, IDX, row, position)."""
    def again(child, aliases=aliases, loops=loops, scalars=scalars):
        return _rewrite_writes(child, patterns, aliases, loops, scalars, arrays, fresh)

    match e:
        case Sum(key=k, val=v, source=s, body=b):
            inner = _without(loops, (k, v))
            found = _row_slice(s, aliases)
            if found is not None and v != "_":
                if k == "_":
                    k = fresh("p")
                inner[v] = (*found, k)
            numbers = scalars | {k, v} if found is not None or isinstance(s, Range) else scalars - {k, v}
            return Sum(k, v, s, again(b, loops=inner, scalars=numbers), span=e.span)
        case Let(name=n, value=x, body=b):
            inner_aliases = {a: y for a, y in aliases.items() if a != n}
            if isinstance(x, (SubArray, Binary)):
                inner_aliases[n] = x
            numbers = scalars | {n} if _scalar(x, scalars, arrays) else scalars - {n}
            return Let(n, x, again(b, aliases=inner_aliases, loops=_without(loops, (n,)), scalars=numbers),
                       span=e.span)
        case Singleton(key=row, value=Singleton(key=Unique() as column, value=v)):
            column = _bare(column)
            if not isinstance(column, Var) or column.name not in loops:
                raise _Mismatch
            pos, idx, loop_row, position = loops[column.name]
            if _bare(row) != loop_row:
                raise _Mismatch
            patterns.append((pos, idx))
            return Singleton(Var(position), v, span=e.span)
        case Binary(op="+", left=l, right=r):
            return Binary("+", again(l), again(r), span=e.span)
        case Binary(op="*", left=l, right=r) if _scalar(l, scalars, arrays):
            return Binary("*", l, again(r), span=e.span)
        case Binary(op="*", left=l, right=r) if _scalar(r, scalars, arrays):
            return Binary("*", again(l), r, span=e.span)
        case EmptyDict():
            return e
    raise _Mismatch  # an entry, a row or a dictionary built some other way


def _rewrite_reads(e: Expr, name: str, pattern: tuple[str, str], aliases: dict, loops: dict,
                   fresh: Fresh) -> Expr:
    """e with each `name(i)(j)`, j the column of an enclosing loop over row i of `pattern`, as
    `name(q)` for that loop's position q (a loop whose position was `_` gets a name)."""
    match e:
        case Lookup(dict=Lookup(dict=Var(name=n), key=row), key=column) if n == name:
            column = _bare(column)
            if not isinstance(column, Var) or column.name not in loops:
                raise _Mismatch
            pos, idx, loop_row, position = loops[column.name]
            if (pos, idx) != pattern or _bare(row) != loop_row:
                raise _Mismatch
            return Lookup(Var(name), Var(position), span=e.span)
        case Var(name=n) if n == name:
            raise _Mismatch
        case Sum(key=k, val=v, source=s, body=b):
            s = _rewrite_reads(s, name, pattern, aliases, loops, fresh)
            inner = _without(loops, (k, v))
            found = _row_slice(s, aliases)
            if found is not None and v != "_" and name in free_vars(b):
                if k == "_":
                    k = fresh("q")
                inner[v] = (*found, k)
            return Sum(k, v, s, _rewrite_reads(b, name, pattern, aliases, inner, fresh), span=e.span)
        case Let(name=n, value=x, body=b):
            x = _rewrite_reads(x, name, pattern, aliases, loops, fresh)
            if n == name:
                return Let(n, x, b, span=e.span)  # shadowed
            inner_aliases = {a: y for a, y in aliases.items() if a != n}
            if isinstance(x, (SubArray, Binary)):
                inner_aliases[n] = x
            inner = _without(loops, (n,))
            return Let(n, x, _rewrite_reads(b, name, pattern, inner_aliases, inner, fresh), span=e.span)
        case _:
            return map_children(e, lambda child: _rewrite_reads(child, name, pattern, aliases, loops, fresh))


def _position_indexed(let: Let, fresh: Fresh, arrays: frozenset[str]) -> Let | None:
    patterns: list = []
    try:
        value = _rewrite_writes(let.value, patterns, {}, {}, frozenset(), arrays, fresh)
        if not patterns or len(set(patterns)) != 1:
            return None
        body = _rewrite_reads(let.body, let.name, patterns[0], {}, {}, fresh)
    except _Mismatch:
        return None
    return Let(let.name, value, body, span=let.span)


def index_by_position(expr: Expr, types: Mapping[str, Type] | None = None) -> Expr:
    """expr with each let-bound matrix written and read only at positions of one stored pattern
    made a vector over those positions (see the module docstring). `types`: the physical inputs'
    types (vectors of numbers among them scale entries). A pure function."""
    arrays = frozenset(n for n, t in (types or {}).items() if isinstance(t, Dict) and not isinstance(t.value, Dict))
    fresh = Fresh(set(all_names(expr)), prefix="q_")

    def visit(e: Expr) -> Expr:
        e = map_children(e, visit)
        if isinstance(e, Let):
            rewritten = _position_indexed(e, fresh, arrays)
            if rewritten is not None:
                return rewritten
        return e

    return visit(expr)
