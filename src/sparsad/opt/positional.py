"""Reading a sparse operand at the keys of its own entries by position, not by key (co-iteration).

A tangent or cotangent of a sparse matrix has the matrix's pattern; a jvp reads it at the keys of
the matrix's entries (`dA(i)(j)` inside `sum(<i, r> in A) sum(<j, a> in r)`). When both are
stored with the same index arrays (the compiler checks this on every call and renames the
second input's index arrays to the first's), the lookup is the value at the position the loop
is already at. The rule, on physical programs (binder names unique):

    sum(<q, j2> in S) ... D(K) ...
       where D is, through lets and lookups, sum(<p, j> in S) { unique(k) -> B }
       and K is k with p := q, j := j2
    ~> sum(<q, j2> in S) ... B[p := q, j := j2] ...

Sound because S is the same source in the same scope (names are unique) and `unique` says no two
of its entries share a key, so the entry of D at K is B at that one entry. Only loop-free results
replace lookups (no binder is duplicated); lets left unread are dropped. Nested levels resolve
one lookup at a time (`T(i)(j)(k)` of a CSF through its three levels).

>>> from sparsad.lang.parse import parse
>>> from sparsad.lang.printer import to_text
>>> e = parse("let d = sum(<p, j> in I(0:n)) { unique(j) -> V(p) } in sum(<q, k> in I(0:n)) d(k) * W(q)")
>>> to_text(read_by_position(e))
'sum(<q, _> in I(0:n))\\n  V(q) * W(q)'
"""
from __future__ import annotations

from collections import Counter

from sparsad.lang.rebuild import map_children, substitute
from sparsad.lang.syntax import Expr, Let, Lookup, Range, Singleton, SubArray, Sum, Unique, Var, free_vars, has_loop, walk
from sparsad.opt.dce import eliminate_dead_lets


def read_by_position(expr: Expr) -> Expr:
    """`expr` with lookups of a unique-keyed comprehension at the key of the entry a loop over the
    same source is at replaced by that entry's value (the module docstring); unchanged when
    binder names are not unique."""
    binders = Counter(name for e in walk(expr) for name in _binders(e) if name != "_")
    if any(count > 1 for count in binders.values()):
        return expr
    taken = set(binders) | free_vars(expr)
    counter = [0]

    def fresh() -> str:
        while True:
            counter[0] += 1
            name = f"pos_{counter[0]}"
            if name not in taken:
                taken.add(name)
                return name

    inputs = free_vars(expr)
    changed = [False]

    def go(e: Expr, env: dict, loops: tuple, bound: frozenset) -> Expr:
        if isinstance(e, Let):
            value = go(e.value, env, loops, bound)
            body = go(e.body, {**env, e.name: value}, loops, bound | {e.name})
            return Let(e.name, value, body, span=e.span)
        if isinstance(e, Sum):
            source = go(e.source, env, loops, bound)
            key = e.key
            if key == "_" and isinstance(_expand(source, env), (SubArray, Range)):
                # a name for the position, in case a lookup resolves to it (also when the
                # sub-array was let-bound once for several loops: common-subexpression elimination)
                key = fresh()
            inner = (key, e.val, source)
            body = go(e.body, env, loops + (inner,), bound | {key, e.val})
            return Sum(key, e.val, source, body, span=e.span)
        if isinstance(e, Lookup):
            d, k = go(e.dict, env, loops, bound), go(e.key, env, loops, bound)
            comprehension = _resolve(d, env, loops, bound, inputs)
            if comprehension is not None:
                value = _at(comprehension, k, env, loops, bound, inputs)
                if value is not None and not has_loop(value):
                    changed[0] = True
                    return value
            return Lookup(d, k, span=e.span)
        return map_children(e, lambda c: go(c, env, loops, bound))

    result = go(expr, {}, (), frozenset())
    return eliminate_dead_lets(result) if changed[0] else expr


def _binders(e: Expr) -> tuple[str, ...]:
    if isinstance(e, Sum):
        return (e.key, e.val)
    if isinstance(e, Let):
        return (e.name,)
    return ()


def _comprehension(e: Expr) -> tuple[Sum, Expr, Expr] | None:
    """(the sum, its key k, its value B) when e is `sum(<p, j> in S) { unique(k) -> B }`, or a
    normalized nest `sum(<p, j> in S) sum(...) ... { unique(k) -> V }` whose key k reads none of
    the inner binders (then B is the inner sums of V: one entry per entry of S)."""
    if not isinstance(e, Sum):
        return None
    inner: list[Sum] = []
    body = e.body
    while isinstance(body, Sum):
        inner.append(body)
        body = body.body
    if not (isinstance(body, Singleton) and isinstance(body.key, Unique)):
        return None
    if free_vars(body.key) & {name for s in inner for name in (s.key, s.val)}:
        return None
    value = body.value
    for s in reversed(inner):
        value = Sum(s.key, s.val, s.source, value, span=s.span)
    return e, body.key.operand, value


def _resolve(d: Expr, env: dict, loops: tuple, bound: frozenset, inputs: frozenset,
             depth: int = 0) -> tuple[Sum, Expr, Expr] | None:
    """The comprehension a dict expression is, through lets and lookups resolved by position."""
    if depth > 16:
        return None
    if isinstance(d, Var) and d.name in env:
        return _resolve(env[d.name], env, loops, bound, inputs, depth + 1)
    if isinstance(d, Lookup):
        outer = _resolve(d.dict, env, loops, bound, inputs, depth + 1)
        if outer is None:
            return None
        value = _at(outer, d.key, env, loops, bound, inputs)
        return None if value is None else _resolve(value, env, loops, bound, inputs, depth + 1)
    return _comprehension(d)


def _at(c: tuple[Sum, Expr, Expr], key: Expr, env: dict, loops: tuple, bound: frozenset,
        inputs: frozenset) -> Expr | None:
    """The value of comprehension c at `key` when key is the key of the entry an enclosing loop
    over c's source is at; else None."""
    total, entry_key, entry_value = c
    source = _expand(total.source, env)
    wanted = _expand(key, env)
    for q, j2, loop_source in reversed(loops):
        if _expand(loop_source, env) != source:
            continue
        mapping = {}
        if total.key != "_":
            if q == "_":
                continue
            mapping[total.key] = Var(q)
        if total.val != "_":
            if j2 == "_":
                continue
            mapping[total.val] = Var(j2)
        if _expand(_substitute(entry_key, mapping), env) != wanted:
            continue
        value = _substitute(entry_value, mapping)
        if free_vars(value) <= (bound | inputs):
            return value
    return None


def _substitute(e: Expr, mapping: dict) -> Expr:
    for name, replacement in mapping.items():
        e = substitute(e, name, replacement)
    return e


def _expand(e: Expr, env: dict, depth: int = 0) -> Expr:
    """e with let-bound loop-free names replaced by their values (to compare two spellings)."""
    if depth > 16:
        return e
    names = {n for n in free_vars(e) if n in env and not has_loop(env[n])}
    for name in sorted(names):
        e = substitute(e, name, _expand(env[name], env, depth + 1))
    return e
