"""Sparse-patterned results assembled without a row workspace: on an input's pattern, or in full rows.

Two shapes of a matrix result whose pattern is known before any value is computed.

**On a sparse input's pattern.**
A ``pattern`` output (`codegen.outputs`) writes the value at key (i, idx[p]) into ``values[p]``
and returns a CSR matrix with the input's row pointers and column indices: the masked gradient
of a sparse operand in O(nnz), with no marks, sort or hashing. `outputs.input_pattern` sees
that shape when the loop over a row's positions reads its limits from the row pointers
directly, `for p in range(pos[i], pos[i + 1])`. When a row's slice is read twice (once for a
forward row sum, once for the writes of the gradient, as in a logistic regression's gradient
with respect to its design matrix), common-subexpression elimination binds the limits once::

    st = pos[i]
    en = pos[i + 1]
    for p in range(st, en): acc += val[p] * w[idx[p]]
    for q in range(st, en): out[i, idx[q]] += g * w[idx[q]]

and the writes looked like arbitrary keys (a row workspace with marks and a sort per row,
4-10x the closed form). `loop_limits_inlined` puts such limits back into the loops (for
recognition only; the kernel keeps its locals) so that the same recognition applies.
Sound because a local is replaced only when it is assigned exactly once in the whole kernel,
is never accumulated into, and holds a read of an input array (inputs are not written by a
kernel), at an index made of loop variables and such locals: every loop that reads it sees
the value of that read in the same iteration of the enclosing loops.

**In full rows.** An SpMM-like result `{i -> ... sum(<_, j> in (0:n)) { j -> v }}` writes, in
every row it writes at all, every column 0..n-1 (the write sits directly in a loop over the
whole range, with no condition between: each pass of that loop writes all n columns). The row
workspace then pays a mark, a test and a flush per entry, 4-5x `A @ B`. A ``full_rows`` plan
(`OutputPlan("dense", "rows", row, (n,))`) accumulates into a dense rows x columns array,
marks the rows written, and returns the CSR of the marked rows with columns 0..n-1: the same
entries (explicit zeros included) and the same sums in the same order as the workspace. Its
memory is that of the dense result, checked by the dense-result memory guard.

>>> from sparsad.codegen.ir import Assign, For, Load, Num, Ref
>>> rows = For("i", Num(0), Num(4), (Assign("st", Load("pos", Ref("i"))), For("p", Ref("st"), Num(3), ())))
>>> loop_limits_inlined_in((rows,))[0].body[1].start
Load(array='pos', index=Ref(name='i'), guarded=False)
"""
from __future__ import annotations

from collections import Counter
from dataclasses import replace

import numpy as np

from sparsad.codegen.ir import (OUTPUT, Accumulate, AddTo, Assign, For, ForItems, IfThen, IRExpr, Load, LoopProgram,
                                Num, Op, Ref, Stmt)

ROWS = "rows"  # the result_format of a dense-kind plan that returns its written rows as CSR


def loop_limits_inlined(program: LoopProgram) -> LoopProgram:
    """`program` with loop limits that are once-assigned locals holding input reads replaced by
    those reads (see the module docstring); the program itself when nothing changes."""
    body = loop_limits_inlined_in(program.body)
    return program if body == program.body else replace(program, body=body)


