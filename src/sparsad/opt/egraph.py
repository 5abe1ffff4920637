"""Equality saturation with egglog: loop-invariant factors and lets leave their loops.

The program (binders renamed apart) is encoded as an egglog term. Rules are data (egglog text):
sum factorization (a factor that does not read the loop's key or value moves out), let hoisting,
sums over `+` (sum merging), distributivity and associativity of `*`, elimination of sums over
singletons, lookups of singletons, and if-to-multiplication. (Vertical fusion and let inlining,
which substitute under binders, are term rewrites in `opt.fuse`.) Independence of a term from a binder
is a relation derived bottom-up, so the rules need no negation. Extraction uses a cost model
that counts loop nesting: a sum costs its source plus the estimated size of the source times
its body. Saturation is bounded by a number of iterations and of rule matches, never by
wall-clock time, so that every process finds the same program.

Determinism and trust: names, operators and constants enter the e-graph as integer codes of a
per-call table (first-use order), the e-graph is built from egglog source text, and the cheapest
term is extracted here from the serialized e-graph with ties broken by a fixed order. (egglog 13's
Python expression layer at times stored a literal of another node when building large terms,
`let lookup = ...` or `unknown binary operator 'j_15'`, at random from one process to the next.)
"""
from __future__ import annotations

import json
import math
from typing import Mapping

from egglog import bindings

from sparsad.errors import SparsadError
from sparsad.lang.names import Fresh, all_names, desugar_let_tuples, rename_bound
from sparsad.lang.syntax import (Binary, Call, Const, EmptyDict, Expr, If, Let, Lookup, Neg, Not,
                                 Range, Singleton, SubArray, Sum, Unique, Var)
from sparsad.lang.types import Type

DEFAULT_SIZE = 100.0
BUILD_COST = 4.0
MATCH_BUDGET = 200_000  # rule matches over the whole saturation (a deterministic size bound)

# operators the rules name have fixed codes; every other name, operator or constant gets the next one
SINGLE, LOOKUP, IF, EQUAL = 0, 1, 2, 3
FIXED_SYMBOLS = ("single", "lookup", "if", "=")


class SaturationError(SparsadError, RuntimeError):
    """Equality saturation failed inside (an internal fault, never the user's error)."""


class Symbols:
    """A per-call table of one program's names, operators and constants, in first-use order."""

    def __init__(self):
        self.items: list = list(FIXED_SYMBOLS)
        self.codes: dict = {("name", n): i for i, n in enumerate(self.items)}

    def code(self, item, kind: str = "name") -> int:
        key = (kind, float(item).hex() if kind == "real" else item)
        if key not in self.codes:
            self.codes[key] = len(self.items)
            self.items.append(item)
        return self.codes[key]

    def __getitem__(self, code: int):
        return self.items[code]


DECLARATIONS = """
(datatype Term
  (Var i64) (Real i64) (Int i64) (Bool i64) (Empty)
  (Add Term Term) (Mul Term Term)
  (Op1 i64 Term) (Op2 i64 Term Term) (Op3 i64 Term Term Term)
  (Let i64 Term Term)
  (Sum i64 i64 Term Term i64))
(relation indep (Term i64))
(relation binder (i64))
(relation root (Term))
(ruleset independence)
(ruleset rewrites)
"""

# indep(t, x): t does not read the binder x (derived bottom-up, so rules need no negation)
INDEPENDENCE_RULES = [
    "((= t (Var y)) (binder x) (!= x y)) ((indep t x))",
    "((= t (Real r)) (binder x)) ((indep t x))",
    "((= t (Int r)) (binder x)) ((indep t x))",
    "((= t (Bool r)) (binder x)) ((indep t x))",
    "((= t (Empty)) (binder x)) ((indep t x))",
    "((= t (Add a b)) (indep a x) (indep b x)) ((indep t x))",
    "((= t (Mul a b)) (indep a x) (indep b x)) ((indep t x))",
    "((= t (Op1 o a)) (indep a x)) ((indep t x))",
    "((= t (Op2 o a b)) (indep a x) (indep b x)) ((indep t x))",
    "((= t (Op3 o a b c)) (indep a x) (indep b x) (indep c x)) ((indep t x))",
    "((= t (Let y a b)) (indep a x) (indep b x)) ((indep t x))",
    "((= t (Sum k v s b n)) (indep s x) (indep b x)) ((indep t x))",
]

