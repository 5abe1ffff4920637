"""Reverse-mode differentiation on the language (the ∇SD paper leaves it as future work).

The program is put in A-normal form with unique names; a block `let t1 = op1 in ... tn` is
followed by the adjoint lets `t̄n, ..., t̄1` in reverse order, each the semi-ring sum of the
contributions of the later operations that use it. A `sum` passes the same adjoint to every
iteration, so the contributions of its body are themselves summed over the same source; the
body's primal lets are recomputed inside that adjoint loop. The cost is a constant factor of the
primal's, independent of the data.
"""
from __future__ import annotations

from typing import Mapping

from sparsad.ad.rules import derivative_of
from sparsad.errors import UnsupportedError
from sparsad.lang.build import lookups, over_levels, singletons
from sparsad.lang.names import Fresh, all_names, rename_bound
from sparsad.lang.syntax import (Binary, Call, Const, EmptyDict, Expr, If, Let, Lookup, Neg, Not,
                                 Range, Singleton, SubArray, Sum, Unique, Var, free_vars)
from sparsad.lang.typecheck import infer
from sparsad.lang.types import Bool, Dict, Int, Type, Zero
from sparsad.lang.fold import fold_exponents
from sparsad.opt.anf import blocks, to_anf


def reverse(expr: Expr, wrt: str, seed: Expr, types: Mapping[str, Type]) -> Expr:
    """An expression for the adjoint of input `wrt`, given the adjoint `seed` of expr's value.

    `types` gives the types of expr's free variables (and of the seed's, if it is a variable).
    """
    fresh = Fresh(all_names(expr) | free_vars(seed))
    prepared = to_anf(rename_bound(fold_exponents(expr), fresh), fresh)
    return _Reverse(fresh).block(prepared, seed, wrt, dict(types))


def differentiable(t: Type) -> bool:
    """Reals and dictionaries of reals carry adjoints; ints and bools do not."""
    while isinstance(t, Dict):
        t = t.value
    return not isinstance(t, (Int, Bool))


def order_of(t: Type) -> int:
    order = 0
    while isinstance(t, Dict):
        order += 1
        t = t.value
    return order


def plus(terms: list[Expr]) -> Expr:
    if not terms:
        return EmptyDict()
    total = terms[0]
    for term in terms[1:]:
        total = Binary("+", total, term)
    return total