def loop_limits_inlined_in(body: tuple[Stmt, ...]) -> tuple[Stmt, ...]:
    """The statements with the limits of their loops inlined (`loop_limits_inlined`)."""
    assigned: Counter = Counter()
    for stmt in _statements(body):
        match stmt:
            case Assign(name=name):
                assigned[name] += 1
            case AddTo(name=name):
                assigned[name] += 2  # accumulated into: not a fixed value
            case For(var=var):
                assigned[var] += 2
            case ForItems(key=key, value=value):
                assigned[key] += 2
                assigned[value] += 2
    fixed = {name for name, count in assigned.items() if count == 1}

    def steady(e: IRExpr, env: dict, loop_vars: frozenset) -> bool:
        """Whether e has one value within an iteration of the enclosing loops: loop variables,
        constants and visible once-assigned sums of those."""
        match e:
            case Num():
                return True
            case Ref(name=name):
                return name in loop_vars or (name in env and isinstance(env[name], Op)
                                             and steady(env[name], env, loop_vars))
            case Op(op=op, left=left, right=right) if op in ("+", "-"):
                return steady(left, env, loop_vars) and steady(right, env, loop_vars)
        return False

    def spelled(index: IRExpr, env: dict) -> IRExpr:
        """The index with its locals spelled out (`i + 1` rather than `t13`), the form
        `outputs.input_pattern` compares with."""
        match index:
            case Ref(name=name) if name in env:
                return spelled(env[name], env)
            case Op(op=op, left=left, right=right):
                return Op(op, spelled(left, env), spelled(right, env))
        return index

    def limit(e: IRExpr, env: dict, loop_vars: frozenset) -> IRExpr:
        value = env.get(e.name) if isinstance(e, Ref) else None
        if isinstance(value, Load) and not value.guarded and steady(value.index, env, loop_vars):
            return replace(value, index=spelled(value.index, env))
        return e

    def rewrite(stmts: tuple[Stmt, ...], env: dict, loop_vars: frozenset) -> tuple[Stmt, ...]:
        # env: the once-assigned locals visible here (assigned earlier in this block or in an
        # enclosing one; an assignment inside a branch or a loop body is not visible after it)
        env = dict(env)
        out = []
        for stmt in stmts:
            match stmt:
                case Assign(name=name, value=value) if name in fixed:
                    env[name] = value
                case For():
                    stmt = replace(stmt, start=limit(stmt.start, env, loop_vars), end=limit(stmt.end, env, loop_vars),
                                   body=rewrite(stmt.body, env, loop_vars | {stmt.var}))
                case ForItems():
                    stmt = replace(stmt, body=rewrite(stmt.body, env, loop_vars))
                case IfThen():
                    stmt = replace(stmt, then=rewrite(stmt.then, env, loop_vars),
                                   orelse=rewrite(stmt.orelse, env, loop_vars))
            out.append(stmt)
        return tuple(out)

    return rewrite(body, {}, frozenset())


def _statements(body: tuple[Stmt, ...]):
    for stmt in body:
        yield stmt
        match stmt:
            case For(body=inner) | ForItems(body=inner):
                yield from _statements(inner)
            case IfThen(then=then, orelse=orelse):
                yield from _statements(then)
                yield from _statements(orelse)


# ----- full rows -----

def full_rows(program: LoopProgram, row_var: str) -> tuple[IRExpr] | None:
    """(n,) when every write into the result, inside the row loop `row_var`, is at (row, j) directly
    in a loop `for j in range(0, n)`, the same n for all (a constant or a kernel parameter):
    then each row written holds exactly the columns 0..n-1. Else None."""
    ends: set[IRExpr] = set()

    def visit(stmts, parent: For | None) -> bool:
        for stmt in stmts:
            match stmt:
                case Accumulate(target=target, keys=keys) if target == OUTPUT:
                    # (the row loop itself is no column loop: {i -> {i -> v}} writes one column a row)
                    if parent is None or parent.start != Num(0) or len(keys) != 2 or parent.var == row_var or \
                            keys[0] != Ref(row_var) or keys[1] != Ref(parent.var):
                        return False
                    ends.add(parent.end)
                case For(body=body):
                    if not visit(body, stmt):
                        return False
                case ForItems(body=body):
                    if not visit(body, None):
                        return False
                case IfThen(then=then, orelse=orelse):
                    if not (visit(then, None) and visit(orelse, None)):
                        return False
        return True

    if not visit(program.body, None) or len(ends) != 1:
        return None
    end, = ends
    if isinstance(end, Num) or (isinstance(end, Ref) and end.name in program.params):
        return (end,)
    return None


