"""Fusion: the algebraic rules that remove intermediate dictionaries (∇SD §5.2-5.3).

Rules, tried in this order at each node:
- sum over a singleton:       sum(<k, v> in {e1 -> e2}) b      ~> let k = e1 in let v = e2 in b
- lookup of a singleton:      {e1 -> e2}(e3)                   ~> if e1 = e3 then e2
- vertical fusion:            sum(<k, v> in sum(<x, y> in S) ... { unique(f) -> g }) b
                                                               ~> sum(<x, y> in S) ... let k = f in let v = g in b
  (the inner body may be wrapped in lets and else-less ifs; `unique` guarantees keys do not merge)
- dense lookup:               (sum(<_, q> in (st:en)) { unique(q) -> g })(k)  ~> let q = k in g
  (keys are validated against the extents at the boundary, so k lies in range)
- dense sub-array:            (sum(<_, q> in (st:en)) { unique(q) -> g })(a:b)
                                  ~> sum(<_, q> in (st:en)) if not(q < a) then if q < b then { unique(q) -> g }
  (the keys of both ranges; with constant bounds, one loop over their intersection instead)
- lookup at the loop's own keys:  sum(<p, j> in S) ... G(j) ..., G = sum(<q, w> in S) { unique(w) -> g }
                                                               ~> ... g[q := p, w := j] ...
  (j is one of G's keys, which are distinct: the lookup is the entry, no search, no intermediate)
- generator inlining:         let x = G in b  ~> b[x := G]  when G is a generator (a sum that builds
  unique keys) and every use of x in b is a sum source or a dense lookup, so each use fuses.
"""
from __future__ import annotations

from sparsad.lang.names import Fresh, all_names, rename_bound
from sparsad.lang.rebuild import substitute
from sparsad.lang.syntax import (Binary, Const, Expr, If, Let, Lookup, Not, Range, Singleton, SubArray, Sum,
                                 Unique, Var, has_loop, walk)
from sparsad.lang.types import Type
from sparsad.opt.dce import eliminate_dead_lets
from sparsad.opt.inline import inline_atoms
from sparsad.opt.rewrite import Rule, rewrite_fixpoint


def _sum_over_singleton(e, _):
    if isinstance(e, Sum) and isinstance(e.source, Singleton):
        body = e.body
        if e.val != "_":
            body = Let(e.val, e.source.value, body)
        if e.key != "_":
            body = Let(e.key, e.source.key, body)
        return body


def _lookup_singleton(e, _):
    if isinstance(e, Lookup) and isinstance(e.dict, Singleton):
        return If(Binary("=", strip_unique(e.dict.key), e.key), e.dict.value)


def strip_unique(e: Expr) -> Expr:
    return e.operand if isinstance(e, Unique) else e


def singleton_leaf(body: Expr, unique: bool):
    """(f, g, wrap) for the singleton { f -> g } that a generator body ends in, below lets and
    else-less ifs (and, when `unique` is False, nested sums), with `wrap` rebuilding the layers
    around a new innermost expression. With `unique`, the key must be marked unique."""
    match body:
        case Singleton(key=key, value=value) if isinstance(key, Unique) or not unique:
            return strip_unique(key), value, lambda inner: inner
        case Let(name=n, value=v, body=b):
            layer = lambda inner, n=n, v=v: Let(n, v, inner)  # noqa: E731
            inner_body = b
        case If(cond=c, then=t, orelse=None):
            layer = lambda inner, c=c: If(c, inner)  # noqa: E731
            inner_body = t
        case Sum(key=k, val=v, source=src, body=b) if not unique:
            layer = lambda inner, k=k, v=v, src=src: Sum(k, v, src, inner)  # noqa: E731
            inner_body = b
        case _:
            return None
    found = singleton_leaf(inner_body, unique)
    if not found:
        return None
    f, g, wrap = found
    return f, g, lambda inner: layer(wrap(inner))


def _unique_singleton_leaf(body: Expr):
    return singleton_leaf(body, unique=True)


def _vertical_fusion(e, _):
    if not (isinstance(e, Sum) and isinstance(e.source, Sum)):
        return None
    inner = e.source
    found = _unique_singleton_leaf(inner.body)
    if not found:
        return None
    f, g, wrap = found
    body = e.body
    if e.val != "_":
        body = Let(e.val, g, body)
    if e.key != "_":
        body = Let(e.key, f, body)
    return Sum(inner.key, inner.val, inner.source, wrap(body))


