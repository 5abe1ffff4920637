"""Loop-invariant dictionaries leave their loops: built once, then looked up or iterated.

    sum(<k, v> in S) ... G(e) ...   ~>   let d = G in sum(<k, v> in S) ... d(e) ...
    sum(<k, v> in S) ... sum(<a, b> in G) ...   ~>   let d = G in sum(<k, v> in S) ... sum(<a, b> in d) ...

when G is a dictionary built by a sum (a row of a second sparse operand, an intermediate vector)
that reads neither k, v nor anything bound inside the loop. Without this, a lookup `W(i)(j)` into
a second CSR operand at the keys of the first rebuilds (or scans) W's row once per entry of the
first row: O(nnz_i^2) per row. Hoisted, code generation scatters the row once into a workspace
(O(nnz_i)) and each lookup is O(1): the per-call index of a Gustavson-style co-iteration.
An inner loop's source is hoisted when iterating it builds a dictionary anyway (a sum or
difference of dictionaries, as a Jacobian's tangent of a softmax row: built once per entry of
the row instead of once per entry times the columns of the loop around it); sources iterated
in place (fused) stay. Dictionaries under an `if` stay where they are (hoisting would evaluate
them unconditionally).

>>> from sparsad.lang.parse import parse
>>> from sparsad.lang.printer import to_text
>>> hoisted = hoist_invariant_dictionaries(parse(
...     "sum(<j, a> in r) a * (sum(<p, q> in B) { unique(q) -> p })(j)"))
>>> to_text(hoisted).split()[:2]
['let', 'd_1']
"""
from __future__ import annotations

from typing import Mapping

from sparsad.lang.names import Fresh, all_names
from sparsad.lang.rebuild import map_children
from sparsad.lang.syntax import (Binary, Expr, If, Let, LetTuple, Lookup, Neg, Singleton, Sum,
                                 Unique, Var, free_vars)
from sparsad.lang.types import Type


def _candidates(body: Expr, inner: frozenset[str], found: list) -> None:
    """Dictionaries looked up in `body` that read no name bound inside the loop (pre-order)."""
    match body:
        case Lookup(dict=Sum() as d, key=k):
            if not (set(free_vars(d)) & inner):
                found.append(d)
                _candidates(k, inner, found)
                return
        case If(cond=c):
            _candidates(c, inner, found)  # the branches run conditionally: nothing leaves them
            return
        case Sum(key=k, val=v, source=s, body=b):
            if _built(s) and not (set(free_vars(s)) & inner):
                found.append(s)  # an inner loop over a dictionary built anew at every iteration
            else:
                _candidates(s, inner, found)
            _candidates(b, inner | {k, v}, found)
            return
        case Let(name=n, value=v, body=b):
            _candidates(v, inner, found)
            _candidates(b, inner | {n}, found)
            return
        case LetTuple(names=ns, values=vs, body=b):
            for v in vs:
                _candidates(v, inner, found)
            _candidates(b, inner | set(ns), found)
            return
    map_children(body, lambda child: _candidates(child, inner, found) or child)


def _built(source: Expr) -> bool:
    """Whether iterating `source` builds a dictionary first (code generation fills a container
    for it at each evaluation): a sum, difference or scaling of dictionaries, or a sum whose
    entries may repeat keys. Names, ranges, sub-arrays, rows and sums producing each key once
    are iterated where they are (fused): hoisting them would build what costs nothing now."""
    while isinstance(source, Unique):
        source = source.operand
    if isinstance(source, (Binary, Neg)):
        return True
    if isinstance(source, Sum):
        body = source.body
        while isinstance(body, Let):
            body = body.body
        return not (isinstance(body, Singleton) and isinstance(body.key, Unique))
    return False


def _replace(expr: Expr, target: Expr, name: str, reads: frozenset[str]) -> Expr:
    """expr with `target` read as Var(name), except under a binder that rebinds a name the target
    reads (`reads`, its free names): there the same text means another dictionary."""
    if expr == target:
        return Var(name)
    again = lambda child: _replace(child, target, name, reads)  # noqa: E731
    match expr:
        case Sum(key=k, val=v, source=s, body=b):
            body = b if reads & {k, v} else again(b)
            return Sum(k, v, again(s), body, span=expr.span)
        case Let(name=n, value=v, body=b):
            return Let(n, again(v), b if n in reads else again(b), span=expr.span)
        case LetTuple(names=ns, values=vs, body=b):
            values, shadowed = [], False
            for n, v in zip(ns, vs):  # each value sees the names bound before it
                values.append(v if shadowed else again(v))
                shadowed = shadowed or n in reads
            return LetTuple(ns, tuple(values), b if shadowed else again(b), span=expr.span)
    return map_children(expr, again)


def hoist_invariant_dictionaries(expr: Expr, types: Mapping[str, Type] | None = None) -> Expr:
    """Every loop-invariant dictionary looked up inside a loop, bound by a let just outside it."""
    fresh = Fresh(all_names(expr))

    def go(e: Expr) -> Expr:
        e = map_children(e, go)
        if not isinstance(e, Sum):
            return e
        found: list = []
        _candidates(e.body, frozenset({e.key, e.val}), found)
        lets = []
        body = e.body
        for dictionary in found:
            if any(dictionary == done for done, _ in lets):
                continue
            name = fresh("d")
            lets.append((dictionary, name))
            body = _replace(body, dictionary, name, free_vars(dictionary))
        result: Expr = Sum(e.key, e.val, e.source, body)
        for dictionary, name in reversed(lets):
            result = Let(name, dictionary, result)
        return result

    return go(expr)
