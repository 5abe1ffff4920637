"""The physical definition of a format (∇SD Fig. 10), generated level by level for any order.

Walking the levels outermost first, each level contributes a loop and a coordinate:

- dense:       `sum(<_, x> in (0:size))`, coordinate x, position `parent * size + x`
               (just x at the root);
- compressed:  `sum(<p, x> in crd(pos(parent):pos(parent+1)))`, coordinate x, position p;
               at the root `sum(<_, x> in (0:len))`, coordinate `crd(x)`, position x;
- singleton:   no loop, coordinate `crd(parent)`, position unchanged.

The value of the innermost position is `val(position)`. The logical value is always indexed
in logical mode order ([row][col] for matrices): as soon as the next logical mode's coordinate
is known it is emitted as a singleton key `{ k -> ... }` around the rest. In row-major formats
this nests keys inside loops exactly as in Fig. 10; in CSC and column-major formats the row
key only becomes known in the inner loop, so the body is the sum of singletons
`{ i -> { j -> v } }`, which `+` merges into the [row][col] dictionary.

A key is wrapped in `unique(...)` when the loops around it can never produce the same key
twice for the same enclosing keys: its logical prefix is exactly the modes bound so far, and
every level so far stores unique tuples. So COO's repeated row key carries no `unique`.
"""
from __future__ import annotations

from dataclasses import dataclass

from sparsad.formats.format import Format
from sparsad.formats.levels import Compressed, Dense, Singleton
from sparsad.lang.syntax import Const, Expr, Lookup, Range, Singleton as Single, SubArray, Sum, \
    Unique, Var

_MODE_LETTERS = "ijklmn"
_POSITION_LETTERS = "pqrstu"


def mode_variable(mode: int) -> str:
    """The loop variable of a logical mode: i, j, k, ... (i6, i7, ... beyond six modes)."""
    return _MODE_LETTERS[mode] if mode < len(_MODE_LETTERS) else f"i{mode}"


def position_variable(count: int) -> str:
    """The position variable of the count-th non-root compressed level: p, q, r, ..."""
    return _POSITION_LETTERS[count] if count < len(_POSITION_LETTERS) else f"p{count}"


@dataclass(frozen=True)
class KeyPlan:
    """Logical mode `mode` becomes a key right after level `after_level`."""
    mode: int
    after_level: int
    unique: bool


def key_plan(fmt: Format) -> tuple[KeyPlan, ...]:
    """When each logical mode's key is emitted, and whether it is annotated unique.

    >>> from sparsad.formats import CSR
    >>> [(p.mode, p.after_level, p.unique) for p in key_plan(CSR)]
    [(0, 0, True), (1, 1, True)]
    """
    plan, bound, next_mode, tuple_unique = [], set(), 0, True
    for depth, level in enumerate(fmt.levels):
        bound.add(fmt.mode_order[depth])
        # a singleton level's `unique` speaks for the whole coordinate tuple (as in COO)
        tuple_unique = level.unique and (tuple_unique or isinstance(level, Singleton))
        while next_mode in bound:
            exact_prefix = bound == set(range(next_mode + 1))
            plan.append(KeyPlan(next_mode, depth, exact_prefix and tuple_unique))
            next_mode += 1
    return tuple(plan)


def physical_definition(fmt: Format, name: str) -> Expr:
    """The Physical SDQLite expression of `fmt` over the variables `{name}_{field}`.

    >>> from sparsad.formats import CSR
    >>> from sparsad.lang.printer import to_text
    >>> print(to_text(physical_definition(CSR, "A")))
    sum(<_, i> in (0:A_len))
      { unique(i) -> sum(<p, j> in A_idx(A_pos(i):A_pos(i + 1)))
        { unique(j) -> A_val(p) } }
    """
    if not name.isidentifier():
        raise ValueError(f"physical_definition needs an identifier as the tensor name, got {name!r}")

    def field(label: str) -> Var:
        return Var(f"{name}_{label}")

    loops: list[tuple[str, str, Expr] | None] = []  # per level: (key var, value var, source)
    coordinates: dict[int, Expr] = {}
    parent: Expr | None = None
    compressed_seen = 0
    for depth, level in enumerate(fmt.levels):
        mode = fmt.mode_order[depth]
        x = mode_variable(mode)
        if isinstance(level, Dense):
            size = field(level.size)
            loops.append(("_", x, Range(Const(0), size)))
            coordinates[mode] = Var(x)
            parent = Var(x) if parent is None else parent * size + Var(x)
        elif isinstance(level, Compressed) and parent is None:
            loops.append(("_", x, Range(Const(0), field(level.count))))
            coordinates[mode] = field(level.crd)(Var(x))
            parent = Var(x)
        elif isinstance(level, Compressed):
            p = position_variable(compressed_seen)
            compressed_seen += 1
            pos = field(level.pos)
            loops.append((p, x, SubArray(field(level.crd), pos(parent), pos(parent + 1))))
            coordinates[mode] = Var(x)
            parent = Var(p)
        else:
            loops.append(None)
            coordinates[mode] = field(level.crd)(parent)

    body: Expr = Lookup(field(fmt.values), parent)
    plan = key_plan(fmt)
    for depth in reversed(range(fmt.order)):
        for key in reversed([k for k in plan if k.after_level == depth]):
            coordinate = coordinates[key.mode]
            body = Single(Unique(coordinate) if key.unique else coordinate, body)
        if loops[depth] is not None:
            key_var, value_var, source = loops[depth]
            body = Sum(key_var, value_var, source, body)
    return body
