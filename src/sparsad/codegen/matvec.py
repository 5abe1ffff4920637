"""Dense matrix-vector products of loop nests through one BLAS call.

A dense matrix is a flat row-major array in the loop IR, so `M @ v` lowers to a nest that sums
one row at a time (`for i: for j: out[i] += M[i*C + j] * v[j]`) and `u @ M` to a nest that
adds scaled rows (`for i: for j: out[j] += u[i] * M[i*C + j]`). Numba runs the first as a scalar
reduction (it may not reorder floating additions), several times slower than BLAS `dgemv`.

`product_nest` recognises such a perfect nest of two `For` loops, whatever the loop order and
whether the matrix is read along its rows or its columns (`M[j*C + i]`), and rewrites it as

    _blas_k = rt.matvec(M, m0, rows, cols, C, v, v0)      # or rt.vecmat: the transposed product
    for kept in range(...): target[key(kept)] += f(kept) * _blas_k[kept - start]

under a run-time test of the block's size (small blocks keep the scalar nest, cheaper than a
call) and that its rows follow each other (stride == cols: a column block of a wider matrix
keeps the nest). It applies when the nest only accumulates into a target whose writes commute (the dense
output or a plain real workspace, never read in the nest), the write's key depends on one loop
variable (or none: a scalar), and the summed value is a product of the matrix read, one stride-1
read in the summed variable, and factors free of the summed variable. Only the order of
additions changes (rounding); `rt.matvec` calls BLAS on contiguous float64 blocks whose rows
follow each other and runs a float64 scalar loop otherwise (float32 inputs, gaps between rows).

>>> from sparsad.codegen.ir import Op, Ref, Num
>>> stride_of(Op("+", Op("*", Ref("i"), Ref("C")), Num(3)), "i")
(Ref(name='C'), Num(value=3))
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from sparsad.codegen.ir import Accumulate, Assign, For, IfThen, IRExpr, Load, Num, Op, Ref, Stmt
from sparsad.codegen.ir_reads import UNKNOWN, factors, plus, reads, substitute, times, trips

# Below these sizes (rows * cols) the scalar nest beats a call into BLAS (bench/blas_nests.py:
# the row-sum nest loses from ~32 x 32 on, the scaled-row nest, which Numba vectorises, from ~64 x 64)
MATVEC_MIN_SIZE = 2048
VECMAT_MIN_SIZE = 4096


@dataclass(frozen=True)
class MatVec(IRExpr):
    """A new float64 vector: block @ vector (length rows) or, transposed, vector @ block (length
    cols), where block[r, t] = matrix[start + r * stride + t] and the vector is read from
    vector_start on (arrays named as the kernel names them)."""
    matrix: str
    start: IRExpr
    rows: IRExpr
    cols: IRExpr
    stride: IRExpr
    vector: str
    vector_start: IRExpr
    transposed: bool
    depends: tuple[str, ...] = ()  # the containers the arrays belong to (for dependence tests)

    def emit(self, expr: Callable[[IRExpr], str]) -> str:
        block = f"{self.matrix}, {expr(self.start)}, {expr(self.rows)}, {expr(self.cols)}, {expr(self.stride)}"
        vector = f"{self.vector}, {expr(self.vector_start)}"
        return f"rt.vecmat({vector}, {block})" if self.transposed else f"rt.matvec({block}, {vector})"

    def names_read(self, reads_of: Callable[[IRExpr], frozenset[str]]) -> frozenset[str]:
        names = frozenset({self.matrix, self.vector, *self.depends})
        return names.union(*(reads_of(e) for e in (self.start, self.rows, self.cols, self.stride,
                                                    self.vector_start)))


def stride_of(address: IRExpr, var: str) -> tuple[IRExpr, IRExpr] | None:
    """(stride, rest) when address == var * stride + rest with stride and rest free of var."""
    terms = _terms(address)
    if terms is None:
        return None
    with_var = [t for t in terms if var in reads(t)]
    if len(with_var) != 1:
        return None
    match with_var[0]:
        case Op(op="*", left=Ref(name=n), right=s) if n == var and var not in reads(s):
            stride = s
        case Op(op="*", left=s, right=Ref(name=n)) if n == var and var not in reads(s):
            stride = s
        case Ref(name=n) if n == var:
            stride = Num(1)
        case _:
            return None
    rest: IRExpr = Num(0)
    for t in terms:
        if t is not with_var[0]:
            rest = plus(rest, t)
    return stride, rest


def _terms(e: IRExpr) -> list[IRExpr] | None:
    if isinstance(e, Op) and e.op == "+":
        left, right = _terms(e.left), _terms(e.right)
        return None if left is None or right is None else left + right
    if isinstance(e, Op) and e.op == "-":
        return None
    return [e]


class ProductNests:
    """Rewrites matrix-vector nests of one kernel (numbering the temporaries it introduces).

    `commuting(write)`: whether a write's target adds once per key in any order;
    `contiguous(read, var)`: (array, base) of a stride-1 real read `array[base + var]`, else None;
    `depends(array)`: the container an array belongs to (itself for an input)."""

    def __init__(self, commuting: Callable[[Accumulate], bool],
                 contiguous: Callable[[IRExpr, str], tuple[str, IRExpr] | None],
                 container_of: Callable[[str], str]):
        self.commuting = commuting
        self.contiguous = contiguous
        self.container_of = container_of
        self.count = 0

    def rewrite(self, outer: For) -> Stmt | None:
        """The nest as one product and a loop over the kept variable, under a size test (None
        when the nest is not a matrix-vector product)."""
        *outer_assigns, inner = outer.body or (None,)
        if not isinstance(inner, For) or not all(isinstance(a, Assign) for a in outer_assigns):
            return None
        *inner_assigns, write = inner.body or (None,)
        if not isinstance(write, Accumulate) or not all(isinstance(a, Assign) for a in inner_assigns):
            return None
        if not self.commuting(write):
            return None
        bound = {outer.var} | {a.name for a in outer_assigns}
        if (reads(inner.start) | reads(inner.end)) & (bound | {UNKNOWN}):
            return None
        if inner.var in reads(outer.start) | reads(outer.end):
            return None
        value, keys = write.value, write.keys
        for a in reversed((*outer_assigns, *inner_assigns)):  # in terms of the loop variables
            value = substitute(value, a.name, a.value)
            keys = tuple(substitute(k, a.name, a.value) for k in keys)
            if value is None or any(k is None for k in keys):
                return None
        if write.target in reads(value) or UNKNOWN in reads(value):
            return None
        loops = {outer.var: outer, inner.var: inner}
        key_vars = set().union(*(reads(k) for k in keys)) & set(loops) if keys else set()
        if any(UNKNOWN in reads(k) for k in keys) or len(key_vars) == 2:
            return None
        kept = key_vars.pop() if key_vars else outer.var
        summed = inner.var if kept == outer.var else outer.var
        parts = factors(value)
        with_summed = [f for f in parts if summed in reads(f)]
        if len(with_summed) != 2:
            return None
        matrix_read = next((f for f in with_summed if kept in reads(f)), None)
        vector_read = next((f for f in with_summed if kept not in reads(f)), None)
        if matrix_read is None or vector_read is None:
            return None
        product = self._product(matrix_read, vector_read, loops, kept, summed)
        if product is None:
            return None
        total, minimum = product
        name = f"_blas_{self.count}"
        self.count += 1
        kept_loop = loops[kept]
        result: IRExpr = Load(name, _offset(Ref(kept), kept_loop.start))
        for f in parts:
            if f is not matrix_read and f is not vector_read:
                result = times(f, result)
        residual = For(kept, kept_loop.start, kept_loop.end, (replace(write, keys=keys, value=result),))
        test: IRExpr = Op("<=", Num(minimum), Op("*", total.rows, total.cols))
        if total.stride != total.cols:  # rows that overlap or leave gaps (a convolution) stay loops
            test = Op("and", test, Op("==", total.stride, total.cols))
        return IfThen(test, (Assign(name, total), residual), (outer,))

    def _product(self, matrix_read: IRExpr, vector_read: IRExpr, loops: dict[str, For], kept: str,
                 summed: str) -> tuple[MatVec, int] | None:
        vector = self.contiguous(vector_read, summed)
        if vector is None:
            return None
        for column_var, row_var in ((summed, kept), (kept, summed)):  # the matrix's stride-1 variable
            matrix = self.contiguous(matrix_read, column_var)
            if matrix is None:
                continue
            split = stride_of(matrix[1], row_var)
            if split is None:
                continue
            stride, rest = split
            if stride == Num(1):
                continue  # overlapping rows (a convolution): dot products serve it better
            if reads(stride) & (set(loops) | {UNKNOWN}) or reads(rest) & (set(loops) | {UNKNOWN}):
                continue
            rows_loop, cols_loop = loops[row_var], loops[column_var]
            start = plus(plus(rest, times(rows_loop.start, stride)), cols_loop.start)
            transposed = column_var == kept  # summing down the columns: vector @ block
            vector_array, vector_base = vector
            node = MatVec(matrix[0], start, trips(rows_loop), trips(cols_loop), stride, vector_array,
                          plus(vector_base, loops[summed].start), transposed,
                          tuple(sorted({self.container_of(matrix[0]), self.container_of(vector_array)})))
            return node, VECMAT_MIN_SIZE if transposed else MATVEC_MIN_SIZE
        return None


def _offset(var: Ref, start: IRExpr) -> IRExpr:
    return var if start == Num(0) else Op("-", var, start)


__all__ = ["MATVEC_MIN_SIZE", "MatVec", "ProductNests", "VECMAT_MIN_SIZE", "stride_of"]
