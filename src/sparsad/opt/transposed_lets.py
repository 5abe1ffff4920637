"""A let-bound transpose of a CSR input is read through the input's transposed pattern.

Reverse mode turns a read `B(j)(i)` at the keys (i, j) of a CSR input A into a let that builds
the transpose of A's values, keyed by A's *column* first, then looks it up row by row:

    let T = sum(<_, i> in (0:A_len)) sum(<p, j> in A_idx(A_pos(i):A_pos(i + 1))) { j -> { i -> e } }
    in ... T(x) ...

Code generation can only build such a T in nested hash maps (rows arrive in any order): one
typed-dict insertion per entry of A and a hashed lookup per read, an order of magnitude slower
than SciPy's transpose. Row x of T is column x of A, which the per-call transposed pattern of
`opt.interchange` (a counting sort, O(nnz)) lists in order, so each lookup becomes

    T(x)  ~>  sum(<q, i> in A_T_tidx(A_T_tpos(x):A_T_tpos(x + 1))) let p = A_T_tperm(q) in { i -> e }

and `hoist` then builds that row once per x in a workspace. The rule applies only when every
use of T is such a lookup at the variable of a top-level range loop (each x once: O(nnz) in all)
whose range lies within A's columns (so the column pointers are read in bounds).

>>> from sparsad.lang.parse import parse
>>> from sparsad.lang.printer import to_text
>>> from sparsad.lang.types import Dict, Int, REAL
>>> types = {"A_len": Int(), "A_pos": Dict(Int(dense=True, extent=4), Int()),
...          "A_idx": Dict(Int(dense=True, extent=5), Int(extent=3)), "A_val": Dict(Int(dense=True, extent=5), REAL),
...          "B_len": Int(), "B_pos": Dict(Int(dense=True, extent=4), Int())}
>>> e = parse("let T = sum(<_, i> in (0:A_len)) sum(<p, j> in A_idx(A_pos(i):A_pos(i + 1))) "
...           "{ unique(j) -> { i -> A_val(p) } } in sum(<_, x> in (0:B_len)) { unique(x) -> T(x) }")
>>> "A_T_tidx" in to_text(read_transposed_lets(e, types))
True
"""
from __future__ import annotations

from typing import Mapping

from sparsad.lang.names import Fresh, all_names
from sparsad.lang.rebuild import map_children, substitute
from sparsad.lang.syntax import (Binary, Const, Expr, Let, LetTuple, Lookup, Range, Singleton, SubArray, Sum, Var,
                                 free_vars)
from sparsad.lang.types import Dict, Int, Type
from sparsad.opt.fuse import singleton_leaf
from sparsad.opt.hoist import hoist_invariant_dictionaries
from sparsad.opt.interchange import _interchange_sum, _row_slice, derived_base


def _once_loops(body: Expr, depth: int, found: dict[str, Expr]) -> None:
    """variable -> range end of every range loop that no other loop encloses (each key once)."""
    match body:
        case Sum(val=v, source=Range(start=Const(value=0), end=end), body=b) if depth == 0:
            found[v] = end
            _once_loops(b, depth + 1, found)
            return
        case Sum(source=s, body=b):
            _once_loops(s, depth, found)
            _once_loops(b, depth + 1, found)
            return
    map_children(body, lambda child: _once_loops(child, depth, found) or child)


def _uses(body: Expr, name: str, lookups: list[Lookup]) -> bool:
    """Collects the lookups `name(x)`; False when `name` is used otherwise (or rebound)."""
    match body:
        case Var(name=n):
            return n != name
        case Lookup(dict=Var(name=n), key=k) if n == name:
            lookups.append(body)
            return _uses(k, name, lookups)
        case Let(name=n) if n == name:
            return False
        case LetTuple(names=ns) if name in ns:
            return False
        case Sum(key=k, val=v) if name in (k, v):
            return False
    ok = [True]

    def visit(child: Expr) -> Expr:
        ok[0] = ok[0] and _uses(child, name, lookups)
        return child

    map_children(body, visit)
    return ok[0]


def _rows_within(end: Expr, columns: int, types: Mapping[str, Type]) -> bool:
    """Whether a range (0:end) lies within 0..columns-1 (known from the input types)."""
    if isinstance(end, Const) and isinstance(end.value, int):
        return end.value <= columns
    if isinstance(end, Var) and end.name.endswith("_len"):
        pos = types.get(end.name[: -len("_len")] + "_pos")
        if isinstance(pos, Dict) and isinstance(pos.key, Int) and pos.key.extent is not None:
            return pos.key.extent - 1 <= columns
    return False


def _row_template(value: Expr, types: Mapping[str, Type]) -> tuple[str, Expr, int] | None:
    """(column variable x, row x of the let's value with x free, number of columns)."""
    transposed = _interchange_sum(value, types)
    if transposed is None:
        return None
    column_var, column_loop = transposed.val, transposed.body
    leaf = singleton_leaf(column_loop.body, unique=False)
    if leaf is None or leaf[0] != Var(column_var):
        return None
    _, row_value, wrap = leaf
    idx = _source_idx(value)
    extent = types[idx].value.extent if idx in types and isinstance(types[idx], Dict) else None
    if not isinstance(extent, int):
        return None
    return column_var, Sum(column_loop.key, column_loop.val, column_loop.source, wrap(row_value)), extent