def rows_threshold() -> int:
    """The bytes a full-rows buffer may take (`full_rows_fit`): the memory guard's warning
    threshold, or its limit when lower; kernels are cached per value of it."""
    from sparsad.memory import memory_limit, warn_threshold

    return min(warn_threshold(), memory_limit())


def full_rows_fit(static_sizes: tuple) -> bool:
    """Whether a full-rows buffer of the result's rows x columns (known when the kernel is made)
    stays under the memory guard's warning threshold: it is allocated whole whatever the number of
    rows written, so a tall result with few rows written (a hypersparse A times a dense B) keeps
    the row workspace, which costs O(rows written x columns) plus the CSR's row pointers. (Sizes
    known only when the kernel runs, such as a column range's end: full rows, under the guard.)"""
    from sparsad.memory import dense_bytes

    sizes = tuple(static_sizes[:2])
    if len(sizes) != 2 or any(n is None for n in sizes):
        return True
    return dense_bytes(sizes, 8) <= rows_threshold()


def full_rows_params() -> tuple[str, ...]:
    return ("out", "out_rows")


def full_rows_accumulate(keys: list[str], value: str, guarded: list[bool]) -> list[str]:
    """Add into the dense rows and mark the row (both keys checked unless proven in range)."""
    from sparsad.codegen.outputs import unsigned

    row, column = keys
    write = [f"out[{unsigned(row)}, {unsigned(column)}] += {value}", f"out_rows[{unsigned(row)}] = True"]
    tests = [f"0 <= {k} < out.shape[{d}]" for d, k in enumerate(keys) if guarded[d]]
    if not tests:
        return write
    return [f"if {' and '.join(tests)}:", *("    " + line for line in write), "else:",
            "    raise IndexError('sparsad: a key of the result lies outside its shape')"]


def full_rows_arguments(extents: list[int], dtype) -> tuple[np.ndarray, np.ndarray]:
    return np.zeros((int(extents[0]), int(extents[1])), dtype=dtype), np.zeros(int(extents[0]), np.bool_)


def full_rows_result(plan, arguments: tuple, extents: list[int], inputs: dict):
    """The CSR matrix of the marked rows of the dense buffer, columns 0..n-1 in each."""
    from sparsad.codegen.outputs import csr_result

    dense, written = arguments[0], arguments[1]
    end = plan.pattern[0]
    n = int(end.value) if isinstance(end, Num) else int(inputs[end.name])
    rows, columns = int(extents[0]), int(extents[1])
    n = max(0, min(n, columns))  # the guard proved every written column below the extent
    kept = np.flatnonzero(written)
    if plan.trimmed:  # modes sized by the keys written (`outputs.OutputPlan.trimmed`)
        if 0 in plan.trimmed:
            rows = int(kept[-1]) + 1 if len(kept) else 0
        if 1 in plan.trimmed:
            columns = n if len(kept) else 0  # a row written holds columns 0..n-1
        n = min(n, columns)
        dense = dense[:rows]
    index_dtype = np.int32 if rows * n < 2**31 - 1 else np.int64
    if len(kept) == rows and n == dense.shape[1]:
        data = dense.reshape(-1)  # every row written: the buffer is the result
    else:
        data = dense[kept, :n].reshape(-1)
    counts = np.zeros(rows + 1, index_dtype)
    counts[1:][kept] = n
    indptr = np.cumsum(counts, dtype=index_dtype)
    indices = np.tile(np.arange(n, dtype=index_dtype), len(kept))
    return csr_result(data, indices, indptr, (rows, columns))


__all__ = ["loop_limits_inlined", "loop_limits_inlined_in", "full_rows", "full_rows_fit", "rows_threshold", "ROWS", "full_rows_params",
           "full_rows_accumulate", "full_rows_arguments", "full_rows_result"]
