"""Dense loop nests of a lowered kernel: long loops innermost, long dot products through BLAS.

Lowering keeps the loop order of the program, so a convolution's derivative iterates the long
signal outside and the short filter inside (`for i < n: for k < m: out[k] += c[i] * x[i + k]`):
every iteration adds into memory the previous one just wrote, and the sum over the long index
never becomes a reduction. Three rewrites of the loop IR fix that, each guarded by a run-time
test on the trip counts (sizes are known only when the kernel runs), so that the original loops
still run where they are the better order:

- **interchange**: a perfect nest of two loops with independent bounds whose innermost
  statements only accumulate (into the dense output or a plain workspace) runs the shorter
  loop outside. Accumulation commutes, so only the order of additions changes (rounding).
- **dot**: a loop that sums `a[base_a + v] * b[base_b + v]` (times factors that do not depend
  on v) into one fixed key becomes one call `rt.dot(a, base_a + start, b, base_b + start, n)`
  (BLAS `ddot` on contiguous float64 slices) once the trip count reaches `DOT_MIN_LENGTH`:
  shorter dot products stay scalar loops, cheaper than a call.
- **matrix-vector products** (`codegen.matvec`): a two-loop nest that is `M @ v` or `u @ M` on a
  dense row-major block becomes one BLAS gemv and a loop adding its result, tried first (the
  nest it replaces still gets the two rewrites above for the sizes under its threshold).

The rewrites change no value beyond rounding (BLAS and the interchanged order add in another
order); tests/codegen/test_dense_loops.py checks them against the interpreter and NumPy.

>>> from sparsad.codegen.ir import Load, Op, Ref, Num
>>> affine_base(Op("+", Ref("i"), Ref("k")), "k")
Ref(name='i')
>>> affine_base(Op("*", Ref("k"), Num(2)), "k") is None
True
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from sparsad.codegen import outputs as O
from sparsad.codegen.ir import (OUTPUT, Accumulate, Assign, Choose, Fn, For, HasKey, IfThen, IRExpr, Length,
                                Load, LocalGet, LoopProgram, Num, Op, Ref, RowGet, RowOf, Stmt, Unary)
from sparsad.codegen.ir_reads import UNKNOWN, affine_base, factors, plus, reads, substitute, trips
from sparsad.codegen.matvec import ProductNests
from sparsad.lang.types import Dict, Real

DOT_MIN_LENGTH = 128  # below it a scalar loop beats the call into BLAS (bench/blas_nests.py)
#: a nest whose swapped inner loop would gather through an assigned index is swapped only when
#: the loop moved outside has fewer trips than this (X W, X sparse with 18 entries a row, W of
#: 1 / 2 / 4 / 8 / 16 columns: swapped 0.36 / 0.59 / 0.99 / 1.26 / 1.49x the time of unswapped)
GATHER_SWAP_BELOW = 4
TARGET_KINDS = ("dense", "scalar")  # output plans whose writes commute and add once per key


@dataclass(frozen=True)
class Dot(IRExpr):
    """sum over t < length of left[left_start + t] * right[right_start + t] (contiguous reads
    of two arrays: an input or a workspace's values, named as the kernel names them)."""
    left: str
    left_start: IRExpr
    right: str
    right_start: IRExpr
    length: IRExpr

    def names_read(self, reads_of: Callable[[IRExpr], frozenset[str]]) -> frozenset[str]:
        return frozenset({self.left, self.right}).union(*(reads_of(e) for e in (self.left_start,
                                                                                 self.right_start, self.length)))

    def emit(self, expr: Callable[[IRExpr], str]) -> str:
        return (f"rt.dot({self.left}, {expr(self.left_start)}, {self.right}, {expr(self.right_start)}, "
                f"{expr(self.length)})")


class _Rewriter:
    def __init__(self, program: LoopProgram, plan: O.OutputPlan, plain: frozenset[str]):
        self.containers = {c.name: c for c in program.containers}
        self.real_arrays = {n for n, t in zip(program.params, program.param_types)
                            if isinstance(t, Dict) and isinstance(t.value, Real)}
        self.output_ok = plan.kind in TARGET_KINDS and program.leaf == "real"
        self.plain = plain
        # a result with a mode sized by the keys written (`OutputPlan.trimmed`) keeps its writes
        # where the loops made them: a product nest may write a key its loops never reached (a dot
        # product runs only from DOT_MIN_LENGTH >= 1 steps, and an interchange writes the same keys)
        trimmed = bool(plan.trimmed)
        self.products = ProductNests(lambda w: self._commuting_target(w) and not (trimmed and w.target == OUTPUT),
                                     self._contiguous, self._container_of)

    def _container_of(self, array: str) -> str:
        """The local container whose values array `array` is (`<name>_val`), or the input itself."""
        if array.endswith("_val") and array[:-4] in self.containers:
            return array[:-4]
        return array

    # -- which writes commute --------------------------------------------------------------

    def _commuting_target(self, write: Accumulate) -> bool:
        if write.target == OUTPUT:
            return self.output_ok
        container = self.containers.get(write.target)
        return (container is not None and write.target in self.plain and container.kind == "workspace"
                and container.leaf == "real" and len(write.keys) == 1)

    def _flat_accumulating(self, body: tuple[Stmt, ...]) -> bool:
        """Assignments and commuting writes only, no write read back in the same body."""
        written = set()
        for stmt in body:
            if isinstance(stmt, Accumulate) and self._commuting_target(stmt):
                written.add(stmt.target)
            elif not isinstance(stmt, Assign):
                return False
        for stmt in body:
            value_reads = reads(stmt.value) | (frozenset().union(*(reads(k) for k in stmt.keys))
                                               if isinstance(stmt, Accumulate) else frozenset())
            if value_reads & (written | {UNKNOWN}):
                return False
        return True

    # -- interchange ------------------------------------------------------------------------

    def interchange(self, loop: For) -> Stmt | None:
        """The nest with its inner loop outside, chosen at run time when the inner loop is
        shorter (None when the rule does not apply)."""
        *assigns, inner = loop.body or (None,)
        if not isinstance(inner, For) or not all(isinstance(a, Assign) for a in assigns):
            return None
        bound_outside = {loop.var} | {a.name for a in assigns}
        if (reads(inner.start) | reads(inner.end)) & (bound_outside | {UNKNOWN}):
            return None
        if inner.var in (reads(loop.start) | reads(loop.end)):
            return None
        if not self._flat_accumulating((*assigns, *inner.body)):
            return None
        if not all(_cheap(a.value) for a in assigns):
            return None  # the swapped nest computes them once per inner iteration
        if not all(_contiguous_or_fixed(index, loop.var) for stmt in (*assigns, *inner.body)
                   for index in _memory_indices(stmt)):
            return None  # the swapped inner loop would stride through memory
        swapped = For(inner.var, inner.start, inner.end,
                      (For(loop.var, loop.start, loop.end, (*assigns, *inner.body)),))
        shorter = Op("<", trips(inner), trips(loop))
        # an index through a name assigned in the nest (j = idx[p]; ... W[j * m + c]) varies
        # with the loop as that name's value does: judged with the assignments substituted, the
        # swapped loop gathers with a stride, which pays only while the loop it moves outside
        # is very short (sparse X times dense W: faster swapped below 4 columns, slower from 8)
        bound = [s for s in (*assigns, *inner.body) if isinstance(s, Assign)]
        if not all(index is not None and _contiguous_or_fixed(index, loop.var)
                   for stmt in (*assigns, *inner.body)
                   for index in (_through(i, bound) for i in _memory_indices(stmt))):
            shorter = Op("and", shorter, Op("<", trips(inner), Num(GATHER_SWAP_BELOW)))
        return IfThen(shorter, (swapped,), (loop,))

    # -- dot products -----------------------------------------------------------------------

    def _contiguous(self, read: IRExpr, var: str) -> tuple[str, IRExpr] | None:
        """(array as the kernel names it, base) of a stride-1 real read in var."""
        match read:
            case Load(array=a, index=i, guarded=False) if a in self.real_arrays:
                base = affine_base(i, var)
                return None if base is None else (a, base)
            case LocalGet(container=c, key=k, proven=True):
                container = self.containers.get(c)
                if container is None or container.kind != "workspace" or container.leaf != "real":
                    return None
                base = affine_base(k, var)
                return None if base is None else (f"{c}_val", base)
        return None

    def dot(self, loop: For) -> Stmt | None:
        """The loop as one dot product when it is long enough (None when the rule does not apply)."""
        *assigns, write = loop.body or (None,)
        if not isinstance(write, Accumulate) or not all(isinstance(a, Assign) for a in assigns):
            return None
        if not self._commuting_target(write):
            return None
        varying = {loop.var} | {a.name for a in assigns}
        if any(reads(k) & (varying | {UNKNOWN}) for k in write.keys):
            return None
        value = write.value
        for a in reversed(assigns):  # the written value in terms of the loop variable
            value = substitute(value, a.name, a.value)
            if value is None:
                return None
        if write.target in reads(value):
            return None  # the sum reads what it writes: its order matters
        parts = factors(value)
        varying_factors = [f for f in parts if reads(f) & (varying | {UNKNOWN})]
        if len(varying_factors) != 2:
            return None
        operands = [self._contiguous(f, loop.var) for f in varying_factors]
        if any(o is None for o in operands):
            return None
        (left, left_base), (right, right_base) = operands
        length = trips(loop)
        total: IRExpr = Dot(left, plus(left_base, loop.start), right, plus(right_base, loop.start), length)
        for factor in parts:
            if factor not in varying_factors:
                total = Op("*", factor, total)
        long_enough = Op("<=", Num(DOT_MIN_LENGTH), length)
        return IfThen(long_enough, (replace(write, value=total),), (loop,))

    # -- the walk ---------------------------------------------------------------------------

    def block(self, stmts: tuple[Stmt, ...]) -> tuple[Stmt, ...]:
        return tuple(self.stmt(s) for s in stmts)

    def stmt(self, s: Stmt) -> Stmt:
        if isinstance(s, For):
            as_product = (self.products.matmat(s) or self.products.rewrite(s) or self.products.hoist(s)
                          or self.products.scatter(s))
            if as_product is not None:  # the original nest stays for small sizes, rewritten as below
                return IfThen(as_product.cond, self.block(as_product.then), (self._nest(s),))
            return self._nest(s)
        if isinstance(s, IfThen):
            return IfThen(s.cond, self.block(s.then), self.block(s.orelse))
        if hasattr(s, "body"):
            return replace(s, body=self.block(s.body))
        return s

    def _nest(self, s: For) -> Stmt:
        swapped = self.interchange(s)
        if swapped is not None:
            fast, original = swapped.then[0], swapped.orelse[0]
            return IfThen(swapped.cond, (self._loop(fast),), (self._loop(original),))
        return self._loop(s)

    def _loop(self, loop: For) -> Stmt:
        loop = replace(loop, body=self.block(loop.body))
        as_dot = self.dot(loop)
        return loop if as_dot is None else as_dot


def _memory_indices(stmt: Stmt) -> list[tuple[IRExpr, ...]]:
    """The index of every memory access of a statement, outermost key first."""
    found: list[tuple[IRExpr, ...]] = []

    def visit(e: IRExpr) -> None:
        match e:
            case Load(index=i) | LocalGet(key=i):
                found.append((i,))
                visit(i)
            case Op(left=l, right=r):
                visit(l)
                visit(r)
            case Unary(operand=o):
                visit(o)
            case Fn(args=args):
                for a in args:
                    visit(a)
            case Choose(cond=c, then=t, orelse=o):
                for part in (c, t, o):
                    visit(part)
            case RowGet() | RowOf() | HasKey():
                found.append((Ref(UNKNOWN),))  # a hash lookup: never contiguous

    visit(stmt.value)
    if isinstance(stmt, Accumulate):
        found.append(stmt.keys)
        for key in stmt.keys:
            visit(key)
    return found


def _through(index: tuple[IRExpr, ...], assigns: list[Assign]) -> tuple[IRExpr, ...] | None:
    """The index with the assigned names replaced by their values, latest assignment first
    (None where an expression cannot be substituted)."""
    keys = []
    for key in index:
        for assign in reversed(assigns):
            key = substitute(key, assign.name, assign.value) if key is not None else None
        if key is None:
            return None
        keys.append(key)
    return tuple(keys)


def _contiguous_or_fixed(index: tuple[IRExpr, ...], var: str) -> bool:
    """Whether consecutive values of var read consecutive addresses (or one address): var
    only in the last key, with stride 1."""
    if any(var in reads(key) or UNKNOWN in reads(key) for key in index[:-1]):
        return False
    if not index:
        return True
    last = reads(index[-1])
    return UNKNOWN not in last and (var not in last or affine_base(index[-1], var) is not None)


def _cheap(e: IRExpr) -> bool:
    """Arithmetic on loads and names: cheap to repeat (no function call, no hash lookup)."""
    match e:
        case Num() | Ref() | Length():
            return True
        case Op(left=l, right=r):
            return _cheap(l) and _cheap(r)
        case Unary(operand=o):
            return _cheap(o)
        case Load(index=i) | LocalGet(key=i):
            return _cheap(i)
    return False


def rewrite_dense_loops(program: LoopProgram, plan: O.OutputPlan, plain: frozenset[str]) -> LoopProgram:
    """The loop program with short-outside nests interchanged and long dot products through
    BLAS (each under a run-time test of the trip counts). `plain`: the workspaces that are
    filled once and only looked up (`numba_backend.plain_workspaces`)."""
    body = _Rewriter(program, plan, plain).block(program.body)
    return program if body == program.body else replace(program, body=body)


__all__ = ["Dot", "DOT_MIN_LENGTH", "affine_base", "reads", "rewrite_dense_loops"]
