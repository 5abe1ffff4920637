"""Tracer part: `for`/`while` loops, iteration over rows of traced tensors (`zip`/`enumerate`/`reversed`),
and the loop-counter index forms."""
from __future__ import annotations

import ast
import builtins
import copy
from typing import Callable

import numpy as np

from sparsad.coarsen import ssa
from sparsad.coarsen.source import CoarsenUnsupported
from sparsad.coarsen.frontend.values import (
    _aliased,
    _Stacked,
    DYNAMIC,
    DynamicInTensorMath,
    _NeedsStaticLoop,
    _Detached,
    _traced,
    STATIC_UNROLL,
    site_of,
    _broadcast,
    _assigned_names,
    _affine_in_counter,
    _holds_node,
    _walk_own_scope,
)


class LoopsMixin:
    """Methods of ``Tracer`` (see ``frontend/__init__.py``) for loops."""

    def st_For(self, node, env):
        if node.orelse:
            raise CoarsenUnsupported(f"line {node.lineno}: for-else")
        node = _without_continue(node)
        rows = self.row_sequence(node.iter, env, site_of(node))
        if isinstance(rows, _RowSequence):
            done = self.row_loop(node, env, rows)
            if done is not None:
                return done
            iterable = rows.unrolled(self, node)
        else:
            iterable = rows
        if isinstance(iterable, _TracedRange):
            if not isinstance(node.target, ast.Name):
                raise CoarsenUnsupported(f"line {node.lineno}: only `for name in range(...)` loops are traced")
            index = ssa.LoopIndex((), site_of(node), iterable.start)
            self.stops[site_of(node)] = iterable.stop
            return self._loop(node, env, "for", None, iterable.start, {node.target.id: index})
        if _traced(iterable):
            iterable = self.rows(iterable, node)
        if iterable is DYNAMIC:
            raise CoarsenUnsupported(f"line {node.lineno}: iterating over a value that changes inside a loop")
        if not isinstance(iterable, range):
            env = dict(env)
            for item in iterable:  # a static collection: unroll while tracing
                self.bind(node.target, item, env)
                env = self.run(node.body, env)
            return env
        if len(iterable) == 0:
            return env  # the body never runs (and its target stays unbound)
        if iterable.step != 1 or not isinstance(node.target, ast.Name):
            if len(iterable) > STATIC_UNROLL:
                raise CoarsenUnsupported(f"line {node.lineno}: a `for` over {iterable} with more than {STATIC_UNROLL} "
                                         "iterations (only unit steps become traced loops)")
            env = dict(env)
            for item in iterable:  # short: unroll while tracing
                self.bind(node.target, item, env)
                env = self.run(node.body, env)
            return env
        if not self._touches_tensors(node.body, {**env, node.target.id: DYNAMIC}):
            env = dict(env)
            for i in iterable:
                env[node.target.id] = i
                env = self.run(node.body, env)
            return env
        index = ssa.LoopIndex((), site_of(node), iterable.start)
        saved = (len(self.loops), len(self.branch_sites), dict(self.scopes[-1]))
        self.short_loops[site_of(node)] = len(iterable) <= STATIC_UNROLL
        try:
            return self._loop(node, env, "for", len(iterable), iterable.start, {node.target.id: index})
        except _NeedsStaticLoop as caught:
            why = caught
            if site_of(node) not in why.sites:
                raise
            if len(iterable) > STATIC_UNROLL:
                return self.masked_loop(node, env, iterable, index, saved, why)
        # the counter is needed as a Python int: a short loop is unrolled while tracing
        note = (f"loop at line {node.lineno}: unrolled while tracing ({len(iterable)} iterations): "
                f"{str(why).split(': ', 1)[-1]}")
        if note not in self.notes:
            self.notes.append(note)
        del self.loops[saved[0]:]
        del self.branch_sites[saved[1]:]
        self.scopes[-1] = saved[2]
        env = dict(env)
        for i in iterable:
            env[node.target.id] = i
            env = self.run(node.body, env)
        return env

    def masked_loop(self, node, env, iterable: range, index, saved, why):
        """A long loop that writes (or reads back) a vector at its counter (``x[i] = v``, ``x[i - 1]``):
        traced again with those accesses as whole-vector selects on the counter, so it stays one traced
        loop (compiled as a loop when it has no closed form) whatever its trip count."""
        site = site_of(node)
        del self.loops[saved[0]:]
        del self.branch_sites[saved[1]:]
        self.scopes[-1] = dict(saved[2])
        self.masked[site] = iterable
        try:
            node, env, buffers = self.appends_as_writes(node, env, len(iterable), iterable.start)
            out = self._loop(node, env, "for", len(iterable), iterable.start, {node.target.id: index})
            for name in buffers:  # the grown list: the rows of the buffer the loop filled
                vector = out[name]
                out[name] = self.new_list([ssa.View((), vector, k) for k in range(vector.shape[0])])
            return out
        except _NeedsStaticLoop as again:
            raise CoarsenUnsupported(f"{why} (the loop at line {node.lineno} would be unrolled while tracing, "
                                     f"but it has {len(iterable)} iterations, more than {STATIC_UNROLL}; "
                                     f"{str(again).split(': ', 1)[-1]})") from None
        finally:
            del self.masked[site]

    def appends_as_writes(self, node: ast.For, env: dict, trips: int, start: int):
        """``xs.append(v)`` once per iteration (a statement of the body itself) into a list this function
        made, not otherwise used in the body: the list becomes a buffer preallocated for the items it
        has plus one per iteration, and the append a write at the counter (``xs[i + c] = v``).
        Returns the rewritten loop, the environment with the buffers and their names."""
        names = []
        for stmt in node.body:
            call = stmt.value if isinstance(stmt, ast.Expr) else None
            if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "append"
                    and isinstance(call.func.value, ast.Name) and len(call.args) == 1 and not call.keywords):
                names.append(call.func.value.id)
        buffers = []
        for name in dict.fromkeys(names):
            current = env.get(name)
            owned = self.own_lists.get(id(current))
            uses = sum(isinstance(sub, ast.Name) and sub.id == name for stmt in node.body for sub in ast.walk(stmt))
            if (names.count(name) != 1 or uses != 1 or not isinstance(current, list) or owned is None
                    or owned[0] is not current or _aliased(current, name, env)
                    or any(_traced(v) and v.shape != () for v in current)):
                continue
            buffers.append(name)
        if not buffers:
            return node, env, []
        node = copy.deepcopy(node)
        env = dict(env)
        body = []
        for stmt in node.body:
            call = stmt.value if isinstance(stmt, ast.Expr) else None
            name = call.func.value.id if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) else None
            if name in buffers and call.func.attr == "append":
                shift = len(env[name]) - start
                position = ast.BinOp(ast.Name(node.target.id, ast.Load()), ast.Add(), ast.Constant(shift))
                target = ast.Subscript(ast.Name(name, ast.Load()), position, ast.Store())
                stmt = ast.copy_location(ast.Assign([target], call.args[0]), stmt)
                ast.fix_missing_locations(stmt)
            body.append(stmt)
        node.body = body
        for name in buffers:
            items = list(env[name]) + [0.0] * trips
            env[name] = self.materialize(_Stacked(items)) if any(_traced(v) for v in items) else \
                ssa.Const((len(items),), 0.0)
        return node, env, buffers

    def row_sequence(self, expr: ast.expr, env: dict, site: ssa.Site):
        """What a ``for`` at ``site`` iterates over: a ``_RowSequence`` when it walks the rows of traced
        tensors (``x``, ``zip(xs, ys)``, ``enumerate(x)``, ``reversed(x)``, with ranges beside them),
        else the evaluated iterable."""
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.args and \
                not any(isinstance(a, ast.Starred) for a in expr.args) and all(k.arg for k in expr.keywords):
            func = self.ev(expr.func, env)
            if func in (builtins.zip, builtins.enumerate, builtins.reversed):
                args = [self.row_sequence(a, env, site) for a in expr.args]
                kwargs = {k.arg: self.ev(k.value, env) for k in expr.keywords}
                combined = _RowSequence.combine(func, args, kwargs, self)
                if combined is not None:
                    return combined
                args = [a.unrolled(self, expr) if isinstance(a, _RowSequence) else a for a in args]
                values = args + list(kwargs.values())
                if any(_traced(a) or _holds_node(a) for a in values):
                    return self.call_builtin(func, args, kwargs, expr)
                if any(a is DYNAMIC for a in values):
                    return DYNAMIC
                try:
                    return func(*args, **kwargs)
                except Exception as exc:
                    raise CoarsenUnsupported(f"line {expr.lineno}: {func.__name__}() failed while tracing: {exc}") \
                        from exc
        value = self.ev(expr, env)
        if isinstance(value, ssa.Node) and value.shape and not isinstance(value, ssa.Const):
            return _RowSequence.of_tensor(value, site)
        return value

    def row_loop(self, node: ast.For, env: dict, rows: "_RowSequence"):
        """A ``for`` over the rows of traced tensors as a traced loop (its trip count is the number of
        rows), so that nothing grows with it; None when the body needs the rows as separate values
        (then it is unrolled while tracing, if short)."""
        if rows.length == 0:
            return env
        if not rows.has_tensor:
            return None
        if (rows.matrix_rows or not self.compiled_loops) and rows.length <= STATIC_UNROLL:
            return None  # compiled loops index only vectors by the counter, and exist for torch only
        site = site_of(node)
        counter = ssa.LoopIndex((), site, 0)
        extra: dict = {}
        try:
            self.bind(node.target, rows.at(self, counter), extra)
        except CoarsenUnsupported:
            return None
        saved = (len(self.loops), len(self.branch_sites), dict(self.scopes[-1]), len(self.notes))
        self.short_loops[site] = rows.length <= STATIC_UNROLL
        try:
            return self._loop(node, env, "for", rows.length, 0, extra)
        except CoarsenUnsupported as why:
            if rows.length > STATIC_UNROLL:
                raise
            note = (f"loop at line {node.lineno}: unrolled while tracing ({rows.length} rows): "
                    f"{str(why).split(': ', 1)[-1]}")
        del self.loops[saved[0]:]
        del self.branch_sites[saved[1]:]
        self.scopes[-1] = saved[2]
        del self.notes[saved[3]:]
        if note not in self.notes:
            self.notes.append(note)
        return None

    def st_While(self, node, env):
        if node.orelse:
            raise CoarsenUnsupported(f"line {node.lineno}: while-else")
        node = _without_continue(node)
        return self._loop(node, env, "while", None, 0, {})

    def _touches_tensors(self, body, env) -> bool:
        try:
            probe = self.scoped_run(body, {k: (DYNAMIC if not _traced(v) and k in _assigned_names(body) else v)
                                    for k, v in env.items()})
        except CoarsenUnsupported:
            return True
        return any(_traced(v) for k, v in probe.items() if k in _assigned_names(body))

    def _loop(self, node, env, kind, trip, start, extra):
        if self.inlining:
            raise CoarsenUnsupported(f"line {node.lineno}: a loop over traced values inside helper "
                                     f"{self.fn_stack[-1].__name__}() (write the loop in the decorated function)")
        promoted: list[str] = []
        while True:
            try:
                return self._loop_once(node, env, kind, trip, start, extra, promoted)
            except DynamicInTensorMath as why:
                # state initialised from a Python number (`s = 0.0`) that meets tensors inside the loop:
                # carry it as a traced scalar from its initial value
                assigned = _assigned_names(list(node.body))
                fresh = [n for n in why.names if n in assigned and n not in promoted and n not in extra
                         and isinstance(env.get(n), (bool, int, float, np.floating, np.integer))]
                if not fresh:
                    raise
                promoted.extend(fresh)

    def _loop_once(self, node, env, kind, trip, start, extra, promoted):
        site = site_of(node)
        body = list(node.body)
        pre, post, break_site = body, [], None
        for pos, stmt in enumerate(body):
            if isinstance(stmt, ast.If) and stmt.body and isinstance(stmt.body[0], ast.Break):
                if len(stmt.body) != 1:
                    raise CoarsenUnsupported(f"line {stmt.lineno}: statements before `break` inside its `if`")
                pre, post, break_site = body[:pos], list(stmt.orelse) + body[pos + 1:], site_of(stmt)
                break_test = stmt.test
                break
        for stmt in pre + post:
            for sub in _walk_own_scope(stmt):
                if isinstance(sub, (ast.Break, ast.Continue, ast.Return)):
                    if isinstance(sub, ast.Return) or not _inside_inner_loop(stmt, sub):
                        raise CoarsenUnsupported(f"line {sub.lineno}: {type(sub).__name__.lower()} in a traced loop "
                                                 "(only `if ...: break` at the top level of the body is supported)")
        assigned = [n for n in _assigned_names(body) if n not in extra]
        env = {**env, **{n: self.const(env[n]) for n in promoted}}
        node_vars = [n for n in assigned if _traced(env.get(n))]
        shapes = {n: env[n].shape for n in node_vars}
        for _attempt in range(4):
            carried = {n: ssa.Carried(shapes[n], site, k) for k, n in enumerate(node_vars)}
            for n, c in carried.items():
                self.origins[id(c)] = (c, env.get(n), env)
            inner = dict(env)
            for n in assigned:
                if n not in carried:
                    inner[n] = DYNAMIC if n in env else inner.get(n, None)
                    if inner[n] is None:
                        inner.pop(n)
            inner.update(carried)
            inner.update(extra)
            self.scopes.append({})
            self.loop_stack.append(site)
            try:
                after_pre = self.run(pre, inner)
                if break_site is not None:
                    test = self.ev(break_test, after_pre)
                    if isinstance(test, _Detached):
                        test = self.op("ne", test, 0.0)
                    if not _traced(test) and test is not DYNAMIC:
                        raise CoarsenUnsupported(f"line {break_site[0]}: `break` on a static condition")
                after = self.run(post, after_pre)
            finally:
                self.scopes.pop()
                self.loop_stack.pop()
            promote = [n for n in assigned if n not in carried and _traced(after.get(n))]
            reshape = [n for n in node_vars if after[n].shape != shapes[n]]
            if not promote and not reshape:
                break
            for n in promote:
                node_vars.append(n)
                shapes[n] = after[n].shape
            for n in reshape:
                shapes[n] = _broadcast(shapes[n], after[n].shape)
        else:
            raise CoarsenUnsupported(f"line {node.lineno}: loop-carried shapes do not settle")
        inits = []
        for n in node_vars:
            value = env.get(n)
            if value is None or value is DYNAMIC:
                inits.append(None)
            else:
                inits.append(self.const(value))
        updates = tuple(self.const(after[n]) for n in node_vars)
        before = tuple(self.const(after_pre[n]) if n in after_pre else inits[k]
                       for k, n in enumerate(node_vars)) if break_site else None
        if before is not None and any(b is None for b in before):
            raise CoarsenUnsupported(f"line {node.lineno}: a variable first defined after the break is used")
        loop = ssa.Loop((), site, kind, tuple(node_vars), tuple(inits), updates, trip, start, before, break_site,
                        self.entry(site), tuple(self.loop_stack), self.stops.get(site) if trip is None else None)
        self.loops.append(loop)
        out = dict(env)
        for k, n in enumerate(node_vars):
            out[n] = ssa.LoopOut(shapes[n], loop, k)
        for n in assigned:
            if n not in carried and n in env:
                out[n] = DYNAMIC
        for n, v in extra.items():
            out[n] = DYNAMIC
        return out


