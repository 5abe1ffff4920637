"""Equality saturation with egglog: loop-invariant factors and lets leave their loops.

The program (binders renamed apart) is encoded as an egglog term. Rules are data:
sum factorization (a factor that does not read the loop's key or value moves out), let hoisting,
sums over `+` (sum merging), distributivity and associativity of `*`, elimination of sums over
singletons, lookups of singletons, and if-to-multiplication. (Vertical fusion and let inlining,
which substitute under binders, are term rewrites in `opt.fuse`.) Independence of a term from a binder
is a relation derived bottom-up, so the rules need no negation. Extraction uses a cost model
that counts loop nesting: a sum costs its source plus the estimated size of the source times
its body. Saturation is bounded in iterations and time.
"""
from __future__ import annotations

import time
from typing import Mapping

from egglog import (EGraph, Expr as EggExpr, String, StringLike, f64, f64Like, i64, i64Like, eq, ne,
                    relation, rule, ruleset, union, vars_, get_callable_args, get_callable_fn,
                    get_literal_value)

from sparsad.lang.names import Fresh, all_names, desugar_let_tuples, rename_bound
from sparsad.lang.syntax import (Binary, Call, Const, EmptyDict, Expr, If, Let, Lookup, Neg, Not,
                                 Range, Singleton, SubArray, Sum, Unique, Var)
from sparsad.lang.types import Type

DEFAULT_SIZE = 100.0
BUILD_COST = 4.0


class Term(EggExpr):
    @classmethod
    def var(cls, name: StringLike) -> "Term": ...
    @classmethod
    def real(cls, value: f64Like) -> "Term": ...
    @classmethod
    def integer(cls, value: i64Like) -> "Term": ...
    @classmethod
    def boolean(cls, value: i64Like) -> "Term": ...
    @classmethod
    def empty(cls) -> "Term": ...
    @classmethod
    def op1(cls, op: StringLike, a: "Term") -> "Term": ...
    @classmethod
    def op2(cls, op: StringLike, a: "Term", b: "Term") -> "Term": ...
    @classmethod
    def op3(cls, op: StringLike, a: "Term", b: "Term", c: "Term") -> "Term": ...
    @classmethod
    def let_(cls, name: StringLike, value: "Term", body: "Term") -> "Term": ...
    @classmethod
    def sum(cls, key: StringLike, val: StringLike, source: "Term", body: "Term", size: f64Like) -> "Term": ...
    def __add__(self, other: "Term") -> "Term": ...
    def __mul__(self, other: "Term") -> "Term": ...


indep = relation("indep", Term, String)      # indep(t, x): t does not read the binder x
binder = relation("binder", String)

_t, _a, _b, _c, _s, _body = vars_("t a b c s body", Term)
_k, _v, _x, _y, _o = vars_("k v x y o", String)
_n, _r = vars_("n r", f64)
(_i,) = vars_("i", i64)

INDEPENDENCE_RULES = ruleset(
    rule(eq(_t).to(Term.var(_y)), binder(_x), ne(_x).to(_y)).then(indep(_t, _x)),
    rule(eq(_t).to(Term.real(_r)), binder(_x)).then(indep(_t, _x)),
    rule(eq(_t).to(Term.empty()), binder(_x)).then(indep(_t, _x)),
    rule(eq(_t).to(Term.integer(_i)), binder(_x)).then(indep(_t, _x)),
    rule(eq(_t).to(Term.boolean(_i)), binder(_x)).then(indep(_t, _x)),
    rule(eq(_t).to(_a + _b), indep(_a, _x), indep(_b, _x)).then(indep(_t, _x)),
    rule(eq(_t).to(_a * _b), indep(_a, _x), indep(_b, _x)).then(indep(_t, _x)),
    rule(eq(_t).to(Term.op1(_o, _a)), indep(_a, _x)).then(indep(_t, _x)),
    rule(eq(_t).to(Term.op2(_o, _a, _b)), indep(_a, _x), indep(_b, _x)).then(indep(_t, _x)),
    rule(eq(_t).to(Term.op3(_o, _a, _b, _c)), indep(_a, _x), indep(_b, _x), indep(_c, _x)).then(indep(_t, _x)),
    rule(eq(_t).to(Term.let_(_y, _a, _b)), indep(_a, _x), indep(_b, _x)).then(indep(_t, _x)),
    rule(eq(_t).to(Term.sum(_k, _v, _s, _body, _n)), indep(_s, _x), indep(_body, _x)).then(indep(_t, _x)),
)

