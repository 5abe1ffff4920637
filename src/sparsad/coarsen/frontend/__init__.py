"""AST front end: a Python function on tensors becomes an SSA graph (``ssa.Graph``).

The function's source is walked once per call signature (argument shapes, dtypes and the values
of non-tensor arguments).  Python values known while tracing (ints, floats, shapes, ``len``) are
computed on the spot; tensor values become SSA nodes.  ``if`` on a tensor keeps both arms and
merges them with ``Phi``; ``for``/``while`` whose body touches tensors become ``Loop`` nodes whose
trip counts and decisions are recorded when the primal runs (see ``record.py``).  Python ints
that change inside a loop (``k += 1``) are *dynamic*: they may steer control flow but may not
enter tensor arithmetic.

Anything outside this subset raises ``CoarsenUnsupported``; callers fall back to autograd.

The tracer is split by what it translates: ``expressions``, ``calls`` (functions, methods, inlining of
user helpers), ``containers`` (tensors assembled from pieces, lists), ``statements`` and ``loops``;
``values`` holds the values they trace with and the shared tables.
"""
from __future__ import annotations

import ast
from typing import Any, Callable

from sparsad.coarsen import ssa
from sparsad.coarsen.frontend.calls import CallsMixin, guard_defaults
from sparsad.coarsen.frontend.containers import ContainersMixin
from sparsad.coarsen.frontend.expressions import ExpressionsMixin
from sparsad.coarsen.frontend.layouts import LayoutsMixin
from sparsad.coarsen.frontend.loops import LoopsMixin
from sparsad.coarsen.frontend.statements import StatementsMixin
from sparsad.coarsen.frontend.values import (  # noqa: F401  (re-exported: used by record, numba_primal, tests)
    DYNAMIC,
    DynamicInTensorMath,
    _Return,
    _Stacked,
    _tensor_function_name,
    _tensor_shape,
    _walk_own_scope,
    site_of,
)
from sparsad.coarsen.source import CoarsenUnsupported, function_ast  # noqa: F401  (re-exported)


class Tracer(ExpressionsMixin, CallsMixin, ContainersMixin, LayoutsMixin, StatementsMixin, LoopsMixin):
    """Walks a function body, building SSA nodes.  ``trace`` is the entry point."""

    def __init__(self, fn: Callable, dtype=None, device=None):
        from sparsad.coarsen.guards import Guards

        self.fn = fn
        self.fn_stack: list[Callable] = [fn]   # the function whose names are being read (helpers inlined)
        self.guards = Guards()
        self.dtype, self.device = dtype, device
        self.line = getattr(getattr(fn, "__code__", None), "co_firstlineno", 0)
        self.inlining = 0   # > 0 while tracing the body of an inlined helper
        self.loops: list[ssa.Loop] = []
        self.branch_sites: list[ssa.Site] = []
        self.loop_stack: list = []
        self.scopes: list[dict] = [{}]  # per traced-loop body: executions of each site so far
        self.frames: list[int] = [0]     # ids of the function bodies being traced (innermost last)
        self.frame_derived: list[bool] = [False]  # whether a frame's names come from the frame below (local defs)
        self.frame_locals: list[frozenset] = [frozenset()]  # local names of each inlined body
        self.next_frame = 1
        self.notes: list[str] = []              # decisions worth explaining (see ``explain``)
        self.compiled_loops = True             # whether loops without closed form can become compiled loops
        self.short_loops: dict = {}             # site -> whether the traced `for` may be unrolled while tracing
        self.stops: dict = {}                   # site -> traced stop of `range(start, i)`, i an enclosing counter
        self.masked: dict = {}                  # site -> range of a long loop whose writes/reads at the counter
                                                 # are whole-vector selects (see containers.masked_write)
        self.own_lists: dict[int, tuple] = {}   # id -> (list, traced-loop depth at its creation): lists made here
        self.narrow: dict[int, str] = {}         # id -> dtype of constant tensors made with another dtype
        self.const_views: dict[int, tuple] = {}  # id -> (constant, the constant it was indexed from)
        self.in_place_updates = True             # `t += v` updates t in place (torch); JAX arrays rebind
        self.origins: dict[int, tuple] = {}      # id of a Carried node -> (it, value before the loop, env there)

    def entry(self, site) -> int:
        counts = self.scopes[-1]
        counts[site] = counts.get(site, 0) + 1
        return counts[site] - 1

    def scoped_run(self, stmts, env):
        self.scopes.append({})
        try:
            return self.run(stmts, env)
        finally:
            self.scopes.pop()


def trace(fn: Callable, args: tuple) -> ssa.Graph:
    """Trace ``fn`` applied to ``args`` (tensors become inputs; other values are static)."""
    fdef, _ = function_ast(fn)
    params = fdef.args
    if params.vararg or params.kwarg or params.kwonlyargs:
        raise CoarsenUnsupported(f"{fn.__name__}: *args, **kwargs and keyword-only parameters are not supported")
    names = [a.arg for a in params.args]
    if len(args) > len(names):
        raise CoarsenUnsupported(f"{fn.__name__}: too many arguments")
    defaults = list(fn.__defaults__ or ())
    full = list(args) + defaults[len(defaults) - (len(names) - len(args)):] if len(args) < len(names) else list(args)
    if len(full) != len(names):
        raise CoarsenUnsupported(f"{fn.__name__}: missing arguments")
    tensors = [v for v in full if _tensor_shape(v) is not None]
    first = tensors[0] if tensors else None
    torch_first = first is not None and type(first).__module__.startswith("torch")
    tracer = Tracer(fn, getattr(first, "dtype", None), first.device if torch_first else None)
    tracer.compiled_loops = first is None or torch_first  # (loops compiled as loops: torch and Numba only)
    tracer.in_place_updates = first is None or torch_first
    guard_defaults(tracer.guards, fn, fn.__code__.co_firstlineno)
    env: dict[str, Any] = {}
    inputs = []
    for position, (name, value) in enumerate(zip(names, full)):
        shape = _tensor_shape(value)
        if shape is None:
            env[name] = value
        elif 0 in shape:
            raise CoarsenUnsupported(f"{fn.__name__}: argument {name!r} is an empty tensor (shape {list(shape)})")
        else:
            node = ssa.Input(shape, name, position)
            inputs.append(node)
            env[name] = node
    try:
        tracer.run(fdef.body, env)
    except _Return as ret:
        value = ret.value
    else:
        raise CoarsenUnsupported(f"{fn.__name__}: no return statement at the top level")
    _check_returns(fdef)
    tuple_output = isinstance(value, tuple)
    outs = value if tuple_output else (value,)
    outs = tuple(tracer.const(o) if isinstance(o, _Stacked) else o for o in outs)
    if not all(isinstance(o, ssa.Node) for o in outs):
        raise CoarsenUnsupported(f"{fn.__name__}: every returned value must be a traced tensor")
    return ssa.Graph(fn.__name__, tuple(inputs), tuple(outs), tuple_output, tuple(tracer.loops),
                     tuple(tracer.branch_sites), tracer.guards, tuple(tracer.notes))


def _check_returns(fdef: ast.FunctionDef) -> None:
    body = fdef.body
    for stmt in body[:-1]:
        for sub in _walk_own_scope(stmt):
            if isinstance(sub, ast.Return):
                raise CoarsenUnsupported(f"line {sub.lineno}: return before the end of the function")