REWRITE_RULES = [
    # sum factorization: sum(..) c * b = c * sum(..) b, when c reads neither key nor value
    "((= t (Sum k v s (Mul c b) n)) (indep c k) (indep c v)) ((union t (Mul c (Sum k v s b n))))",
    "((= t (Sum k v s (Mul b c) n)) (indep c k) (indep c v)) ((union t (Mul (Sum k v s b n) c)))",
    # loop-invariant hoisting of a let
    "((= t (Sum k v s (Let y a b) n)) (indep a k) (indep a v)) ((union t (Let y a (Sum k v s b n))))",
    # a sum of a + is a + of sums, and back (sum merging)
    "((= t (Sum k v s (Add a b) n))) ((union t (Add (Sum k v s a n) (Sum k v s b n))))",
    "((= t (Add (Sum k v s a n) (Sum k v s b n)))) ((union t (Sum k v s (Add a b) n)))",
    # * distributes over + and is associative (the semi-ring; ⊗ is associative too)
    "((= t (Mul c (Add a b)))) ((union t (Add (Mul c a) (Mul c b))))",
    "((= t (Mul (Add a b) c))) ((union t (Add (Mul a c) (Mul b c))))",
    "((= t (Mul (Mul a b) c))) ((union t (Mul a (Mul b c))))",
    "((= t (Mul a (Mul b c)))) ((union t (Mul (Mul a b) c)))",
    # the lookup of a singleton (the sum over a singleton is `opt.fuse`'s: when its value may be
    # the empty dictionary, which is no entry, the body needs a guard that only types can tell)
    f"((= t (Op2 {LOOKUP} (Op2 {SINGLE} a b) c))) ((union t (Op3 {IF} (Op2 {EQUAL} a c) b (Empty))))",
    # if-to-multiplication: a factor moves into an else-less conditional
    f"((= t (Mul (Op3 {IF} c a (Empty)) b))) ((union t (Op3 {IF} c (Mul a b) (Empty))))",
    f"((= t (Mul b (Op3 {IF} c a (Empty))))) ((union t (Op3 {IF} c (Mul b a) (Empty))))",
]


def _rules_text() -> str:
    lines = [f"(rule {r} :ruleset independence)" for r in INDEPENDENCE_RULES]
    lines += [f"(rule {r} :ruleset rewrites)" for r in REWRITE_RULES]
    return "\n".join(lines)


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


def encode(expr: Expr, sizes: Mapping[str, float], binders: set[int], symbols: Symbols) -> str:
    """The egglog s-expression of `expr`; names, operators and reals become codes of `symbols`."""
    code = symbols.code

    def go(e: Expr) -> str:
        match e:
            case Const(value=v) if isinstance(v, bool):
                return f"(Bool {int(v)})"
            case Const(value=v) if isinstance(v, int):
                return f"(Int {v})"
            case Const(value=v):
                return f"(Real {code(v, 'real')})"
            case Var(name=n):
                return f"(Var {code(n)})"
            case EmptyDict():
                return "(Empty)"
            case Binary(op="+", left=l, right=r):
                return f"(Add {go(l)} {go(r)})"
            case Binary(op="*", left=l, right=r):
                return f"(Mul {go(l)} {go(r)})"
            case Binary(op=op, left=l, right=r):
                return f"(Op2 {code(op)} {go(l)} {go(r)})"
            case Neg(operand=o):
                return f"(Op1 {code('neg')} {go(o)})"
            case Not(operand=o):
                return f"(Op1 {code('not')} {go(o)})"
            case Unique(operand=o):
                return f"(Op1 {code('unique')} {go(o)})"
            case Call(func=f, args=(a,)):
                return f"(Op1 {code('call:' + f)} {go(a)})"
            case Call(func=f, args=(a, b)):
                return f"(Op2 {code('call:' + f)} {go(a)} {go(b)})"
            case Lookup(dict=d, key=k):
                return f"(Op2 {LOOKUP} {go(d)} {go(k)})"
            case Singleton(key=k, value=v):
                return f"(Op2 {SINGLE} {go(k)} {go(v)})"
            case Range(start=s, end=en):
                return f"(Op2 {code('range')} {go(s)} {go(en)})"
            case SubArray(array=a, start=s, end=en):
                return f"(Op3 {code('sub')} {go(a)} {go(s)} {go(en)})"
            case If(cond=c, then=t, orelse=o):
                return f"(Op3 {IF} {go(c)} {go(t)} {'(Empty)' if o is None else go(o)})"
            case Let(name=n, value=v, body=b):
                binders.add(code(n))
                return f"(Let {code(n)} {go(v)} {go(b)})"
            case Sum(key=k, val=v, source=s, body=b):
                binders.update((code(k), code(v)))
                size = code(_size(s, sizes), "real")
                return f"(Sum {code(k)} {code(v)} {go(s)} {go(b)} {size})"
        raise SaturationError(f"cannot encode {type(e).__name__}")

    return go(expr)


def _node_cost(op: str, children: list[float], literals: list[int], symbols: Symbols) -> float:
    """Cost = work: a sum costs its source plus (estimated source size) x (1 + its body); building
    a singleton dictionary costs an allocation; anything else one plus its children."""
    if op == "Sum":
        return children[2] + float(symbols[literals[4]]) * (1.0 + children[3])
    if op == "Op2" and literals[0] == SINGLE:
        return BUILD_COST + sum(children)
    return 1.0 + sum(children)


