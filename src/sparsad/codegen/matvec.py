"""Dense matrix products of loop nests through one BLAS call.

A dense matrix is a flat row-major array in the loop IR, so `M @ v` lowers to a nest that sums
one row at a time (`for i: for j: out[i] += M[i*C + j] * v[j]`) and `u @ M` to a nest that
adds scaled rows (`for i: for j: out[j] += u[i] * M[i*C + j]`). Numba runs the first as a scalar
reduction (it may not reorder floating additions), several times slower than BLAS `dgemv`.
`ProductNests` rewrites four shapes of loops (`codegen.dense_loops` tries them on every loop):

- `matmat`: a perfect nest of three loops adding `A[p, s] * B[s, q]` at keys of p and q becomes
  one `rt.matmat` (dgemm, either block transposed) and two loops adding its result;
- `rewrite`: a perfect nest of two loops that is `M @ v` or `u @ M` (the matrix read along its
  rows or its columns, `M[j*C + i]`) becomes

      _blas_k = rt.matvec(M, m0, rows, cols, C, v, v0)      # or rt.vecmat: the transposed product
      for kept in range(...): target[key(kept)] += f(kept) * _blas_k[kept - start]

- `hoist`: a row loop's inner loop that sums a row against a vector into a scalar
  (`acc += M[i*C + j] * x[j]`) reads one `rt.matvec` computed before the row loop;
- `scatter`: a row loop's inner loop that adds a scaled row into a target nothing in the loop
  reads stores the row's weight instead; one `rt.vecmat` after the loop adds the product.

Each runs under a run-time test of the block's size (small blocks keep the loops, cheaper than a
call) and that its rows follow each other (stride == cols: a column block of a wider matrix
keeps the loops). Targets are those whose writes commute (the dense output, a plain real
workspace); the product never reads what the rewritten loops write. Only the order of additions
changes (rounding); the runtime helpers call BLAS on contiguous float64 blocks and run scalar
loops summing in float64 otherwise (float32 inputs, gaps between rows). Thresholds:
bench/blas_nests.py; tests: tests/codegen/test_matvec.py.

>>> from sparsad.codegen.ir import Op, Ref, Num
>>> stride_of(Op("+", Op("*", Ref("i"), Ref("C")), Num(3)), "i")
(Ref(name='C'), Num(value=3))
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from sparsad.codegen.ir import (AddTo, Accumulate, Assign, Fill, For, ForItems, IfThen, IRExpr, Load, Num, Op,
                                Ref, Stmt)
from sparsad.codegen.ir_reads import UNKNOWN, factors, plus, reads, substitute, times, trips

# Below these sizes (rows * cols) the scalar nest beats a call into BLAS (bench/blas_nests.py:
# the row-sum nest loses from ~32 x 32 on, the scaled-row nest, which Numba vectorises, from ~64 x 64)
MATVEC_MIN_SIZE = 2048
VECMAT_MIN_SIZE = 4096
MATMAT_MIN_SIZE = 8192  # rows * inner * cols of a matrix product (a gemm wins from ~32 x 16 x 16)


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


@dataclass(frozen=True)
class NewVector(IRExpr):
    """A new float64 array of `length` (none when negative), filled by `Store`s."""
    length: IRExpr

    def emit(self, expr: Callable[[IRExpr], str]) -> str:
        return f"np.empty(max({expr(self.length)}, 0), np.float64)"

    def names_read(self, reads_of: Callable[[IRExpr], frozenset[str]]) -> frozenset[str]:
        return reads_of(self.length)


@dataclass(frozen=True)
class Store(Stmt):
    """`array[index] = value` into a vector made by `NewVector` (index within its length)."""
    array: str
    index: IRExpr
    value: IRExpr

    def emit_lines(self, expr: Callable[[IRExpr], str]) -> list[str]:
        return [f"{self.array}[{expr(self.index)}] = {expr(self.value)}"]


@dataclass(frozen=True)
class Block:
    """A row-major block of an array: block[r, t] = array[start + r * stride + t], rows x cols,
    used transposed when `transposed` (the kernel's array name)."""
    array: str
    start: IRExpr
    rows: IRExpr
    cols: IRExpr
    stride: IRExpr
    transposed: bool

    def code(self, expr: Callable[[IRExpr], str]) -> str:
        return (f"{self.array}, {expr(self.start)}, {expr(self.rows)}, {expr(self.cols)}, {expr(self.stride)}, "
                f"{self.transposed}")

    def expressions(self) -> tuple[IRExpr, ...]:
        return self.start, self.rows, self.cols, self.stride


@dataclass(frozen=True)
class MatMat(IRExpr):
    """A new flat row-major float64 array: op(left) @ op(right) of two blocks."""
    left: Block
    right: Block
    depends: tuple[str, ...] = ()

    def emit(self, expr: Callable[[IRExpr], str]) -> str:
        return f"rt.matmat({self.left.code(expr)}, {self.right.code(expr)})"

    def names_read(self, reads_of: Callable[[IRExpr], frozenset[str]]) -> frozenset[str]:
        names = frozenset({self.left.array, self.right.array, *self.depends})
        return names.union(*(reads_of(e) for e in (*self.left.expressions(), *self.right.expressions())))


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
        name = self._name()
        kept_loop = loops[kept]
        result: IRExpr = Load(name, _offset(Ref(kept), kept_loop.start))
        for f in parts:
            if f is not matrix_read and f is not vector_read:
                result = times(f, result)
        residual = For(kept, kept_loop.start, kept_loop.end, (replace(write, keys=keys, value=result),))
        return IfThen(self._test(total, minimum), (Assign(name, total), residual), (outer,))

    def matmat(self, outer: For) -> Stmt | None:
        """A perfect nest of three loops adding `A[p, s] * B[s, q]` (times factors free of s) into
        a target at keys of p and q, whatever the loop order and the blocks' orientations, as one
        BLAS gemm and two loops adding its result, under a size test (None otherwise)."""
        chain, level = [], outer
        assigns: list[Assign] = []
        for _ in range(3):
            if not isinstance(level, For):
                return None
            *head, last = level.body or (None,)
            if not all(isinstance(a, Assign) for a in head):
                return None
            chain.append(level)
            assigns += head
            level = last
        write = level
        if not isinstance(write, Accumulate) or not self.commuting(write):
            return None
        loops = {loop.var: loop for loop in chain}
        bound = set(loops) | {a.name for a in assigns} | {UNKNOWN}
        if any((reads(loop.start) | reads(loop.end)) & bound for loop in chain):
            return None
        value, keys = write.value, write.keys
        for a in reversed(assigns):
            value = substitute(value, a.name, a.value)
            keys = tuple(substitute(k, a.name, a.value) for k in keys)
            if value is None or any(k is None for k in keys):
                return None
        if write.target in reads(value) or UNKNOWN in reads(value) or any(UNKNOWN in reads(k) for k in keys):
            return None
        key_vars = [v for v in loops if any(v in reads(k) for k in keys)]
        if len(key_vars) != 2:
            return None
        p, q = key_vars
        summed = next(v for v in loops if v not in key_vars)
        parts = factors(value)
        with_s = [f for f in parts if summed in reads(f)]
        left = next((f for f in with_s if p in reads(f) and q not in reads(f)), None)
        right = next((f for f in with_s if q in reads(f) and p not in reads(f)), None)
        if len(with_s) != 2 or left is None or right is None:
            return None
        left_block = self._block(left, (p, summed), loops)
        right_block = self._block(right, (summed, q), loops)
        if left_block is None or right_block is None:
            return None
        arrays = {self.container_of(left_block.array), self.container_of(right_block.array)}
        total = MatMat(left_block, right_block, tuple(sorted(arrays)))
        name = self._name()
        width = trips(loops[q])
        at = plus(times(_offset(Ref(p), loops[p].start), width), _offset(Ref(q), loops[q].start))
        result: IRExpr = Load(name, at)
        for f in parts:
            if f is not left and f is not right:
                result = times(f, result)
        residual = For(p, loops[p].start, loops[p].end,
                       (For(q, loops[q].start, loops[q].end, (replace(write, keys=keys, value=result),)),))
        size = Op("*", Op("*", trips(loops[p]), trips(loops[summed])), width)
        test: IRExpr = Op("<=", Num(MATMAT_MIN_SIZE), size)
        for block in (left_block, right_block):
            if block.stride != block.cols:
                test = Op("and", test, Op("==", block.stride, block.cols))
        return IfThen(test, (Assign(name, total), residual), (outer,))

    def _block(self, read: IRExpr, shape: tuple[str, str], loops: dict[str, For]) -> Block | None:
        """The block a read sweeps, oriented so that its rows run over shape[0] and its columns
        over shape[1] (None when the read is not a row-major block in those variables)."""
        for column_var, row_var in (shape[::-1], shape):
            found = self.contiguous(read, column_var)
            if found is None:
                continue
            split = stride_of(found[1], row_var)
            if split is None or split[0] == Num(1):
                continue
            stride, rest = split
            if (reads(stride) | reads(rest)) & (set(loops) | {UNKNOWN}):
                continue
            rows_loop, cols_loop = loops[row_var], loops[column_var]
            start = plus(plus(rest, times(rows_loop.start, stride)), cols_loop.start)
            return Block(found[0], start, trips(rows_loop), trips(cols_loop), stride, row_var != shape[0])
        return None

    def hoist(self, outer: For) -> Stmt | None:
        """The row loop with each inner loop that sums one row of a matrix against a vector into a
        scalar (`acc += M[i*C + j] * x[j]`, the lowering of `sum(<j, a> in r) a * x(j)` inside a
        row's expression) replaced by a read of one product computed before the loop, under a
        size test (None when no inner loop qualifies). The product's reads must not change in the
        loop: they read no name the loop binds or writes but the row variable."""
        bound = _bound(outer.body) | {outer.var}
        written = _written(outer.body)
        before, body, tests = [], [], []
        for stmt in outer.body:
            hoisted = self._row_sum(stmt, outer, bound, written) if isinstance(stmt, For) else None
            if hoisted is None:
                body.append(stmt)
                continue
            assign, replacement, test = hoisted
            before.append(assign)
            body.append(replacement)
            tests.append(test)
        if not before:
            return None
        test = tests[0]
        for more in tests[1:]:
            test = Op("and", test, more)
        return IfThen(test, (*before, replace(outer, body=tuple(body))), (outer,))

    def _row_sum(self, inner: For, outer: For, bound: set[str], written: set[str]):
        *assigns, add = inner.body or (None,)
        if not isinstance(add, AddTo) or not all(isinstance(a, Assign) for a in assigns):
            return None
        if (reads(inner.start) | reads(inner.end)) & (bound | {UNKNOWN}):
            return None
        value = add.value
        for a in reversed(assigns):
            value = substitute(value, a.name, a.value)
            if value is None:
                return None
        if add.name in reads(value):
            return None
        i, j = outer.var, inner.var
        parts = factors(value)
        with_j = [f for f in parts if j in reads(f)]
        if len(with_j) != 2 or UNKNOWN in reads(value):
            return None
        matrix_read = next((f for f in with_j if i in reads(f)), None)
        vector_read = next((f for f in with_j if i not in reads(f)), None)
        if matrix_read is None or vector_read is None:
            return None
        changing = (bound - {i, j}) | written
        if (reads(matrix_read) | reads(vector_read)) & changing:
            return None  # the product would read a value the loop changes
        product = self._product(matrix_read, vector_read, {i: outer, j: inner}, i, j)
        if product is None:
            return None
        total, minimum = product
        name = self._name()
        result: IRExpr = Load(name, _offset(Ref(i), outer.start))
        for f in parts:
            if f is not matrix_read and f is not vector_read:
                result = times(f, result)
        return Assign(name, total), AddTo(add.name, result), self._test(total, minimum)

    def scatter(self, outer: For) -> Stmt | None:
        """The row loop with each inner loop that adds a scaled row of a matrix into a target
        nothing in the loop reads (`out[j] += M[i*C + j] * w`, w free of j: the transposed
        product of a backward pass) split off: the loop stores each row's weight w into a vector,
        and one product of that vector with the matrix is added after it, under a size test
        (None when no inner loop qualifies)."""
        bound = _bound(outer.body) | {outer.var}
        written = _written(outer.body)
        read = _block_reads(outer.body)
        before, body, after, tests = [], [], [], []
        for stmt in outer.body:
            split = (self._scaled_rows(stmt, outer, bound, written, read) if isinstance(stmt, For)
                     and not before else None)  # one per loop: its weights fill one vector
            if split is None:
                body.append(stmt)
                continue
            weights, store, product, residual, test = split
            before.append(weights)
            body.append(store)
            after += [product, residual]
            tests.append(test)
        if not before:
            return None
        return IfThen(tests[0], (*before, replace(outer, body=tuple(body)), *after), (outer,))

    def _scaled_rows(self, inner: For, outer: For, bound: set[str], written: set[str], read: frozenset[str]):
        *assigns, write = inner.body or (None,)
        if not isinstance(write, Accumulate) or not all(isinstance(a, Assign) for a in assigns):
            return None
        if not self.commuting(write) or write.target in read or UNKNOWN in read:
            return None  # something in the loop reads the target: its additions must stay in place
        i, j = outer.var, inner.var
        if (reads(inner.start) | reads(inner.end)) & (bound | {UNKNOWN}):
            return None
        value, keys = write.value, write.keys
        for a in reversed(assigns):
            value = substitute(value, a.name, a.value)
            keys = tuple(substitute(k, a.name, a.value) for k in keys)
            if value is None or any(k is None for k in keys):
                return None
        changing = (bound - {j}) | written  # names whose value differs after the loop
        if any(reads(k) & (changing | {UNKNOWN}) for k in keys) or UNKNOWN in reads(value):
            return None
        parts = factors(value)
        at = next((n for n, f in enumerate(parts) if {i, j} <= reads(f)), None)
        if at is None or (reads(parts[at]) - {i, j}) & changing:
            return None
        matrix_read = parts[at]
        others = parts[:at] + parts[at + 1:]  # by position: a factor may be the same node twice (a * a)
        later = [f for f in others if j in reads(f)]  # evaluated after the loop
        weight = [f for f in others if j not in reads(f)]  # evaluated per row
        if any(reads(f) & changing for f in later):
            return None
        vector = self._name()
        product = self._block_product(matrix_read, vector, Num(0), {i: outer, j: inner}, j, i)
        if product is None or not product[0].transposed:
            return None
        total, minimum = product
        row_weight: IRExpr = Num(1.0)
        for f in weight:
            row_weight = times(f, row_weight)
        name = self._name()
        result: IRExpr = Load(name, _offset(Ref(j), inner.start))
        for f in later:
            result = times(f, result)
        residual = For(j, inner.start, inner.end, (replace(write, keys=keys, value=result),))
        return (Assign(vector, NewVector(trips(outer))), Store(vector, _offset(Ref(i), outer.start), row_weight),
                Assign(name, total), residual, self._test(total, minimum))

    def _name(self) -> str:
        name = f"_blas_{self.count}"
        self.count += 1
        return name

    @staticmethod
    def _test(total: MatVec, minimum: int) -> IRExpr:
        test: IRExpr = Op("<=", Num(minimum), Op("*", total.rows, total.cols))
        if total.stride != total.cols:  # rows that overlap or leave gaps (a convolution) stay loops
            test = Op("and", test, Op("==", total.stride, total.cols))
        return test

    def _product(self, matrix_read: IRExpr, vector_read: IRExpr, loops: dict[str, For], kept: str,
                 summed: str) -> tuple[MatVec, int] | None:
        vector = self.contiguous(vector_read, summed)
        if vector is None:
            return None
        return self._block_product(matrix_read, vector[0], plus(vector[1], loops[summed].start), loops, kept,
                                   summed)

    def _block_product(self, matrix_read: IRExpr, vector_array: str, vector_start: IRExpr,
                       loops: dict[str, For], kept: str, summed: str) -> tuple[MatVec, int] | None:
        """The product of the block the matrix read sweeps with a vector (None when the read is
        not a row-major block: stride 1 in one loop variable, an invariant stride in the other)."""
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
            node = MatVec(matrix[0], start, trips(rows_loop), trips(cols_loop), stride, vector_array,
                          vector_start, transposed,
                          tuple(sorted({self.container_of(matrix[0]), self.container_of(vector_array)})))
            return node, VECMAT_MIN_SIZE if transposed else MATVEC_MIN_SIZE
        return None


def _bound(stmts) -> set[str]:
    """Every name a block binds: assigned or summed names, loop variables (any depth)."""
    names: set[str] = set()
    for stmt in stmts:
        match stmt:
            case Assign(name=n) | AddTo(name=n):
                names.add(n)
            case For(var=v, body=b):
                names |= {v} | _bound(b)
            case ForItems(key=k, value=v, body=b):
                names |= {k, v} | _bound(b)
            case IfThen(then=t, orelse=o):
                names |= _bound(t) | _bound(o)
            case _ if not isinstance(stmt, (Accumulate, Fill, Store)):
                names.add(UNKNOWN)  # a statement this module does not know
    return names


def _written(stmts) -> set[str]:
    """Every container or output a block writes or empties (any depth)."""
    names: set[str] = set()
    for stmt in stmts:
        match stmt:
            case Accumulate(target=t):
                names.add(t)
            case Fill(container=c) | Store(array=c):
                names.add(c)
            case For(body=b) | ForItems(body=b):
                names |= _written(b)
            case IfThen(then=t, orelse=o):
                names |= _written(t) | _written(o)
    return names


def _block_reads(stmts) -> frozenset[str]:
    """Every name a block reads: in values, keys, bounds and the containers it iterates."""
    names: set[str] = set()
    for stmt in stmts:
        match stmt:
            case Assign(value=v) | AddTo(value=v):
                names |= reads(v)
            case Accumulate(keys=keys, value=v):
                names |= reads(v).union(*(reads(k) for k in keys))
            case For(start=a, end=b, body=body):
                names |= reads(a) | reads(b) | _block_reads(body)
            case ForItems(container=c, body=body):
                names |= {c} | _block_reads(body)
            case IfThen(cond=c, then=t, orelse=o):
                names |= reads(c) | _block_reads(t) | _block_reads(o)
            case Store(index=k, value=v):
                names |= reads(k) | reads(v)
            case Fill():
                pass
            case _:
                names.add(UNKNOWN)
    return frozenset(names)


def _offset(var: Ref, start: IRExpr) -> IRExpr:
    return var if start == Num(0) else Op("-", var, start)


__all__ = ["Block", "MATMAT_MIN_SIZE", "MATVEC_MIN_SIZE", "MatMat", "MatVec", "NewVector", "ProductNests", "Store", "VECMAT_MIN_SIZE", "stride_of"]
