"""Loop interchange through a transposed index: make the outermost loop fix the result's row.

A matrix-valued program over a CSR input whose result rows are keyed by the *column* j of the
input (BATAx: `sum over rows i, sum(<p, j> in row i) ... { j -> { k -> ... } }`) writes every
row of its result from many outer iterations, so code generation can only append triplets and
sort them afterwards. Iterating the same (i, p, j) triples column by column makes the outer loop
fix j, and the row workspace (Gustavson) output applies — SciPy's SpGEMM does the same after
transposing A. The rule (on physical programs, below top-level lets):

    sum(<_, i> in (0:LEN)) LETS sum(<p, j> in IDX(POS(i):POS(i + 1))) B          (B's leaf { j -> { .. } })
  ~> sum(<_, j> in (0:IDX_tlen)) sum(<q, i> in IDX_tidx(IDX_tpos(j):IDX_tpos(j + 1)))
       let p = IDX_tperm(q) in LETS B

where LETS are loop-free lets (they now run once per entry instead of once per row) and the
derived arrays describe the transpose of the pattern (POS, IDX), named `A_T_...` for `A_pos`,
`A_idx` (see `derived_base`; `IDX_t...` above): `_tpos` the column pointers, `_tidx` the row
of each entry in column order, `_tperm` its position in IDX, `_tlen` the number of columns.
The sum visits the same triples, so the value is unchanged. `derived_inputs` (or `derivation_spec` once, then `compute_derived`) computes the arrays
(a counting sort, O(nnz + columns)) and `derived_types` their types; the compiler adds both
for the names a program reads.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from sparsad.lang.syntax import (Binary, Const, Expr, Let, Lookup, Range, Singleton, SubArray, Sum,
                                 Unique, Var, free_vars, has_loop)
from sparsad.lang.types import Dict, Int, Type
from sparsad.opt.fuse import singleton_leaf

SUFFIXES = ("_tpos", "_tidx", "_tperm", "_tlen")


def _row_slice(src: Expr, i: str) -> tuple[str, str] | None:
    """(pos, idx) when src is IDX(POS(i):POS(i + 1))."""
    match src:
        case SubArray(array=Var(name=idx), start=Lookup(dict=Var(name=pos), key=Var(name=a)),
                      end=Lookup(dict=Var(name=pos2), key=Binary(op="+", left=Var(name=b), right=Const(value=1)))) \
                if pos == pos2 and a == b == i:
            return pos, idx
    return None


def _interchange_sum(e: Expr, types: Mapping[str, Type]) -> Expr | None:
    if not (isinstance(e, Sum) and isinstance(e.source, Range) and e.source.start == Const(0)
            and isinstance(e.source.end, Var) and e.key not in free_vars(e.body)):
        return None
    i = e.val
    lets: list[tuple[str, Expr]] = []
    body = e.body
    while isinstance(body, Let):
        if has_loop(body.value):
            return None
        lets.append((body.name, body.value))
        body = body.body
    if not isinstance(body, Sum):
        return None
    src = body.source
    aliases = dict(lets)
    if isinstance(src, Var) and src.name in aliases:
        src = aliases[src.name]
    found = _row_slice(src, i)
    if found is None:
        return None
    pos, idx = found
    idx_type, pos_type = types.get(idx), types.get(pos)
    if not (isinstance(idx_type, Dict) and isinstance(idx_type.value, Int) and idx_type.value.extent is not None
            and isinstance(pos_type, Dict)):
        return None
    j, p = body.val, body.key
    leaf = singleton_leaf(body.body, unique=False)
    if leaf is None or leaf[0] != Var(j) or not isinstance(leaf[1], Singleton):
        return None  # only matrix results keyed first by the column: then a row workspace applies
    inner = _strip_unique_of(body.body, j)
    for name, value in reversed(lets):
        inner = Let(name, value, inner)
    q = _fresh(e, "q")
    base = derived_base(pos, idx)
    if p != "_" and p in free_vars(body.body):
        inner = Let(p, Lookup(Var(base + "_tperm"), Var(q)), inner)
    tpos = Var(base + "_tpos")
    column = SubArray(Var(base + "_tidx"), Lookup(tpos, Var(j)), Lookup(tpos, Binary("+", Var(j), Const(1))))
    return Sum("_", j, Range(Const(0), Var(base + "_tlen")), Sum(q, i, column, inner))


def derived_base(pos: str, idx: str) -> str:
    """The prefix of the arrays derived from the pattern (pos, idx): `A_T` for `A_pos`, `A_idx`
    (the formats name fields `<input>_<field>`), else `<idx>_T_<pos>`."""
    head_p, _, field_p = pos.rpartition("_")
    head_i, _, field_i = idx.rpartition("_")
    if head_p and head_p == head_i and (field_p, field_i) == ("pos", "idx"):
        return f"{head_p}_T"
    return f"{idx}_T_{pos}"


def _source_of(name: str, types: Mapping[str, Type]) -> tuple[str, str] | None:
    """(pos, idx) of a derived array name, matched against the physical arrays' names."""
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            base = name[: -len(suffix)]
            break
    else:
        return None
    for pos, idx in _array_pairs(types):
        if derived_base(pos, idx) == base:
            return pos, idx
    return None