def extract(serialized: dict, symbols: Symbols) -> tuple:
    """The cheapest term of the root class as nested tuples (op, integer literal or child, ...).

    Costs are found by iterating to a fixed point over the classes; among nodes of equal cost the
    first in the order (op, node id) wins, so the answer never depends on hash order.
    """
    nodes = serialized["nodes"]
    term_nodes = {nid: n for nid, n in nodes.items() if n["eclass"].startswith("Term-")}
    roots = [n["children"][0] for n in nodes.values() if n["op"] == "root"]
    if len(roots) != 1:
        raise SaturationError("the serialized e-graph has no single root")
    order = sorted(term_nodes, key=lambda nid: (term_nodes[nid]["op"], nid))
    best: dict[str, tuple[float, str]] = {}
    changed = True
    while changed:
        changed = False
        for nid in order:
            node = term_nodes[nid]
            costs, literals = [], []
            for child in node["children"]:
                if child in term_nodes:
                    found = best.get(term_nodes[child]["eclass"])
                    if found is None:
                        break
                    costs.append(found[0])
                    literals.append(-1)
                else:
                    costs.append(0.0)
                    literals.append(int(nodes[child]["op"]))
            else:
                cost = _node_cost(node["op"], costs, literals, symbols)
                current = best.get(node["eclass"])
                if current is None or cost < current[0] * (1 - 1e-12):
                    best[node["eclass"]] = (cost, nid)
                    changed = True
    root_class = nodes[roots[0]]["eclass"]
    if root_class not in best or not math.isfinite(best[root_class][0]):
        raise SaturationError("no finite-cost term in the root class")

    def build(eclass: str) -> tuple:
        node = term_nodes[best[eclass][1]]
        return (node["op"], *(build(term_nodes[c]["eclass"]) if c in term_nodes else int(nodes[c]["op"])
                              for c in node["children"]))

    return build(root_class)


_UNARY = {"neg": Neg, "not": Not, "unique": Unique}
_NARY = {"lookup": Lookup, "single": Singleton, "range": Range, "sub": SubArray}


def decode(term: tuple, symbols: Symbols) -> Expr:
    """The program of an extracted term."""
    op, *args = term

    def go(t):
        return decode(t, symbols)

    match op:
        case "Add":
            return Binary("+", go(args[0]), go(args[1]))
        case "Mul":
            return Binary("*", go(args[0]), go(args[1]))
        case "Var":
            return Var(symbols[args[0]])
        case "Real":
            return Const(float(symbols[args[0]]))
        case "Int":
            return Const(int(args[0]))
        case "Bool":
            return Const(bool(args[0]))
        case "Empty":
            return EmptyDict()
        case "Let":
            return Let(symbols[args[0]], go(args[1]), go(args[2]))
        case "Sum":
            return Sum(symbols[args[0]], symbols[args[1]], go(args[2]), go(args[3]))
        case "Op1" | "Op2" | "Op3":
            operator = symbols[args[0]]
            parts = [go(a) for a in args[1:]]
            if operator.startswith("call:"):
                return Call(operator[5:], tuple(parts))
            if operator in _UNARY:
                return _UNARY[operator](parts[0])
            if operator in _NARY:
                return _NARY[operator](*parts)
            if operator == "if":
                return If(parts[0], parts[1], None if isinstance(parts[2], EmptyDict) else parts[2])
            return Binary(operator, *parts)
    raise SaturationError(f"the e-graph holds an unknown constructor {op!r}")


def _run(egraph: bindings.EGraph, text: str) -> list:
    return egraph.run_program(*egraph.parse_program(text))


def saturate(expr: Expr, types: Mapping[str, Type] | None = None, sizes: Mapping[str, float] | None = None,
             iterations: int = 6, match_budget: int = MATCH_BUDGET) -> Expr:
    """The cheapest equivalent program found by bounded equality saturation.

    Deterministic: the bounds are a number of iterations and of rule matches, not time.

    >>> from sparsad.lang.parse import parse
    >>> from sparsad.lang.printer import to_text
    >>> to_text(saturate(parse("sum(<i, a> in V) beta * a"), sizes={"V": 1000})).split()[:2]
    ['beta', '*']
    """
    expr = rename_bound(desugar_let_tuples(expr), Fresh(all_names(expr)))
    binders: set[int] = set()
    symbols = Symbols()
    term = encode(expr, sizes or {}, binders, symbols)
    egraph = bindings.EGraph()
    facts = "\n".join(f"(binder {b})" for b in sorted(binders))
    _run(egraph, f"{DECLARATIONS}\n{_rules_text()}\n{facts}\n(root {term})")
    matches = 0
    for _ in range(iterations):
        _run(egraph, "(run-schedule (repeat 4 (run independence)))")
        (output,) = _run(egraph, "(run rewrites 1)")
        matches += sum(output.report.num_matches_per_rule.values())
        if not output.report.updated or matches > match_budget:
            break
    _run(egraph, "(run-schedule (repeat 4 (run independence)))")
    serialized = json.loads(egraph.serialize([]).to_json())
    return decode(extract(serialized, symbols), symbols)
