"""Loop IR -> Python source -> `numba.njit(cache=True)` kernel, with in-memory and on-disk caches.

`compile_physical(expr, input_types, output="auto", shape=None)` lowers a physical program
(`codegen.loops`), picks the output (`codegen.outputs`), writes the kernel's source as a
module named by its hash under the kernel cache directory (``$SPARSAD_KERNEL_CACHE`` or
``~/.cache/sparsad/kernels``) and imports it, so that Numba's own on-disk cache makes a second
process start without recompiling. Kernels are also kept in memory per (program text, input
types with their extents, output, shape).

A `Kernel` is called with the physical inputs by name. Before the compiled code runs, the
inputs are checked at the boundary: names, dtypes, and the index ranges proved by
`codegen.bounds` (an index array pointing outside the array it indexes raises FormatError
naming both). The kernel itself then runs without bounds checks.
"""
from __future__ import annotations

import builtins
import hashlib
import importlib.util
import keyword
import os
import re
import sys
import tempfile
import threading
from operator import itemgetter
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from sparsad.codegen import bounds as B
from sparsad.codegen import outputs as O
from sparsad.codegen import pattern_outputs as PO
from sparsad.codegen.dense_loops import rewrite_dense_loops
from sparsad.codegen.position_nests import flatten_position_nests
from sparsad.codegen.ir import sized_containers
from sparsad.codegen.prefix import index_names, prefix_workspaces
from sparsad.codegen.loops import (OUTPUT, Accumulate, AddTo, Assign, Choose, Fill, Fn,
                                   For, ForItems, HasKey, IfThen, IRExpr, Length, Load, LocalGet,
                                   LoopProgram, Num, Op, Ref, RowGet, RowOf, Stmt, Unary, lower)
from sparsad.codegen.runtime import FUNCTION_CODE
from sparsad.errors import DTypeError, FormatError, InputError, SparsadError, UnsupportedError
from sparsad.lang.names import all_names
from sparsad.lang.printer import to_text
from sparsad.lang.rebuild import substitute
from sparsad.lang.syntax import Expr, Var
from sparsad.lang.types import Bool, Dict, Int, Real, Type, extents as type_extents
from sparsad.memory import check_allocation, dense_bytes, memory_limit, warn_threshold

# ----------------------------------------------------------------------------------------
# source emission



def _only_raises_flags(body) -> bool:
    """Whether every statement of a loop body sets a flag to True: running it once is running it
    every time."""
    return bool(body) and all(isinstance(stmt, Assign) and stmt.value == Num(True) for stmt in body)


