"""Run-time recording of trip counts and branch decisions.

The function's AST is rewritten once: each ``if`` test reports its decision, each loop reports
its entries, iterations and breaks.  The rewritten function computes exactly what the original
does (same code, same tensors), so its outputs are the primal outputs; the record it leaves is
what the generated adjoint needs (trip counts for closed forms, predicates for φ).
"""
from __future__ import annotations

import ast
import copy
import threading
import types
from dataclasses import dataclass, field
from typing import Callable

from sparsad.coarsen.frontend import site_of
from sparsad.coarsen.source import build_function, function_ast

_REC = "__sparsad_record__"


@dataclass
class Record:
    """Trip counts and decisions of traced sites, keyed by ``(site, path, entry)``.

    ``path`` names the enclosing traced loop iterations as ``((site, entry, iteration), ...)``;
    ``entry`` counts executions of the statement within the same path (the tracer assigns the
    same numbers to its nodes).
    """
    loops: dict = field(default_factory=dict)
    branches: dict = field(default_factory=dict)
    _stack: list = field(default_factory=list)
    _counters: dict = field(default_factory=dict)

    def _path(self) -> tuple:
        return tuple((s, e, it) for s, e, it, _key in self._stack)

    def _next(self, site, path) -> int:
        key = (site, path)
        entry = self._counters.get(key, 0)
        self._counters[key] = entry + 1
        return entry

    def enter(self, site):
        path = self._path()
        entry = self._next(site, path)
        self.loops[(site, path, entry)] = [0, False]
        self._stack.append([site, entry, -1, (site, path, entry)])

    def step(self, site):
        frame = self._stack[-1]
        frame[2] += 1
        self.loops[frame[3]][0] += 1

    def steps(self, site, n: int):
        """``n`` iterations at once (what ``n`` calls of ``step`` record)."""
        frame = self._stack[-1]
        frame[2] += n
        self.loops[frame[3]][0] += n

    def brk(self, site):
        self.loops[self._stack[-1][3]][1] = True

    def leave(self, site):
        self._stack.pop()

    def branch(self, site, test):
        decision = bool(test)
        path = self._path()
        self.branches[(site, path, self._next(site, path))] = decision
        return decision

    def completed(self, site, path=(), entry: int = 0) -> tuple[int, bool]:
        """Full iterations of one entry of the loop at ``site``, and whether it left by ``break``."""
        started, broke = self.loops[(site, path, entry)]
        return started - int(broke), broke

    def decision(self, site, path=(), entry: int = 0) -> bool:
        """The recorded decision (False when that ``if`` did not run on this path)."""
        return self.branches.get((site, path, entry), False)


def _call(method: str, *args: ast.expr) -> ast.expr:
    return ast.Call(func=ast.Attribute(value=ast.Name(_REC, ast.Load()), attr=method, ctx=ast.Load()),
                    args=list(args), keywords=[])


def _site_expr(site) -> ast.expr:
    return ast.Tuple([ast.Constant(site[0]), ast.Constant(site[1])], ast.Load())


class _Instrument(ast.NodeTransformer):
    def __init__(self, sites):
        self.sites = set(sites)
        self.loop_stack: list = []

    def visit_If(self, node: ast.If):
        self.generic_visit(node)
        if site_of(node) in self.sites:
            node.test = _call("branch", _site_expr(site_of(node)), node.test)
        return node

    def _loop(self, node):
        site = site_of(node)
        self.loop_stack.append(site if site in self.sites else None)
        self.generic_visit(node)
        self.loop_stack.pop()
        if site not in self.sites:
            return node
        node.body.insert(0, ast.Expr(_call("step", _site_expr(site))))
        return [ast.Expr(_call("enter", _site_expr(site))), node, ast.Expr(_call("leave", _site_expr(site)))]

    visit_For = _loop
    visit_While = _loop

    def visit_Break(self, node):
        if not self.loop_stack or self.loop_stack[-1] is None:
            return node
        return [ast.Expr(_call("brk", _site_expr(self.loop_stack[-1]))), node]

    def visit_FunctionDef(self, node):
        if self.loop_stack:
            return node
        node.decorator_list = []
        self.generic_visit(node)
        return node


class _Recorder:
    """What the rewritten function calls: the record of the call running in *this* thread (calls in
    other threads, and calls nested in this one, each keep their own record)."""

    def __init__(self):
        self.local = threading.local()

    def enter(self, site):
        self.local.record.enter(site)

    def step(self, site):
        self.local.record.step(site)

    def brk(self, site):
        self.local.record.brk(site)

    def leave(self, site):
        self.local.record.leave(site)

    def branch(self, site, test):
        return self.local.record.branch(site, test)


def instrument(fn: Callable, sites) -> Callable[..., tuple[object, Record]]:
    """``fn`` rewritten to return ``(outputs, record)``, recording the traced ``sites``."""
    fdef, _ = function_ast(fn)
    fdef = _Instrument(sites).visit(copy.deepcopy(fdef))
    recorder = _Recorder()
    holder = types.CellType(recorder)  # (the rewritten function reads live globals/closure, and this cell)
    rewritten = build_function(fn, fdef, {_REC: holder})
    local = recorder.local

    def run(*args):
        record, outer = Record(), getattr(local, "record", None)
        local.record = record
        try:
            return rewritten(*args), record
        finally:
            local.record = outer

    return run
