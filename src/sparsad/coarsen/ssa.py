"""The SSA graph that the front end builds from a Python function.

Nodes are immutable and compared by identity (a graph may share sub-nodes).  Values are
scalars (shape ``()``) or tensors combined elementwise with broadcasting; ``Reduce`` sums a
tensor to a scalar.  Control flow stays structured: ``Phi`` merges the two arms of an ``if``
whose predicate is recorded at run time, ``Loop`` keeps a loop's carried variables, their
initial values and their one-iteration updates (in terms of ``Carried`` placeholders), and
``LoopOut`` reads a carried variable at the loop's exit.

A *site* names a statement of the source, ``(line, column)``; the run-time record of trip
counts and branch decisions is keyed by sites.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Site = tuple[int, int]


@dataclass(frozen=True, eq=False)
class Node:
    shape: tuple[int, ...]


@dataclass(frozen=True, eq=False)
class Input(Node):
    """A tensor argument of the traced function (position ``index``)."""
    name: str
    index: int


@dataclass(frozen=True, eq=False)
class Const(Node):
    value: float


@dataclass(frozen=True, eq=False)
class Iota(Node):
    """The vector ``0, 1, ..., n - 1`` (shape ``(n,)``): positions for tensors built from pieces and
    for constant vectors (``arange``, ``tensor([...])``), which select their entries by position."""


@dataclass(frozen=True, eq=False)
class Op(Node):
    """An elementwise operation: ``add sub mul div pow neg exp log ... where gt lt ...``."""
    op: str
    args: tuple[Node, ...]


@dataclass(frozen=True, eq=False)
class Reduce(Node):
    """Sum of all elements of ``arg`` (a scalar)."""
    arg: Node


@dataclass(frozen=True, eq=False)
class View(Node):
    """``base[key]`` with a key known when tracing (ints and slices)."""
    base: Node
    key: Any


@dataclass(frozen=True, eq=False)
class Layout(Node):
    """A linear rearrangement of ``base``'s entries into ``shape``, known when tracing: ``kind``
    "reshape" (row-major order kept; ``key`` None) or "pad" (``base`` placed at the static slices
    ``key`` of a zero tensor).  Views (``View``) are the third such map; slices, ``roll`` and
    ``cat`` are built from views and pads, so every backend needs only these two."""
    base: Node
    kind: str
    key: Any = None


@dataclass(frozen=True, eq=False)
class LoopIndex(Node):
    """The counter ``i`` of ``for i in range(start, stop)``: ``start + iteration``."""
    site: Site
    start: int


@dataclass(frozen=True, eq=False)
class Index(Node):
    """``base[stride * i + offset]`` with ``i`` the counter of the loop at ``site`` (stride ±1)."""
    base: Node
    site: Site
    offset: int
    stride: int = 1


@dataclass(frozen=True, eq=False)
class Phi(Node):
    """φ of an ``if`` on a traced value: ``then`` when the recorded decision at ``site`` is true."""
    site: Site
    then: Node
    orelse: Node
    entry: int = 0
    scope: tuple = ()   # sites of the traced loops around the `if`, innermost last
    test: Node | None = None   # the traced predicate (a loop compiled as a loop selects with it per iteration)


@dataclass(frozen=True, eq=False)
class Carried(Node):
    """Inside a loop body: the value of carried variable ``k`` at the start of an iteration."""
    site: Site
    k: int


@dataclass(frozen=True, eq=False)
class Loop(Node):
    """A ``for``/``while`` loop.

    ``trip`` is the static trip count of ``for ... in range`` (None for ``while``; then the count
    is recorded at run time).  ``updates[k]`` is carried variable ``k`` after one full iteration;
    ``before_break[k]`` its value at a ``break`` (None when the loop has no break).
    """
    site: Site
    kind: str
    names: tuple[str, ...]
    inits: tuple[Node | None, ...]
    updates: tuple[Node, ...]
    trip: int | None
    start: int = 0
    before_break: tuple[Node, ...] | None = None
    break_site: Site | None = None
    entry: int = 0
    scope: tuple = ()   # sites of the traced loops around this loop
    stop: Node | None = None   # `range(start, stop)` with `stop` from an enclosing counter (trip recorded too)


@dataclass(frozen=True, eq=False)
class LoopOut(Node):
    loop: Loop
    k: int


@dataclass(frozen=True)
class Graph:
    """The traced function: its tensor inputs and output nodes (a tuple when it returns a tuple)."""
    name: str
    inputs: tuple[Input, ...]
    outputs: tuple[Node, ...]
    tuple_output: bool
    loops: tuple[Loop, ...] = field(default=())
    branch_sites: tuple[Site, ...] = field(default=())
    guards: Any = field(default=None, compare=False)   # guards.Guards: values the trace read
    notes: tuple = field(default=(), compare=False)    # front-end decisions (loops unrolled while tracing)


def children(node: Node) -> tuple[Node, ...]:
    """Direct operands of ``node`` (loop bodies excluded: they live in the loop's own scope)."""
    if isinstance(node, Op):
        return node.args
    if isinstance(node, (Reduce,)):
        return (node.arg,)
    if isinstance(node, (View, Index, Layout)):
        return (node.base,)
    if isinstance(node, Phi):
        return (node.then, node.orelse)
    if isinstance(node, Loop):
        return tuple(n for n in node.inits if n is not None)
    if isinstance(node, LoopOut):
        return (node.loop,)
    return ()


def loop_dependencies(node: Node, memo: dict) -> frozenset:
    """Sites of the loops whose iteration ``node``'s value depends on (or sits inside).

    Iterative (operands first), so that a long chain of nodes reaches no recursion limit."""
    stack = [(node, False)]
    while stack:
        current, expanded = stack.pop()
        key = id(current)
        if not expanded:
            if key in memo:
                continue
            memo[key] = None  # in progress (graphs are acyclic)
            stack.append((current, True))
            stack.extend((n, False) for n in _dependency_operands(current) if id(n) not in memo)
            continue
        memo[key] = _own_dependencies(current, memo)
    return memo[id(node)]


def _dependency_operands(node: Node) -> tuple:
    if isinstance(node, (Carried, LoopIndex)):
        return ()
    if isinstance(node, Phi):
        return (node.then, node.orelse)
    if isinstance(node, Loop):
        return tuple(body_nodes(node)) + tuple(n for n in node.inits if n is not None)
    return children(node)


def _own_dependencies(node: Node, memo: dict) -> frozenset:
    """``node``'s dependencies from its operands' (already in ``memo``)."""
    def of(n):
        return memo.get(id(n)) or frozenset()

    if isinstance(node, (Carried, LoopIndex)):
        return frozenset([node.site])
    if isinstance(node, Index):
        return frozenset([node.site]) | of(node.base)
    if isinstance(node, Phi):
        return frozenset(node.scope) | of(node.then) | of(node.orelse)
    if isinstance(node, Loop):
        inner = frozenset()
        for n in body_nodes(node):
            inner |= of(n)
        result = frozenset(node.scope) | (inner - {node.site})
        for n in node.inits:
            if n is not None:
                result |= of(n)
        return result
    result = frozenset()
    for n in children(node):
        result |= of(n)
    return result


def body_nodes(loop: Loop) -> tuple[Node, ...]:
    """Roots of a loop body: the updates and (if any) the values at the break."""
    return tuple(loop.updates) + tuple(loop.before_break or ())


def walk_body(loop: Loop):
    """Each node reachable from ``loop``'s body roots through `children`, once, depth first."""
    seen: set = set()
    stack = list(body_nodes(loop))
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        yield node
        stack.extend(children(node))


def describe(node: Node) -> str:
    """A short one-line description of a node, for ``explain``."""
    if isinstance(node, Input):
        return f"input {node.name}{list(node.shape)}"
    if isinstance(node, Const):
        return repr(node.value)
    if isinstance(node, Iota):
        return f"iota({node.shape[0]})"
    if isinstance(node, Op):
        return node.op
    if isinstance(node, Layout):
        return f"{node.kind} to {list(node.shape)}"
    if isinstance(node, Loop):
        trip = node.trip if node.trip is not None else "recorded"
        return f"{node.kind} loop at line {node.site[0]} carrying {', '.join(node.names)} (trips: {trip})"
    return type(node).__name__