def is_linear(body: Expr, name: str) -> bool:
    """body(v1 + v2) = body(v1) + body(v2) and body({}) = {}: v is read only through lookups,
    sum sources, +, -, scaling by v-free factors, singleton values and lets of such."""
    from sparsad.lang.syntax import Neg, free_vars

    def lin(e: Expr) -> bool:
        if name not in free_vars(e):
            return False  # a term without v is not linear in v (it would be counted per entry)
        match e:
            case Var(name=n):
                return n == name
            case Lookup(dict=d, key=k):
                return name not in free_vars(k) and lin(d)
            case Sum(key=k, val=v, source=src, body=b):
                if name in (k, v):
                    return False
                inner_ok = name not in free_vars(b) or False
                if name in free_vars(src):
                    return inner_ok and lin(src) and _linear_in_value(b, v)
                return lin(b)
            case Binary(op="+" | "-", left=l, right=r):
                return lin(l) and lin(r)
            case Binary(op="*", left=l, right=r):
                return (lin(l) and name not in free_vars(r)) or (lin(r) and name not in free_vars(l))
            case Neg(operand=o):
                return lin(o)
            case Singleton(key=k, value=v):
                return name not in free_vars(k) and lin(v)
            case Let(name=n, value=v, body=b):
                if n == name:
                    return False
                if name in free_vars(v):
                    return name not in free_vars(b) and lin(v) and is_linear(b, n)
                return lin(b)
            case If(cond=c, then=t, orelse=o):
                return name not in free_vars(c) and lin(t) and (o is None or lin(o))
        return False

    def _linear_in_value(b: Expr, v: str) -> bool:
        return v != "_" and is_linear(b, v)

    return lin(body)


def _linear_vertical_fusion(e, _):
    """sum(<k, v> in sum(<x, y> in S) { f -> g }) b  ~>  sum(<x, y> in S) let k = f in let v = g in b,
    when b is linear in v: entries that share a key add up either way. Only for a loop-free b:
    otherwise b's loops would run once per entry of S instead of once per distinct key (the
    aggregated form that `opt.aggregate` builds)."""
    if not (isinstance(e, Sum) and isinstance(e.source, Sum) and e.val != "_"):
        return None
    found = singleton_leaf(e.source.body, unique=False)
    if not found or not is_linear(e.body, e.val):
        return None
    if has_loop(e.body):
        return None  # keys may repeat: a loop in b would run once per entry instead of once per key
    f, g, wrap = found
    # a key may now repeat across iterations: what was unique per key no longer is
    body = Let(e.val, g, _strip_unique_of(e.body, e.key))
    if e.key != "_":
        body = Let(e.key, f, body)
    return Sum(e.source.key, e.source.val, e.source.source, wrap(body))


def _strip_unique_of(expr: Expr, name: str) -> Expr:
    from sparsad.lang.rebuild import map_children
    from sparsad.lang.syntax import free_vars

    expr = map_children(expr, lambda child: _strip_unique_of(child, name))
    if isinstance(expr, Unique) and name in free_vars(expr.operand):
        return expr.operand
    return expr


def _is_dense_generator(e: Expr) -> bool:
    """sum(<_, q> in (st:en)) { unique(q) -> g }: one entry per key of a range."""
    return (isinstance(e, Sum) and isinstance(e.source, Range) and isinstance(e.body, Singleton)
            and isinstance(e.body.key, Unique) and e.body.key.operand == Var(e.val) and e.val != "_")


def _dense_lookup(e, _):
    if isinstance(e, Lookup) and _is_dense_generator(e.dict):
        gen = e.dict
        return Let(gen.val, e.key, gen.body.value)


def _dense_sub_array(e, _):
    if isinstance(e, SubArray) and _is_dense_generator(e.array):
        gen = e.array
        bounds = (gen.source.start, gen.source.end, e.start, e.end)
        if all(isinstance(b, Const) and isinstance(b.value, int) for b in bounds):
            start, end, lo, hi = (b.value for b in bounds)
            low = max(start, lo)
            return Sum(gen.key, gen.val, Range(Const(low), Const(max(low, min(end, hi)))), gen.body)
        q = Var(gen.val)
        inside = If(Not(Binary("<", q, e.start)), If(Binary("<", q, e.end), gen.body))
        return Sum(gen.key, gen.val, gen.source, inside)


def is_generator(e: Expr) -> bool:
    """A sum whose body ends in a singleton with a unique key: it fuses into a consumer."""
    return isinstance(e, Sum) and (_unique_singleton_leaf(e.body) is not None or _is_dense_generator(e))


