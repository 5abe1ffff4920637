"""Fusion: the algebraic rules that remove intermediate dictionaries (∇SD §5.2-5.3).

Rules, tried in this order at each node:
- sum over a singleton:       sum(<k, v> in {e1 -> e2}) b      ~> let k = e1 in let v = e2 in b
- lookup of a singleton:      {e1 -> e2}(e3)                   ~> if e1 = e3 then e2
- vertical fusion:            sum(<k, v> in sum(<x, y> in S) ... { unique(f) -> g }) b
                                                               ~> sum(<x, y> in S) ... let k = f in let v = g in b
  (the inner body may be wrapped in lets and else-less ifs; `unique` guarantees keys do not merge)
- dense lookup:               (sum(<_, q> in (st:en)) { unique(q) -> g })(k)
                                  ~> let q = k in if not(q < st) then if q < en then g
  (a key outside the range has no entry; the guard is left out only for the range `(0:e)` of a
  stored input's dense level, e one of `extents`: a key into an input is checked against its
  extent at the call boundary, `lang.keyranges`, and the type checker relates axes through lets)
- dense sub-array:            (sum(<_, q> in (st:en)) { unique(q) -> g })(a:b)
                                  ~> sum(<_, q> in (st:en)) if not(q < a) then if q < b then { unique(q) -> g }
  (the keys of both ranges; with constant bounds, one loop over their intersection instead)
- lookup at the loop's own keys:  sum(<p, j> in S) ... G(j) ..., G = sum(<q, w> in S) { unique(w) -> g }
                                                               ~> ... g[q := p, w := j] ...
  (j is one of G's keys, which are distinct: the lookup is the entry, no search, no intermediate)
- generator inlining:         let x = G in b  ~> b[x := G]  when G is a generator (a sum that builds
  unique keys) and every use of x in b is a sum source or a dense lookup, so each use fuses;
  but not when a use sits inside a loop of b and G is more than a view of stored levels
  (`is_view`): inlined there, G would be rebuilt on every iteration (the cost model: a let read
  in a loop is materialised once, by code generation, unless fusing it costs no more).
- row lookup:                 (sum(<_, q> in (st:en)) ... { q -> g })(k)  ~>  let q = k in if st <= q < en then ... g
  (every entry keyed by the range's own value: the lookup is that row, built where it is read)
- rows bound per iteration:   let x = G in ... sum(<_, m> in (a:b)) ... x(m) ...
                                  ~>  ... sum(<_, m> in (a:b)) let x_row = <row m of G> in ... x_row ...
  (G a row generator as above, every use a lookup at a range loop's key outside other loops:
  each row is built once, when its key comes; e.g. the masked gradient of a second sparse operand)
"""
from __future__ import annotations

from functools import partial

from sparsad.lang.names import Fresh, all_names, rename_bound
from sparsad.lang.rebuild import substitute
from sparsad.lang.syntax import (Binary, Const, Expr, If, Let, Lookup, Not, Range, Singleton, SubArray, Sum,
                                 Unique, Var, has_loop, walk)
from sparsad.lang.types import Dict, Int, Type
from sparsad.errors import SparsadError
from sparsad.opt.emptiness import entry_guard, let_suspects, may_be_empty, vanishes_on_empty
from sparsad.opt.dce import eliminate_dead_lets
from sparsad.opt.inline import inline_atoms
from sparsad.opt.rewrite import Rule, _binder_types, rewrite_fixpoint


def _sum_over_singleton(e, scope, suspects: set[str] | frozenset[str] = frozenset()):
    if isinstance(e, Sum) and isinstance(e.source, Singleton):
        guard = _empty_entry_guard(e, e.source.value, scope, lambda: scope, frozenset(suspects))
        if guard is None:
            return None  # an empty value is no entry, and only a loop could tell: left to codegen
        body = e.body
        if e.val != "_":
            body = Let(e.val, e.source.value, body)
            _note_suspect(suspects, e.val, e.source.value)
        if e.key != "_":  # `unique` holds among the singleton's siblings, not where k is used
            body = Let(e.key, strip_unique(e.source.key), body)
        return body if guard is False else If(guard, body)


def _note_suspect(suspects: set[str] | frozenset[str], name: str, value: Expr) -> None:
    """A let this sweep creates binds `name` (unique after renaming) to value: when value may be
    `{}`, a consumer fused later in the same sweep must not take name for an entry."""
    if isinstance(suspects, set) and may_be_empty(value):
        suspects.add(name)


