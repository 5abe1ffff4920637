"""The boundary checks of one kernel call as one straight-line function, built once per kernel.

`Kernel.run` must check, before any kernel runs, every interval of `codegen.bounds` (the read
checks of the inputs, the workspace sizes, the output extents and writes, and for a pattern
output that the input's row pointers do not decrease). Evaluating the interval trees node by
node in Python, with one NumPy `min` and one `max` per index array, costs 20-50 µs per call.
`build_guard` turns them into the Python source of one function (`guard(P)`, P = the prepared
inputs by parameter name): one Numba pass per index array gives its (min, max), and the tree
arithmetic is straight-line code on Python ints (exact: no overflow), calling the same interval
functions as `bounds.evaluate`.

The guard decides only "all checks pass": it returns (workspace sizes, output extents, pattern
indptr or None), or None when any check fails or a case is not covered. `Kernel.run` then
takes the node-by-node path, which raises the FormatError naming the argument (or computes the
same result). Nothing is cached between calls: arrays may change in place.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
from numba import njit

from sparsad.codegen import bounds as B
from sparsad.codegen import outputs as O
from sparsad.codegen.ir import Num as B_Num


@njit(cache=True, nogil=True)
def _minmax(a):  # pragma: no cover - compiled
    n = a.shape[0]
    if n == 0:
        return 0, -1, 0
    lo = a[0]
    hi = a[0]
    for i in range(n):  # branch-free: vectorized (an if/elif scan is ~10x slower)
        v = a[i]
        lo = min(lo, v)
        hi = max(hi, v)
    return np.int64(lo), np.int64(hi), n


@njit(cache=True, nogil=True)
def _nondecreasing(pos, m):  # pragma: no cover - compiled
    bad = 0
    for i in range(1, m):  # branch-free count (vectorized)
        bad += pos[i] < pos[i - 1]
    return bad == 0


def array_interval(array: np.ndarray):
    """[min, max] of an int array in one pass, or None when it is empty."""
    lo, hi, n = _minmax(array)
    return None if n == 0 else (int(lo), int(hi))


def _pattern_indptr(pos: np.ndarray, rows: int, nrows: int):
    """`outputs.pattern_rows` when pos[:rows + 1] is non-decreasing, else None (the slow path
    raises)."""
    m = rows + 1
    if m < 1 or m > pos.shape[0] or not _nondecreasing(pos, m):
        return None
    return O.indptr_from_rows(pos[:m], nrows)


class _Emitter:
    def __init__(self):
        self.lines: list[str] = []
        self.names: dict[Any, str] = {}
        self.constants: dict[str, Any] = {}

    def node(self, iv: B.IV) -> str:
        key = ("array", iv.name) if isinstance(iv, B.IArray) else id(iv)
        if key in self.names:
            return self.names[key]
        match iv:
            case B.IConst(value=v):
                code = f"({int(v)}, {int(v)})"
            case B.IScalar(name=n):
                code = f"_point(P[{n!r}])"
            case B.ILen(name=n):
                code = f"_point(P[{n!r}].shape[0])"
            case B.IArray(name=n):
                code = f"_array(P[{n!r}])"
            case B.IRange(start=s, end=e):
                code = f"_range({self.node(s)}, {self.node(e)})"
            case B.IArith(op=op, left=l, right=r):
                code = f"_ops[{op!r}]({self.node(l)}, {self.node(r)})"
            case B.IJoin(left=l, right=r):
                code = f"_join({self.node(l)}, {self.node(r)})"
            case B.IClamp(inner=i, at_least=lo, below=hi):
                bounds = ", ".join("None" if b is None else self.node(b) for b in (lo, hi))
                code = f"_clamp({self.node(i)}, {bounds})"
            case _:
                raise TypeError(f"not an interval expression: {iv!r}")
        name = f"v{len(self.names)}"
        self.names[key] = name
        self.lines.append(f"    {name} = {code}")
        return name

    def fail_unless_within(self, value: str, size: str) -> None:
        self.lines.append(f"    if {value} is not None and ({value}[0] < 0 or {value}[1] >= {size}): return None")


def _point(x):
    x = int(x)
    return (x, x)


def build_guard(kernel) -> Callable[[dict], tuple | None]:
    """The guard function of a `numba_backend.Kernel` (see the module docstring)."""
    loops, plan = kernel.loops, kernel.plan
    em = _Emitter()
    sizes = {}
    for k, container in enumerate(kernel._workspaces):
        value = em.node(container.key_iv)
        sizes[container.name] = f"s{k}"
        em.lines.append(f"    s{k} = 0 if {value} is None else {value}[1] + 1")
    for check in loops.checks:
        value = em.node(check.index)
        size = sizes.get(check.array) or f"P[{check.array!r}].shape[0]"
        em.fail_unless_within(value, size)
    extents = []
    for d in range(loops.depth):
        static = kernel._static_extents[d]
        if static is not None:
            extents.append(str(int(static)))
            continue
        iv = loops.key_ivs[d]
        if iv is None:
            extents.append("None")
            continue
        value = em.node(iv)
        em.lines.append(f"    e{d} = 0 if {value} is None else max({value}[1] + 1, 0)")
        extents.append(f"e{d}")
    indptr = "None"
    if plan.kind == "pattern":
        end, pos_name, _, _ = plan.pattern
        rows = str(int(end.value)) if isinstance(end, B_Num) else f"int(P[{end.name!r}])"
        em.lines.append(f"    indptr = _pattern_indptr(P[{pos_name!r}], {rows}, int({extents[0]}))")
        em.lines.append("    if indptr is None: return None")
        indptr = "indptr"
    if plan.kind in ("dense", "coo", "workspace", "pattern"):
        for d, iv in enumerate(loops.key_ivs):
            if iv is None or extents[d] == "None":
                continue
            em.fail_unless_within(em.node(iv), extents[d])
    size_list = "[" + ", ".join(sizes.values()) + "]"
    # the interval nodes first (evaluated in order of need), then the checks: the emitter
    # appends both in the order of the slow path, so a node is defined before its first use
    source = "\n".join(["def guard(P):", *em.lines,
                        f"    return {size_list}, [{', '.join(extents)}], {indptr}"]) + "\n"
    namespace = dict(_array=array_interval, _point=_point, _range=B.interval_range, _ops=B.INTERVAL_OPS,
                     _join=B.interval_join, _clamp=B.interval_clamp, _pattern_indptr=_pattern_indptr)
    exec(compile(source, "<sparsad guard>", "exec"), namespace)  # noqa: S102 - our own source
    guard = namespace["guard"]
    guard.source = source
    # the parameters whose contents (not only lengths) the checks read: a caller that knows
    # those are unchanged since a call the guard passed may reuse that call's answer
    # (fastcall.RepeatCall.passed)
    guard.reads = frozenset([name for kind, name in (k for k in em.names if isinstance(k, tuple))
                             if kind == "array"] + ([plan.pattern[1]] if plan.kind == "pattern" else []))
    return guard