class _Emitter:
    def __init__(self, program: LoopProgram, plan: O.OutputPlan):
        self.program = program
        self.plan = plan
        self.containers = {c.name: c for c in program.containers}
        self.plain = plain_workspaces(program)
        self.prefixes = prefix_workspaces(program.body, program.containers, exclude=self.plain)
        self.lines: list[str] = []
        self._highest_after = False  # in a loop that notes the trimmed modes' largest key itself

    def expr(self, e: IRExpr) -> str:
        match e:
            case Num(value=v):
                if isinstance(v, bool):
                    return "True" if v else "False"
                if isinstance(v, float):
                    if v != v:
                        return "np.nan"
                    if v in (float("inf"), float("-inf")):
                        return "np.inf" if v > 0 else "(-np.inf)"
                    return repr(v) if v >= 0 else f"({v!r})"
                return str(v) if v >= 0 else f"({v})"
            case Ref(name=n):
                return n
            case Op(op=op, left=l, right=r):
                return f"({self.expr(l)} {op} {self.expr(r)})"
            case Unary(op="-", operand=o):
                return f"(-{self.expr(o)})"
            case Unary(op="not", operand=o):
                return f"(not {self.expr(o)})"
            case Fn(name=name, args=args):
                if name in ("max", "min"):
                    return f"{name}({', '.join(self.expr(a) for a in args)})"
                template = FUNCTION_CODE.get(name)
                if template is None:
                    raise UnsupportedError(f"code generation has no code for the function {name!r}")
                return template.format(*(f"float({self.expr(a)})" for a in args))
            case Load(array=a, index=i, guarded=g):
                return f"rt.load({a}, {self.expr(i)})" if g else f"{a}[{O.unsigned(self.expr(i))}]"
            case Length(array=a):
                return f"{a}.shape[0]"
            case LocalGet(container=c, key=k) if self._grid_row(c):
                return f"rt.load2({self._grid_row(c)}_val, {c}, {self.expr(k)})"
            case LocalGet(container=c, key=k) if self._trie(c):
                t, zero = self._trie(c), "0" if self.containers[c].leaf == "int" else "0.0"
                return f"rt.trie_get({t}_nd, {t}_vl, {t}_tb, {t}_n, {self._node(c)}, np.int64({self.expr(k)}), {zero})"
            case LocalGet(container=c, key=k, proven=proven):
                container = self.containers[c]
                if container.kind == "workspace" and proven:
                    return f"{c}_val[{O.unsigned(self.expr(k))}]"
                if container.kind == "workspace":
                    return f"rt.load({c}_val, {self.expr(k)})"
                zero = "0" if container.leaf == "int" else "0.0"
                return f"{c}.get(np.int64({self.expr(k)}), {zero})"
            case HasKey(container=c, key=k) if self.containers[c].kind == "grid":
                if self.containers[c].marked:
                    return f"rt.has_row({c}_rowmark, {self.expr(k)})"
                return "True"  # only read by key: an absent row reads zeros as well
            case RowOf(container=c, key=k) if self.containers[c].kind == "grid":
                return f"np.int64({self.expr(k)})"  # a row of a grid is its index
            case RowGet(container=c, row_key=r, key=k) if self.containers[c].kind == "grid":
                return f"rt.load2({c}_val, {self.expr(r)}, {self.expr(k)})"
            case HasKey(container=c, key=k) if self._trie(c):
                t = self._trie(c)
                return f"(rt.trie_find({t}_nd, {t}_tb, {t}_n, {self._node(c)}, np.int64({self.expr(k)})) >= 0)"
            case RowOf(container=c, key=k) if self._trie(c):
                t = self._trie(c)
                return f"rt.trie_find({t}_nd, {t}_tb, {t}_n, {self._node(c)}, np.int64({self.expr(k)}))"
            case RowGet(container=c, row_key=r, key=k) if self._trie(c):
                t, zero = self._trie(c), "0" if self.containers[c].leaf == "int" else "0.0"
                row = f"rt.trie_find({t}_nd, {t}_tb, {t}_n, {self._node(c)}, np.int64({self.expr(r)}))"
                return f"rt.trie_get({t}_nd, {t}_vl, {t}_tb, {t}_n, {row}, np.int64({self.expr(k)}), {zero})"
            case HasKey(container=c, key=k):
                return f"(np.int64({self.expr(k)}) in {c})"
            case RowOf(container=c, key=k):
                return f"{c}[np.int64({self.expr(k)})]"
            case RowGet(container=c, row_key=r, key=k):
                zero = "0" if self.containers[c].leaf == "int" else "0.0"
                return f"{c}[np.int64({self.expr(r)})].get(np.int64({self.expr(k)}), {zero})"
            case Choose(cond=c, then=t, orelse=o):
                return f"({self.expr(t)} if {self.expr(c)} else {self.expr(o)})"
            case _ if hasattr(e, "emit"):  # nodes of optional rewrites (codegen.dense_loops.Dot)
                return e.emit(self.expr)
        raise TypeError(f"not an IR expression: {e!r}")

    def _grid_row(self, name: str) -> str | None:
        """The grid whose row `name` is (a row container of a grid holds the row's index)."""
        container = self.containers.get(name)
        if container is None or container.kind != "row" or container.parent is None:
            return None
        return container.parent if self.containers[container.parent].kind == "grid" else None

    def _trie(self, name: str) -> str | None:
        """The trie that `name` is, or whose row (at any depth) it is; None for other containers."""
        container = self.containers.get(name)
        while container is not None and container.kind == "row" and container.parent is not None:
            container = self.containers.get(container.parent)
        return container.name if container is not None and container.kind == "trie" else None

    def _node(self, name: str) -> str:
        """The node of a trie or of its row `name`: 0 for the trie itself, else the row's variable."""
        return "0" if self.containers[name].kind == "trie" else name

    def reduction(self, loop: For) -> str | None:
        """The leaf ("real"/"int") when `loop` only sums into one key that does not change in it
        (assignments, then one write into the dense output or a workspace whose key set does
        not depend on the write: plain or prefix). Adding the sum once after the loop writes
        the same keys (a prefix counts its keys before the loop; a zero sum adds nothing)."""
        if self.plan.row_var == loop.var or not loop.body or self.prefixes.updates.get(loop.var):
            return None
        *assigns, write = loop.body
        if not isinstance(write, Accumulate) or not all(isinstance(a, Assign) for a in assigns):
            return None
        if write.target == OUTPUT:
            if self.plan.kind != "dense" or any(iv is None for iv in write.key_ivs):
                return None
            leaf = self.program.leaf
        elif len(write.keys) == 1 and (write.target in self.plain or write.target in self.prefixes.names):
            leaf = self.containers[write.target].leaf
        else:
            return None
        varying = {loop.var} | {a.name for a in assigns}
        for key in write.keys:
            names = index_names(key)
            if names is None or names & varying:
                return None
        return leaf

    def count_updates(self, loop_var: str, indent: int) -> None:
        """Before a loop that writes a prefix workspace at its every key: extend the count."""
        for update in self.prefixes.updates.get(loop_var, ()):
            c, end = update.container, self.expr(update.end)
            line = f"{c}_n = max({c}_n, {end})"
            if update.inner:
                nonempty = " and ".join(f"{self.expr(s)} < {self.expr(e)}" for s, e in update.inner)
                self.put(indent, f"if {nonempty}:", f"    {line}")
            else:
                self.put(indent, line)

    def _notes_highest_after(self, loop: For) -> bool:
        """Whether a loop of a dense result with modes sized by the keys written (`OutputPlan.trimmed`)
        writes, at every step, the output at key `loop.var` in each such mode and nothing else
        (assignments and those writes only): its largest key is then its end - 1 when it ran."""
        plan = self.plan
        if plan.kind != "dense" or plan.result_format is not None or not plan.trimmed or not loop.body \
                or self.prefixes.updates.get(loop.var) or self.reduction(loop) is not None:
            return False
        writes = [t for t in loop.body if isinstance(t, Accumulate)]
        return bool(writes) and all(isinstance(t, (Assign, Accumulate)) for t in loop.body) and all(
            w.target == OUTPUT and all(w.keys[d] == Ref(loop.var) for d in plan.trimmed) for w in writes)

    def put(self, indent: int, *lines: str) -> None:
        self.lines.extend("    " * indent + line for line in lines)

    def block(self, stmts, indent: int) -> None:
        if not stmts:
            self.put(indent, "pass")
        for stmt in stmts:
            self.stmt(stmt, indent)

    def stmt(self, s: Stmt, indent: int) -> None:
        match s:
            case Assign(name=n, value=v):
                self.put(indent, f"{n} = {self.expr(v)}")
            case AddTo(name=n, value=v):
                self.put(indent, f"{n} += {self.expr(v)}")
            case For(var=var, start=st, end=en, body=body) if self.reduction(s) is not None:
                # a sum into one fixed key: in a register, added once after the loop
                write = body[-1]
                total = f"_sum_{var}"
                # a mode sized by the keys written (`OutputPlan.trimmed`): the key is written only
                # when the loop ran a step, as it was inside the loop
                ran = f"_ran_{var}" if write.target == OUTPUT and self.plan.trimmed else None
                self.put(indent, f"{total} = {'0' if self.reduction(s) == 'int' else '0.0'}")
                if ran:
                    self.put(indent, f"{ran} = False")
                self.put(indent, f"for {var} in range({self.expr(st)}, {self.expr(en)}):")
                for assign in body[:-1]:
                    self.stmt(assign, indent + 1)
                self.put(indent + 1, f"{total} += {self.expr(write.value)}")
                if ran:
                    self.put(indent + 1, f"{ran} = True")
                    self.put(indent, f"if {ran}:")
                self.stmt(Accumulate(write.target, write.keys, Ref(total), write.key_ivs), indent + (1 if ran else 0))
            case For(var=var, start=st, end=en, body=body) if self._notes_highest_after(s):
                # every step writes at key `var` in each mode sized by the keys written: the
                # largest key is noted once after the loop, not at each write (which keeps the loop
                # from being vectorised)
                self.count_updates(var, indent)
                self.put(indent, f"_lo_{var} = {self.expr(st)}", f"_hi_{var} = {self.expr(en)}",
                         f"for {var} in range(_lo_{var}, _hi_{var}):")
                self._highest_after = True
                self.block(body, indent + 1)
                self._highest_after = False
                for d in self.plan.trimmed:
                    self.put(indent, f"if _hi_{var} > _lo_{var} and _hi_{var} > out_hi{d}:",
                             f"    out_hi{d} = _hi_{var}")
            case For(var=var, start=st, end=en, body=body):
                self.count_updates(var, indent)
                self.put(indent, f"for {var} in range({self.expr(st)}, {self.expr(en)}):")
                self.block(body, indent + 1)
                if self.plan.kind == "workspace" and var == self.plan.row_var:
                    self.put(indent + 1, *O.row_epilogue(var, self.plan))
            case ForItems(key=k, value=v, container=c, body=body):
                self.count_updates(k, indent)
                grid = self._grid_row(c)
                # a loop that only raises flags (an entry test: is the container nonempty?) stops
                # at its first entry; it was a pass over the whole container at every use
                first_only = ["break"] if _only_raises_flags(body) else []
                if c in self.prefixes.names:
                    self.put(indent, f"for {k} in range({c}_n):", f"    {v} = {c}_val[{k}]")
                    self.block(body, indent + 1)
                    self.put(indent + 1, *first_only)
                elif self.containers[c].kind == "grid":
                    self.put(indent, f"for {k} in range({c}_size):", f"    if {c}_rowmark[{k}]:",
                             f"        {v} = {k}")
                    self.block(body, indent + 2)
                    self.put(indent + 2, *first_only)
                elif grid:
                    self.put(indent, f"for {k} in range({grid}__cols_size):",
                             f"    if {grid}_mark[{c}, {k}]:", f"        {v} = {grid}_val[{c}, {k}]")
                    self.block(body, indent + 2)
                    self.put(indent + 2, *first_only)
                elif self._trie(c):
                    # children in insertion order; the next is read first (the body may break)
                    t = self._trie(c)
                    value = f"{k}_at" if self.containers[c].depth >= 2 else f"{t}_vl[{k}_at]"
                    self.put(indent, f"{k}_next = {t}_nd[{self._node(c)}, rt.TRIE_FIRST]",
                             f"while {k}_next >= 0:", f"    {k}_at = {k}_next",
                             f"    {k}_next = {t}_nd[{k}_at, rt.TRIE_NEXT]",
                             f"    {k} = {t}_nd[{k}_at, rt.TRIE_KEY]", f"    {v} = {value}")
                    self.block(body, indent + 1)
                    self.put(indent + 1, *first_only)
                elif self.containers[c].kind == "workspace":
                    self.put(indent, f"for {k}_t in range({c}_n):")
                    self.put(indent + 1, f"{k} = {c}_keys[{k}_t]", f"{v} = {c}_val[{O.unsigned(k)}]")
                    self.block(body, indent + 1)
                    self.put(indent + 1, *first_only)
                else:
                    self.put(indent, f"for {k}, {v} in {c}.items():")
                    self.block(body, indent + 1)
                    self.put(indent + 1, *first_only)
            case IfThen(cond=c, then=t, orelse=o):
                self.put(indent, f"if {self.expr(c)}:")
                self.block(t, indent + 1)
                if o:
                    self.put(indent, "else:")
                    self.block(o, indent + 1)
            case Fill(container=c):
                container = self.containers[c]
                if c in self.plain or container.kind == "grid":
                    pass  # zeroed once where it is allocated
                elif c in self.prefixes.names:
                    self.put(indent, f"{c}_val[:{c}_n] = 0", f"{c}_n = 0")
                elif container.kind == "workspace":
                    self.put(indent, f"for {c}_t in range({c}_n):",
                             f"    {c}_val[{c}_keys[{c}_t]] = 0",
                             f"    {c}_mark[{c}_keys[{c}_t]] = False",
                             f"{c}_n = 0")
                elif container.kind == "trie":
                    self.put(indent, f"rt.trie_reset({c}_nd, {c}_tb, {c}_n)",
                             *_trie_path_reset(c, container.depth))
                elif container.depth >= 2:
                    row = _row_type(container.leaf, container.depth - 1)
                    self.put(indent, f"{c} = Dict.empty(key_type=types.int64, value_type={row})")
                else:
                    value = "types.int64" if container.leaf == "int" else "types.float64"
                    self.put(indent, f"{c} = Dict.empty(key_type=types.int64, value_type={value})")
            case Accumulate(target=t, keys=keys, value=v, key_ivs=ivs) if t == OUTPUT:
                names = []
                for d, key in enumerate(keys):
                    code = self.expr(key)
                    if not code.isidentifier() and not code.lstrip("-").isdigit():
                        self.put(indent, f"_k{d} = {code}")
                        code = f"_k{d}"
                    names.append(code)
                guarded = [iv is None for iv in ivs]
                self.put(indent, *O.output_accumulate(self.plan, names, self.expr(v), guarded,
                                                      self.program.leaf, note_highest=not self._highest_after))
            case Accumulate(target=c, keys=keys, value=v) if self.containers[c].kind == "trie":
                # the node at each key, made when absent; the number at the last one
                # the path of the last write at each level is remembered (nodes live until the
                # trie's reset): consecutive writes under the same keys skip their lookups
                self.put(indent, "_tn = 0")
                for d, key in enumerate(keys):
                    self.put(indent, f"_tk = np.int64({self.expr(key)})",
                             f"if {c}_pn{d} >= 0 and {c}_pp{d} == _tn and {c}_pk{d} == _tk:",
                             f"    _tn = {c}_pn{d}",
                             "else:",
                             f"    {c}_pp{d} = _tn",
                             f"    _tn = rt.trie_child({c}_nd, {c}_vl, {c}_tb, {c}_n, _tn, _tk)",
                             f"    {c}_pk{d} = _tk",
                             f"    {c}_pn{d} = _tn")
                self.put(indent, f"{c}_vl[_tn] += {self.expr(v)}")
            case Accumulate(target=c, keys=keys, value=v) if len(keys) > 2:
                # a deeper container: find or make the row at each key but the last
                leaf = self.containers[c].leaf
                zero = "0" if leaf == "int" else "0.0"
                parent = c
                for level, row_key in enumerate(keys[:-1]):
                    depth = len(keys) - 2 - level  # of the values of the row made here
                    inner = _row_type(leaf, depth) if depth else ("types.int64" if leaf == "int" else "types.float64")
                    self.put(indent, f"_row_key = np.int64({self.expr(row_key)})",
                             f"if _row_key not in {parent}:",
                             f"    {parent}[_row_key] = Dict.empty(key_type=types.int64, value_type={inner})",
                             f"_{c}_r{level} = {parent}[_row_key]")
                    parent = f"_{c}_r{level}"  # one name per container and level: one Numba type
                self.put(indent, f"_key = np.int64({self.expr(keys[-1])})",
                         f"{parent}[_key] = {parent}.get(_key, {zero}) + {self.expr(v)}")
            case Accumulate(target=c, keys=(row_key, key), value=v) if self.containers[c].kind == "grid":
                r, k = self.expr(row_key), self.expr(key)
                self.put(indent, f"{c}_val[{O.unsigned(r)}, {O.unsigned(k)}] += {self.expr(v)}")
                if self.containers[c].marked:
                    self.put(indent, f"{c}_mark[{r}, {k}] = True", f"{c}_rowmark[{r}] = True")
            case Accumulate(target=c, keys=(row_key, key), value=v):
                leaf = self.containers[c].leaf
                value_type = "types.int64" if leaf == "int" else "types.float64"
                zero = "0" if leaf == "int" else "0.0"
                self.put(indent, f"_row_key = np.int64({self.expr(row_key)})",
                         f"if _row_key not in {c}:",
                         f"    {c}[_row_key] = Dict.empty(key_type=types.int64, value_type={value_type})",
                         f"_row = {c}[_row_key]", f"_key = np.int64({self.expr(key)})",
                         f"_row[_key] = _row.get(_key, {zero}) + {self.expr(v)}")
            case Accumulate(target=c, keys=(key,), value=v):
                container = self.containers[c]
                k = self.expr(key)
                if c in self.plain or c in self.prefixes.names:  # a prefix counts its keys before the loop
                    self.put(indent, f"{c}_val[{O.unsigned(k)}] += {self.expr(v)}")
                elif container.kind == "workspace":
                    self.put(indent, f"if not {c}_mark[{k}]:", f"    {c}_mark[{k}] = True",
                             f"    {c}_keys[{c}_n] = {k}", f"    {c}_n += 1",
                             f"{c}_val[{O.unsigned(k)}] += {self.expr(v)}")
                else:
                    zero = "0" if container.leaf == "int" else "0.0"
                    self.put(indent, f"_key = np.int64({k})",
                             f"{c}[_key] = {c}.get(_key, {zero}) + {self.expr(v)}")
            case _ if hasattr(s, "emit_lines"):  # statements of optional rewrites (codegen.matvec.Store)
                self.put(indent, *s.emit_lines(self.expr))
            case _:
                raise TypeError(f"not an IR statement: {s!r}")


