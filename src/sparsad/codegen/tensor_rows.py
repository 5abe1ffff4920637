"""A result of order 3 or more accumulated one outer row at a time (the row workspace, n-d).

A matrix-by-matrix Jacobian `{i -> {d -> {j -> {k -> ...}}}}` written inside the loop over the
rows i of a sparse input gets the same entry (d, j, k) from every entry of row i (a softmax
normaliser, a GCN row sum): appended as coordinates, the kernel wrote six times the result's
entries (100 M for 17 M on a mesh of 65 k entries) and the assembly sorted them all. Here
the entries of one row i are added into a dense workspace over the linear index of (d, j, k)
(one slot per cell, marked when first touched, as the CSR workspace does for one column
index), and at the end of the row the touched slots are appended in order: the kernel
writes each entry once, in order, and the COO tensor is made without sorting anything.
A row is ordered without a sort when its cells fill most of the block spanned by the distinct
keys of each mode (a Jacobian row is dense in the modes of a dense operand and holds a few keys
of the sparse one): each new cell notes its keys per mode (`note_keys`), and the flush reads
the block off the marks in order (`runtime.flush_tensor_row`); other rows are sorted.

Used for "auto" results whose extents are known at compile time, whose writes all sit in one
top-level loop that fixes the first key, and whose workspace (the product of the other
extents) holds at most ROW_CELLS_LIMIT cells; the workspace is sized by the memory guard
before it is allocated (sparsad.memory).

>>> linear_column(["j", "k", "l"])
'(((j)) * w_e2 + (k)) * w_e3 + (l)'
"""
from __future__ import annotations

import numpy as np

from sparsad.codegen.ir import OUTPUT, For, LoopProgram, Ref, accumulates

ROW_CELLS_LIMIT = 1 << 25  # cells of one row's workspace: 17 bytes each (value, mark, key)
TENSOR = "tensor"


def tensor_row_loop(program: LoopProgram) -> For | None:
    """The top-level loop fixing the first key of every write of an order >= 3 result, when every
    key's range is known before the kernel runs (the workspace is indexed without checks)."""
    if program.depth < 3:
        return None
    loops = [s for s in program.body if any(True for _ in accumulates((s,)))]
    if len(loops) != 1 or not isinstance(loops[0], For):
        return None
    loop = loops[0]
    writes = [w for w in accumulates(loop.body) if w.target == OUTPUT]
    if not writes or any(w.keys[0] != Ref(loop.var) for w in writes):
        return None
    if any(iv is None for w in writes for iv in w.key_ivs):
        return None
    return loop


def fits(static_sizes, depth: int) -> bool:
    """Whether the extents are known at compile time and a row's workspace is small enough."""
    sizes = list(static_sizes)[:depth]
    if len(sizes) < depth or any(n is None for n in sizes):
        return False
    return float(np.prod([max(int(n), 1) for n in sizes[1:]], dtype=np.float64)) <= ROW_CELLS_LIMIT


def params(depth: int) -> tuple[str, ...]:
    """The extents of modes 1.. (the workspace's linear index is made from them)."""
    return tuple(f"w_e{d}" for d in range(1, depth))


def linear_column(keys: list[str]) -> str:
    """The workspace slot of keys (modes 1..) in row-major order of their extents."""
    code = f"({keys[0]})"
    for d, key in enumerate(keys[1:], start=2):
        code = f"({code}) * w_e{d} + ({key})"
    return code


def prologue(depth: int) -> list[str]:
    """Kernel lines before the rows: the extents of modes 1.. and, per mode, the distinct keys
    of the current row's cells (a list and marks; one offset per mode into shared arrays)."""
    modes = depth - 1
    extents = [f"w_e{d}" for d in range(1, depth)]
    offsets = ["0"] + [" + ".join(extents[:m]) for m in range(1, modes)]
    total = " + ".join(extents)
    return [f"w_ext = np.array(({', '.join(extents)},), np.int64)",
            f"w_loff = np.array(({', '.join(offsets)},), np.int64)",
            *(f"w_o{m} = {offset}" for m, offset in enumerate(offsets)),
            f"w_lk = np.empty({total}, np.int64)", f"w_lm = np.zeros({total}, np.bool_)",
            f"w_lc = np.zeros({modes}, np.int64)"]