REWRITE_RULES = ruleset(
    # sum factorization: sum(..) c * b = c * sum(..) b, when c reads neither key nor value
    rule(eq(_t).to(Term.sum(_k, _v, _s, _c * _b, _n)), indep(_c, _k), indep(_c, _v))
    .then(union(_t).with_(_c * Term.sum(_k, _v, _s, _b, _n))),
    rule(eq(_t).to(Term.sum(_k, _v, _s, _b * _c, _n)), indep(_c, _k), indep(_c, _v))
    .then(union(_t).with_(Term.sum(_k, _v, _s, _b, _n) * _c)),
    # loop-invariant hoisting of a let
    rule(eq(_t).to(Term.sum(_k, _v, _s, Term.let_(_y, _a, _b), _n)), indep(_a, _k), indep(_a, _v))
    .then(union(_t).with_(Term.let_(_y, _a, Term.sum(_k, _v, _s, _b, _n)))),
    # a sum of a + is a + of sums, and back (sum merging)
    rule(eq(_t).to(Term.sum(_k, _v, _s, _a + _b, _n)))
    .then(union(_t).with_(Term.sum(_k, _v, _s, _a, _n) + Term.sum(_k, _v, _s, _b, _n))),
    rule(eq(_t).to(Term.sum(_k, _v, _s, _a, _n) + Term.sum(_k, _v, _s, _b, _n)))
    .then(union(_t).with_(Term.sum(_k, _v, _s, _a + _b, _n))),
    # * distributes over + and is associative (the semi-ring; ⊗ is associative too)
    rule(eq(_t).to(_c * (_a + _b))).then(union(_t).with_(_c * _a + _c * _b)),
    rule(eq(_t).to((_a + _b) * _c)).then(union(_t).with_(_a * _c + _b * _c)),
    rule(eq(_t).to((_a * _b) * _c)).then(union(_t).with_(_a * (_b * _c))),
    rule(eq(_t).to(_a * (_b * _c))).then(union(_t).with_((_a * _b) * _c)),
    # elimination of a sum over a singleton, and the lookup of a singleton
    rule(eq(_t).to(Term.sum(_k, _v, Term.op2("single", _a, _b), _body, _n)))
    .then(union(_t).with_(Term.let_(_k, _a, Term.let_(_v, _b, _body)))),
    rule(eq(_t).to(Term.op2("lookup", Term.op2("single", _a, _b), _c)))
    .then(union(_t).with_(Term.op3("if", Term.op2("=", _a, _c), _b, Term.empty()))),
    # if-to-multiplication: a factor moves into (or out of) an else-less conditional
    rule(eq(_t).to(Term.op3("if", _c, _a, Term.empty()) * _b))
    .then(union(_t).with_(Term.op3("if", _c, _a * _b, Term.empty()))),
    rule(eq(_t).to(_b * Term.op3("if", _c, _a, Term.empty())))
    .then(union(_t).with_(Term.op3("if", _c, _b * _a, Term.empty()))),
)


class LoopCost:
    """Cost = work: a sum costs its source plus (estimated source size) x (1 + its body)."""

    def __call__(self, egraph, expr, children_costs):
        args = get_callable_args(expr)
        if args is None:
            return 0.0
        name = str(get_callable_fn(expr))
        if name.endswith("sum"):
            size = float(get_literal_value(args[4]))
            return children_costs[2] + size * (1.0 + children_costs[3])
        if name.endswith("op2") and get_literal_value(args[0]) == "single":
            return BUILD_COST + sum(children_costs)  # building a dictionary costs an allocation
        return 1.0 + sum(children_costs)


def _size(source: Expr, sizes: Mapping[str, float]) -> float:
    match source:
        case Var(name=n):
            return float(sizes.get(n, DEFAULT_SIZE))
        case Range(start=Const(value=a), end=Const(value=b)):
            return float(max(b - a, 0))
        case Range(end=Var(name=n)):
            return float(sizes.get(n, DEFAULT_SIZE))
        case SubArray(array=Var(name=n)):
            return float(sizes.get(n + ":row", 10.0))
    return DEFAULT_SIZE