TRIE_PARAMETER = "_trie_nodes"  # the nodes each trie of a kernel reserves: passed per call


def _trie_nodes() -> int:
    """The nodes a trie reserves on a kernel's first run (`runtime.TRIE_NODES`, read per call: a
    test lowers it to drive a fill past it; a power of two of at least 8). A fill that outgrows
    them reruns with four times as many (`Kernel.run_prepared`), under the memory limit."""
    from sparsad.codegen import runtime

    nodes = int(runtime.TRIE_NODES)
    if nodes < 8 or nodes & (nodes - 1):
        raise ValueError(f"runtime.TRIE_NODES must be a power of two of at least 8, not {nodes}")
    return nodes


def _trie_path_reset(name: str, depth: int) -> list[str]:
    """Forget the trie's remembered write path (its nodes are made again after a reset)."""
    return [f"{name}_pn{d} = -1" for d in range(depth)]


def _row_type(leaf: str, depth: int) -> str:
    """The name of the Numba type of a row `depth` levels deep: ROW_REAL, ROW_REAL_2, ..."""
    base = "ROW_INT" if leaf == "int" else "ROW_REAL"
    return base if depth == 1 else f"{base}_{depth}"


def plain_workspaces(program: LoopProgram) -> frozenset[str]:
    """Workspaces that are filled once, at the top level, and only looked up (never iterated):
    a plain dense accumulator suffices (no marks, no touched-key list, no reset)."""
    iterated: set[str] = set()
    fills: dict[str, int] = {}
    nested_fills: set[str] = set()

    def visit(stmts, top: bool) -> None:
        for stmt in stmts:
            if isinstance(stmt, Fill):
                fills[stmt.container] = fills.get(stmt.container, 0) + 1
                if not top:
                    nested_fills.add(stmt.container)
            if isinstance(stmt, ForItems):
                iterated.add(stmt.container)
            for field in ("body", "then", "orelse"):
                inner = getattr(stmt, field, None)
                if inner:
                    visit(inner, False)

    visit(program.body, True)
    return frozenset(c.name for c in program.containers
                     if c.kind == "workspace" and c.depth == 1 and c.name not in iterated
                     and fills.get(c.name, 0) <= 1 and c.name not in nested_fills)


