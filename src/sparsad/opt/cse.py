"""Common-subexpression elimination: in A-normal form with unique names, a binding whose
operation was already computed in scope reuses the earlier variable; copies are then inlined
and single-use bindings folded back."""
from __future__ import annotations

from sparsad.lang.names import Fresh, all_names, rename_bound
from sparsad.lang.rebuild import map_children, substitute
from sparsad.lang.syntax import Expr, Let, Singleton, Sum, Var, has_loop
from sparsad.lang.types import Type
from sparsad.opt.anf import is_atom, to_anf
from sparsad.opt.dce import eliminate_dead_lets
from sparsad.opt.inline import inline_atoms


def _dedupe(expr: Expr, available: dict[Expr, str]) -> Expr:
    if isinstance(expr, Let):
        value = _dedupe(expr.value, available)
        if not is_atom(value) and value in available:
            return _dedupe(substitute(expr.body, expr.name, Var(available[value])), available)
        inner = dict(available)
        if not is_atom(value):
            inner[value] = expr.name
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


def eliminate_common_subexpressions(expr: Expr, types: dict[str, Type] | None = None) -> Expr:
    from sparsad.opt.fuse import fold_single_use_lets

    fresh = Fresh(all_names(expr))
    anf = to_anf(rename_bound(expr, fresh), fresh)
    return fold_single_use_lets(_inline_singletons(eliminate_dead_lets(inline_atoms(_dedupe(anf, {})))))
