"""The imperative loop IR that code generation lowers physical programs into (∇SD §5.5).

Scalar expressions (`IRExpr`), statements (`Stmt`: loops over ranges and local containers,
assignments, accumulation into a destination at a key path, conditionals), local containers
and the `LoopProgram` a kernel is made from. Every node is an immutable dataclass.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from sparsad.codegen import bounds as B
from sparsad.lang.syntax import Expr
from sparsad.lang.types import Type

# ----------------------------------------------------------------------------------------
# IR expressions (scalars)


class IRExpr:
    __slots__ = ()


@dataclass(frozen=True)
class Num(IRExpr):
    value: float | int | bool


@dataclass(frozen=True)
class Ref(IRExpr):
    name: str


@dataclass(frozen=True)
class Op(IRExpr):
    """Binary operator: + - * / == < <= and."""
    op: str
    left: IRExpr
    right: IRExpr


@dataclass(frozen=True)
class Unary(IRExpr):
    op: str  # "-" or "not"
    operand: IRExpr


@dataclass(frozen=True)
class Fn(IRExpr):
    """A built-in function of the language (exp, log, ...) or max/min on indices."""
    name: str
    args: tuple[IRExpr, ...]


@dataclass(frozen=True)
class Load(IRExpr):
    """`array[index]` of an input array; guarded reads give zero outside the array."""
    array: str
    index: IRExpr
    guarded: bool = False


@dataclass(frozen=True)
class Length(IRExpr):
    array: str


@dataclass(frozen=True)
class LocalGet(IRExpr):
    """The value at key in a local container (zero when absent). `proven`: the key lies in the
    hull of the keys the container is written at (then inside a workspace: no guard)."""
    container: str
    key: IRExpr
    proven: bool = False


@dataclass(frozen=True)
class HasKey(IRExpr):
    """Whether a hash container (of rows) holds key."""
    container: str
    key: IRExpr


@dataclass(frozen=True)
class RowOf(IRExpr):
    """The row at key of a nested hash container (the key must be present)."""
    container: str
    key: IRExpr


@dataclass(frozen=True)
class RowGet(IRExpr):
    """The value at (row_key, key) of a nested hash container whose row row_key exists."""
    container: str
    row_key: IRExpr
    key: IRExpr


@dataclass(frozen=True)
class Choose(IRExpr):
    """`then if cond else orelse`."""
    cond: IRExpr
    then: IRExpr
    orelse: IRExpr


# ----------------------------------------------------------------------------------------
# IR statements


class Stmt:
    __slots__ = ()


@dataclass(frozen=True)
class Assign(Stmt):
    name: str
    value: IRExpr


@dataclass(frozen=True)
class AddTo(Stmt):
    """A scalar accumulator: `name += value`."""
    name: str
    value: IRExpr


@dataclass(frozen=True)
class For(Stmt):
    """`for var in range(start, end): body`."""
    var: str
    start: IRExpr
    end: IRExpr
    body: tuple[Stmt, ...]


@dataclass(frozen=True)
class ForItems(Stmt):
    """Each (key, value) of a local container."""
    key: str
    value: str
    container: str
    body: tuple[Stmt, ...]


@dataclass(frozen=True)
class Accumulate(Stmt):
    """`target[keys] += value`; target OUTPUT is the kernel's destination, else a container."""
    target: str
    keys: tuple[IRExpr, ...]
    value: IRExpr
    key_ivs: tuple[B.IV | None, ...] = field(default=(), compare=False)


@dataclass(frozen=True)
class IfThen(Stmt):
    cond: IRExpr
    then: tuple[Stmt, ...]
    orelse: tuple[Stmt, ...] = ()


@dataclass(frozen=True)
class Fill(Stmt):
    """Start (re)filling a local container: empty it."""
    container: str


@dataclass(frozen=True)
class Container:
    """A local dictionary: 'workspace' (dense array sized by key_iv), 'hash' (typed dict; of
    typed-dict rows, nested depth - 1 times, when depth >= 2), 'trie' (depth >= 2: a pool of
    nodes and one hash table, `runtime.trie_*`; its rows are node indices), 'grid' (a dense 2-D array sized
    by key_iv x col_iv: a matrix filled once; when it is iterated, boolean marks of its written
    keys and rows say which entries exist) or 'row' (a row of a nested hash or of a grid, bound
    by a loop or a lookup; itself nested when depth >= 2)."""
    name: str
    kind: str
    key_iv: B.IV | None
    leaf: str  # "real" or "int"
    depth: int = 1
    col_iv: B.IV | None = None  # a grid's column keys
    parent: str | None = None   # a row's container
    marked: bool = False        # a grid that is iterated: it marks its written keys and rows


def sized_containers(containers) -> list[Container]:
    """The extents a kernel is passed (as `<name>_size`), in order: one per workspace, two per
    grid (its rows under its own name, its columns under `<name>__cols`)."""
    sized = []
    for c in containers:
        if c.kind == "workspace":
            sized.append(c)
        elif c.kind == "grid":
            sized += [c, Container(f"{c.name}__cols", "grid", c.col_iv, c.leaf, 2)]
    return sized


OUTPUT = "out"


@dataclass(frozen=True)
class LoopProgram:
    """A lowered kernel: parameters (the inputs), body, local containers, output facts."""
    params: tuple[str, ...]
    param_types: tuple[Type, ...]
    body: tuple[Stmt, ...]
    containers: tuple[Container, ...]
    depth: int                      # nesting of the output: 0 scalar, 1 vector, 2 matrix, ...
    leaf: str                       # "real" or "int"
    result_type: Type
    key_ivs: tuple[B.IV | None, ...]  # per output level: the hull of every written key
    checks: tuple[B.Check, ...]     # read checks on the inputs
    program: Expr


def accumulates(stmts, target: str = OUTPUT):
    """Every Accumulate into target inside stmts (any depth)."""
    for stmt in stmts:
        match stmt:
            case Accumulate(target=t) if t == target:
                yield stmt
            case For(body=b) | ForItems(body=b):
                yield from accumulates(b, target)
            case IfThen(then=t, orelse=o):
                yield from accumulates(t, target)
                yield from accumulates(o, target)