def _empty_entry_guard(e: Sum, value: Expr, scope, value_scope, suspects: frozenset[str]):
    """`emptiness.entry_guard` for the consumer e = sum(<k, v> in source) b of entries with value
    `value` (in the scope `value_scope()`): False, a condition on value being an entry, or None."""
    if vanishes_on_empty(e.body, e.val):
        return False
    try:
        types = value_scope().types
    except SparsadError:
        return None  # types unknown (fuse called without them): not known to be safe

    def dense_array(name: str) -> bool:
        t = types.get(name)
        return isinstance(t, Dict) and isinstance(t.key, Int) and t.key.dense
    return entry_guard(value, e.body, e.val, types, dense_array, suspects)


def _leaf_scope(e: Sum, scope):
    """The scope of the singleton leaf of e.source's body (its binders' types, lets included)."""
    inner = e.source
    key, value = _binder_types(scope, inner.source)
    leaf = scope.bind(**{inner.key: key, inner.val: value})
    body = inner.body
    while True:
        match body:
            case Let(name=n, value=v, body=b):
                leaf = leaf.bind(**{n: partial(leaf.type_of, v)})
                body = b
            case If(then=t):
                body = t
            case Sum(key=k, val=v, source=src, body=b):
                key, value = _binder_types(leaf, src)
                leaf = leaf.bind(**{k: key, v: value})
                body = b
            case _:
                return leaf


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


def _vertical_fusion(e, scope, suspects: set[str] | frozenset[str] = frozenset()):
    if not (isinstance(e, Sum) and isinstance(e.source, Sum)):
        return None
    inner = e.source
    found = _unique_singleton_leaf(inner.body)
    if not found:
        return None
    f, g, wrap = found
    guard = _empty_entry_guard(e, g, scope, lambda: _leaf_scope(e, scope), frozenset(suspects))
    if guard is None:
        return None  # an empty value is no entry, and only a loop could tell: left to codegen
    body = e.body
    if e.val != "_":
        body = Let(e.val, g, body)
        _note_suspect(suspects, e.val, g)
    if e.key != "_":
        body = Let(e.key, f, body)
    if guard is not False:
        body = If(guard, body)
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


def _linear_vertical_fusion(e, _, suspects: set[str] | frozenset[str] = frozenset()):
    """sum(<k, v> in sum(<x, y> in S) { f -> g }) b  ~>  sum(<x, y> in S) let k = f in let v = g in b,
    when b is linear in v: entries that share a key add up either way. Only for a loop-free b:
    otherwise b's loops would run once per entry of S instead of once per distinct key (the
    aggregated form that `opt.aggregate` builds)."""
    if not (isinstance(e, Sum) and isinstance(e.source, Sum) and e.val != "_"):
        return None
    found = singleton_leaf(e.source.body, unique=False)
    if not found or not is_linear(e.body, e.val) or not vanishes_on_empty(e.body, e.val):
        return None
    f, g, wrap = found
    if has_loop(e.body) and not _loops_only_over(e.body, e.val, g):
        return None  # keys may repeat: a loop in b would run once per entry instead of once per key
    # a key may now repeat across iterations: what was unique per key no longer is
    body = Let(e.val, g, _strip_unique_of(e.body, e.key))
    _note_suspect(suspects, e.val, g)
    if e.key != "_":
        body = Let(e.key, f, body)
    return Sum(e.source.key, e.source.val, e.source.source, wrap(body))


def _loops_only_over(body: Expr, v: str, g: Expr) -> bool:
    """Every loop of body iterates v itself, with a loop-free body, and g (v's value per entry)
    is loop-free: after fusion each such loop runs over one entry's g, so the fused program does
    no more work than building the intermediate (a row `{i -> sum(<j, a> in r) ...}` read from a
    transposed CSC: `sum(<i, r> in A) sum(<j, a> in r) ...`)."""
    if has_loop(g):
        return False
    for node in walk(body):
        if isinstance(node, Sum) and not isinstance(node.source, Singleton):
            if node.source != Var(v) or has_loop(node.body):
                return False
    return True


def _strip_unique_of(expr: Expr, name: str) -> Expr:
    from sparsad.lang.rebuild import map_children
    from sparsad.lang.syntax import free_vars

    expr = map_children(expr, lambda child: _strip_unique_of(child, name))
    if isinstance(expr, Unique) and name in free_vars(expr.operand):
        return expr.operand
    return expr


def _strip_row_key(body: Expr, q: str) -> Expr | None:
    """body with its outermost singletons `{q -> g}` replaced by g, when every entry body makes
    is keyed by q (through lets, ifs, sums and +), else None."""
    match body:
        case Singleton(key=key, value=value) if strip_unique(key) == Var(q):
            return value
        case Let(name=n, value=v, body=b) if n != q:
            inner = _strip_row_key(b, q)
            return None if inner is None else Let(n, v, inner)
        case If(cond=c, then=t, orelse=o):
            then = _strip_row_key(t, q)
            orelse = None if o is None else _strip_row_key(o, q)
            if then is None or (o is not None and orelse is None):
                return None
            return If(c, then, orelse)
        case Sum(key=k, val=v, source=src, body=b) if q not in (k, v):
            inner = _strip_row_key(b, q)
            return None if inner is None else Sum(k, v, src, inner)
        case Binary(op="+", left=l, right=r):
            left, right = _strip_row_key(l, q), _strip_row_key(r, q)
            return None if left is None or right is None else Binary("+", left, right)
    return None


