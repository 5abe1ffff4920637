"""Values an earlier loop stored are read back, not recomputed (issue 11, "no recomputation").

A reverse-mode derivative of a program with a let-bound row map, e.g. a two-layer GCN

    let H = sum(<_, i> in R) sum(<o, zo> in G(i)) { unique(i) -> { unique(o) -> tanh(zo) } } in
    ... sum(<_, i2> in R) ... sum(<o2, zo2> in G(i2)) { o2 -> bar(o2) * (1 - tanh(zo2) * tanh(zo2)) }

evaluates the primal row body again in its backward loop: the row's products G(i2) and the
transcendental F(zo2) = tanh(zo2), entry by entry, although H already holds F at every key of
G(i) for every row. This pass reads them from H instead:

    ... sum(<_, i2> in R) ... sum(<o2, t> in H(i2)) { o2 -> bar(o2) * (1 - t * t) }

when the loop's body reads zo2 only through F (the iteration over G, with its products, goes);
otherwise each F(zo2) becomes the lookup H(i2)(o2) (the function goes, G stays).

It is exact: H's row i holds, for each key o of G(i), exactly F(zo) (keys of a dictionary are
distinct, `unique(i)` rows are built once, and F is a function call, a scalar that is stored
even when zero); a row that G leaves empty is empty (or missing) in H as well. The rewrite
applies only at a loop over the same rows R whose source G2 is G read at that loop's row, up to
the names of bound variables and after substituting the lets bound between H and the loop
(`h = sum(<j, a> in r) ...` inlined in H, let-bound in the backward loop), and only where no
name that H's definition reads has been rebound.

>>> from sparsad.lang.parse import parse
>>> from sparsad.lang.printer import to_text
>>> program = parse('''let H = sum(<_, i> in (0:n)) sum(<o, z> in M(i)) { unique(i) -> { unique(o) -> tanh(z) } } in
... sum(<_, i2> in (0:n)) sum(<o2, z2> in M(i2)) B(i2)(o2) * tanh(z2)''')
>>> "tanh" in to_text(read_stored_rows(program)).split(" in\\n")[-1]
False
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from sparsad.lang.names import Fresh, all_names, canonical
from sparsad.lang.rebuild import map_children, substitute
from sparsad.lang.syntax import (Call, Expr, Let, LetTuple, Lookup, Range, Singleton, Sum, Unique, Var,
                                 free_vars, walk)
from sparsad.lang.types import Type


@dataclass(frozen=True)
class _StoredRows:
    """`name` = sum over `rows` of { row -> sum(<key, val> in source) { key -> value } }."""
    name: str
    rows: Expr  # the expression iterated by the outer loop (a range, or a name bound to one)
    row_names: tuple[str, ...]  # the outer loop's key and value names (equal on a range)
    key: str
    val: str
    source: Expr  # reads the row
    value: Expr  # a function call of val (and perhaps key and row)
    reads: frozenset[str]  # free names of source and value other than the bound ones


def _unwrap_unique(e: Expr) -> Expr:
    while isinstance(e, Unique):
        e = e.operand
    return e


def _stored_rows(name: str, value: Expr, ranges: Mapping[str, Expr]) -> _StoredRows | None:
    """The description of `let name = value` if value is a row map of the shape above."""
    if not isinstance(value, Sum):
        return None
    rows = value.source
    if not isinstance(rows, Range) and not (isinstance(rows, Var) and rows.name in ranges):
        return None
    row_names = tuple(n for n in (value.key, value.val) if n != "_")
    body = value.body
    # { unique(i) -> sum(<o, zo> in G) { o -> F } }   or   sum(<o, zo> in G) { unique(i) -> { o -> F } }
    if isinstance(body, Singleton):
        row_key, inner = body.key, body.value
        if not isinstance(inner, Sum) or not isinstance(inner.body, Singleton):
            return None
        loop, entry = inner, inner.body
    elif isinstance(body, Sum) and isinstance(body.body, Singleton) and isinstance(body.body.value, Singleton):
        loop = body
        row_key, entry = body.body.key, body.body.value
    else:
        return None
    row_key = _unwrap_unique(row_key)
    if not (isinstance(row_key, Var) and row_key.name in row_names):
        return None
    if loop.key == "_" or loop.val == "_" or _unwrap_unique(entry.key) != Var(loop.key):
        return None
    f = entry.value
    if not isinstance(f, Call) or loop.val not in free_vars(f) or any(isinstance(n, Sum) for n in walk(f)):
        return None
    bound = set(row_names) | {loop.key, loop.val}
    if bound & free_vars(loop.source) - set(row_names):
        return None  # the source reads its own entries: not a row's dictionary
    reads = (free_vars(loop.source) | free_vars(f) | free_vars(rows)) - bound
    return _StoredRows(name, rows, row_names, loop.key, loop.val, loop.source, f, frozenset(reads))


def _renamed(expr: Expr, renames: Mapping[str, Var]) -> Expr:
    """expr with the free names of `renames` replaced by theirs all at once (through placeholders
    no program binds, so that a new name equal to an old one is not renamed twice)."""
    placeholders = {old: f"%{k}" for k, old in enumerate(renames)}
    for old, placeholder in placeholders.items():
        expr = substitute(expr, old, Var(placeholder))
    for old, placeholder in placeholders.items():
        expr = substitute(expr, placeholder, renames[old])
    return expr


# a let whose value, with the lets before it substituted, is larger than this is not substituted
# (its name then matches nothing): chains of lets cannot make the comparison blow up
EXPANSION_LIMIT = 2000


def _expanded(expr: Expr, lets: Mapping[str, Expr]) -> Expr:
    """expr with the names of `lets` (bound since the stored rows, already expanded) substituted."""
    for name in sorted(n for n in free_vars(expr) if n in lets):
        expr = substitute(expr, name, lets[name])
    return expr


def _unbound(lets: Mapping[str, Expr], names: set[str]) -> dict[str, Expr]:
    """`lets` under a binder of `names`: a let those names shadow, or whose expansion reads one
    of them (it would now read the new binding), is no longer known."""
    return {n: e for n, e in lets.items() if n not in names and not free_vars(e) & names}


def _size(expr: Expr) -> int:
    return sum(1 for _ in walk(expr))


def _replace_all(expr: Expr, target: Expr, replacement: Expr, reads: frozenset[str]) -> Expr:
    """expr with every occurrence of `target` replaced, except under a binder of a name it reads."""
    if expr == target:
        return replacement
    again = lambda child: _replace_all(child, target, replacement, reads)  # noqa: E731
    match expr:
        case Sum(key=k, val=v, source=s, body=b):
            return Sum(k, v, again(s), b if reads & {k, v} else again(b), span=expr.span)
        case Let(name=n, value=v, body=b):
            return Let(n, again(v), b if n in reads else again(b), span=expr.span)
        case LetTuple():
            return expr  # rare after ANF: left alone
    return map_children(expr, again)


class _Reuse:
    """Rewrites the body of `let H = ...` for one stored row map H."""

    def __init__(self, stored: _StoredRows, fresh: Fresh):
        self.stored = stored
        self.fresh = fresh

    def go(self, e: Expr, rows: tuple[str, ...], lets: dict[str, Expr], rebound: frozenset[str]) -> Expr:
        """`rows`: the row names of the enclosing loops over the stored rows, innermost first;
        `lets`: names bound inside the body so far -> their expanded values; `rebound`: every name
        bound inside the body (a read of one of `stored.reads` under it means something else)."""
        s = self.stored
        if s.name in rebound or rebound & s.reads:
            return e  # the stored rows are shadowed, or what they read: nothing is the same here
        match e:
            case Let(name=n, value=v, body=b):
                value = self.go(v, rows, lets, rebound)
                expanded = _expanded(value, lets)
                inner = _unbound(lets, {n})
                if _size(expanded) <= EXPANSION_LIMIT and n not in free_vars(expanded):
                    inner[n] = expanded  # (one reading the name it rebinds would read the new binding)
                inner_rows = tuple(r for r in rows if r != n)  # a rebound row name is no row of the map
                return Let(n, value, self.go(b, inner_rows, inner, rebound | {n}), span=e.span)
            case LetTuple():
                return e
            case Sum(key=k, val=v, source=src, body=b):
                source = self.go(src, rows, lets, rebound)
                inner_rows = tuple(r for r in rows if r not in (k, v))
                if src == s.rows and (v != "_" or k != "_"):
                    inner_rows = (v if v != "_" else k,) + inner_rows
                body = self.go(b, inner_rows, _unbound(lets, {k, v}), rebound | {k, v})
                return self._reuse(Sum(k, v, source, body, span=e.span), rows, lets)
        return map_children(e, lambda child: self.go(child, rows, lets, rebound))

    def _reuse(self, loop: Sum, rows: tuple[str, ...], lets: Mapping[str, Expr]) -> Expr:
        if loop.val == "_" or not rows:
            return loop
        source = canonical(_expanded(loop.source, lets))
        for row in rows:
            if source == canonical(_renamed(self.stored.source, {n: Var(row) for n in self.stored.row_names})):
                return self._read(loop, row)
        return loop

    def _read(self, loop: Sum, row: str) -> Expr:
        """`loop`, whose source is the stored source at `row`, reading the stored values."""
        s = self.stored
        at_row = {n: Var(row) for n in s.row_names}
        key = loop.key if loop.key != "_" else self.fresh(s.key.split("_")[0] or "k")  # a key to look up at
        value = _renamed(s.value, {**at_row, s.key: Var(key), s.val: Var(loop.val)})
        if not any(node == value for node in walk(loop.body)):
            return loop
        loop = Sum(key, loop.val, loop.source, loop.body, span=loop.span)
        binders = frozenset({loop.key, loop.val, row, s.name} | free_vars(value))  # (H(row) reads s.name)
        entry = self.fresh(loop.val.split("_")[0] or "v")
        body = _replace_all(loop.body, value, Var(entry), binders)
        stored_row = Lookup(Var(s.name), Var(row))
        if loop.val not in free_vars(body):
            return Sum(loop.key, entry, stored_row, body, span=loop.span)  # G's iteration goes
        return Sum(loop.key, loop.val, loop.source,
                   _replace_all(loop.body, value, Lookup(stored_row, Var(loop.key)), binders), span=loop.span)


def read_stored_rows(expr: Expr, types: Mapping[str, Type] | None = None) -> Expr:
    """Every loop over the rows of a stored row map that recomputes its entries reads them instead."""
    fresh = Fresh(all_names(expr))

    def go(e: Expr, ranges: dict[str, Expr]) -> Expr:
        if isinstance(e, Let):
            value = go(e.value, ranges)
            inner = dict(ranges)
            inner.pop(e.name, None)
            if isinstance(value, Range):
                inner[e.name] = value
            body = go(e.body, inner)
            stored = _stored_rows(e.name, value, ranges)
            if stored is not None and e.name not in stored.reads:
                body = _Reuse(stored, fresh).go(body, (), {}, frozenset())
            return Let(e.name, value, body, span=e.span)
        if isinstance(e, Sum):
            inner = {n: r for n, r in ranges.items() if n not in (e.key, e.val)}
            return Sum(e.key, e.val, go(e.source, ranges), go(e.body, inner), span=e.span)
        if isinstance(e, LetTuple):
            return e
        return map_children(e, lambda child: go(child, ranges))

    return go(expr, {})
