"""Forward-mode differentiation: scalar (∇SD Fig. 5) and tensorized (Fig. 6).

The tangent of a variable x is the variable x'. No pairs are built: tangents refer to the
let-bound primal names. In tensorized mode the tangent of a value of type D has type D ⊗ τ,
and products use the ⋆ᵀ[τ] rule, which needs the primal types.
"""
from __future__ import annotations

from typing import Mapping

from sparsad.ad.rules import derivative_of
from sparsad.errors import UnsupportedError
from sparsad.lang.build import over_levels, singletons
from sparsad.lang.names import Fresh, all_names
from sparsad.lang.syntax import (Binary, Call, Const, EmptyDict, Expr, If, Let, LetTuple, Lookup,
                                 Neg, Not, Range, Singleton, SubArray, Sum, Unique, Var)
from sparsad.lang.typecheck import infer
from sparsad.lang.types import Dict, Type, Zero, tensor_order


def tangent_name(name: str) -> str:
    return name + "'"


def forward(expr: Expr) -> Expr:
    """Scalar forward mode F[e] (Fig. 5): the tangent of e in terms of primal names and x' tangents."""
    return _Forward(None, {}, Fresh(all_names(expr))).d(expr)


def tensorized(expr: Expr, tau: Type, types: Mapping[str, Type]) -> Expr:
    """Tensorized forward mode D_τ[e] (Fig. 6): the tangent of e of type D ⊗ τ.

    `types` gives the primal types of e's free variables (their tangents have type T ⊗ τ).
    """
    return _Forward(tau, dict(types), Fresh(all_names(expr))).d(expr)


class _Forward:
    def __init__(self, tau: Type | None, env: dict[str, Type], fresh: Fresh):
        self.tau = tau          # None: scalar mode (Fig. 5)
        self.env = env          # primal types, needed only in tensorized mode
        self.fresh = fresh

    def _with(self, **bindings: Type) -> "_Forward":
        env = dict(self.env)
        env.update({k: v for k, v in bindings.items() if k != "_"})
        return _Forward(self.tau, env, self.fresh)

    def _type(self, e: Expr) -> Type:
        return infer(e, self.env)

    def d(self, e: Expr) -> Expr:
        match e:
            case Var(name=n):
                return Var(tangent_name(n))
            case Const() | EmptyDict() | Range() | Not():
                return EmptyDict()
            case Binary(op="=" | "<"):
                return EmptyDict()
            case Sum(key=k, val=v, source=s, body=b):
                if k == "_" and v != "_":  # the value's tangent is read at the key: name it
                    k = self.fresh("k")
                inner = self
                if self.tau is not None:
                    source_type = self._type(s)
                    if isinstance(source_type, Dict):
                        inner = self._with(**{k: source_type.key, v: source_type.value})
                tangent_of_value = self.d_lookup(s, Var(k) if k != "_" else None)
                names, values = [], []
                if k != "_":
                    names.append(tangent_name(k))
                    values.append(EmptyDict())
                if v != "_":
                    names.append(tangent_name(v))
                    values.append(tangent_of_value)
                body = inner.d(b)
                if names:
                    body = LetTuple(tuple(names), tuple(values), body)
                return Sum(k, v, s, body)
            case Let(name=n, value=v, body=b):
                inner = self._with(**{n: self._type(v)}) if self.tau is not None else self
                return LetTuple((n, tangent_name(n)), (v, self.d(v)), inner.d(b))
            case LetTuple(names=ns, values=vs, body=b):
                names, values, current = [], [], self
                for n, v in zip(ns, vs):
                    names += [n, tangent_name(n)]
                    values += [v, current.d(v)]
                    if self.tau is not None:
                        current = current._with(**{n: current._type(v)})
                return LetTuple(tuple(names), tuple(values), current.d(b))
            case If(cond=c, then=t, orelse=o):
                return If(c, self.d(t), None if o is None else self.d(o))
            case Lookup(dict=d, key=k):
                return Lookup(self.d(d), k)
            case Singleton(key=k, value=v):
                return Singleton(k, self.d(v))
            case Binary(op="+", left=l, right=r):
                return Binary("+", self.d(l), self.d(r))
            case Binary(op="-", left=l, right=r):
                return Binary("-", self.d(l), self.d(r))
            case Binary(op="*", left=l, right=r):
                return Binary("+", Binary("*", l, self.d(r)), self.star_t(self.d(l), l, r))
            case Binary(op="/", left=l, right=r):
                # d(l/r) = (1/r) dl - ((l/r)/r) dr; scalars on the left keep tangents τ-shaped;
                # (l/r)/r, not l/(r*r): r*r overflows long before l/r/r does (a softmax's sum)
                return Binary("-", Binary("*", Binary("/", Const(1.0), r), self.d(l)),
                              Binary("*", Binary("/", Binary("/", l, r), r), self.d(r)))
            case Neg(operand=o):
                return Neg(self.d(o))
            case Unique(operand=o):
                return self.d(o)
            case Call() as call:
                return Binary("*", derivative_of(call), self.d(call.args[0]))
            case SubArray(array=a, start=s, end=en):
                tangent = self.d(a)  # a window of a zero tangent is zero (and `{}(s:e)` is ill-typed)
                return tangent if isinstance(tangent, EmptyDict) else SubArray(tangent, s, en)
        raise UnsupportedError(f"forward mode does not handle {type(e).__name__}")

    def d_lookup(self, source: Expr, key: Expr | None) -> Expr:
        """F[e1(k)] = F[e1](k), the tangent of a sum's value binder."""
        if key is None:
            raise UnsupportedError("a sum whose key is '_' cannot give its value a tangent; name the key")
        return Lookup(self.d(source), key)

    def star_t(self, d_left: Expr, left: Expr, right: Expr) -> Expr:
        """D[e1] ⋆ᵀ[τ] e2: put e2's indices before τ's in the tangent of a product."""
        if self.tau is None or tensor_order(self.tau) == 0:
            return Binary("*", d_left, right)
        left_type = self._type(left)
        m = _order(left_type)
        if m == 0:
            right_order = _order(self._type(right))
            return Binary("*", d_left, right) if right_order == 0 else Binary("*", right, d_left)
        # sum(<i1, r2> in D[e1]) ... sum(<im, v> in rm) { i1 -> ... { im -> 1 } } * e2 * v
        keys = [self.fresh("i") for _ in range(m)]
        values = [self.fresh("r") for _ in range(m - 1)] + [self.fresh("v")]
        return over_levels(d_left, keys, values,
                           lambda ks, v: Binary("*", Binary("*", singletons(ks, Const(1.0)), right), v))


def _order(t: Type) -> int:
    if isinstance(t, Zero):
        return 0
    order = 0
    while isinstance(t, Dict):
        order += 1
        t = t.value
    return order
