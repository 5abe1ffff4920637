"""Structural dependencies of a traced value on an input: for every element of a node of the SSA
graph, the elements of one input it can depend on, read off the graph alone (nothing is evaluated).

The result is a 0/1 sparse matrix (node elements x input elements, both in row-major order) that
holds every nonzero of the node's Jacobian with respect to the input, at every point where the
graph is the traced function: i.e. while the plan's guards hold (a guard miss means another
graph, whose dependencies must be worked out again). It is a superset, never a subset: operands
of an operation contribute whether or not the derivative happens to vanish (`x * 0`), both arms
of a traced `if` contribute whichever the decision, and only operations whose derivative is zero
everywhere (comparisons, and the condition of `where`) contribute nothing.

Rules are data: `NODE_RULES` maps each node type to how its rows arise from its operands' rows,
`OP_RULES` each elementwise operation to which operands its value reads differentiably. Anything
without a rule (loops, loop counters, an operation added to the front end later) makes the whole
answer `None` ("unknown"): callers then keep their own check. An intermediate larger than
`max_entries` gives None too (a reduction broadcast back over a long vector is dense).

Example:
    >>> import numpy as np
    >>> from sparsad.coarsen import ssa
    >>> x = ssa.Input((4,), "x", 0)
    >>> y = ssa.Op((3,), "mul", (ssa.View((3,), x, slice(1, None)), ssa.View((3,), x, slice(None, -1))))
    >>> dependencies(y, x).toarray().astype(int)
    array([[1, 1, 0, 0],
           [0, 1, 1, 0],
           [0, 0, 1, 1]])
    >>> dependencies(ssa.Op((4,), "gt", (x, ssa.Const((), 0.0))), x).nnz
    0
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import scipy.sparse as sp

from sparsad.coarsen import ssa

#: Largest number of (element, input element) pairs one intermediate may hold before the answer
#: becomes "unknown" (int32 indices and float32 ones: about 8 bytes each).
MAX_ENTRIES = 50_000_000


class _Unknown(Exception):
    """A node without a rule, or an intermediate past `max_entries`."""


_ALL = "all"          # the value reads every operand differentiably
_BRANCHES = "branches"  # where(condition, a, b): a and b (the condition is piecewise constant)
_NONE = "none"        # piecewise constant (comparisons): a zero derivative everywhere

#: Elementwise operations of the front end (`frontend.values.UNARY`, `BINARY`, `where`, the
#: comparisons) -> which operands their value depends on differentiably.
OP_RULES: dict[str, str] = {
    **dict.fromkeys(("exp", "log", "sin", "cos", "tan", "tanh", "sqrt", "abs", "sigmoid", "softplus", "relu",
                     "log1p", "expm1", "square", "neg", "sinh", "cosh", "asin", "acos", "atan", "erf", "sign",
                     "lgamma", "digamma", "log2", "log10", "exp2", "rsqrt", "reciprocal", "asinh", "acosh",
                     "atanh"), _ALL),
    **dict.fromkeys(("add", "sub", "mul", "div", "pow", "maximum", "minimum", "atan2"), _ALL),
    "where": _BRANCHES,
    **dict.fromkeys(("gt", "ge", "lt", "le", "eq", "ne"), _NONE),
}


def _size(shape: tuple) -> int:
    return int(np.prod(shape, dtype=np.int64))


def _positions(shape: tuple) -> np.ndarray:
    return np.arange(_size(shape), dtype=np.int64).reshape(shape)


class _Deps:
    """The running analysis: rows per node (memoised by identity), the input, the size bound."""

    def __init__(self, wrt: ssa.Input, max_entries: int):
        self.wrt = wrt
        self.columns = _size(wrt.shape)
        self.max_entries = max_entries
        self.memo: dict[int, sp.csr_array] = {}

    def empty(self, shape: tuple) -> sp.csr_array:
        return sp.csr_array((_size(shape), self.columns), dtype=np.float32)

    def select(self, source: sp.csr_array, targets: np.ndarray, sources: np.ndarray, rows: int) -> sp.csr_array:
        """Rows `targets` of a (rows x columns) result are rows `sources` of `source` (other rows empty)."""
        counts = np.diff(source.indptr)
        if int(counts[sources].sum()) > self.max_entries:
            raise _Unknown("too many entries")
        selection = sp.csr_array((np.ones(targets.size, dtype=np.float32), (targets, sources)),
                                 shape=(rows, source.shape[0]))
        return selection @ source

    def broadcast(self, operand: ssa.Node, shape: tuple) -> sp.csr_array:
        """The operand's rows, broadcast to `shape` (its elements as elementwise operations read them)."""
        rows = self.memo[id(operand)]
        if tuple(operand.shape) == tuple(shape):
            return rows
        try:
            sources = np.broadcast_to(_positions(tuple(operand.shape)), shape).ravel()
        except ValueError:
            raise _Unknown(f"shape {operand.shape} does not broadcast to {shape}") from None
        return self.select(rows, np.arange(sources.size), sources, sources.size)

    def union(self, parts: list, shape: tuple) -> sp.csr_array:
        if not parts:
            return self.empty(shape)
        total = parts[0]
        for part in parts[1:]:
            if total.nnz + part.nnz > self.max_entries:
                raise _Unknown("too many entries")
            total = total + part  # (ones add up: no entry cancels)
        return total


def _input(node: ssa.Input, deps: _Deps) -> sp.csr_array:
    if node is not deps.wrt:
        return deps.empty(node.shape)  # another argument: a constant with respect to `wrt`
    size = _size(node.shape)
    return sp.csr_array((np.ones(size, dtype=np.float32), np.arange(size), np.arange(size + 1)), shape=(size, size))


