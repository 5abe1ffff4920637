"""Stage splitting: a program cut at the top-level lets whose values are worth keeping.

`let XW = <X W> in <A XW>` as one kernel computes X W once in the forward pass, but every
derivative program of it is derived from the inputs and computes X W again; the dense
contraction also runs in the kernel's loops rather than as a stage of its own. Cut at the let,
the program becomes two programs, `XW = <X W>` and `<A XW>`, chained by the framework bridge:
the second's derivatives receive XW, which the framework keeps from the forward pass.

A top-level `let x = v in b` is cut when the fused kernel materialises `x` anyway, by the
fusion pass's own cost model (`sparsad.opt.fuse`), so the forward pass loses no fusion:
- `v` has a loop (a loop-free value costs nothing to recompute),
- `v` is not a view of stored levels (`is_view`: rebuilt where it is read, a view costs only
  its entries, and fusion inlines it),
- `x` is read inside a loop of `b` or more than once (read once outside loops, fusion inlines it),
- and the bridge can hold `x`'s value between stages (`keep(name, value)`, e.g. its type is a
  real tensor of an order and size the framework passes along).
Lets inside loops are never cut (the attention layer's per-row lets stay fused). A top-level let
that is not cut is repeated in each stage that reads it (it is cheap by the rules above).

>>> from sparsad.lang.parse import parse
>>> from sparsad.lang.printer import to_text
>>> stages = split_stages(parse("let Y = sum(<i, r> in X) { i -> sum(<j, x> in r) sum(<c, w> in W(j)) { c -> x * w } } "
...                             "in sum(<i, r> in A) sum(<k, a> in r) a * Y(k)(0)"))
>>> [(s.name, list(s.inputs)) for s in stages]
[('Y', ['W', 'X']), (None, ['A', 'Y'])]
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from sparsad.lang.names import all_names, desugar_let_tuples
from sparsad.lang.rebuild import map_children, substitute
from sparsad.lang.syntax import Expr, Let, Singleton, Sum, Unique, Var, free_vars, has_loop, walk
from sparsad.opt.anf import blocks


@dataclass(frozen=True)
class Stage:
    """One program of the chain: `name` is the input later stages read its result by (None for
    the last stage, whose result is the program's); `inputs` are its free names, sorted."""

    name: str | None
    expr: Expr
    inputs: tuple[str, ...]


def split_stages(expr: Expr, keep: Callable[[str, Expr], bool] | None = None) -> tuple[Stage, ...]:
    """The program as a chain of stages, cut at the top-level lets worth materialising (see the
    module docstring); one stage (the program itself) when there is none. Deterministic and pure.

    `keep(name, value)`: whether the bridge can hold the let's value between stages (called only
    for lets the cost rules would cut; every let by default). A stage's name is the let's own
    name unless that is taken elsewhere in the program (a shadowed input, a repeated name): then
    a fresh one."""
    spine, body = blocks(_distinct_let_names(desugar_let_tuples(expr)))
    stages: list[Stage] = []
    kept: list[tuple[str, Expr]] = []  # top-level lets not cut: repeated in the stages that read them
    for index, (name, value) in enumerate(spine):
        rest = _rebuild(spine[index + 1:], body)
        if worth_materialising(name, value, rest) and (keep is None or keep(name, value)):
            stage = _with_lets(value, kept)
            stages.append(Stage(name, stage, tuple(sorted(free_vars(stage)))))
        else:
            kept.append((name, value))
    if not stages:
        return (Stage(None, expr, tuple(sorted(free_vars(expr)))),)
    last = _with_lets(body, kept)
    return (*stages, Stage(None, last, tuple(sorted(free_vars(last)))))


def worth_materialising(name: str, value: Expr, body: Expr) -> bool:
    """Whether `let name = value in body` at the top level is materialised by the fused kernel
    anyway (the fusion pass's cost model, see the module docstring)."""
    if not has_loop(value) or _is_view(value):
        return False
    reads = sum(1 for node in walk(body) if isinstance(node, Var) and node.name == name)
    if name in _rebinds(body):
        return False  # shadowed inside: the count above mixes the two names (rare; stay fused)
    return reads > 1 or (reads == 1 and _read_inside_loop(name, body))


def _rebuild(spine: list[tuple[str, Expr]], body: Expr) -> Expr:
    for name, value in reversed(spine):
        body = Let(name, value, body)
    return body


def _with_lets(expr: Expr, kept: list[tuple[str, Expr]]) -> Expr:
    """`expr` under the kept lets it reads (directly or through another kept let), in order."""
    for name, value in reversed(kept):
        if name in free_vars(expr):
            expr = Let(name, value, expr)
    return expr


def _distinct_let_names(expr: Expr) -> Expr:
    """The top-level lets renamed apart: each name bound once in the program and not an input
    (a let shadowing an input or another let gets a fresh name; no capture: it is new)."""
    taken = all_names(expr)
    spine, body = blocks(expr)
    renamed: list[tuple[str, Expr]] = []
    while spine:
        (name, value), spine = spine[0], spine[1:]
        if _binders(name, expr) > 1 or name in free_vars(expr):
            fresh = _fresh(name, taken)
            rest = substitute(_rebuild(spine, body), name, Var(fresh))
            spine, body = blocks(rest)
            name = fresh
        renamed.append((name, value))
    return _rebuild(renamed, body)


def _binders(name: str, expr: Expr) -> int:
    return sum(1 for node in walk(expr) if (isinstance(node, Let) and node.name == name)
               or (isinstance(node, Sum) and name in (node.key, node.val)))


def _fresh(name: str, taken: set[str]) -> str:
    count = 1
    while f"{name}_{count}" in taken:
        count += 1
    taken.add(f"{name}_{count}")
    return f"{name}_{count}"


def _rebinds(body: Expr) -> set[str]:
    names: set[str] = set()
    for node in walk(body):
        if isinstance(node, Let):
            names.add(node.name)
        elif isinstance(node, Sum):
            names.update((node.key, node.val))
    return names


def _read_inside_loop(name: str, body: Expr) -> bool:
    return any(isinstance(node, Sum) and name in free_vars(node.body) for node in walk(body))


def _is_view(value: Expr) -> bool:
    """`sparsad.opt.fuse.is_view` of the value with its loop-key singletons marked unique, as
    fusion marks them before it asks."""
    from sparsad.opt.fuse import is_view

    return is_view(_mark_unique_keys(value))


def _mark_unique_keys(expr: Expr) -> Expr:
    expr = map_children(expr, _mark_unique_keys)
    if isinstance(expr, Sum) and isinstance(expr.body, Singleton) and not isinstance(expr.body.key, Unique):
        key = expr.body.key
        if (expr.key != "_" and key == Var(expr.key)) or (expr.val != "_" and key == Var(expr.val)
                                                           and type(expr.source).__name__ == "Range"):
            return Sum(expr.key, expr.val, expr.source, Singleton(Unique(key), expr.body.value))
    return expr


def matrix_product(expr: Expr) -> tuple[str, str] | None:
    """(L, R) when `expr` is exactly the product of two inputs read as matrices, L @ R:
    `sum(<i, l> in L) { i -> sum(<k, x> in l) sum(<j, y> in R(k)) { j -> x * y } }` (either
    factor order). A bridge may run such a stage as its framework's matmul when both inputs are
    dense: the same entries (a dense input has every key), a GEMM, and the framework's own exact
    derivative of a product (no kinks, no masked convention: both factors are dense).

    >>> from sparsad.lang.parse import parse
    >>> matrix_product(parse("sum(<i, l> in X) { i -> sum(<k, x> in l) sum(<j, y> in W(k)) { j -> x * y } }"))
    ('X', 'W')
    """
    from sparsad.lang.syntax import Binary, Lookup

    match expr:
        case Sum(key=i, val=row, source=Var(name=left),
                 body=Singleton(key=Var(name=i2), value=Sum(key=k, val=x, source=Var(name=row2),
                                                            body=Sum(key=j, val=y, source=Lookup(dict=Var(name=right),
                                                                                                 key=Var(name=k2)),
                                                                     body=Singleton(key=Var(name=j2),
                                                                                    value=Binary(op="*") as product))))):
            names = {i, row, k, x, j, y}
            if len(names) != 6 or left in names or right in names or (i2, row2, k2, j2) != (i, row, k, j):
                return None
            if {(product.left, product.right), (product.right, product.left)} & {(Var(x), Var(y))}:
                return left, right
    return None


def dense_size(t) -> int | None:
    """The number of entries of a real tensor type held densely (None: unknown or not one); the
    bridges' size limit for an intermediate passed between stages."""
    from sparsad.lang.types import extents, tensor_order

    if tensor_order(t) is None:
        return None
    size = 1
    for extent in extents(t):
        if extent is None:
            return None
        size *= extent
    return size