class _RowSequence:
    """What a ``for`` walks when it iterates over the rows of traced tensors: ``length`` items, item
    ``c`` (``c`` a counter expression) made by ``at``.  ``zip``/``enumerate``/``reversed`` compose."""

    def __init__(self, length: int, at: Callable, has_tensor: bool, unrolled: Callable, matrix_rows: bool = False):
        self.length, self._at, self.has_tensor, self._unrolled = length, at, has_tensor, unrolled
        self.matrix_rows = matrix_rows  # rows that are vectors (compiled loops take only scalars by the counter)

    def at(self, tracer: "Tracer", counter):
        return self._at(tracer, counter)

    def unrolled(self, tracer: "Tracer", node):
        """The items as Python values (the iteration unrolled while tracing)."""
        return self._unrolled(tracer, node)

    @staticmethod
    def of_tensor(value: ssa.Node, site: ssa.Site) -> "_RowSequence":
        def at(tracer, counter):
            affine = _affine_in_counter(counter)
            if affine is None or affine[0] is None:
                raise CoarsenUnsupported("a row taken at a position that is not affine in the loop counter")
            _, stride, offset = affine
            return ssa.Index(value.shape[1:], value, site, offset, stride)

        return _RowSequence(value.shape[0], at, True, lambda tracer, node: tracer.rows(value, node),
                            len(value.shape) > 1)

    @staticmethod
    def of_range(r: range) -> "_RowSequence":
        def at(tracer, counter):
            scaled = counter if r.step == 1 else tracer.op("mul", counter, r.step)
            return scaled if r.start == 0 else tracer.op("add", scaled, r.start)

        return _RowSequence(len(r), at, False, lambda tracer, node: r)

    @staticmethod
    def combine(func, args: list, kwargs: dict, tracer: "Tracer") -> "_RowSequence | None":
        """``zip``/``enumerate``/``reversed`` of row sequences and ranges (None for other arguments)."""
        if func is builtins.enumerate and len(args) == 2 and "start" not in kwargs:
            args, kwargs = args[:1], {"start": args[1]}
        seqs = [_RowSequence.of_range(a) if isinstance(a, range) else a for a in args]
        if not seqs or not all(isinstance(a, _RowSequence) for a in seqs):
            return None
        has_tensor = any(a.has_tensor for a in seqs)
        matrix_rows = any(a.matrix_rows for a in seqs)
        if func is builtins.reversed and len(seqs) == 1 and not kwargs:
            seq = seqs[0]
            last = seq.length - 1
            return _RowSequence(seq.length, lambda t, c: seq.at(t, t.op("sub", last, c)), has_tensor,
                                lambda t, node: tuple(reversed(tuple(seq.unrolled(t, node)))), matrix_rows)
        if func is builtins.enumerate and len(seqs) == 1 and set(kwargs) <= {"start"}:
            seq, start = seqs[0], kwargs.get("start", 0)
            if not isinstance(start, int) or isinstance(start, bool):
                return None
            return _RowSequence(seq.length, lambda t, c: (c if start == 0 else t.op("add", c, start), seq.at(t, c)),
                                has_tensor, lambda t, node: tuple(enumerate(seq.unrolled(t, node), start)), matrix_rows)
        if func is builtins.zip and not kwargs:
            length = min(a.length for a in seqs)
            return _RowSequence(length, lambda t, c: tuple(a.at(t, c) for a in seqs), has_tensor,
                                lambda t, node: tuple(zip(*[a.unrolled(t, node) for a in seqs])), matrix_rows)
        return None