def _constant(node: ssa.Node, deps: _Deps) -> sp.csr_array:
    return deps.empty(node.shape)


def _op(node: ssa.Op, deps: _Deps) -> sp.csr_array:
    rule = OP_RULES.get(node.op)
    if rule is None:
        raise _Unknown(f"operation {node.op!r}")
    if rule == _ALL:
        read = node.args
    elif rule == _BRANCHES:
        if len(node.args) != 3:
            raise _Unknown("where() without three operands")
        read = node.args[1:]
    else:
        read = ()
    return deps.union([deps.broadcast(a, node.shape) for a in read], node.shape)


def _reduce(node: ssa.Reduce, deps: _Deps) -> sp.csr_array:
    rows = deps.memo[id(node.arg)]
    size = rows.shape[0]
    return deps.select(rows, np.zeros(size, dtype=np.int64), np.arange(size), 1)


def _view(node: ssa.View, deps: _Deps) -> sp.csr_array:
    try:
        sources = np.asarray(_positions(tuple(node.base.shape))[node.key])
    except (IndexError, TypeError, ValueError):
        raise _Unknown(f"view key {node.key!r}") from None
    if sources.shape != tuple(node.shape):
        raise _Unknown(f"view key {node.key!r} gives shape {sources.shape}, not {node.shape}")
    sources = sources.ravel()
    return deps.select(deps.memo[id(node.base)], np.arange(sources.size), sources, sources.size)


def _layout(node: ssa.Layout, deps: _Deps) -> sp.csr_array:
    rows = deps.memo[id(node.base)]
    if node.kind == "reshape":
        if _size(node.shape) != rows.shape[0]:
            raise _Unknown("a reshape that changes the number of elements")
        return rows  # (row-major order kept: element k stays element k)
    if node.kind == "pad":
        try:
            targets = np.asarray(_positions(tuple(node.shape))[node.key])
        except (IndexError, TypeError, ValueError):
            raise _Unknown(f"pad key {node.key!r}") from None
        if targets.shape != tuple(node.base.shape):
            raise _Unknown(f"pad key {node.key!r} does not fit the padded tensor")
        return deps.select(rows, targets.ravel(), np.arange(targets.size), _size(node.shape))
    raise _Unknown(f"layout {node.kind!r}")


def _phi(node: ssa.Phi, deps: _Deps) -> sp.csr_array:
    # either arm, whatever the recorded decision (the predicate itself is piecewise constant)
    return deps.union([deps.broadcast(node.then, node.shape), deps.broadcast(node.orelse, node.shape)], node.shape)


#: Node type -> rule; operands are analysed first (`OPERANDS`). Loops, loop-carried values, loop
#: counters and loop-indexed reads have none: a graph holding one is "unknown".
NODE_RULES: dict[type, Callable] = {
    ssa.Input: _input, ssa.Const: _constant, ssa.Iota: _constant, ssa.Op: _op, ssa.Reduce: _reduce,
    ssa.View: _view, ssa.Layout: _layout, ssa.Phi: _phi,
}

#: Node type -> the operands its rule reads.
OPERANDS: dict[type, Callable] = {
    ssa.Input: lambda node: (), ssa.Const: lambda node: (), ssa.Iota: lambda node: (),
    ssa.Op: lambda node: node.args, ssa.Reduce: lambda node: (node.arg,), ssa.View: lambda node: (node.base,),
    ssa.Layout: lambda node: (node.base,), ssa.Phi: lambda node: (node.then, node.orelse),
}


def dependencies(node: ssa.Node, wrt: ssa.Input, max_entries: int = MAX_ENTRIES) -> sp.csr_array | None:
    """(elements of `node`) x (elements of `wrt`) 0/1 CSR array holding every nonzero of d node / d wrt
    wherever the graph holds; None when some node on the way has no rule (or the answer is too large).
    Canonical (sorted, unique column indices per row)."""
    order = _operands_first(node)
    if order is None:
        return None
    uses: dict[int, int] = {}
    for current in order:
        for operand in OPERANDS[type(current)](current):
            uses[id(operand)] = uses.get(id(operand), 0) + 1
    deps = _Deps(wrt, max_entries)
    try:
        for current in order:
            rows = NODE_RULES[type(current)](current, deps)
            if rows.shape != (_size(current.shape), deps.columns):
                raise _Unknown(f"{type(current).__name__} rows of shape {rows.shape}")
            rows = sp.csr_array(rows)
            rows.sum_duplicates()
            rows.data[:] = 1.0
            deps.memo[id(current)] = rows
            for operand in OPERANDS[type(current)](current):  # (an operand read for the last time is dropped)
                uses[id(operand)] -= 1
                if not uses[id(operand)]:
                    deps.memo.pop(id(operand), None)
    except _Unknown:
        return None
    result = deps.memo[id(node)]
    result.sort_indices()
    return result


def _operands_first(node: ssa.Node) -> list | None:
    """Every node `node` reads, each once, operands before their users; None when one has no rule."""
    order, done, stack = [], set(), [(node, False)]
    while stack:  # iterative: long chains reach no recursion limit
        current, expanded = stack.pop()
        if id(current) in done:
            continue
        kind = type(current)
        if kind not in NODE_RULES:
            return None
        if expanded:
            done.add(id(current))
            order.append(current)
            continue
        stack.append((current, True))
        stack.extend((operand, False) for operand in OPERANDS[kind](current) if id(operand) not in done)
    return order
