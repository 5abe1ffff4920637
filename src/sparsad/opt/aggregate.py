"""Aggregation by key before expansion: sum the scalars that share a key, then expand once per key.

The reverse-mode adjoint of a lookup `B(k)` iterated with a body linear in its value is a scalar
times B's row k. Over the entries a of A at column k this builds `{ k -> a * row(k) }` once per
entry: nnz(A) * nnz(B) / n work for SMMM. Rules (tried as data, each keeps the meaning):

- aggregate by key (at loop-free positions only: nested in a loop it would rebuild the
  accumulator per iteration):

      sum(gens) { k -> V }   ~>   let c = sum(gens) { k -> a } in sum(<k', a'> in c) { unique(k') -> V[k := k', a := a'] }

  when V contains a loop, reads no variable bound by the generators other than the key k and
  one scalar a, and is linear in a: the entries that share a key add up to V(a1) + V(a2) = V(a1 + a2).
- hoist a let out of a let's value (names are unique): `let x = (let c = e in f) in b ~> let c = e in let x = f in b`.
- inline a let whose every use is a lookup into it, when it is a unique-key sum over a dictionary
  linear in its value (the lookup then costs one read, below).
- lookup through a let: `(let x = e in b)(k) ~> let x = e in b(k)`.
- lookup of a unique-key sum over a dictionary, linear in its value:
  `(sum(<k, v> in d) { unique(k) -> g })(e) ~> let k = e in let v = d(k) in g` (a missing key
  reads 0 and g(0) = 0).
- lookup at a loop's own key: inside `sum(<p, j> in S) b`, the lookup
  `(sum(<p', j'> in S) { unique(j') -> g })(j)` is `g[p' := p, j' := j]` (the same entry of S; keys
  are unique, so no other entry matches). Likewise with the keys of S instead of its values.

The pass keeps its result only when it lowers the deepest loop nesting of the program (so a
partial match never trades a loop for a re-evaluated one).
"""
from __future__ import annotations

from typing import Mapping

from sparsad.lang.names import Fresh, all_names, bound_names, rename_bound
from sparsad.lang.rebuild import map_children, substitute
from sparsad.lang.syntax import (Binary, Expr, If, Let, Lookup, Singleton, Sum, Unique, Var,
                                 free_vars, has_loop, walk)
from sparsad.lang.typecheck import infer
from sparsad.lang.types import Dict, Type
from sparsad.opt.dce import eliminate_dead_lets
from sparsad.opt.fuse import is_linear, strip_unique
from sparsad.opt.inline import inline_atoms
from sparsad.opt.rewrite import Rule, rewrite_fixpoint


def _layers(body: Expr, bound: list[str]):
    """(singleton, rebuild, bound names) for a generator body: lets, else-less ifs and sums down
    to a singleton."""
    match body:
        case Singleton():
            return body, (lambda inner: inner), bound
        case Let(name=n, value=v, body=b):
            layer = lambda inner, n=n, v=v: Let(n, v, inner)  # noqa: E731
            found = _layers(b, bound + [n])
        case If(cond=c, then=t, orelse=None):
            layer = lambda inner, c=c: If(c, inner)  # noqa: E731
            found = _layers(t, bound)
        case Sum(key=k, val=v, source=s, body=b):
            layer = lambda inner, k=k, v=v, s=s: Sum(k, v, s, inner)  # noqa: E731
            found = _layers(b, bound + [k, v])
        case _:
            return None
    if found is None:
        return None
    leaf, wrap, names = found
    return leaf, (lambda inner: layer(wrap(inner))), names


def aggregate_by_key(e: Expr, types: Mapping[str, Type], fresh: Fresh) -> Expr | None:
    """The first rule of the module docstring, or None when it does not apply."""
    if not isinstance(e, Sum):
        return None
    found = _layers(e, [])
    if found is None:
        return None
    leaf, wrap, bound = found
    bound_set = set(bound) - {"_"}
    key = strip_unique(leaf.key)
    if not (isinstance(key, Var) and key.name in bound_set and has_loop(leaf.value)):
        return None
    reads = (free_vars(leaf.value) & bound_set) - {key.name}
    if len(reads) != 1:
        return None
    (scalar,) = reads
    if not is_linear(leaf.value, scalar):
        return None
    collected = wrap(Singleton(leaf.key, Var(scalar)))
    try:
        collected_type = infer(collected, dict(types))
    except Exception:  # noqa: BLE001 - an ill-typed candidate is simply not rewritten
        return None
    if not (isinstance(collected_type, Dict) and not isinstance(collected_type.value, Dict)):
        return None
    c, k2, a2 = fresh("agg"), fresh("k"), fresh("s")
    value = substitute(substitute(leaf.value, key.name, Var(k2)), scalar, Var(a2))
    return Let(c, collected, Sum(k2, a2, Var(c), Singleton(Unique(Var(k2)), value)))