class _TracedRange:
    """``range(start, stop)`` whose stop is an enclosing loop's counter (trip count recorded per run)."""

    def __init__(self, start: int, stop=None):
        self.start, self.stop = start, stop   # (``stop``: the traced counter expression)


def _without_continue(loop):
    """``loop`` with ``if t: A; continue`` + rest of the body rewritten as ``if t: A else: rest``.

    Only a ``continue`` that ends an ``if`` at the top level of the body is rewritten (the meaning
    is the same); other ``continue``s stay and are refused later.
    """
    def rewrite(stmts):
        for pos, stmt in enumerate(stmts):
            if (isinstance(stmt, ast.If) and stmt.body and isinstance(stmt.body[-1], ast.Continue)
                    and not any(isinstance(s, ast.Continue) for b in stmt.body[:-1] for s in ast.walk(b))):
                rest = rewrite(list(stmts[pos + 1:]))
                orelse = list(stmt.orelse) + rest
                new = ast.If(test=stmt.test, body=list(stmt.body[:-1]) or [ast.Pass()], orelse=orelse)
                ast.copy_location(new, stmt)
                ast.fix_missing_locations(new)
                return list(stmts[:pos]) + [new]
        return list(stmts)

    if not any(isinstance(s, ast.Continue) for s in ast.walk(loop)):
        return loop
    new = copy.copy(loop)
    new.body = rewrite(list(loop.body))
    return new


def _inside_inner_loop(outer: ast.stmt, target: ast.AST) -> bool:
    for node in ast.walk(outer):
        if isinstance(node, (ast.For, ast.While)) and node is not outer:
            if any(sub is target for sub in ast.walk(node)):
                return True
    if isinstance(outer, (ast.For, ast.While)):
        return True
    return False