def kernel_parameters(program: LoopProgram, plan: O.OutputPlan) -> tuple[str, ...]:
    sizes = tuple(f"{c.name}_size" for c in sized_containers(program.containers))
    tries = (TRIE_PARAMETER,) if any(c.kind == "trie" for c in program.containers) else ()
    return (*program.params, *sizes, *tries, *O.output_params(plan, program.depth))


def generate_source(program: LoopProgram, plan: O.OutputPlan) -> str:
    """The Python module text of the kernel (a function `kernel`)."""
    emitter = _Emitter(program, plan)
    params = kernel_parameters(program, plan)
    body_indent = 1
    for container in program.containers:
        if container.name in emitter.plain:
            dtype = "np.int64" if container.leaf == "int" else "np.float64"
            emitter.put(body_indent, f"{container.name}_val = np.zeros({container.name}_size, {dtype})")
        elif container.kind == "trie":
            c, dtype = container.name, "np.int64" if container.leaf == "int" else "np.float64"
            emitter.put(body_indent, f"{c}_nd, {c}_tb, {c}_n = rt.trie_new({TRIE_PARAMETER})",
                        f"{c}_vl = np.empty({c}_nd.shape[0], {dtype})",
                        *(line for d in range(container.depth) for line in (f"{c}_pp{d} = -1", f"{c}_pk{d} = 0")),
                        *_trie_path_reset(c, container.depth))
        elif container.kind == "grid":
            c, dtype = container.name, "np.int64" if container.leaf == "int" else "np.float64"
            emitter.put(body_indent, f"{c}_val = np.zeros(({c}_size, {c}__cols_size), {dtype})")
            if container.marked:
                emitter.put(body_indent, f"{c}_mark = np.zeros(({c}_size, {c}__cols_size), np.bool_)",
                            f"{c}_rowmark = np.zeros({c}_size, np.bool_)")
        elif container.name in emitter.prefixes.names:
            c, dtype = container.name, "np.int64" if container.leaf == "int" else "np.float64"
            emitter.put(body_indent, f"{c}_val = np.zeros({c}_size, {dtype})", f"{c}_n = 0")
        elif container.kind == "workspace":
            c, dtype = container.name, "np.int64" if container.leaf == "int" else "np.float64"
            emitter.put(body_indent, f"{c}_val = np.zeros({c}_size, {dtype})",
                        f"{c}_mark = np.zeros({c}_size, np.bool_)",
                        f"{c}_keys = np.empty({c}_size, np.int64)", f"{c}_n = 0")
    emitter.put(body_indent, *O.output_prologue(plan, program.depth, program.leaf))
    emitter.block(program.body, body_indent)
    emitter.put(body_indent, f"return {O.output_return(plan, program.depth)}")
    program_text = "\n".join("#   " + line for line in _program_text(program.program).splitlines())
    header = [
        "# Generated by sparsad.codegen; do not edit. The physical program:",
        program_text,
        f"# output: {plan.kind}" + (f" -> {plan.result_format}" if plan.result_format else ""),
        f"# runtime: {_RUNTIME_HASH}",
        "import numpy as np",
        "from numba import njit, types",
        "from numba.typed import Dict",
        "from sparsad.codegen import runtime as rt",
        *O.output_globals(plan, program.depth),
        *(["ROW_REAL = types.DictType(types.int64, types.float64)",
           "ROW_INT = types.DictType(types.int64, types.int64)"]
          if any(c.depth >= 2 for c in program.containers) else []),
        *[f"{_row_type(leaf, d)} = types.DictType(types.int64, {_row_type(leaf, d - 1)})"
          for d in range(2, max((c.depth for c in program.containers), default=0)) for leaf in ("real", "int")],
        "",
        "",
        '@njit(cache=True, error_model="numpy", nogil=True)',
        f"def kernel({', '.join(params)}):",
    ]
    return "\n".join(header + emitter.lines) + "\n"