def _uses_all_fuse(name: str, body: Expr, generator: Expr) -> bool:
    uses, fusing = 0, 0
    for node in walk(body):
        if isinstance(node, Var) and node.name == name:
            uses += 1
        if isinstance(node, Sum) and node.source == Var(name):
            fusing += 1
        if isinstance(node, (Lookup, SubArray)) and getattr(node, "dict", getattr(node, "array", None)) == Var(name) \
                and _is_dense_generator(generator):
            fusing += 1
    # a binder of the same name would shadow; names are unique after rename_bound
    return uses > 0 and uses == fusing


def _inline_generator(e, _):
    if isinstance(e, Let) and is_generator(e.value) and _uses_all_fuse(e.name, e.body, e.value):
        return substitute(e.body, e.name, e.value)


def _inline_single_use(e, _):
    """let x = e in b, x read once and not inside a loop of b: substitute (same work, one place)."""
    if not isinstance(e, Let):
        return None
    occurrences = [n for n in walk(e.body) if isinstance(n, Var) and n.name == e.name]
    if len(occurrences) != 1:
        return None
    for node in walk(e.body):
        if isinstance(node, Sum) and e.name in _free(node.body):
            return None
        if isinstance(node, Let) and node.name == e.name:
            return None
    return substitute(e.body, e.name, e.value)


def _free(e: Expr):
    from sparsad.lang.syntax import free_vars

    return free_vars(e)


def _mark_unique_keys(e, _):
    """sum(<k, v> in d) { k -> g }: the keys of a dictionary are distinct, so is the built key
    (also the values of a range, which equal its keys)."""
    if not (isinstance(e, Sum) and isinstance(e.body, Singleton)) or isinstance(e.body.key, Unique):
        return None
    key = e.body.key
    if (e.key != "_" and key == Var(e.key)) or (isinstance(e.source, Range) and e.val != "_" and key == Var(e.val)):
        return Sum(e.key, e.val, e.source, Singleton(Unique(key), e.body.value))
    return None


RULES = (
    Rule("mark keys built from a loop's own keys as unique", _mark_unique_keys),
    Rule("sum over a singleton", _sum_over_singleton),
    Rule("lookup of a singleton", _lookup_singleton),
    Rule("vertical fusion of a sum over a unique-key sum", _vertical_fusion),
    Rule("vertical fusion of a sum linear in its value", _linear_vertical_fusion),
    Rule("lookup into a dense generator", _dense_lookup),
    Rule("sub-array of a dense generator", _dense_sub_array),
    Rule("inline a generator whose every use fuses", _inline_generator),
    Rule("inline a single-use let outside loops", _inline_single_use),
)


def lookups_at_own_keys(expr: Expr) -> Expr:
    """The lookup rule above, for a tree whose binders are renamed apart (scopes from context)."""
    from sparsad.lang.rebuild import map_children

    def own_entry(gen: Expr, source: Expr, position: str, key: str) -> Expr | None:
        if not (isinstance(gen, Sum) and gen.source == source and gen.val != "_"
                and isinstance(gen.body, Singleton) and gen.body.key == Unique(Var(gen.val))):
            return None
        entry = substitute(gen.body.value, gen.val, Var(key))
        if gen.key != "_":
            if position == "_":
                return None
            entry = substitute(entry, gen.key, Var(position))
        return entry

    def go(e: Expr, loops: dict, lets: dict) -> Expr:
        match e:
            case Lookup(dict=d, key=Var(name=j)) if j in loops:
                gen = lets.get(d.name) if isinstance(d, Var) else d
                entry = own_entry(gen, *loops[j], j) if gen is not None else None
                if entry is not None:
                    return entry
            case Sum(key=k, val=v, source=src, body=b):
                inner = {**loops, v: (src, k)} if v != "_" else loops
                return Sum(k, v, go(src, loops, lets), go(b, inner, lets))
            case Let(name=n, value=val, body=b):
                value = go(val, loops, lets)
                return Let(n, value, go(b, loops, {**lets, n: value}))
        return map_children(e, lambda c: go(c, loops, lets))

    return go(expr, {}, {})


def fuse(expr: Expr, types: dict[str, Type] | None = None) -> Expr:
    """Apply the fusion rules to a fixed point, renaming binders apart between sweeps."""
    for _ in range(20):
        unique_names = rename_bound(expr, Fresh(all_names(expr)))
        fused = rewrite_fixpoint(lookups_at_own_keys(unique_names), RULES, types or {}, max_sweeps=1)
        fused = eliminate_dead_lets(inline_atoms(fused))
        if fused == unique_names:
            return fused
        expr = fused
    return expr


def fold_single_use_lets(expr: Expr) -> Expr:
    """Substitute bindings read once outside loops back into their use (undoing needless ANF)."""
    rule = (Rule("inline a single-use let outside loops", _inline_single_use),)
    return rewrite_fixpoint(expr, rule, {})
