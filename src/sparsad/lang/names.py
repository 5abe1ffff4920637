"""Names: all names a tree uses, fresh names that avoid them, and alpha-equivalence."""
from __future__ import annotations

from sparsad.lang.syntax import Expr, Let, LetTuple, Sum, Var, walk


def bound_names(expr: Expr) -> set[str]:
    """Every name a sum, let or tupled let binds anywhere in expr."""
    names: set[str] = set()
    for node in walk(expr):
        match node:
            case Sum(key=k, val=v):
                names.update((k, v))
            case Let(name=n):
                names.add(n)
            case LetTuple(names=ns):
                names.update(ns)
    return names


def all_names(expr: Expr) -> set[str]:
    """Every variable name used or bound anywhere in expr."""
    return bound_names(expr) | {node.name for node in walk(expr) if isinstance(node, Var)}


class Fresh:
    """Makes names that clash with none of `avoid` nor with each other: _1, _2, ... or hint_1."""

    def __init__(self, avoid: set[str] | None = None, prefix: str = "_"):
        self.avoid = set(avoid or ())
        self.prefix = prefix
        self.count = 0

    def __call__(self, hint: str | None = None) -> str:
        while True:
            self.count += 1
            name = f"{hint}_{self.count}" if hint else f"{self.prefix}{self.count}"
            if name not in self.avoid:
                self.avoid.add(name)
                return name


def desugar_let_tuples(expr: Expr) -> Expr:
    """Replace every `let <a, b> = <e1, e2> in e` by `let a = e1 in let b = e2 in e`."""
    from sparsad.lang.rebuild import map_children

    expr = map_children(expr, desugar_let_tuples)
    if isinstance(expr, LetTuple):
        body = expr.body
        for name, value in reversed(list(zip(expr.names, expr.values))):
            body = Let(name, value, body)
        return body
    return expr


def canonical(expr: Expr) -> Expr:
    """Bound variables renamed to #0, #1, ... in binding order (tupled lets desugared first)."""
    counter = [0]

    def new() -> str:
        counter[0] += 1
        return f"#{counter[0]}"

    def go(e: Expr, env: dict) -> Expr:
        from sparsad.lang.rebuild import map_children

        match e:
            case Var(name=n):
                return Var(env.get(n, n))
            case Sum(key=k, val=v, source=s, body=b):
                source = go(s, env)
                inner = dict(env)
                nk, nv = new(), new()
                if k != "_":
                    inner[k] = nk
                if v != "_":
                    inner[v] = nv
                return Sum(nk if k != "_" else "_", nv if v != "_" else "_", source, go(b, inner))
            case Let(name=n, value=v, body=b):
                value = go(v, env)
                fresh = new()
                return Let(fresh, value, go(b, {**env, n: fresh}))
        return map_children(e, lambda c: go(c, env))

    return go(desugar_let_tuples(expr), {})


def alpha_equal(a: Expr, b: Expr) -> bool:
    """Equal up to renaming of bound variables (and tupled lets read as nested lets)."""
    return canonical(a) == canonical(b)


def rename_bound(expr: Expr, fresh: Fresh) -> Expr:
    """Every binder (including `_`) renamed to a fresh name, so that no name is bound twice or shadows."""
    from sparsad.lang.rebuild import map_children

    def go(e: Expr, env: dict) -> Expr:
        match e:
            case Var(name=n):
                return Var(env.get(n, n), span=e.span)
            case Sum(key=k, val=v, source=s, body=b):
                nk, nv = fresh(_hint(k, "k")), fresh(_hint(v, "v"))
                inner = {**env, k: nk, v: nv}
                return Sum(nk, nv, go(s, env), go(b, inner), span=e.span)
            case Let(name=n, value=v, body=b):
                nn = fresh(_hint(n, "t"))
                return Let(nn, go(v, env), go(b, {**env, n: nn}), span=e.span)
            case LetTuple():
                return go(desugar_let_tuples(e), env)
        return map_children(e, lambda c: go(c, env))

    return go(expr, {})


def _hint(name: str, default: str) -> str:
    base = name.rstrip("'").split("_")[0] if name != "_" else default
    return base or default
