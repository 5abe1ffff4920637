"""Where a kernel writes its result, and how the result is handed back.

Output kinds (the destination of destination-passing style):

- ``scalar``     a local accumulator; the kernel returns a Python float (or int).
- ``dense``      a zeroed numpy array of the output's extents, passed in and updated in place.
- ``dict``       a Numba typed dict (tuple keys when nested), returned as nested Python dicts.
- ``coo``        triplets appended to growing buffers, then assembled by scipy (duplicates
                 summed) into the requested scipy format: ``csr`` (default), ``csc`` or ``coo``.
- ``pattern``    the result has the pattern of a CSR input (two-phase assembly with the first
                 phase for free): when every write is at (row i, column idx(p)) inside the
                 loop over positions p of row i of that input, the kernel adds into
                 ``values[p]`` and the result reuses the input's indptr and indices —
                 the masked gradient of a sparse operand; no marks, no sort, no hashing.
- ``workspace``  a row workspace (dense accumulator of one row, Gustavson style) for programs
                 whose outermost loop fixes the row key: each row is accumulated densely,
                 its touched columns sorted and appended, giving CSR directly (no sort of all
                 entries, no duplicates).
- ``entries``    the result lives on the entries of an n-d input stored by compressed levels
                 (CSF; an n-d COO is iterated as its CSF): when every write is at the key path
                 (idx0[p0], idx1[p1], ...) read inside that input's loops over positions
                 p0, p1, ... in storage order, the kernel adds into ``values[p_last]`` and the
                 result is a CSF `StoredTensor` sharing the input's index arrays — the masked
                 gradient of an order-3+ sparse operand; no hashing, no sort, no dense buffer.
                 Asked for by name (a derivative on the pattern of its sparse input asks for it);
                 when the writes do not follow one input's entries, "auto" decides.

Cost model for ``output="auto"`` (decided once, at compile time, from what is known):

- a scalar program: ``scalar``;
- a vector: ``dense`` when its extent is known (the shape, the type, or the range of its keys
  computed from the inputs) — a vector costs O(n) to zero, the same order as reading a dense
  input, and every write is a plain store; otherwise ``dict``;
- a matrix: it is never made dense automatically (n*m memory would dwarf an O(nnz) kernel):
  ``pattern`` when the writes follow a CSR input's positions (O(nnz of that input)), else
  ``workspace`` when the outermost loop fixes the row (O(writes + rows + cols), sorted
  rows), else ``coo`` assembled to CSR (O(writes + rows + cols) plus a sort per row);
- order 3 and above: when every extent is known from the types, ``dense`` if the dense size is
  at most ``DENSE_AUTO_LIMIT`` entries, else ``coo`` assembled into a COO `StoredTensor`
  (duplicates summed), or, when one outermost loop fixes the first key, a row workspace over
  the other keys (`codegen.tensor_rows`: each entry written once, in order); when an extent is
  unknown, ``dict``.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from sparsad.codegen import tensor_rows
from sparsad.codegen.ir import (OUTPUT, Accumulate, Assign, For, ForItems, IfThen, Load,
                                LoopProgram, Num, Op, Ref, accumulates)
from sparsad.codegen import pattern_outputs as PO
from sparsad.errors import FormatError, InputError, UnsupportedError
from sparsad.lang.types import DENSE_AUTO_LIMIT

OUTPUT_CHOICES = ("auto", "scalar", "dense", "dict", "coo", "csr", "csc", "workspace", "pattern", "entries")


@dataclass(frozen=True)
class OutputPlan:
    kind: str                 # scalar | dense | dict | coo | workspace
    result_format: str | None = None  # csr | csc | coo for sparse results
    row_var: str | None = None        # the row loop of a workspace output
    # a pattern output: (rows-loop end, pos array, idx array, ((column var, position var), ...))
    pattern: tuple | None = None
    entries: "InputEntries | None" = None  # an entries output: the input's levels it follows
    # modes whose extent is a value (a range to `k`): one past the largest key written, as the
    # interpreter sizes them (`lang.program.to_natural`), not the bound of the keys' range
    trimmed: tuple[int, ...] = ()


@dataclass(frozen=True)
class InputEntries:
    """The CSF levels an `entries` output follows: the root's count (a parameter name or an
    int) and coordinate array, then per deeper level its (pos, crd) arrays; `leaves` maps the
    name holding the last key of each write to the position variable of its entry."""
    count: str | int
    root_crd: str
    levels: tuple[tuple[str, str], ...]
    leaves: tuple[tuple[str, str], ...]

    @property
    def leaf_crd(self) -> str:
        return self.levels[-1][1] if self.levels else self.root_crd

    @functools.cached_property
    def fields(self) -> tuple[tuple[str, str], ...]:
        """(CSF field, kernel parameter) of every index array, root first (made once: per call)."""
        pairs = [("idx0", self.root_crd)]
        for d, (pos, crd) in enumerate(self.levels, start=1):
            pairs += [(f"pos{d}", pos), (f"idx{d}", crd)]
        return tuple(pairs)


def row_loop(program: LoopProgram) -> For | None:
    """The top-level loop that fixes the first output key, if the program has one."""
    if program.depth != 2:
        return None
    loops = [s for s in program.body if any(True for _ in accumulates((s,)))]
    if len(loops) != 1 or not isinstance(loops[0], For):
        return None
    loop = loops[0]
    writes = list(accumulates(loop.body))
    if not writes or any(w.keys[0] != Ref(loop.var) for w in writes):
        return None
    if any(w.key_ivs[0] is None or w.key_ivs[1] is None for w in writes):
        return None  # the row and column ranges must be checkable before the kernel runs
    return loop


def input_pattern(program: LoopProgram) -> tuple | None:
    """(rows end, pos, idx, column->position pairs) when every write of the row loop lands at
    a position of one CSR input's row: keys (i, j) with `j = idx[p]` inside
    `for p in range(pos[i], pos[i + 1])` and `for i in range(0, rows)`."""
    loop = row_loop(program)
    if loop is None or loop.start != Num(0) or not isinstance(loop.end, (Ref, Num)):
        return None
    row = loop.var
    pairs: dict[str, str] = {}
    arrays: set[tuple[str, str]] = set()
    following = Op("+", Ref(row), Num(1))
    # `row + 1` may have been bound to a local once (common-subexpression elimination)
    next_row = {following} | {Ref(s.name) for s in loop.body if isinstance(s, Assign) and s.value == following}

    def visit(stmts, positions: dict) -> bool:
        for stmt in stmts:
            match stmt:
                case For(var=p, start=Load(array=pos, index=Ref(name=r0), guarded=False),
                         end=Load(array=pos2, index=after, guarded=False), body=body) \
                        if pos == pos2 and r0 == row and after in next_row:
                    inner = dict(positions)
                    for t in body:
                        if isinstance(t, Assign) and isinstance(t.value, Load) \
                                and t.value.index == Ref(p) and not t.value.guarded:
                            inner[t.name] = (p, pos, t.value.array)
                    if not visit(body, inner):
                        return False
                case For(body=body) | ForItems(body=body):
                    if not visit(body, positions):
                        return False
                case IfThen(then=then, orelse=orelse):
                    if not (visit(then, positions) and visit(orelse, positions)):
                        return False
                case Accumulate(target=target, keys=(_, Ref(name=column))) if target == OUTPUT \
                        and column in positions:
                    position, pos, idx = positions[column]
                    pairs[column] = position
                    arrays.add((pos, idx))
                case Accumulate(target=target) if target == OUTPUT:
                    return False
        return True

    if not visit(loop.body, {}) or len(arrays) != 1:
        return None
    (pos, idx), = arrays
    return (loop.end, pos, idx, tuple(sorted(pairs.items())))


def input_entries(program: LoopProgram) -> InputEntries | None:
    """The levels of one compressed (CSF) input when every write of the output (of depth >= 3)
    has the key path (crd0[p0], crd1[p1], ...) of the entry at position p_last, inside that
    input's loops: `for p0 in range(0, count)`, then `for p_d in range(pos_d[p_{d-1}],
    pos_d[p_{d-1} + 1])`, with each key a name bound to an unguarded `crd_d[p_d]`."""
    depth = program.depth
    if depth < 3:
        return None
    found: set[tuple] = set()
    leaves: dict[str, str] = {}

    def position_load(value, bound: dict) -> tuple[str, str] | None:
        """(crd array, position var) of `crd[p]` for a loop position p of some level."""
        if isinstance(value, Load) and not value.guarded and isinstance(value.index, Ref) \
                and value.index.name in bound:
            return value.array, value.index.name
        return None

    def visit(stmts, chain: tuple, bound: dict, names: dict, nexts: dict) -> bool:
        # chain: ((var, level arrays), ...) of the enclosing position loops, outermost first;
        # bound: position var -> its depth in chain; names: name -> (crd, position var)
        names, nexts = dict(names), dict(nexts)
        for stmt in stmts:
            match stmt:
                case Assign(name=name, value=value):
                    load = position_load(value, bound)
                    if load is not None:
                        names[name] = load
                    if isinstance(value, Op) and value.op == "+" and value.right == Num(1) \
                            and isinstance(value.left, Ref):
                        nexts[name] = value.left.name
                case For(var=var, start=start, end=end, body=body):
                    level = _level_array(start, end, chain, nexts)
                    if level is None:
                        inner = (chain, bound)
                    else:
                        inner = (chain + ((var, level),), {**bound, var: len(chain)})
                    if not visit(body, inner[0], inner[1], names, nexts):
                        return False
                case ForItems(body=body):
                    if not visit(body, chain, bound, names, nexts):
                        return False
                case IfThen(then=then, orelse=orelse):
                    if not (visit(then, chain, bound, names, nexts) and visit(orelse, chain, bound, names, nexts)):
                        return False
                case Accumulate(target=target, keys=keys) if target == OUTPUT:
                    if len(chain) < depth or len(keys) != depth:
                        return False
                    levels = chain[:depth]  # the write's key at mode d is read at level d's position
                    arrays = []
                    for d, key in enumerate(keys):
                        if not isinstance(key, Ref) or key.name not in names:
                            return False
                        crd, var = names[key.name]
                        if var != levels[d][0]:
                            return False
                        arrays.append((levels[d][1], crd))
                    leaf = levels[-1][0]
                    if leaves.setdefault(keys[-1].name, leaf) != leaf:
                        return False
                    found.add(tuple(arrays))
        return True

    if not visit(program.body, (), {}, {}, {}) or len(found) != 1:
        return None
    (levels,) = found
    (count, root_crd), *deeper = levels
    return InputEntries(count, root_crd, tuple(deeper), tuple(sorted(leaves.items())))


def _level_array(start, end, chain: tuple, nexts: dict) -> str | int | None:
    """What delimits a level loop: the root's count (`range(0, count)`, only outside every
    level loop) or a deeper level's pos array (`range(pos[p], pos[p + 1])` with p the innermost
    enclosing level's position); None for any other loop."""
    if not chain:
        if start == Num(0) and isinstance(end, (Ref, Num)):
            return end.name if isinstance(end, Ref) else int(end.value)
        return None
    parent = chain[-1][0]
    match start, end:
        case (Load(array=pos, index=Ref(name=p), guarded=False),
              Load(array=pos2, index=after, guarded=False)) if pos == pos2 and p == parent:
            following = after == Op("+", Ref(parent), Num(1)) or \
                (isinstance(after, Ref) and nexts.get(after.name) == parent)
            return pos if following else None
    return None


def choose_output(program: LoopProgram, requested: str, extent_known: tuple[bool, ...],
                  static_sizes: tuple[int | None, ...] = (), trimmed: tuple[int, ...] = (),
                  rows_fit: bool | None = None) -> OutputPlan:
    """The output plan for a request (see the module doc for the rules of "auto").

    extent_known[d]: the extent of level d can be found (shape, type, or key range);
    static_sizes[d]: the extent when known at compile time (shape or type), else None;
    trimmed: the modes sized by the largest key written (`OutputPlan.trimmed`): their buffers
    are sized by the keys' range, and only outputs that record which keys were written serve
    them (a dense output notes the largest, full rows mark their rows; a pattern stores entries
    nobody wrote);
    rows_fit: whether a full-rows buffer of `static_sizes` passes the memory guard's threshold
    (`pattern_outputs.full_rows_fit`, asked now when None): a decision the caller keys kernels by.
    """
    if rows_fit is None:
        rows_fit = PO.full_rows_fit(static_sizes)
    plan = _choose_output(program, requested, extent_known, static_sizes, tuple(trimmed), rows_fit)
    if not trimmed or plan.kind in ("scalar", "dict"):
        return plan
    return OutputPlan(plan.kind, plan.result_format, plan.row_var, plan.pattern, plan.entries, tuple(trimmed))


def _choose_output(program: LoopProgram, requested: str, extent_known: tuple[bool, ...],
                   static_sizes: tuple[int | None, ...], trimmed: tuple[int, ...], rows_fit: bool) -> OutputPlan:
    if requested not in OUTPUT_CHOICES:
        raise InputError(f"output={requested!r} is not a known output; choose one of "
                         f"{', '.join(OUTPUT_CHOICES)}")
    depth = program.depth
    if depth == 0:
        return OutputPlan("scalar")
    if trimmed and requested in ("pattern", "entries"):  # they store entries nobody wrote
        requested = "auto" if requested == "entries" else "csr"
    if trimmed and depth > 2 and requested == "workspace":
        requested = "coo"
    if requested == "entries":
        entries = input_entries(program) if all(extent_known) else None
        if entries is not None:
            return OutputPlan("entries", "tensor", entries=entries)
        requested = "auto"  # the writes do not follow one input's entries
    loop = row_loop(program)
    pattern = input_pattern(PO.loop_limits_inlined(program)) if depth == 2 and not trimmed else None
    rows = PO.full_rows(program, loop.var) if loop is not None and all(extent_known) and rows_fit else None
    if requested == "auto":
        if depth == 1:
            return OutputPlan("dense" if extent_known[0] else "dict")
        if depth == 2:
            if pattern is not None and extent_known[1]:
                return OutputPlan("pattern", "csr", loop.var, pattern)
            if rows is not None:  # every row written is whole: dense rows, no workspace
                return OutputPlan("dense", PO.ROWS, loop.var, rows)
            if loop is not None and extent_known[1]:
                return OutputPlan("workspace", "csr", loop.var)
            return OutputPlan("coo", "csr")
        sizes = list(static_sizes) + [None] * depth
        if trimmed or not all(n is not None for n in sizes[:depth]):
            return OutputPlan("dict")
        small = float(np.prod([n for n in sizes[:depth]], dtype=np.float64)) <= DENSE_AUTO_LIMIT
        if small:
            return OutputPlan("dense")
        first_keys = tensor_rows.tensor_row_loop(program)  # one row at a time: no duplicates appended
        if first_keys is not None and tensor_rows.fits(sizes, depth):
            return OutputPlan("workspace", tensor_rows.TENSOR, first_keys.var)
        return OutputPlan("coo", "tensor")
    if requested == "scalar":
        raise UnsupportedError(f"output='scalar' but the program returns a dictionary of depth {depth}")
    if requested == "dense":
        if not all(extent_known):
            raise UnsupportedError("output='dense' needs every extent of the result; pass shape=(...) "
                                   "or use output='dict'")
        return OutputPlan("dense")
    if requested == "dict":
        return OutputPlan("dict")
    if depth > 2 and requested == "workspace":
        first_keys = tensor_rows.tensor_row_loop(program)
        if first_keys is None or not all(extent_known):
            raise UnsupportedError("output='workspace' for a result of order 3 or more needs every extent "
                                   "and one outermost loop fixing the first key; use output='dict'")
        return OutputPlan("workspace", tensor_rows.TENSOR, first_keys.var)
    if depth != 2:
        raise UnsupportedError(f"output={requested!r} makes a scipy.sparse matrix, but the result has "
                               f"{depth} modes; use output='dense' or 'dict'")
    if requested == "pattern":
        if pattern is None or not extent_known[1]:
            raise UnsupportedError("output='pattern' needs every write at a position of one CSR "
                                   "input's rows (a masked result); use output='csr'")
        return OutputPlan("pattern", "csr", loop.var, pattern)
    if requested == "csr" and pattern is not None and extent_known[1]:
        return OutputPlan("pattern", "csr", loop.var, pattern)
    if requested == "workspace":
        if loop is None:
            raise UnsupportedError("output='workspace' needs a program whose outermost loop fixes the "
                                   "row key ({i -> ...} inside sum over rows); use output='csr'")
        if not extent_known[1]:
            raise UnsupportedError("output='workspace' needs the number of columns; pass shape=(...)")
        return OutputPlan("workspace", "csr", loop.var)
    if requested == "csr" and rows is not None:
        return OutputPlan("dense", PO.ROWS, loop.var, rows)
    if requested == "csr" and loop is not None and extent_known[1]:
        return OutputPlan("workspace", "csr", loop.var)
    return OutputPlan("coo", requested)


# ----- the code each output kind contributes to the kernel -----

def output_params(plan: OutputPlan, depth: int) -> tuple[str, ...]:
    """Extra kernel parameters the wrapper passes for this output."""
    if plan.kind == "dense":
        return PO.full_rows_params() if plan.result_format == PO.ROWS else ("out",)
    if plan.kind == "coo":
        return (*(f"out_k{d}" for d in range(depth)), "out_v")
    if plan.kind == "workspace":
        more = tensor_rows.params(depth) if plan.result_format == tensor_rows.TENSOR else ()
        return ("out_idx", "out_v", "row_nnz", "w_size", *more)
    if plan.kind in ("pattern", "entries"):
        return ("out_v",)
    return ()


def output_globals(plan: OutputPlan, depth: int) -> list[str]:
    """Module-level lines (Numba needs tuple key types as globals, not built in the kernel)."""
    if plan.kind == "dict" and depth > 1:
        return [f"OUT_KEY = types.UniTuple(types.int64, {depth})"]
    return []


def output_prologue(plan: OutputPlan, depth: int, leaf: str) -> list[str]:
    zero = "0" if leaf == "int" else "0.0"
    if plan.kind == "scalar":
        return [f"out = {zero}"]
    if plan.kind == "dict":
        key = "types.int64" if depth == 1 else "OUT_KEY"
        value = "types.int64" if leaf == "int" else "types.float64"
        return [f"out = Dict.empty(key_type={key}, value_type={value})"]
    if plan.kind == "coo":
        return ["out_n = 0"]
    if plan.kind == "dense" and plan.result_format is None and plan.trimmed:
        return [f"out_hi{d} = 0" for d in plan.trimmed]
    if plan.kind == "workspace":
        more = tensor_rows.prologue(depth) if plan.result_format == tensor_rows.TENSOR else []
        return ["w_val = np.zeros(w_size, out_v.dtype)", "w_mark = np.zeros(w_size, np.bool_)",
                "w_keys = np.empty(w_size, np.int64)", "w_n = 0", "out_n = 0", *more]
    return []


def unsigned(index: str) -> str:
    """An index proven to lie in its array (checked before the kernel runs) as an unsigned int:
    Numba then skips its negative-index wraparound, a select per access that keeps LLVM from
    vectorising the contiguous inner loops of dense rows (4-5x on an SpMM row loop)."""
    return index if index.isdigit() else f"np.uint64({index})"


def output_accumulate(plan: OutputPlan, keys: list[str], value: str, guarded: list[bool],
                      leaf: str, note_highest: bool = True) -> list[str]:
    """Lines adding value at keys into the output (keys are plain names or literals).
    note_highest=False: the enclosing loop notes the largest key of the trimmed modes itself."""
    kind = plan.kind
    if kind == "scalar":
        return [f"out += {value}"]
    if kind == "dense" and plan.result_format == PO.ROWS:
        return PO.full_rows_accumulate(keys, value, guarded)
    if kind == "dense":
        # a mode sized by the keys written: note the largest (after the write, which checks it)
        highest = [line for d in plan.trimmed for line in
                   (f"if {keys[d]} >= out_hi{d}:", f"    out_hi{d} = {keys[d]} + 1")] if note_highest else []
        tests = [f"0 <= {k} < out.shape[{d}]" for d, k in enumerate(keys) if guarded[d]]
        if not tests:  # every key proven inside the result's extents
            return [f"out[{', '.join(unsigned(k) for k in keys)}] += {value}", *highest]
        index = ", ".join(keys)
        return [f"if {' and '.join(tests)}:", f"    out[{index}] += {value}", "else:",
                "    raise IndexError('sparsad: a key of the result lies outside its shape')", *highest]
    if kind == "dict":
        zero = "0" if leaf == "int" else "0.0"
        key = f"np.int64({keys[0]})" if len(keys) == 1 else \
            "(" + ", ".join(f"np.int64({k})" for k in keys) + ")"
        return [f"_key = {key}", f"out[_key] = out.get(_key, {zero}) + {value}"]
    if kind == "coo":
        # out of room: give up and let the caller rerun with bigger buffers (kernels are
        # pure, so a rerun is safe); growing in place would cost reference counting in the
        # hot loop, and a good first capacity makes reruns rare
        lines = ["if out_n == out_v.shape[0]:", f"    return {_overflow(plan, len(keys))}"]
        lines += [f"out_k{d}[out_n] = {k}" for d, k in enumerate(keys)]
        lines += [f"out_v[out_n] = {value}", "out_n += 1"]
        return lines
    if kind == "pattern":
        position = dict(plan.pattern[3])[keys[1]]
        return [f"out_v[{unsigned(position)}] += {value}"]
    if kind == "entries":  # keys[-1] was read at the entry's position, in bounds of its arrays
        position = dict(plan.entries.leaves)[keys[-1]]
        return [f"out_v[{unsigned(position)}] += {value}"]
    if kind == "workspace":
        column = keys[1]
        lines = []
        if plan.result_format == tensor_rows.TENSOR:  # the slot of keys 1.. (every key range checked)
            lines.append(f"_wc = {tensor_rows.linear_column(keys[1:])}")
            column = "_wc"
        if guarded[1]:
            lines += [f"if not (0 <= {column} < w_size):",
                      "    raise IndexError('sparsad: a column of the result lies outside its shape')"]
        lines += [f"if not w_mark[{column}]:", f"    w_mark[{column}] = True",
                  f"    w_keys[w_n] = {column}", "    w_n += 1"]
        if plan.result_format == tensor_rows.TENSOR:  # a new cell: note its keys of modes 1..
            lines += ["    " + line for line in tensor_rows.note_keys(keys[1:])]
        lines.append(f"w_val[{unsigned(column)}] += {value}")
        return lines
    raise ValueError(kind)


def row_epilogue(row: str, plan: OutputPlan | None = None) -> list[str]:
    """Flush the row workspace at the end of row `row`: sorted columns appended to the CSR (or,
    for a result of order 3 or more, the row's cells in order: `tensor_rows.epilogue`)."""
    if plan is not None and plan.result_format == tensor_rows.TENSOR:
        return tensor_rows.epilogue(row, _overflow(OutputPlan('workspace'), 2))
    # a row whose touched columns lie in a band (banded matrices: at most 32x as many
    # columns as entries) is read off the marks in column order, O(band); others are sorted
    return ["if w_n > 0:",
            "    if out_n + w_n > out_idx.shape[0]:",
            f"        return {_overflow(OutputPlan('workspace'), 2)}",
            "    _lo = w_keys[0]",
            "    _hi = _lo",
            "    for _t in range(1, w_n):",
            "        _c = w_keys[_t]",
            "        if _c < _lo:",
            "            _lo = _c",
            "        elif _c > _hi:",
            "            _hi = _c",
            "    if _hi - _lo < 32 * w_n:",
            "        _t = out_n",
            "        for _c in range(_lo, _hi + 1):",
            "            if w_mark[_c]:",
            "                out_idx[_t] = _c",
            "                out_v[_t] = w_val[_c]",
            "                w_val[_c] = 0",
            "                w_mark[_c] = False",
            "                _t += 1",
            "    else:",
            "        rt.sort_prefix(w_keys, w_n)",
            "        for _t in range(w_n):",
            "            _c = w_keys[_t]",
            "            out_idx[out_n + _t] = _c",
            "            out_v[out_n + _t] = w_val[_c]",
            "            w_val[_c] = 0",
            "            w_mark[_c] = False",
            "    out_n += w_n",
            f"    row_nnz[{row}] += w_n",
            "    w_n = 0"]


def _overflow(plan: OutputPlan, depth: int) -> str:
    """The early return that tells the caller the append buffers are full."""
    return output_return(plan, depth).replace("(out_n,", "(-1,", 1)


def overflowed(plan: OutputPlan, raw) -> bool:
    return plan.kind in ("coo", "workspace") and int(raw[0]) < 0


def output_return(plan: OutputPlan, depth: int) -> str:
    if plan.kind in ("scalar", "dict"):
        return "out"
    if plan.kind == "coo":
        return "(out_n, " + ", ".join(f"out_k{d}" for d in range(depth)) + ", out_v)"
    if plan.kind == "workspace":
        return "(out_n, out_idx, out_v)"
    if plan.kind == "dense" and plan.result_format is None and plan.trimmed:
        return "(" + "".join(f"out_hi{d}, " for d in plan.trimmed) + ")"
    return "0"


# ----- the Python side: buffers in, results out -----

def plain_kind(plan: OutputPlan) -> str | None:
    """"scalar" or "dense" when the result is the kernel's number, or one zeroed array of the result's
    extents returned as it is (what `output_arguments` and `finish` do for these plans, written out
    by `numba_backend.Kernel._run_simple`); None for every other plan, full rows included."""
    if plan.kind == "scalar" or (plan.kind == "dense" and plan.result_format is None and not plan.trimmed):
        return plan.kind
    return None


def output_arguments(plan: OutputPlan, depth: int, extents: list[int | None], dtype,
                     capacity: int, inputs: dict | None = None, hint: int = 0) -> tuple:
    """The values of output_params for one call (inputs: the prepared kernel inputs; hint: the
    entries the last call appended, 0 on the first)."""
    if plan.kind == "pattern":
        return (np.zeros(len(inputs[plan.pattern[2]]), dtype=dtype),)
    if plan.kind == "entries":
        return (np.zeros(len(inputs[plan.entries.leaf_crd]), dtype=dtype),)
    if plan.kind == "dense":
        if plan.result_format == PO.ROWS:
            return PO.full_rows_arguments(extents, dtype)
        return (np.zeros(tuple(extents), dtype=dtype),)
    if plan.kind == "coo":
        return (*(np.empty(capacity, np.int64) for _ in range(depth)), np.empty(capacity, dtype))
    if plan.kind == "workspace" and plan.result_format == tensor_rows.TENSOR:
        return tensor_rows.arguments(extents, dtype, capacity, hint)
    if plan.kind == "workspace":
        return (np.empty(capacity, np.int64), np.empty(capacity, dtype),
                np.zeros(extents[0], np.int64), int(extents[1]))
    return ()


def pattern_rows(plan: OutputPlan, inputs: dict, nrows: int) -> np.ndarray:
    """The result's indptr for a pattern output; rejects a decreasing pos array."""
    end, pos_name, _, _ = plan.pattern
    rows = int(end.value) if isinstance(end, Num) else int(inputs[end.name])
    pos = np.asarray(inputs[pos_name][: rows + 1], dtype=np.int64)
    if np.any(np.diff(pos) < 0):
        raise FormatError(f"{pos_name} must be non-decreasing (it delimits the rows of a CSR input)")
    return indptr_from_rows(pos, nrows)


def indptr_from_rows(pos: np.ndarray, nrows: int) -> np.ndarray:
    """The result's indptr (a new int64 array) from the first row pointers of the input, known
    to be non-decreasing; rows past them are empty."""
    indptr = np.full(nrows + 1, pos[-1] if len(pos) else 0, dtype=np.int64)
    indptr[: len(pos)] = pos
    return indptr


def finish(plan: OutputPlan, depth: int, leaf: str, raw, arguments: tuple,
           extents: list[int | None], inputs: dict | None = None, indptr=None):
    """The user-facing result from what the kernel returned (`indptr`: a pattern output's rows,
    when the caller already computed them with `pattern_rows`)."""
    import scipy.sparse as sp

    if plan.kind == "pattern":
        if indptr is None:
            indptr = pattern_rows(plan, inputs, int(extents[0]))
        first, last = int(indptr[0]), int(indptr[-1])
        source = inputs[plan.pattern[2]]
        # one copy of the input's indices, in their own integer type (scipy would downcast an
        # int64 copy to int32 again when the sizes allow: a second copy)
        index_dtype = source.dtype if source.dtype == np.int32 and last - first < 2**31 - 1 else np.int64
        indices = np.array(source[first:last], dtype=index_dtype)
        # indptr is this call's own array (pattern_rows / codegen.guard build it), never the input's
        indptr = (indptr - first) if first else indptr
        return csr_result(arguments[0][first:last], indices, indptr.astype(index_dtype, copy=False),
                          (int(extents[0]), int(extents[1])))

    if plan.kind == "entries":
        return entries_result(plan.entries, arguments[0], inputs, extents)
    if plan.kind == "scalar":
        return int(raw) if leaf == "int" else float(raw)
    if plan.kind == "dense" and plan.result_format is None and plan.trimmed:
        highest = dict(zip(plan.trimmed, (int(h) for h in raw)))
        return arguments[0][tuple(slice(0, highest.get(d, n)) for d, n in enumerate(arguments[0].shape))]
    if plan.kind == "dense":
        return PO.full_rows_result(plan, arguments, extents, inputs) if plan.result_format == PO.ROWS else arguments[0]
    if plan.kind == "dict":
        return _nested(raw, depth, leaf)
    if plan.kind == "coo":
        count = int(raw[0])
        keys = [np.asarray(k[:count]) for k in raw[1:-1]]
        values = np.asarray(raw[-1][:count])
        shape = tuple(e if e is not None and d not in plan.trimmed else (int(k.max()) + 1 if count else 0)
                      for d, (e, k) in enumerate(zip(extents, keys)))
        if count and min(int(k.min()) for k in keys) < 0:
            raise FormatError("a key of the result is negative; sparse results need keys "
                              "0..n-1 (use output='dict' for arbitrary keys)")
        for d, (k, n) in enumerate(zip(keys, shape)):
            if count and int(k.max()) >= n:
                raise FormatError(f"a key of the result's mode {d} reaches {int(k.max())} but its "
                                  f"extent is {n}; pass the right shape")
        if plan.result_format == "tensor":  # order 3 and above: a COO StoredTensor, duplicates summed
            from sparsad.formats.convert import from_coordinates

            coords = np.stack(keys) if keys else np.empty((0, count), np.int64)
            return from_coordinates(coords, values, shape, "coo")
        if plan.result_format == "coo":
            matrix = sp.coo_matrix((values, (keys[0], keys[1])), shape=shape)
            matrix.sum_duplicates()
            return matrix
        from sparsad.codegen.runtime import coo_to_csr

        transpose = plan.result_format == "csc"  # CSC is the CSR of the transpose
        rows, cols = (keys[1], keys[0]) if transpose else (keys[0], keys[1])
        nrows, ncols = (shape[1], shape[0]) if transpose else shape
        indptr, indices, data = coo_to_csr(count, rows, cols, values, nrows, ncols)
        make = sp.csc_matrix if transpose else sp.csr_matrix
        return make((data, indices, indptr), shape=shape)
    if plan.kind == "workspace" and plan.result_format == tensor_rows.TENSOR:
        return tensor_rows.finish(raw, arguments, extents)
    if plan.kind == "workspace":
        count, indices, values = int(raw[0]), raw[1], raw[2]
        row_nnz = arguments[2]
        indptr = np.zeros(len(row_nnz) + 1, np.int64)
        np.cumsum(row_nnz, out=indptr[1:])
        # the buffers were allocated for this call: keep views unless most of them is unused
        keep = (lambda a: a[:count]) if 4 * count >= 3 * len(values) else (lambda a: a[:count].copy())
        nrows, ncols = int(extents[0]), int(extents[1])
        if 0 in plan.trimmed:  # to the last row written (a written entry is stored, zero or not)
            nrows = int(np.flatnonzero(row_nnz)[-1]) + 1 if count else 0
            indptr = indptr[:nrows + 1]
        if 1 in plan.trimmed:
            ncols = int(indices[:count].max()) + 1 if count else 0
        return sp.csr_matrix((keep(values), keep(indices), indptr), shape=(nrows, ncols))
    raise ValueError(plan.kind)


def entries_result(entries: InputEntries, values: np.ndarray, inputs: dict, extents):
    """The CSF tensor of the input's levels (its own index arrays, shared) with `values`: an
    `EntryValues`, which `formats.pattern.on_pattern` puts on the input's own format."""
    from sparsad.formats.pattern import EntryValues, built, csf_format

    fields = {field: inputs[parameter] for field, parameter in entries.fields}
    fields["len"] = entries.count if isinstance(entries.count, int) else int(inputs[entries.count])
    fields["val"] = values
    return built(EntryValues, csf_format(len(entries.levels) + 1), tuple(int(e) for e in extents), fields)


_TRUSTED_CSR: bool | None = None  # whether scipy's csr_matrix has the attributes csr_result sets


def csr_result(data, indices, indptr, shape):
    """A scipy CSR matrix of arrays this module built consistently (indices and indptr of one
    int dtype, sorted rows, data and indices of length indptr[-1]). scipy's constructor checks
    that again (~10 µs, a tenth of a small call); when this scipy's csr_matrix holds exactly
    those attributes, they are set directly, else the constructor runs."""
    import scipy.sparse as sp

    global _TRUSTED_CSR
    if _TRUSTED_CSR is None:
        probe = sp.csr_matrix((np.zeros(1), np.zeros(1, np.int32), np.array([0, 1], np.int32)),
                              shape=(1, 1))
        _TRUSTED_CSR = set(vars(probe)) == {"_shape", "data", "indices", "indptr", "maxprint"}
        csr_result.maxprint = probe.maxprint
    if not _TRUSTED_CSR:
        return sp.csr_matrix((data, indices, indptr), shape=shape)
    matrix = sp.csr_matrix.__new__(sp.csr_matrix)
    matrix._shape = shape
    matrix.data, matrix.indices, matrix.indptr = data, indices, indptr
    matrix.maxprint = csr_result.maxprint
    return matrix


def _nested(typed, depth: int, leaf: str) -> dict:
    cast = int if leaf == "int" else float
    result: dict = {}
    for key, value in typed.items():
        if depth == 1:
            result[int(key)] = cast(value)
            continue
        inner = result
        for k in key[:-1]:
            inner = inner.setdefault(int(k), {})
        inner[int(key[-1])] = cast(value)
    return result


__all__ = ["OUTPUT_CHOICES", "DENSE_AUTO_LIMIT", "OutputPlan", "InputEntries", "input_entries", "entries_result",
           "choose_output", "row_loop", "plain_kind",
           "output_params", "output_globals", "unsigned", "output_prologue", "output_accumulate", "row_epilogue",
           "output_return", "overflowed", "output_arguments", "finish", "input_pattern", "pattern_rows"]