def note_keys(keys: list[str]) -> list[str]:
    """Kernel lines run when a row's cell is first written: each of its keys of modes 1..
    (plain names or literals) joins its mode's distinct keys unless already there."""
    lines = []
    for m, key in enumerate(keys):
        slot = f"w_o{m} + {key}"
        lines += [f"if not w_lm[{slot}]:", f"    w_lm[{slot}] = True",
                  f"    w_lk[w_o{m} + w_lc[{m}]] = {key}", f"    w_lc[{m}] += 1"]
    return lines


def epilogue(row: str, overflow: str) -> list[str]:
    """Kernel lines at the end of row `row`: its cells appended in order, as coordinates and values
    (`rt.flush_tensor_row`: read off the block of the modes' distinct keys when it is dense
    enough, else sorted)."""
    return ["if w_n > 0:",
            "    if out_n + w_n > out_v.shape[0]:",
            f"        return {overflow}",
            f"    rt.flush_tensor_row({row}, w_keys, w_n, w_val, w_mark, w_ext, w_lk, w_lc, w_lm, w_loff,"
            " out_idx, out_v, out_n)",
            "    out_n += w_n",
            "    w_n = 0"]


def arguments(extents, dtype, capacity: int, hint: int = 0) -> tuple:
    """The output arguments of one call: the coordinate buffer (one row per mode) and the values,
    the per-row counts (unused: the parameter the CSR workspace shares), the workspace size and the
    extents. `hint`: the entries of the last call (0 on the first): room for them and a quarter
    more, so that the result can be views of the buffers (`finish`); else room for every entry up
    to what the memory guard lets pass quietly (pages never written are never touched): a rerun
    of the whole kernel per 4x growth of the buffers costs as much as the run."""
    from sparsad.memory import check_allocation, memory_limit, warn_threshold

    cells = int(np.prod([int(e) for e in extents[1:]], dtype=np.int64))
    nbytes = 17.0 * cells + 17.0 * sum(int(e) for e in extents[1:])  # cells, then modes' keys
    if nbytes > min(warn_threshold(), memory_limit()):
        check_allocation(nbytes, f"the row workspace of the result ({cells} cells)",
                         "solve a smaller problem", stacklevel=6)
    order = len(extents)
    # the bytes per entry the memory guard counts (numba_backend._guard_memory): a result over the
    # quiet room overflows it and grows through the guard, which then warns, on every call alike
    quiet_entries = int(min(warn_threshold(), memory_limit()) // (8 * order + np.dtype(dtype).itemsize))
    room = min(int(extents[0]) * cells, quiet_entries)
    wanted = min(hint + hint // 4 + 16, room) if hint > 0 else room
    capacity = max(int(capacity), wanted)
    return (np.empty((order, capacity), np.int64), np.empty(capacity, dtype), np.zeros(int(extents[0]), np.int64),
            cells, *(int(e) for e in extents[1:]))


def finish(raw, arguments: tuple, extents):
    """The COO StoredTensor of the rows the kernel appended (sorted, unique: nothing to sort): views
    of the buffers when the entries fill most of them (a repeated call, sized by the last one),
    else copies (that do not keep the larger buffers alive)."""
    from sparsad.formats.format import coo
    from sparsad.formats.tensor import StoredTensor

    count = int(raw[0])
    coordinates, values = raw[1], raw[2]
    keep = (lambda a: a[:count]) if 4 * count >= 3 * len(values) else (lambda a: a[:count].copy())
    shape = tuple(int(e) for e in extents)
    # the COO levels of entries in order, each once (what build_levels would find after checking)
    fmt = coo(len(shape))
    fields: dict = {fmt.levels[0].count: count}
    for level, coordinate in zip(fmt.levels, coordinates):
        fields[level.crd] = keep(coordinate)
    fields[fmt.values] = keep(values)
    return StoredTensor._trusted(fmt, shape, fields)


__all__ = ["ROW_CELLS_LIMIT", "tensor_row_loop", "fits", "params", "linear_column", "prologue", "note_keys",
           "epilogue", "arguments", "finish"]
