"""Dead-let elimination: drop `let x = e in body` when body never reads x (the language is pure)."""
from __future__ import annotations

from sparsad.lang.names import desugar_let_tuples
from sparsad.lang.rebuild import map_children
from sparsad.lang.syntax import Expr, Let, LetTuple, free_vars


def eliminate_dead_lets(expr: Expr) -> Expr:
    """The same program without bindings that nothing reads."""
    if isinstance(expr, LetTuple):
        expr = desugar_let_tuples(expr)
    expr = map_children(expr, eliminate_dead_lets)
    if isinstance(expr, Let) and expr.name not in free_vars(expr.body):
        return expr.body
    return expr