class _Reverse:
    def __init__(self, fresh: Fresh):
        self.fresh = fresh

    def block(self, block: Expr, seed: Expr, target: str, env: dict[str, Type]) -> Expr:
        """Adjoint of `target` from the ANF block `block` whose value has adjoint `seed`."""
        bindings, result = blocks(block)
        env = dict(env)
        active = {target}
        binding_env = []
        for name, op in bindings:
            binding_env.append(dict(env))
            env[name] = infer(op, env)
            if differentiable(env[name]) and (free_vars(op) & active):
                active.add(name)
        contributions: dict[str, list[Expr]] = {}
        if isinstance(result, Var) and result.name in active:
            contributions.setdefault(result.name, []).append(seed)
        adjoint_lets: list[tuple[str, Expr]] = []
        for (name, op), op_env in zip(reversed(bindings), reversed(binding_env)):
            terms = contributions.get(name)
            if name not in active or name == target or not terms:
                continue
            bar = self.fresh(name.lstrip("_") + "_bar" if not name.startswith("_") else "bar")
            adjoint_lets.append((bar, plus(terms)))
            for operand, term in self.op_adjoint(op, Var(bar), op_env, active):
                contributions.setdefault(operand, []).append(term)
        result_expr = plus(contributions.get(target, []))
        for name, value in reversed(adjoint_lets):
            result_expr = Let(name, value, result_expr)
        for name, op in reversed(bindings):
            result_expr = Let(name, op, result_expr)
        return result_expr

    def op_adjoint(self, op: Expr, bar: Var, env: dict[str, Type], active: set[str]):
        """(variable, contribution) pairs: what `op`, whose value has adjoint `bar`, gives its operands."""
        def on(e: Expr) -> bool:
            return isinstance(e, Var) and e.name in active

        match op:
            case Var(name=n):
                return [(n, bar)] if on(op) else []
            case Const() | EmptyDict() | Range() | Not():
                return []
            case Binary(op="=" | "<"):
                return []
            case Binary(op="+", left=l, right=r):
                return [(x.name, bar) for x in (l, r) if on(x)]
            case Binary(op="-", left=l, right=r):
                return ([(l.name, bar)] if on(l) else []) + ([(r.name, Neg(bar))] if on(r) else [])
            case Binary(op="*", left=l, right=r):
                return self.product_adjoint(l, r, bar, env, on)
            case Binary(op="/", left=l, right=r):
                out = []
                if on(l):
                    out.append((l.name, Binary("/", bar, r)))
                if on(r):
                    # bar * (l/r) / r, not bar*l/(r*r): r*r overflows long before the result does
                    out.append((r.name, Neg(Binary("/", Binary("*", bar, Binary("/", l, r)), r))))
                return out
            case Neg(operand=o):
                return [(o.name, Neg(bar))] if on(o) else []
            case Unique(operand=o):
                return [(o.name, bar)] if on(o) else []
            case Call(args=args) as call:
                return [(args[0].name, Binary("*", bar, derivative_of(call)))] if on(args[0]) else []
            case Lookup(dict=d, key=k):
                return [(d.name, Singleton(k, bar))] if on(d) else []
            case Singleton(key=k, value=v):
                return [(v.name, Lookup(bar, k))] if on(v) else []
            case SubArray(array=a, start=s, end=e):
                # only the window's entries came from a: an adjoint at a key outside it (a lookup
                # of the sub-array there reads nothing) does not flow back
                if not on(a):
                    return []
                k, v = Var(self.fresh("k")), self.fresh("b")
                inside = If(Not(Binary("<", k, s)), If(Binary("<", k, e), Singleton(k, Var(v))))
                return [(a.name, Sum(k.name, v, bar, inside))]
            case If(cond=c, then=t, orelse=o):
                out = []
                for z in sorted((free_vars(t) | (free_vars(o) if o is not None else set())) & active):
                    then_adj = self.block(t, bar, z, env)
                    else_adj = self.block(o, bar, z, env) if o is not None else None
                    out.append((z, If(c, then_adj, else_adj)))
                return out
            case Sum(key=k, val=v, source=s, body=b):
                source_type = env[s.name] if isinstance(s, Var) else infer(s, env)
                if isinstance(source_type, Zero):
                    return []
                inner = {**env, k: source_type.key, v: source_type.value}
                out = []
                for z in sorted((free_vars(b) - {k, v}) & active):
                    out.append((z, Sum(k, v, s, self.block(b, bar, z, inner))))
                if on(s) and v in free_vars(b) and differentiable(source_type.value):
                    value_adjoint = self.block(b, bar, v, inner)
                    out.append((s.name, Sum(k, v, s, Singleton(Var(k), value_adjoint))))
                return out
        raise UnsupportedError(f"reverse mode does not handle {type(op).__name__}")

    def product_adjoint(self, l: Expr, r: Expr, bar: Var, env, on):
        """Adjoints of l * r, where * is a scalar product, a scaling, or an outer product."""
        m = order_of(infer(l, env))
        p = order_of(infer(r, env))
        out = []
        if on(l):
            if m == 0:
                out.append((l.name, Binary("*", bar, r) if p == 0 else self.contract(bar, r, p)))
            elif p == 0:
                out.append((l.name, Binary("*", bar, r)))
            else:
                out.append((l.name, self.map_levels(bar, m, lambda inner: self.contract(inner, r, p))))
        if on(r):
            out.append((r.name, Binary("*", l, bar) if m == 0 else self.contract(bar, l, m)))
        return out

    def contract(self, a: Expr, b: Expr, depth: int) -> Expr:
        """Σ over b's first `depth` index levels of a(j1)...(jd) * b(j1)...(jd), iterating b's entries."""
        keys = [self.fresh("j") for _ in range(depth)]
        values = [self.fresh("b") for _ in range(depth)]
        return over_levels(b, keys, values, lambda ks, v: Binary("*", lookups(a, ks), v))

    def map_levels(self, a: Expr, depth: int, leaf) -> Expr:
        """sum(<i1, a1> in a) ... { i1 -> ... { id -> leaf(ad) } }: apply leaf below `depth` levels."""
        keys = [self.fresh("i") for _ in range(depth)]
        values = [self.fresh("e") for _ in range(depth)]
        return over_levels(a, keys, values, lambda ks, v: singletons(ks, leaf(v)))