def _program_text(expr: Expr) -> str:
    try:
        return to_text(expr)
    except ValueError:  # a constant without a text form
        return repr(expr)


def _runtime_hash() -> str:
    from sparsad.codegen import runtime

    text = Path(runtime.__file__).read_bytes()
    return hashlib.sha256(text).hexdigest()[:12]


_RUNTIME_HASH = _runtime_hash()

# ----------------------------------------------------------------------------------------
# on-disk modules


def kernel_cache_dir() -> Path:
    """Where generated kernel modules (and Numba's cache beside them) live: SPARSAD_KERNEL_CACHE,
    else ~/.cache/sparsad/kernels, else a per-user folder in the temp directory. A folder is used
    only when it is ours and no one else can write to it (created 0700): we import code from it."""
    configured = os.environ.get("SPARSAD_KERNEL_CACHE")
    candidates = [Path(configured)] if configured else []
    user = os.getuid() if hasattr(os, "getuid") else os.getlogin()
    candidates += [Path.home() / ".cache" / "sparsad" / "kernels",
                   Path(tempfile.gettempdir()) / f"sparsad-kernels-{user}"]
    refused = []
    for path in candidates:
        try:
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError:
            continue
        problem = _unsafe_directory(path)
        if problem is None:
            return path
        refused.append(f"{path} ({problem})")
    detail = f"; refused {', '.join(refused)}" if refused else ""
    raise UnsupportedError(f"no private writable directory for compiled kernels{detail}; set "
                           f"SPARSAD_KERNEL_CACHE to a folder only you can write (chmod 700)")


def _unsafe_directory(path: Path) -> str | None:
    """Why importing modules from `path` is unsafe (another owner, writable by others), or None."""
    try:
        info = path.stat()
    except OSError as error:
        return str(error)
    if not os.access(path, os.W_OK):
        return "not writable"
    if hasattr(os, "getuid") and info.st_uid != os.getuid():
        return f"owned by uid {info.st_uid}, not by you"
    if info.st_mode & 0o022:
        return f"writable by others (mode {oct(info.st_mode & 0o777)})"
    return None


_LOAD_LOCK = threading.Lock()