def _source_idx(value: Expr) -> str | None:
    """The idx array of the CSR row slice the let's value iterates (as `_interchange_sum` reads it)."""
    if not isinstance(value, Sum):
        return None
    aliases, body = {}, value.body
    while isinstance(body, Let):
        aliases[body.name] = body.value
        body = body.body
    if not isinstance(body, Sum):
        return None
    source = body.source
    if isinstance(source, Var) and source.name in aliases:
        source = aliases[source.name]
    found = _row_slice(source, value.val)
    return None if found is None else found[1]


def _rewrite(let: Let, types: Mapping[str, Type]) -> Expr | None:
    template = _row_template(let.value, types)
    if template is None:
        return None
    column_var, row, columns = template
    lookups: list[Lookup] = []
    if not _uses(let.body, let.name, lookups) or not lookups:
        return None
    once: dict[str, Expr] = {}
    _once_loops(let.body, 0, once)
    bound_in_row = all_names(row) - free_vars(row)
    body_names = all_names(let.body)
    replacements = {}
    for lookup in lookups:
        key = lookup.key
        if not (isinstance(key, Var) and key.name in once and _rows_within(once[key.name], columns, types)):
            return None
        if bound_in_row & (body_names | {key.name}):
            return None  # a binder of the row would capture a name of the body
        replacements[key.name] = substitute(row, column_var, key)

    def replace_lookups(e: Expr) -> Expr:
        if isinstance(e, Lookup) and e.dict == Var(let.name) and isinstance(e.key, Var):
            return replacements[e.key.name]
        return map_children(e, replace_lookups)

    return replace_lookups(let.body)


def _column_lookup(lookup: Lookup, once: Mapping[str, Expr], types: Mapping[str, Type], fresh) -> Expr | None:
    """`(row r of a CSR input)(k)` at a once-loop's k, as `(column k of the input)(r)`: then the
    column is built once per k (hoisted) instead of the row once per entry."""
    row, k = lookup.dict, lookup.key
    if not (isinstance(row, Sum) and isinstance(k, Var) and k.name in once):
        return None
    found = _slice_of(row.source)
    if found is None:
        return None
    pos, idx, r = found
    if k.name in free_vars(row) or r.name == k.name:
        return None  # the row depends on k: nothing to gain
    idx_type = types.get(idx)
    if not (isinstance(idx_type, Dict) and isinstance(idx_type.value, Int) and isinstance(idx_type.value.extent, int)
            and _rows_within(once[k.name], idx_type.value.extent, types)):
        return None
    leaf = singleton_leaf(row.body, unique=False)
    if leaf is None or leaf[0] != Var(row.val):
        return None
    _, value, wrap = leaf
    q, rr = fresh("q"), fresh("r")
    base = derived_base(pos, idx)
    tpos = Var(base + "_tpos")
    column = SubArray(Var(base + "_tidx"), Lookup(tpos, k), Lookup(tpos, Binary("+", k, Const(1))))
    entry = substitute(wrap(Singleton(Var(rr), value)), row.val, k)
    if row.key != "_" and row.key in free_vars(entry):
        entry = Let(row.key, Lookup(Var(base + "_tperm"), Var(q)), entry)
    return Lookup(Sum(q, rr, column, entry), r)


def _slice_of(source: Expr) -> tuple[str, str, Var] | None:
    """(pos, idx, r) when source is IDX(POS(r):POS(r + 1)) for a variable r."""
    match source:
        case SubArray(array=Var(name=idx), start=Lookup(dict=Var(name=pos), key=Var() as r),
                      end=Lookup(dict=Var(name=pos2), key=Binary(op="+", left=Var() as r2, right=Const(value=1)))) \
                if pos == pos2 and r == r2:
            return pos, idx, r
    return None


def read_transposed_lets(expr: Expr, types: Mapping[str, Type]) -> Expr:
    """The program with every let-bound transpose of a CSR input, and every lookup of a CSR
    input's row at a once-loop's key, read through the input's transposed pattern (then rows
    hoisted out of the loops that read them); unchanged where the rules do not apply."""
    changed = [False]
    once: dict[str, Expr] = {}
    _once_loops(expr, 0, once)
    fresh = Fresh(all_names(expr))

    def go(e: Expr) -> Expr:
        e = map_children(e, go)
        if isinstance(e, Let):
            rewritten = _rewrite(e, types)
            if rewritten is not None:
                changed[0] = True
                return rewritten
        if isinstance(e, Lookup):
            rewritten = _column_lookup(e, once, types, fresh)
            if rewritten is not None:
                changed[0] = True
                return rewritten
        return e

    out = go(expr)
    return hoist_invariant_dictionaries(out, types) if changed[0] else expr


RULES = ("read a let-bound transpose of a CSR input through the input's transposed pattern",)