def _row_generator(e: Expr) -> tuple[str, Expr] | None:
    """(q, row) when e is `sum(<_, q> in (st:en)) body` and every entry of body is keyed by q:
    row q of e is `row` (body without the outer key, empty unless st <= q < en); the keys of a
    range are distinct."""
    if not (isinstance(e, Sum) and isinstance(e.source, Range) and e.val != "_"):
        return None
    row = _strip_row_key(e.body, e.val)
    if row is None:
        return None
    if e.key not in ("_", e.val) and e.key in _free(row):
        row = Let(e.key, Var(e.val), row)  # a range's keys are its values
    # a key outside the range has no row: the lookup is empty there, as in the generator
    q = Var(e.val)
    return e.val, If(Not(Binary("<", q, e.source.start)), If(Binary("<", q, e.source.end), row))


def _row_lookup(e, _):
    """(sum(<_, q> in (st:en)) ... { q -> g })(k)  ~>  let q = k in if st <= q < en then ... g: the
    row at key k, built where it is read; `hoist` builds it once per row where it is invariant."""
    if isinstance(e, Lookup) and not _is_dense_generator(e.dict):
        found = _row_generator(e.dict)
        if found is not None:
            q, row = found
            return Let(q, e.key, row)


def _inline_row_generator(e, _):
    """let x = G in b, G a row generator, every use of x a lookup x(m) whose key m is the value of a
    range loop of b outside any other loop: each row of G is built once, when its key comes, as a
    let at the top of that loop's body (code generation fills it once per row; the row's own
    intermediates stay outside the loops that read it)."""
    if not isinstance(e, Let):
        return None
    found = _row_generator(e.value)
    if found is None:
        return None
    uses = sum(1 for node in walk(e.body) if isinstance(node, Var) and node.name == e.name)
    if uses == 0 or uses != _row_lookups(e.name, e.body, frozenset(), 0):
        return None
    q, row = found
    fresh = Fresh(all_names(e))

    def bind_rows(node: Expr) -> Expr:
        from sparsad.lang.rebuild import map_children

        if isinstance(node, Sum) and isinstance(node.source, Range):
            keys = [n for n in (node.key, node.val) if n != "_"]
            if any(Lookup(Var(e.name), Var(m)) in walk(node.body) for m in keys):
                name = fresh(f"{e.name}_row")
                body = node.body
                for m in keys:
                    body = _replace_node(body, Lookup(Var(e.name), Var(m)), Var(name))
                return Sum(node.key, node.val, node.source, Let(name, Let(q, Var(keys[-1]), row), body))
        if isinstance(node, Sum):  # loops inside loops read no row (see _row_lookups)
            return Sum(node.key, node.val, bind_rows(node.source), node.body)
        return map_children(node, bind_rows)

    return bind_rows(e.body)


def _replace_node(expr: Expr, target: Expr, replacement: Expr) -> Expr:
    from sparsad.lang.rebuild import map_children

    if expr == target:
        return replacement
    return map_children(expr, lambda child: _replace_node(child, target, replacement))


def _row_lookups(name: str, e: Expr, rows: frozenset, depth: int) -> int:
    """How many lookups x(m) in e have m a range-loop value in `rows` (loops at depth 0)."""
    match e:
        case Lookup(dict=Var(name=n), key=Var(name=m)) if n == name:
            return 1 if m in rows else 0
        case Sum(key=k, val=v, source=src, body=b):
            inner = rows
            if depth == 0 and isinstance(src, Range):
                inner = rows | ({k, v} - {"_"})  # a range's keys are its values
            else:
                inner = inner - {k, v}
            return _row_lookups(name, src, rows, depth) + _row_lookups(name, b, inner, depth + 1)
        case Let(name=n, value=v, body=b):
            return _row_lookups(name, v, rows, depth) + _row_lookups(name, b, rows - {n}, depth)
    from sparsad.lang.rebuild import map_children

    counts: list[int] = []
    map_children(e, lambda child: counts.append(_row_lookups(name, child, rows, depth)) or child)
    return sum(counts)


def _is_dense_generator(e: Expr) -> bool:
    """sum(<_, q> in (st:en)) { unique(q) -> g }: one entry per key of a range."""
    return (isinstance(e, Sum) and isinstance(e.source, Range) and isinstance(e.body, Singleton)
            and isinstance(e.body.key, Unique) and e.body.key.operand == Var(e.val) and e.val != "_")