def load_kernel_function(source: str):
    """Write source as `<hash>.py` in the cache directory (once), import it, return `kernel`."""
    import numba

    digest = hashlib.sha256((source + numba.__version__ + sys.version).encode()).hexdigest()[:24]
    module_name = f"sparsad_kernel_{digest}"
    with _LOAD_LOCK:
        module = sys.modules.get(module_name)
        if module is None:
            path = kernel_cache_dir() / f"k_{digest}.py"
            if not path.exists() or path.read_text() != source:
                temporary = path.with_suffix(f".{os.getpid()}.tmp")
                temporary.write_text(source)
                os.replace(temporary, path)
            spec = importlib.util.spec_from_file_location(module_name, path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            sys.modules[module_name] = module
    return module.kernel


# ----------------------------------------------------------------------------------------
# kernels


def _leaf(t: Type) -> Type:
    while isinstance(t, Dict):
        t = t.value
    return t


class Kernel:
    """A compiled physical program. Call it with the physical inputs by name.

    Attributes: `source` (the generated Python), `output` (the output kind: scalar, dense,
    dict, coo or workspace), `result_format` (csr/csc/coo for sparse results), `loops` (the
    loop IR), `program`, `input_types`, `shape`.
    """

    def __init__(self, program: Expr, input_types: Mapping[str, Type], loops: LoopProgram,
                 plan: O.OutputPlan, shape: tuple[int, ...] | None,
                 renames: Mapping[str, str] | None = None):
        self.program = program
        self.input_types = dict(input_types)
        inverse = {p: n for n, p in (renames or {}).items()}
        self._external = {p: inverse.get(p, p) for p in loops.params}  # parameter -> input name
        self.loops = loops
        self.plan = plan
        self.shape = shape
        self.source = generate_source(loops, plan)
        self._function = None
        self._capacity_hint = 0
        static = type_extents(loops.result_type)
        self._static_extents = [shape[d] if shape is not None else static[d]
                                for d in range(loops.depth)]
        self._workspaces = sized_containers(loops.containers)
        self._guard = None  # codegen.guard, built on the first call
        self._parameter_kinds = [(p, n, _array_kind(self.input_types.get(n)), self.input_types.get(n))
                                 for p, n in self._external.items()]
        self._external_names = frozenset(self._external.values())
        # fixed per kernel, used on every call: whether the result goes to append buffers, and the
        # workspaces that are the rows of a grid (their next workspace holds its columns)
        self._appends = plan.kind in ("coo", "workspace")
        self._grid_slots = tuple(k for k, c in enumerate(self._workspaces)
                                 if c.kind == "grid" and k + 1 < len(self._workspaces)
                                 and self._workspaces[k + 1].name == f"{c.name}__cols")
        # the last buffer sizes the memory guard let through quietly, and their bytes (see run)
        self._quiet_sizes: tuple = (None, 0.0)
        # a result that is a number or one dense array, with no workspaces: the call has nothing to
        # decide (`_run_simple`); the kernel's parameters gathered by one C call
        # the number of tries (local nested containers): their reserve is a parameter, grown on overflow
        self._tries = sum(1 for c in loops.containers if c.kind == "trie")
        self._trie_hint = 0  # the nodes the last fill needed reserved, when more than the first reserve
        self._simple = O.plain_kind(plan) if not self._workspaces and not self._tries else None
        self._gather = _gatherer(tuple(loops.params))
        # (output asked, whether full rows fitted when the plan depended on it, else None): see compile_physical
        self._made_as: tuple[str, bool | None] = ("auto", None)

    @property
    def output(self) -> str:
        return self.plan.kind

    @property
    def result_format(self) -> str | None:
        return self.plan.result_format

    def show(self) -> str:
        """The generated source (what `.show("code")` prints)."""
        return self.source

    def __repr__(self) -> str:
        names = ", ".join(self.loops.params)
        return f"<sparsad Kernel({names}) -> {self.plan.kind}>"

    @property
    def function(self):
        """The Numba dispatcher (compiled per input dtypes on first use)."""
        if self._function is None:
            self._function = load_kernel_function(self.source)
        return self._function

    # -- calling ---------------------------------------------------------------------------
    def prepare(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """The inputs checked and converted for the kernel (names, dtypes, 1-D arrays)."""
        names = inputs.keys()  # set comparisons of key views first (this runs on every call)
        if not (names <= self.input_types.keys() and names >= self._external_names):
            expected = list(self._external.values())  # the inputs the program uses; others are ignored
            missing = [n for n in expected if n not in inputs]
            extra = [n for n in inputs if n not in self.input_types]
            parts = []
            if missing:
                parts.append(f"missing {', '.join(missing)}")
            if extra:
                parts.append(f"unexpected {', '.join(extra)}")
            raise InputError(f"kernel inputs: {'; '.join(parts)}; it takes {', '.join(expected)}")
        prepared: dict[str, Any] = {}  # by parameter name
        for parameter, name, kind, t in self._parameter_kinds:
            value = inputs[name]
            # the common cases without _convert's checks: what it would return unchanged
            if type(value) is np.ndarray and kind and value.ndim == 1 and value.flags.c_contiguous \
                    and value.dtype.kind == kind[0] and value.dtype.itemsize in kind[1]:
                prepared[parameter] = value
            elif kind is None and ((type(value) is int and type(t) is Int)
                                   or (type(value) is float and type(t) is Real)):
                prepared[parameter] = value  # a size or a number of the right type (as _convert returns it)
            else:
                prepared[parameter] = _convert(name, value, t)
        return prepared

    def __call__(self, **inputs):
        return self.run(inputs)

    def run(self, inputs: Mapping[str, Any], validate: bool = True):
        """Run on the physical inputs (a mapping name -> value).

        validate=False skips the index-range checks (not the dtype checks): only for inputs
        that already passed them unchanged, e.g. in a benchmark loop. An out-of-range index
        then reads or writes outside an array."""
        return self.run_prepared(self.prepare(inputs), validate)

    def run_prepared(self, prepared: Mapping[str, Any], validate: bool = True, dtype: np.dtype | None = None,
                     passed: tuple | None = None):
        """`run` on inputs as `prepare` returns them (by parameter name). `dtype`: the result's
        dtype when the caller knows it already (`_dtype` of these inputs: it depends on their
        dtypes only, e.g. fixed per signature of a repeated call). `passed`: what the guard
        returned for these very inputs (`checked`), when the caller has it already."""
        loops, plan = self.loops, self.plan
        rows_fit = self._made_as[1]
        if rows_fit is not None and PO.full_rows_fit(tuple(self._static_extents)) != rows_fit:
            # the memory limits changed since this plan was chosen: the kernel chosen under them
            current = compile_physical(self.program, self.input_types, self._made_as[0], self.shape)
            return current.run_prepared(prepared, validate, dtype)
        # every check of the call in one straight-line function (codegen.guard); when it does not
        # vouch for the inputs, the node-by-node path below raises the FormatError naming them
        if passed is None:
            passed = self._checked(prepared) if validate else None
        if passed is not None and self._simple is not None:
            return self._run_simple(prepared, passed, dtype)
        if passed is not None:  # the guard lists workspace sizes in self._workspaces' order
            workspace_sizes, extents, indptr = passed
        else:
            sizes, extents, indptr = self._check_slowly(prepared, validate)
            workspace_sizes = [sizes[c.name] for c in self._workspaces]
        if dtype is None:
            dtype = self._dtype(prepared)
        # first guess: the stored values of the inputs; then what the last call needed
        capacity = 16
        if self._appends:
            capacity = max(16, self._capacity_hint, sum(int(v.shape[0]) for v in prepared.values()
                                                        if isinstance(v, np.ndarray) and v.dtype.kind == "f"))
        args = [prepared[n] for n in loops.params]
        if workspace_sizes:
            args += workspace_sizes
        grids = [(workspace_sizes[k], workspace_sizes[k + 1]) for k in self._grid_slots] if self._grid_slots else ()
        trie_nodes = max(_trie_nodes(), self._trie_hint) if self._tries else 0
        try:
            while True:  # each larger buffer passes the memory guard first: the growth is bounded
                # sizes the guard let through quietly last time pass again while the limits allow them
                # (set_memory_limit may have lowered them since): one comparison, not the byte counts
                sizes = (extents, workspace_sizes, capacity, dtype)
                quiet = self._quiet_sizes
                if quiet[0] != sizes or (quiet[1] and quiet[1] > min(warn_threshold(), memory_limit())):
                    nbytes = _guard_memory(plan, loops.depth, extents, dtype, capacity, workspace_sizes, grids)
                    if nbytes <= min(warn_threshold(), memory_limit()):
                        self._quiet_sizes = (sizes, nbytes)
                out_args = O.output_arguments(plan, loops.depth, extents, dtype, capacity, prepared,
                                              hint=self._capacity_hint)
                try:
                    raw = self.function(*args, *((trie_nodes,) if self._tries else ()), *out_args)
                except MemoryError as error:
                    if not self._tries or "reserved nodes" not in str(error):
                        raise
                    # a trie outgrew its reserve: rerun (kernels are pure) with four times as many
                    # nodes, while they fit under the memory limit (else the caller falls back)
                    trie_nodes = _grown_trie_nodes(trie_nodes, self._tries, error)
                    self._trie_hint = trie_nodes
                    continue
                if not self._appends or not O.overflowed(plan, raw):
                    break
                # the append buffers were full: rerun with more room than they had (an output
                # may have allocated more than asked: tensor_rows)
                capacity = 4 * max(capacity, len(out_args[-1] if plan.kind == "coo" else out_args[1]))
            if self._appends:
                self._capacity_hint = max(self._capacity_hint, int(raw[0]))
        except Exception as error:
            ours = _kernel_error(error, extents)
            if ours is error:
                raise
            raise ours from None
        return O.finish(plan, loops.depth, loops.leaf, raw, out_args, extents, prepared, indptr=indptr)

    def _run_simple(self, prepared: Mapping[str, Any], passed: tuple, dtype: np.dtype | None):
        """`run_prepared` after the guard passed, for a result that is a number or one dense array
        and no workspaces: the same steps (memory guard, `outputs.output_arguments`, the kernel,
        `outputs.finish`) written out for those two kinds, with nothing to decide per call."""
        args = self._gather(prepared)
        function = self._function if self._function is not None else self.function
        extents = passed[1]
        try:
            if self._simple == "scalar":  # no buffer to allocate; finish: the number as int or float
                raw = function(*args)
                return int(raw) if self.loops.leaf == "int" else float(raw)
            if dtype is None:
                dtype = self._dtype(prepared)
            sizes = (extents, passed[0], 16, dtype)  # the key `run_prepared` uses
            quiet = self._quiet_sizes
            if quiet[0] != sizes or quiet[1] > min(warn_threshold(), memory_limit()):
                nbytes = _guard_memory(self.plan, self.loops.depth, extents, dtype, 16, passed[0])
                if nbytes <= min(warn_threshold(), memory_limit()):
                    self._quiet_sizes = (sizes, nbytes)
            out = np.zeros(tuple(extents), dtype=dtype)  # output_arguments and finish of a dense result
            function(*args, out)
            return out
        except Exception as error:
            ours = _kernel_error(error, extents)
            if ours is error:
                raise
            raise ours from None

    def _checked(self, prepared):
        """(workspace sizes, extents, pattern indptr) when every check passes, else None."""
        if self._guard is None:
            from sparsad.codegen.guard import build_guard

            self._guard = build_guard(self)
        return self._guard(prepared)

    def checked(self, prepared) -> tuple | None:
        """The guard's answer for `prepared` (by parameter name): (workspace sizes, extents,
        pattern indptr) when every check passes, else None (`run_prepared` then raises)."""
        return self._checked(prepared)

    @property
    def guard_reads(self) -> frozenset:
        """The parameters whose contents the guard reads (the others: their lengths at most)."""
        if self._guard is None:
            from sparsad.codegen.guard import build_guard

            self._guard = build_guard(self)
        return self._guard.reads

    def _check_slowly(self, prepared, validate: bool):
        """The checks node by node (bounds.evaluate): raises FormatError naming the input."""
        memo: dict = {}
        sizes = {}
        for container in self._workspaces:
            interval = B.evaluate(container.key_iv, prepared, memo)
            sizes[container.name] = 0 if interval is None else interval[1] + 1
        try:
            if validate:
                B.run_checks(self.loops.checks, prepared, memo, sizes)
            extents = self._extents(prepared, memo)
            if validate:
                self._check_output(prepared, memo, extents)
        except FormatError as error:
            message = str(error)
            for parameter, name in self._external.items():
                if parameter != name:  # speak of the inputs by the names the caller used
                    message = re.sub(rf"\b{re.escape(parameter)}\b", name, message)
            raise FormatError(message) from None
        return sizes, extents, memo.get("pattern_rows")

    def _extents(self, prepared, memo) -> list[int | None]:
        result = []
        for d in range(self.loops.depth):
            if self._static_extents[d] is not None:
                result.append(int(self._static_extents[d]))
                continue
            iv = self.loops.key_ivs[d]
            if iv is None:
                result.append(None)
                continue
            interval = B.evaluate(iv, prepared, memo)
            result.append(0 if interval is None else max(interval[1] + 1, 0))
        return result

    def _check_output(self, prepared, memo, extents) -> None:
        if self.plan.kind == "pattern":  # rows must not overlap before values are added
            memo["pattern_rows"] = O.pattern_rows(self.plan, prepared, int(extents[0]))
        if self.plan.kind not in ("dense", "coo", "workspace", "pattern"):
            return
        checks, sizes = [], {}
        for d, iv in enumerate(self.loops.key_ivs):
            if iv is None or extents[d] is None:
                continue
            name = f"the result's mode {d}"
            sizes[name] = extents[d]
            checks.append(B.Check(iv, name, "writes"))
        B.run_checks(tuple(checks), prepared, memo, sizes)

    def _dtype(self, prepared) -> np.dtype:
        if self.loops.leaf == "int":
            return np.dtype(np.int64)
        single = False  # float32 only when every float array is float32
        for value in prepared.values():
            if isinstance(value, np.ndarray) and value.dtype.kind == "f":
                if value.dtype.itemsize != 4:
                    return _FLOAT64
                single = True
        return _FLOAT32 if single else _FLOAT64


_FLOAT32, _FLOAT64 = np.dtype(np.float32), np.dtype(np.float64)


def _gatherer(names: tuple[str, ...]):
    """A function from a mapping to the tuple of its values at `names` (operator.itemgetter, which
    returns a bare value for one name)."""
    if len(names) > 1:
        return itemgetter(*names)
    if names:
        name = names[0]
        return lambda mapping: (mapping[name],)
    return lambda mapping: ()


def _grown_trie_nodes(nodes: int, tries: int, error: MemoryError) -> int:
    """Four times `nodes` for each of a kernel's `tries` tries (nodes, hash table and numbers: 72
    bytes a node reserved; pages never written cost no memory), or the MemoryError that makes the
    caller fall back when that reserve passes the memory limit (`sparsad.memory`)."""
    grown = 4 * nodes
    if tries * grown * 72 > memory_limit():
        raise MemoryError(f"{error}; {grown} nodes per trie would pass the memory limit") from None
    return grown


def _kernel_error(error: Exception, extents) -> Exception:
    """What a failed kernel call raises: an index outside the output is the caller's FormatError;
    a Numba typing or lowering error means the kernel cannot compile (UnsupportedError)."""
    if isinstance(error, IndexError):
        return FormatError(f"{error}; the output extents are {extents} (pass shape=... or fix the index arrays)")
    import numba

    if isinstance(error, numba.core.errors.NumbaError):  # typing, lowering: it cannot compile
        return UnsupportedError(f"Numba could not compile the kernel: {error}")
    if type(error) is MemoryError:  # Numba's (a trie's reserve, an allocation), not the guard's
        return UnsupportedError(f"the compiled kernel could not hold its intermediate: {error}")
    return error


def _guard_memory(plan: O.OutputPlan, depth: int, extents, dtype, capacity: int,
                  workspace_sizes, grids=()) -> float:
    """Size the output buffers and workspaces of one kernel call before allocating them; returns
    the bytes it checked (0.0 when there is nothing to allocate)."""
    if not workspace_sizes and plan.kind not in ("dense", "coo", "workspace"):
        return 0.0  # nothing to allocate beyond a number (the common case of a small kernel: per-call cost)
    itemsize = dtype.itemsize if isinstance(dtype, np.dtype) else np.dtype(dtype).itemsize
    workspaces = 16.0 * sum(float(n) for n in workspace_sizes if isinstance(n, (int, np.integer)))
    workspaces += 9.0 * sum(float(rows) * float(cols) for rows, cols in grids)  # values and marks
    # the messages are formatted only for allocations the guard speaks about (per-call cost)
    quiet = min(warn_threshold(), memory_limit())
    if plan.kind == "dense" and all(e is not None for e in extents):
        nbytes = dense_bytes(extents, itemsize) + workspaces
        if nbytes > quiet:
            shape = " x ".join(str(int(e)) for e in extents)
            check_allocation(nbytes, f"the dense result ({shape}, {np.dtype(dtype).name})",
                             "compile with output='coo' or a sparse out_format, or solve a smaller problem",
                             stacklevel=5)
        return nbytes
    if plan.kind in ("coo", "workspace"):
        nbytes = capacity * (depth * 8.0 + itemsize) + workspaces
        if nbytes > quiet:
            check_allocation(nbytes, f"the result buffers ({capacity} entries)", "the result has that many "
                             "stored entries: restrict the program's output or solve a smaller problem",
                             stacklevel=5)
        return nbytes
    if workspaces > quiet:
        check_allocation(workspaces, "the kernel's workspaces", "solve a smaller problem", stacklevel=5)
    return workspaces


def _array_kind(t: Type | None):
    """(dtype kind, itemsizes) an array input is passed on unchanged with, or None."""
    if not isinstance(t, Dict):
        return None
    return ("i", (1, 2, 4, 8)) if isinstance(_leaf(t), Int) else ("f", (4, 8))


def _convert(name: str, value: Any, t: Type):
    if isinstance(t, Dict):
        array = np.asarray(value)
        if array.ndim != 1:
            raise InputError(f"input {name!r} must be a 1-D array, got shape {array.shape}")
        leaf = _leaf(t)
        if isinstance(leaf, Int):
            if array.dtype.kind == "u":
                array = array.astype(np.int64)
            elif array.dtype.kind != "i":
                if array.size == 0:
                    array = array.astype(np.int64)
                else:
                    raise DTypeError(f"input {name!r} is an index array and must have an integer "
                                     f"dtype (int32 or int64), got {array.dtype}")
        elif array.dtype.kind in "iub":
            array = array.astype(np.float64)
        elif array.dtype not in (np.float32, np.float64):
            raise DTypeError(f"input {name!r} must be float32 or float64, got {array.dtype}")
        return np.ascontiguousarray(array)
    if isinstance(t, Bool):
        if not isinstance(value, (bool, np.bool_)):
            raise InputError(f"input {name!r} must be a bool, got {value!r}")
        return bool(value)
    if isinstance(t, Int):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise InputError(f"input {name!r} must be an int, got {value!r}")
        return int(value)
    if isinstance(t, Real):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)):
            raise InputError(f"input {name!r} must be a real number, got {value!r}")
        return float(value)
    raise UnsupportedError(f"input {name!r} has type {t}, which kernels do not take")