def _array_pairs(types: Mapping[str, Type]):
    arrays = [n for n, t in types.items() if isinstance(t, Dict)]
    for pos in arrays:
        for idx in arrays:
            if pos != idx:
                yield pos, idx


def _strip_unique_of(expr: Expr, name: str) -> Expr:
    from sparsad.lang.rebuild import map_children

    expr = map_children(expr, lambda child: _strip_unique_of(child, name))
    if isinstance(expr, Unique) and expr.operand == Var(name):
        return expr.operand
    return expr


def _fresh(e: Expr, hint: str) -> str:
    from sparsad.lang.names import Fresh, all_names

    return Fresh(all_names(e))(hint)


def interchange(expr: Expr, types: Mapping[str, Type] | None = None) -> Expr:
    """The program with its top-level loop interchanged where the rule applies (else unchanged)."""
    types = dict(types or {})
    if isinstance(expr, Let):
        body = interchange(expr.body, types)
        return expr if body is expr.body else Let(expr.name, expr.value, body)
    rewritten = _interchange_sum(expr, types)
    return expr if rewritten is None else rewritten


def _derived(expr: Expr, types: Mapping[str, Type]) -> dict[str, tuple[str, str]]:
    """derived name `expr` reads -> the (pos, idx) arrays it is derived from."""
    out = {}
    for name in sorted(free_vars(expr)):  # sorted: the kernel's parameters in one order
        if name.endswith(SUFFIXES) and name not in types:
            found = _source_of(name, types)
            if found is not None:
                out[name] = found
    return out


def derived_types(expr: Expr, types: Mapping[str, Type]) -> dict[str, Type]:
    """The types of the derived arrays `expr` reads, from the types of the arrays they come from."""
    out: dict[str, Type] = {}
    for name, (pos, idx) in _derived(expr, types).items():
        idx_type, pos_type = types[idx], types[pos]
        nnz = idx_type.key.extent if isinstance(idx_type.key, Int) else None
        ncols = idx_type.value.extent if isinstance(idx_type.value, Int) else None
        nrows = pos_type.key.extent - 1 if isinstance(pos_type.key, Int) and pos_type.key.extent else None
        if name.endswith("_tlen"):
            out[name] = Int()
        elif name.endswith("_tpos"):
            out[name] = Dict(Int(dense=True, extent=None if ncols is None else ncols + 1),
                             Int(extent=None if nnz is None else nnz + 1))
        elif name.endswith("_tidx"):
            out[name] = Dict(Int(dense=True, extent=nnz), Int(extent=nrows))
        else:
            out[name] = Dict(Int(dense=True, extent=nnz), Int(extent=nnz))
    return out


def derivation_spec(expr: Expr, types: Mapping[str, Type]) -> tuple[tuple[str, str, str, int], ...]:
    """(prefix, pos, idx, columns) for each transposed pattern `expr` reads (once per plan)."""
    spec = set()
    for pos, idx in _derived(expr, types).values():
        idx_type = types[idx]
        if isinstance(idx_type.value, Int) and idx_type.value.extent is not None:
            spec.add((derived_base(pos, idx), pos, idx, int(idx_type.value.extent)))
    return tuple(sorted(spec))


def compute_derived(spec, arrays: Mapping[str, Any]) -> dict[str, Any]:
    """The derived arrays of a `derivation_spec` from the physical arrays (O(nnz + columns))."""
    out: dict[str, Any] = {}
    for base, pos, idx, ncols in spec:
        tpos, tidx, tperm = _transpose(np.asarray(arrays[pos]), np.asarray(arrays[idx]), ncols)
        out.update({base + "_tpos": tpos, base + "_tidx": tidx, base + "_tperm": tperm, base + "_tlen": ncols})
    return out


def derived_inputs(expr: Expr, arrays: Mapping[str, Any], types: Mapping[str, Type]) -> dict[str, Any]:
    """The derived arrays `expr` reads, computed from `arrays` (O(nnz + columns))."""
    return compute_derived(derivation_spec(expr, types), arrays)


def _transpose(pos: np.ndarray, idx: np.ndarray, ncols: int):
    from sparsad.opt._transpose_kernel import transpose_pattern

    if len(pos) == 0:
        return np.zeros(ncols + 1, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    if np.any(pos[1:] < pos[:-1]) or pos[0] < 0 or pos[-1] > len(idx):
        from sparsad.errors import FormatError

        raise FormatError("the pos array of a CSR input must be non-decreasing and end within its idx array")
    try:
        return transpose_pattern(pos, idx, ncols)
    except IndexError as error:
        from sparsad.errors import FormatError

        raise FormatError(f"{error} ({ncols} columns); fix the index arrays of the input") from None


RULES = ("interchange the row loop of a matrix result keyed by the column of a CSR input",)