def _dense_lookup(e, _, extents: frozenset[str] = frozenset()):
    if isinstance(e, Lookup) and _is_dense_generator(e.dict):
        gen = e.dict
        entry = gen.body.value
        start, end = gen.source.start, gen.source.end
        if not (start == Const(0) and isinstance(end, Var) and end.name in extents):
            q = Var(gen.val)
            entry = If(Not(Binary("<", q, start)), If(Binary("<", q, end), entry))
        return Let(gen.val, e.key, entry)


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


def is_view(e: Expr) -> bool:
    """A generator whose iteration costs O(its entries): one loop per level over a stored level
    (a range, an input array or sub-array, a lookup), loop-free lets and conditions, and a leaf
    that is loop-free or again a view (the storage definition of an input is one)."""
    if not isinstance(e, Sum) or not isinstance(e.source, (Var, Range, SubArray, Lookup)):
        return False
    body = e.body
    while True:
        match body:
            case Let(value=v, body=b) if not has_loop(v):
                body = b
            case If(cond=c, then=t, orelse=None) if not has_loop(c):
                body = t
            case _:
                break
    if not (isinstance(body, Singleton) and isinstance(body.key, Unique)) or has_loop(body.key):
        return False
    return not has_loop(body.value) or is_view(body.value)


def _container_type(value: Expr, scope) -> bool:
    """Whether code generation can hold `value` in a local container (a vector or matrix of
    numbers); deeper intermediates are lowered where they are used instead."""
    from sparsad.lang.types import Dict, Int, Real

    try:
        t = scope.type_of(value)
    except Exception:  # noqa: BLE001 - without a type, inlining stays the safe choice
        return False
    depth = 0
    while isinstance(t, Dict):
        depth, t = depth + 1, t.value
    return depth in (1, 2) and isinstance(t, (Real, Int))


def used_inside_loop(name: str, body: Expr) -> bool:
    """Whether `name` is read inside the body of a sum of `body` (a loop the let does not enclose)."""
    from sparsad.lang.syntax import free_vars

    return any(isinstance(node, Sum) and name in free_vars(node.body) for node in walk(body))


def _inline_generator(e, scope):
    """Inline a generator into its uses when each use fuses, unless a use sits inside a loop and
    the generator does more work than its entries (nested loops, computed sources): inlining would
    rebuild it on every iteration (the cost model of item 2: materialised by code generation once,
    read per iteration)."""
    if isinstance(e, Let) and is_generator(e.value) and _uses_all_fuse(e.name, e.body, e.value):
        if used_inside_loop(e.name, e.body) and not is_view(e.value) and _container_type(e.value, scope):
            return None
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
    Rule("inline a row generator looked up once per row", _inline_row_generator),
    Rule("lookup of a row of a generator keyed by its range", _row_lookup),
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


def fuse(expr: Expr, types: dict[str, Type] | None = None, extents: frozenset[str] = frozenset()) -> Expr:
    """Apply the fusion rules to a fixed point, renaming binders apart between sweeps.

    `extents`: the int inputs that are extents of stored inputs' dense levels (a lookup into the
    range `(0:e)` over one of them reads the input itself, at a key checked at the boundary).

    >>> from sparsad.lang.parse import parse
    >>> from sparsad.lang.printer import to_text
    >>> print(to_text(fuse(parse("(sum(<_, i> in (2:5)) { i -> x(i) })(k)"))))
    if not (k < 2) then (if k < 5 then x(k))
    """
    with_extents = tuple(Rule(r.name, partial(_dense_lookup, extents=frozenset(extents)))
                         if r.apply is _dense_lookup else r for r in RULES)
    for _ in range(20):
        unique_names = rename_bound(expr, Fresh(all_names(expr)))
        # binders are unique now: a let-bound number that may be {} is known by its name
        # and so is one that a rule of this sweep binds (the rules add it to the set)
        suspects = set(let_suspects(unique_names))
        rules = tuple(Rule(r.name, partial(r.apply, suspects=suspects))
                      if r.apply in (_sum_over_singleton, _vertical_fusion, _linear_vertical_fusion) else r
                      for r in with_extents)
        fused = rewrite_fixpoint(lookups_at_own_keys(unique_names), rules, types or {}, max_sweeps=1)
        fused = eliminate_dead_lets(inline_atoms(fused))
        if fused == unique_names:
            return fused
        expr = fused
    return expr


def fold_single_use_lets(expr: Expr) -> Expr:
    """Substitute bindings read once outside loops back into their use (undoing needless ANF)."""
    rule = (Rule("inline a single-use let outside loops", _inline_single_use),)
    return rewrite_fixpoint(expr, rule, {})