_KERNELS: dict[tuple, Kernel] = {}
_KERNELS_LOCK = threading.Lock()


def _cache_key(expr: Expr, input_types: Mapping[str, Type], output: str, shape) -> tuple:
    return (_program_text(expr), tuple((n, repr(t)) for n, t in input_types.items()), output,
            None if shape is None else tuple(None if s is None else int(s) for s in shape))


# names the generated module itself uses, and prefixes of the names it makes
_RESERVED = frozenset({"np", "rt", "types", "Dict", "njit", "kernel", "OUT_KEY", "ROW_REAL",
                       "ROW_INT"}) | frozenset(dir(builtins)) \
    | frozenset(f"ROW_{leaf}_{d}" for leaf in ("REAL", "INT") for d in range(2, 40))
_RESERVED_PREFIXES = ("out", "w_", "row", "_")


def parameter_names(expr: Expr, input_types: Mapping[str, Type]) -> dict[str, str]:
    """Inputs whose names cannot be kernel parameters (primes as in x1', keywords, builtins,
    clashes with generated names) -> safe parameter names; callers keep the original names."""
    taken = set(input_types) | all_names(expr)
    renames = {}
    for name in input_types:
        safe = (name.isidentifier() and not keyword.iskeyword(name) and name not in _RESERVED
                and not name.startswith(_RESERVED_PREFIXES))
        if safe:
            continue
        base = "in_" + "".join(c if c.isalnum() or c == "_" else "p" for c in name)
        candidate, count = base, 0
        while candidate in taken:
            count += 1
            candidate = f"{base}_{count}"
        taken.add(candidate)
        renames[name] = candidate
    return renames


