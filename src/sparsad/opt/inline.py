"""Copy propagation: `let x = a in body` with a constant or variable `a` becomes body[x := a]."""
from __future__ import annotations

from sparsad.lang.names import bound_names
from sparsad.lang.rebuild import map_children, substitute
from sparsad.lang.syntax import Const, EmptyDict, Expr, Let, Var


def inline_atoms(expr: Expr) -> Expr:
    """The same program with let-bound constants and variable copies substituted in place."""
    expr = map_children(expr, inline_atoms)
    if isinstance(expr, Let) and isinstance(expr.value, (Const, EmptyDict, Var)):
        value = expr.value
        if isinstance(value, Var) and value.name in bound_names(expr.body):
            return expr  # substituting would be captured by an inner binder
        return substitute(expr.body, expr.name, value)
    return expr