def encode(expr: Expr, sizes: Mapping[str, float], binders: set[str]) -> Term:
    def go(e: Expr) -> Term:
        match e:
            case Const(value=v) if isinstance(v, bool):
                return Term.boolean(int(v))
            case Const(value=v) if isinstance(v, int):
                return Term.integer(v)
            case Const(value=v):
                return Term.real(float(v))
            case Var(name=n):
                return Term.var(n)
            case EmptyDict():
                return Term.empty()
            case Binary(op="+", left=l, right=r):
                return go(l) + go(r)
            case Binary(op="*", left=l, right=r):
                return go(l) * go(r)
            case Binary(op=op, left=l, right=r):
                return Term.op2(op, go(l), go(r))
            case Neg(operand=o):
                return Term.op1("neg", go(o))
            case Not(operand=o):
                return Term.op1("not", go(o))
            case Unique(operand=o):
                return Term.op1("unique", go(o))
            case Call(func=f, args=(a,)):
                return Term.op1("call:" + f, go(a))
            case Call(func=f, args=(a, b)):
                return Term.op2("call:" + f, go(a), go(b))
            case Lookup(dict=d, key=k):
                return Term.op2("lookup", go(d), go(k))
            case Singleton(key=k, value=v):
                return Term.op2("single", go(k), go(v))
            case Range(start=s, end=en):
                return Term.op2("range", go(s), go(en))
            case SubArray(array=a, start=s, end=en):
                return Term.op3("sub", go(a), go(s), go(en))
            case If(cond=c, then=t, orelse=o):
                return Term.op3("if", go(c), go(t), Term.empty() if o is None else go(o))
            case Let(name=n, value=v, body=b):
                binders.add(n)
                return Term.let_(n, go(v), go(b))
            case Sum(key=k, val=v, source=s, body=b):
                binders.update((k, v))
                return Term.sum(k, v, go(s), go(b), _size(s, sizes))
        raise TypeError(f"cannot encode {type(e).__name__}")

    return go(expr)


def decode(term) -> Expr:
    fn = str(get_callable_fn(term))
    args = get_callable_args(term)

    def lit(x):
        return get_literal_value(x)

    name = fn.split(".")[-1]
    if "*" in fn:
        return Binary("*", decode(args[0]), decode(args[1]))
    if "+" in fn:
        return Binary("+", decode(args[0]), decode(args[1]))
    if name == "var":
        return Var(lit(args[0]))
    if name == "real":
        return Const(float(lit(args[0])))
    if name == "integer":
        return Const(int(lit(args[0])))
    if name == "boolean":
        return Const(bool(lit(args[0])))
    if name == "empty":
        return EmptyDict()
    if name == "let_":
        return Let(lit(args[0]), decode(args[1]), decode(args[2]))
    if name == "sum":
        return Sum(lit(args[0]), lit(args[1]), decode(args[2]), decode(args[3]))
    op = lit(args[0])
    parts = [decode(a) for a in args[1:]]
    if op.startswith("call:"):
        return Call(op[5:], tuple(parts))
    simple = {"neg": Neg, "not": Not, "unique": Unique}
    if op in simple:
        return simple[op](parts[0])
    if op == "lookup":
        return Lookup(*parts)
    if op == "single":
        return Singleton(*parts)
    if op == "range":
        return Range(*parts)
    if op == "sub":
        return SubArray(*parts)
    if op == "if":
        return If(parts[0], parts[1], None if isinstance(parts[2], EmptyDict) else parts[2])
    return Binary(op, *parts)


def saturate(expr: Expr, types: Mapping[str, Type] | None = None, sizes: Mapping[str, float] | None = None,
             iterations: int = 6, time_limit_s: float = 2.0) -> Expr:
    """The cheapest equivalent program found by bounded equality saturation."""
    expr = rename_bound(desugar_let_tuples(expr), Fresh(all_names(expr)))
    binders: set[str] = set()
    term = encode(expr, sizes or {}, binders)
    egraph = EGraph()
    root = egraph.let("root", term)
    for name in sorted(binders):
        egraph.register(binder(String(name)))
    start = time.perf_counter()
    for _ in range(iterations):
        egraph.run(4, ruleset=INDEPENDENCE_RULES)
        report = egraph.run(1, ruleset=REWRITE_RULES)
        if not report.updated or time.perf_counter() - start > time_limit_s:
            break
    egraph.run(4, ruleset=INDEPENDENCE_RULES)
    best = egraph.extract(root, cost_model=LoopCost())
    return decode(best)