def compile_physical(expr: Expr, input_types: Mapping[str, Type], output: str = "auto",
                     shape: tuple[int, ...] | None = None) -> Kernel:
    """A Kernel for a physical program over ints, reals and 1-D arrays.

    input_types: name -> Type (e.g. `StoredTensor.physical_types(name)` merged over inputs).
    output: "auto", "scalar", "dense", "dict", "coo", "csr", "csc" or "workspace" (see
    `codegen.outputs`). shape: the result's extents, when the types do not give them; an extent
    None is one past the largest key written at that mode (the interpreter's rule, per call).
    Raises UnsupportedError for programs code generation cannot handle (use the interpreter).
    """
    # the memory guard's threshold decides whether a result is assembled in full rows
    # (`pattern_outputs.full_rows_fit`): a kernel made under another threshold is another kernel
    key = (*_cache_key(expr, input_types, output, shape), PO.rows_threshold())
    with _KERNELS_LOCK:
        cached = _KERNELS.get(key)
    if cached is not None:
        return cached
    renames = parameter_names(expr, input_types)
    physical = expr
    for name, parameter in renames.items():
        physical = substitute(physical, name, Var(parameter))
    try:
        loops = lower(physical, {renames.get(n, n): t for n, t in input_types.items()})
    except SparsadError:
        raise
    except (KeyError, TypeError, AttributeError, ValueError, RecursionError) as error:
        # a gap in lowering must not take the caller down: it falls back to the interpreter
        raise UnsupportedError(f"code generation failed on this program ({type(error).__name__}: "
                               f"{error}); this is a bug in sparsad.codegen, please report it") from error
    if shape is not None and len(shape) != loops.depth:
        raise InputError(f"shape={tuple(shape)} has {len(shape)} extents but the result has "
                         f"{loops.depth} modes")
    static = type_extents(loops.result_type)
    static = [shape[d] if shape is not None else static[d] for d in range(loops.depth)]
    known = tuple(static[d] is not None or loops.key_ivs[d] is not None for d in range(loops.depth))
    # a mode the shape leaves unknown (None) is sized, as the interpreter sizes it, by its keys written
    trimmed = () if shape is None else tuple(d for d, extent in enumerate(shape) if extent is None)
    rows_fit = PO.full_rows_fit(tuple(static))
    plan = O.choose_output(loops, output, known, tuple(static), trimmed, rows_fit)
    # a plan the memory guard's threshold decided (full rows or not): each run asks again (`run_prepared`)
    decided = plan != O.choose_output(loops, output, known, tuple(static), trimmed, not rows_fit)
    loops = flatten_position_nests(loops, plan)
    loops = rewrite_dense_loops(loops, plan, plain_workspaces(loops))
    kernel = Kernel(expr, input_types, loops, plan, None if shape is None else tuple(shape), renames)
    kernel._made_as = (output, rows_fit if decided else None)
    with _KERNELS_LOCK:
        _KERNELS.setdefault(key, kernel)
        return _KERNELS[key]


__all__ = ["Kernel", "compile_physical", "generate_source", "kernel_cache_dir",
           "load_kernel_function", "kernel_parameters", "parameter_names"]
