"""Dead-let elimination: drop `let x = e in body` when body never reads x (the language is pure)."""
from __future__ import annotations

from sparsad.lang.names import desugar_let_tuples
from sparsad.lang.rebuild import map_children
from sparsad.lang.syntax import Expr, Let, LetTuple, Sum, free_vars


def eliminate_dead_lets(expr: Expr) -> Expr:
    """The same program without bindings that nothing reads (unread sum binders become `_`)."""
    if isinstance(expr, LetTuple):
        expr = desugar_let_tuples(expr)
    expr = map_children(expr, eliminate_dead_lets)
    if isinstance(expr, Let) and expr.name not in free_vars(expr.body):
        return expr.body
    if isinstance(expr, Sum):
        used = free_vars(expr.body)
        key = expr.key if expr.key in used else "_"
        val = expr.val if expr.val in used else "_"
        if (key, val) != (expr.key, expr.val):
            return Sum(key, val, expr.source, expr.body, span=expr.span)
    return expr
