"""Common-subexpression elimination: in A-normal form with unique names, a binding whose
operation was already computed in scope (up to the names of its bound variables) reuses the
earlier variable; copies are then inlined and single-use bindings folded back.

Before that, sibling sums over one source whose bodies share work are merged, `(sum(<k, v> in s)
b1) + (sum(<k2, v2> in s) b2)` ~> `sum(<k, v> in s) (b1 + b2[k2 := k, v2 := v])` (the sum
distributes over +), so that work both bodies do per entry (e.g. a score that a vjp program
needs in two of its adjoint terms) is one binding, computed once."""
from __future__ import annotations

from sparsad.lang.names import Fresh, all_names, canonical, rename_bound
from sparsad.lang.rebuild import map_children, substitute
from sparsad.lang.syntax import Binary, Call, Expr, If, Let, Singleton, Sum, Var, has_loop, walk
from sparsad.lang.types import Type
from sparsad.opt.anf import is_atom, to_anf
from sparsad.opt.dce import eliminate_dead_lets
from sparsad.opt.inline import inline_atoms


def _operation_key(value: Expr) -> Expr:
    """What identifies an operation: a sum or a branch up to the names it binds."""
    return canonical(value) if isinstance(value, (Sum, If)) else value


def _dedupe(expr: Expr, available: dict[Expr, str]) -> Expr:
    if isinstance(expr, Let):
        value = _dedupe(expr.value, available)
        key = None if is_atom(value) else _operation_key(value)
        if key is not None and key in available:
            return _dedupe(substitute(expr.body, expr.name, Var(available[key])), available)
        inner = dict(available)
        if key is not None:
            inner[key] = expr.name
        return Let(expr.name, value, _dedupe(expr.body, inner))
    if isinstance(expr, Sum):
        return Sum(expr.key, expr.val, _dedupe(expr.source, available), _dedupe(expr.body, dict(available)))
    return map_children(expr, lambda child: _dedupe(child, available))


def _inline_singletons(expr: Expr) -> Expr:
    """`let x = { k -> v } in b` (k, v loop-free) substituted back: a singleton costs O(1) where
    it is used, whereas a shared one becomes a local container that code generation fills."""
    expr = map_children(expr, _inline_singletons)
    if isinstance(expr, Let) and isinstance(expr.value, Singleton) and not has_loop(expr.value):
        return substitute(expr.body, expr.name, expr.value)
    return expr


def _terms(expr: Expr) -> list[Expr]:
    if isinstance(expr, Binary) and expr.op == "+":
        return _terms(expr.left) + _terms(expr.right)
    return [expr]


def _work(expr: Expr) -> int:
    """Loops and function calls in expr: the work CSE can share."""
    return sum(1 for node in walk(expr) if isinstance(node, (Sum, Call)))


def _shared_work(first: Expr, second: Expr, fresh: Fresh) -> bool:
    """Whether CSE finds work common to two bodies of one loop (beyond what each repeats alone)."""
    def deduped(e: Expr) -> int:
        return _work(_dedupe(to_anf(e, fresh), {}))

    return deduped(Binary("+", first, second)) < deduped(first) + deduped(second)


def _merged(earlier: Sum, term: Sum, fresh: Fresh) -> Sum | None:
    """`earlier + term`, two sums over one source, as one sum; None when their bodies share no work
    (then the loops stay apart: later passes, e.g. loop interchange, see each one whole)."""
    key = earlier.key if earlier.key != "_" else term.key
    val = earlier.val if earlier.val != "_" else term.val
    first, second = earlier.body, term.body
    for name, new in ((earlier.key, key), (earlier.val, val)):
        if name != "_" and name != new:
            first = substitute(first, name, Var(new))
    for name, new in ((term.key, key), (term.val, val)):
        if name != "_" and name != new:
            second = substitute(second, name, Var(new))
    if not _shared_work(first, second, fresh):
        return None
    return Sum(key, val, earlier.source, Binary("+", first, second))


def merge_sibling_sums(expr: Expr, fresh: Fresh | None = None) -> Expr:
    """Terms of one addition that are sums over the same source and share work merged into one
    sum, in the place of the first (binders must be unique: the merged bodies' names cannot clash)."""
    fresh = fresh or Fresh(all_names(expr))
    expr = map_children(expr, lambda child: merge_sibling_sums(child, fresh))
    if not (isinstance(expr, Binary) and expr.op == "+"):
        return expr
    terms = _terms(expr)
    merged: list[Expr] = []
    for term in terms:
        for position, earlier in enumerate(merged):
            if isinstance(term, Sum) and isinstance(earlier, Sum) and term.source == earlier.source:
                both = _merged(earlier, term, fresh)
                if both is not None:
                    merged[position] = both
                    break
        else:
            merged.append(term)
    if len(merged) == len(terms):
        return expr
    result = merged[0]
    for term in merged[1:]:
        result = Binary("+", result, term)
    return result


def eliminate_common_subexpressions(expr: Expr, types: dict[str, Type] | None = None) -> Expr:
    from sparsad.opt.fuse import fold_single_use_lets

    fresh = Fresh(all_names(expr))
    expr = merge_sibling_sums(rename_bound(expr, fresh), fresh)
    anf = to_anf(expr, fresh)
    return fold_single_use_lets(_inline_singletons(eliminate_dead_lets(inline_atoms(_dedupe(anf, {})))))
