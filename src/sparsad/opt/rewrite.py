"""A small term rewriter: named rules (tables of rewrites) applied bottom-up to a fixed point.

A rule is a function (node, scope) -> node | None. `scope` gives the types of the variables in
scope (inputs and binders), so rules that need types (normalization) can ask for them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from sparsad.lang.syntax import Expr, Let, LetTuple, Sum
from sparsad.lang.rebuild import map_children
from sparsad.lang.typecheck import infer
from sparsad.lang.types import Dict, Type, ZERO, Zero


@dataclass(frozen=True)
class Rule:
    name: str
    apply: Callable[[Expr, "Scope"], Expr | None]


class Scope:
    """The types of the variables visible at a node, computed only when a rule asks."""

    def __init__(self, types: Mapping[str, "Type | Callable[[], Type]"]):
        self._entries = dict(types)

    @property
    def types(self) -> dict[str, Type]:
        for name, entry in list(self._entries.items()):
            if callable(entry):
                self._entries[name] = entry()
        return self._entries

    def type_of(self, expr: Expr) -> Type:
        return infer(expr, self.types)

    def bind(self, **types: "Type | Callable[[], Type]") -> "Scope":
        inner = dict(self._entries)
        inner.update({k: v for k, v in types.items() if k != "_"})
        return Scope(inner)


def _binder_types(scope: Scope, source: Expr):
    cache: dict[str, Type] = {}

    def source_type() -> Type:
        if "t" not in cache:
            cache["t"] = scope.type_of(source)
        return cache["t"]

    def key() -> Type:
        t = source_type()
        return t.key if isinstance(t, Dict) else ZERO

    def value() -> Type:
        t = source_type()
        return t.value if isinstance(t, Dict) else ZERO

    return key, value


def _inner_scopes(expr: Expr, scope: Scope) -> list[Scope]:
    """The scope of each child of expr, in the order of `children`."""
    match expr:
        case Sum(key=k, val=v, source=s):
            key, value = _binder_types(scope, s)
            return [scope, scope.bind(**{k: key, v: value})]
        case Let(name=n, value=v):
            return [scope, scope.bind(**{n: lambda: scope.type_of(v)})]
    return []


def rewrite_once(expr: Expr, rules: Sequence[Rule], scope: Scope, trace: list | None = None) -> Expr:
    """One bottom-up sweep: rewrite children first, then try each rule at this node."""
    scopes = _inner_scopes(expr, scope)
    if scopes:
        child_iter = iter(scopes)
        expr = map_children(expr, lambda c: rewrite_once(c, rules, next(child_iter), trace))
    else:
        expr = map_children(expr, lambda c: rewrite_once(c, rules, scope, trace))
    for rule in rules:
        result = rule.apply(expr, scope)
        if result is not None and result != expr:
            if trace is not None:
                trace.append(rule.name)
            return result
    return expr


def rewrite_fixpoint(expr: Expr, rules: Sequence[Rule], types: Mapping[str, Type],
                     max_sweeps: int = 50, trace: list | None = None) -> Expr:
    """Sweep until nothing changes (bounded: a rule set that cycles stops after max_sweeps)."""
    if any(isinstance(n, LetTuple) for n in _walk(expr)):
        from sparsad.lang.names import desugar_let_tuples

        expr = desugar_let_tuples(expr)
    scope = Scope(types)
    for _ in range(max_sweeps):
        new = rewrite_once(expr, rules, scope, trace)
        if new == expr:
            return new
        expr = new
    return expr


def _walk(expr: Expr):
    from sparsad.lang.syntax import walk

    return walk(expr)


def is_zero_type(t: Type) -> bool:
    return isinstance(t, Zero)