def _aggregate_outside_loops(e: Expr, types: dict[str, Type], fresh: Fresh) -> Expr:
    """Apply `aggregate_by_key` at every position not inside a loop's body."""
    rewritten = aggregate_by_key(e, types, fresh)
    if rewritten is not None:
        return rewritten
    match e:
        case Let(name=n, value=v, body=b):
            value = _aggregate_outside_loops(v, types, fresh)
            try:
                inner = {**types, n: infer(value, types)}
            except Exception:  # noqa: BLE001
                return Let(n, value, b)
            return Let(n, value, _aggregate_outside_loops(b, inner, fresh))
        case Sum(key=k, val=v, source=s, body=b):
            return Sum(k, v, _aggregate_outside_loops(s, types, fresh), b)
        case If() | Binary() | Singleton():
            return map_children(e, lambda child: _aggregate_outside_loops(child, types, fresh))
    return e


def _linear_dict_generator(e: Expr) -> bool:
    """sum(<k, v> in d) { unique(k) -> g }, d a variable, g linear in v."""
    return (isinstance(e, Sum) and isinstance(e.source, Var) and isinstance(e.body, Singleton)
            and isinstance(e.body.key, Unique) and e.body.key.operand == Var(e.key) and e.key != "_"
            and e.val != "_" and is_linear(e.body.value, e.val))


def _hoist_let_from_let_value(e, _):
    if isinstance(e, Let) and isinstance(e.value, Let) and e.value.name not in free_vars(e.body):
        inner = e.value
        return Let(inner.name, inner.value, Let(e.name, inner.body, e.body))


def _inline_looked_up_generator(e, _):
    if not (isinstance(e, Let) and _linear_dict_generator(e.value)):
        return None
    uses = sum(1 for n in walk(e.body) if n == Var(e.name))
    lookups = sum(1 for n in walk(e.body) if isinstance(n, Lookup) and n.dict == Var(e.name))
    if uses == 0 or uses != lookups or e.value.source.name in bound_names(e.body):
        return None
    return substitute(e.body, e.name, e.value)


def _lookup_through_let(e, _):
    if isinstance(e, Lookup) and isinstance(e.dict, Let) and e.dict.name not in free_vars(e.key):
        inner = e.dict
        return Let(inner.name, inner.value, Lookup(inner.body, e.key))


def _lookup_linear_generator(e, _):
    if isinstance(e, Lookup) and _linear_dict_generator(e.dict):
        gen = e.dict
        if gen.key in free_vars(e.key):
            return None
        return Let(gen.key, e.key, Let(gen.val, Lookup(gen.source, Var(gen.key)), gen.body.value))


def _lookup_at_own_key(e, _):
    if not isinstance(e, Sum) or free_vars(e.source) & bound_names(e.body):
        return None
    outer = e

    def own_entry(node: Expr) -> Expr | None:
        if not (isinstance(node, Lookup) and isinstance(node.dict, Sum) and isinstance(node.key, Var)):
            return None
        gen = node.dict
        if gen.source != outer.source or not isinstance(gen.body, Singleton) \
                or not isinstance(gen.body.key, Unique) or not isinstance(gen.body.key.operand, Var):
            return None
        built, at = gen.body.key.operand.name, node.key.name
        if not ((built == gen.val != "_" and at == outer.val) or (built == gen.key != "_" and at == outer.key)):
            return None
        value = gen.body.value
        for inner, mine in ((gen.key, outer.key), (gen.val, outer.val)):
            if inner != "_" and inner in free_vars(value):
                if mine == "_":
                    return None
                value = substitute(value, inner, Var(mine))
        return value

    def go(node: Expr) -> Expr:
        replaced = own_entry(node)
        if replaced is not None:
            return replaced
        return map_children(node, go)

    body = go(outer.body)
    if body != outer.body:
        return Sum(outer.key, outer.val, outer.source, body)
    return None


RULES = (
    Rule("hoist a let out of a let's value", _hoist_let_from_let_value),
    Rule("inline a let looked up only, a unique-key sum over a dictionary linear in its value",
         _inline_looked_up_generator),
    Rule("lookup through a let", _lookup_through_let),
    Rule("lookup of a unique-key sum over a dictionary, linear in its value", _lookup_linear_generator),
    Rule("lookup at a loop's own key", _lookup_at_own_key),
)


def loop_depth(e: Expr) -> int:
    """The deepest nesting of loops (sums) in a program."""
    match e:
        case Sum(source=s, body=b):
            return max(loop_depth(s), 1 + loop_depth(b))
    from sparsad.lang.syntax import children

    return max((loop_depth(c) for c in children(e)), default=0)


def aggregate(expr: Expr, types: Mapping[str, Type] | None = None) -> Expr:
    """Aggregate by key where it lowers the loop nesting; otherwise the program unchanged."""
    types = dict(types or {})
    fresh = Fresh(all_names(expr))
    start = rename_bound(expr, fresh)
    candidate = _aggregate_outside_loops(start, types, fresh)
    if candidate == start:
        return expr
    for _ in range(20):
        rewritten = rewrite_fixpoint(candidate, RULES, types)
        rewritten = eliminate_dead_lets(inline_atoms(rewritten))
        if rewritten == candidate:
            break
        candidate = rewritten
    return candidate if loop_depth(candidate) < loop_depth(expr) else expr
