"""Results on a sparse input's pattern when the row's limits are bound to locals (codegen.pattern_outputs)."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import sparsad
from sparsad.codegen import compile_physical
from sparsad.codegen.ir import AddTo, Assign, Accumulate, For, Load, Num, Op, Ref, OUTPUT
from sparsad.codegen.pattern_outputs import loop_limits_inlined_in
from sparsad.lang.interpret import evaluate
from sparsad.lang.parse import parse
from sparsad.lang.values import values_equal

# the optimized form of a logistic regression's gradient w.r.t. its design matrix: the row's
# slice is bound once and read twice (a forward row sum, then the writes of the gradient)
ROW_SCALED = parse("""
sum(<_, i> in (0:X_len))
  let s = X_idx(X_pos(i):X_pos(i + 1)) in
  let g = y(i) * sigmoid(sum(<p, j> in s) X_val(p) * w(j)) in
  sum(<_, k> in s) { unique(i) -> { unique(k) -> g * w(k) } }""")

LOGREG = "sum(<i, r> in X) softplus(-y(i) * sum(<j, a> in r) a * w(j))"
PREDICT = "sum(<i, r> in X) { i -> sigmoid(sum(<j, a> in r) a * w(j)) }"


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


@st.composite
def design_matrices(draw):
    """A CSR matrix with empty rows, explicit zeros and sorted unique columns per row."""
    rows, cols = draw(st.integers(1, 7)), draw(st.integers(1, 6))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    mask = rng.random((rows, cols)) < draw(st.sampled_from([0.0, 0.2, 0.5, 1.0]))
    coords = np.argwhere(mask)
    values = rng.standard_normal(len(coords))
    values[rng.random(len(coords)) < 0.25] = 0.0  # explicit zeros: stored entries all the same
    indptr = np.searchsorted(coords[:, 0], np.arange(rows + 1)) if len(coords) else np.zeros(rows + 1, int)
    matrix = sp.csr_matrix((values, coords[:, 1].astype(np.int32), indptr.astype(np.int32)), shape=(rows, cols))
    return matrix, rng


def masked(matrix: sp.csr_matrix, dense: np.ndarray) -> np.ndarray:
    """dense read on the stored entries of matrix (explicit zeros included)."""
    out = np.zeros(matrix.shape)
    rows = np.repeat(np.arange(matrix.shape[0]), np.diff(matrix.indptr))
    out[rows, matrix.indices] = dense[rows, matrix.indices]
    return out


def inner_loop(body):
    """The last statement of `body` inside a loop over rows i, after inlining."""
    return loop_limits_inlined_in((For("i", Num(0), Num(3), body),))[0].body[-1]


def test_loop_limits_are_inlined_only_from_once_assigned_reads():
    body = (Assign("st", Load("pos", Ref("i"))), Assign("t", Op("+", Ref("i"), Num(1))),
            Assign("en", Load("pos", Ref("t"))), For("p", Ref("st"), Ref("en"), ()))
    loop = inner_loop(body)
    assert loop.start == Load("pos", Ref("i")) and loop.end == Load("pos", Op("+", Ref("i"), Num(1)))
    assert loop_limits_inlined_in(body)[-1].start == Ref("st")  # i is no loop variable here
    twice = body[:1] + (Assign("st", Num(0)),) + body[1:]
    assert inner_loop(twice).start == Ref("st")  # reassigned: left alone
    added = body[:-1] + (AddTo("st", Num(1)), body[-1])
    assert inner_loop(added).start == Ref("st")  # accumulated into
    guarded = (Assign("st", Load("pos", Ref("i"), guarded=True)), For("p", Ref("st"), Num(2), ()))
    assert inner_loop(guarded).start == Ref("st")  # a guarded read may be zero
    read = (Assign("k", Load("perm", Ref("i"))), Assign("st", Load("pos", Ref("k"))), For("p", Ref("st"), Num(2), ()))
    assert inner_loop(read).start == Ref("st")  # an index read from data: not a row


@settings(max_examples=25, deadline=None)
@given(data=design_matrices())
def test_row_scaled_writes_on_a_bound_slice_use_the_pattern(make_physical, data):
    X, rng = data
    w, y = rng.standard_normal(X.shape[1]), rng.standard_normal(X.shape[0])
    types, arrays, _ = make_physical({"X": (X, "csr"), "w": (w, "dense"), "y": (y, "dense")})
    arrays = {**arrays, "w": arrays.pop("w_V"), "y": arrays.pop("y_V")}
    types = {**types, "w": types.pop("w_V"), "y": types.pop("y_V")}
    kernel = compile_physical(ROW_SCALED, types)
    assert kernel.output == "pattern" and "w_mark" not in kernel.source
    result = kernel(**arrays)
    assert isinstance(result, sp.csr_matrix) and result.nnz == X.nnz
    assert (result.indices == X.indices).all() and (np.asarray(result.indptr) == X.indptr).all()
    g = y * sigmoid(X @ w)
    np.testing.assert_allclose(result.toarray(), masked(X, np.outer(g, w)), rtol=1e-13, atol=1e-14)
    assert values_equal(result, evaluate(ROW_SCALED, arrays), rtol=1e-13, atol=1e-14)


@settings(max_examples=15, deadline=None)
@given(data=design_matrices())
def test_logistic_gradient_wrt_the_design_matrix(data):
    X, rng = data
    w, y = rng.standard_normal(X.shape[1]), rng.choice([-1.0, 1.0], X.shape[0])
    grad = sparsad.grad(LOGREG, wrt="X")
    result = grad(X=X, w=w, y=y)
    assert "output: pattern" in grad.show("code")
    interpreted = sparsad.grad(LOGREG, wrt="X", interpret=True)(X=X, w=w, y=y)
    assert type(result) is type(interpreted)
    expected = masked(X, np.outer(-y * sigmoid(-y * (X @ w)), w))
    np.testing.assert_allclose(result.toarray(), expected, rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(result.toarray(), interpreted.toarray(), rtol=1e-13, atol=1e-14)
    # another pattern of the same shape through the same compiled derivative: never stale
    other = sp.random(*X.shape, density=0.6, format="csr", random_state=rng)
    again = grad(X=other, w=w, y=y)
    expected = masked(other, np.outer(-y * sigmoid(-y * (other @ w)), w))
    np.testing.assert_allclose(again.toarray(), expected, rtol=1e-13, atol=1e-14)
    assert again.nnz == other.nnz


@settings(max_examples=10, deadline=None)
@given(data=design_matrices())
def test_vjp_of_predictions_wrt_the_design_matrix(data):
    X, rng = data
    w, ct = rng.standard_normal(X.shape[1]), rng.standard_normal(X.shape[0])
    vjp = sparsad.vjp(PREDICT, wrt="X")
    result = vjp(X=X, w=w, cotangent=ct)
    assert "output: pattern" in vjp.show("code")
    p = sigmoid(X @ w)
    expected = masked(X, np.outer(ct * p * (1 - p), w))
    np.testing.assert_allclose(result.toarray(), expected, rtol=1e-13, atol=1e-14)
    interpreted = sparsad.vjp(PREDICT, wrt="X", interpret=True)(X=X, w=w, cotangent=ct)
    np.testing.assert_allclose(result.toarray(), interpreted.toarray(), rtol=1e-13, atol=1e-14)


def test_input_changed_in_place_between_calls():
    rng = np.random.default_rng(3)
    X = sp.random(6, 5, density=0.5, format="csr", random_state=rng)
    w, y = rng.standard_normal(5), rng.choice([-1.0, 1.0], 6)
    grad = sparsad.grad(LOGREG, wrt="X")
    grad(X=X, w=w, y=y)
    X.data *= 2.0  # values changed in place: read on this call
    row = int(np.flatnonzero(np.diff(X.indptr))[0])
    X.indices[X.indptr[row]:X.indptr[row + 1]] = np.sort(rng.choice(5, X.indptr[row + 1] - X.indptr[row],
                                                                     replace=False))
    result = grad(X=X, w=w, y=y)
    expected = masked(X, np.outer(-y * sigmoid(-y * (X @ w)), w))
    np.testing.assert_allclose(result.toarray(), expected, rtol=1e-13, atol=1e-14)


# -- full rows: SpMM-like results whose written rows hold every column -----------------------------

SPMM = "sum(<i, r> in A) { i -> sum(<k, a> in r) a * B(k) }"
SPMM_BIASED = "sum(<i, r> in A) { i -> sum(<k, a> in r) sum(<_, j> in (0:3)) { j -> a * B(k)(j) + 1.0 } }"
# a condition on the column: rows hold columns 0 and 1 only ("a failed if makes no key")
SPMM_FIRST_TWO = "sum(<i, r> in A) { i -> sum(<k, a> in r) sum(<j, b> in B(k)) { j -> if j < 2 then a * b } }"


def entries(matrix: sp.csr_matrix) -> list:
    """(row, column, value) of every stored entry, in storage order."""
    rows = np.repeat(np.arange(matrix.shape[0]), np.diff(matrix.indptr))
    return list(zip(rows.tolist(), matrix.indices.tolist(), matrix.data.tolist()))


@settings(max_examples=15, deadline=None)
@given(data=design_matrices(), k=st.integers(0, 4))
def test_spmm_results_are_assembled_in_full_rows(data, k):
    A, rng = data
    B = rng.standard_normal((A.shape[1], k))
    B[rng.random(B.shape) < 0.3] = 0.0
    compiled = sparsad.compile(SPMM)
    result = compiled(A=A, B=B, out_format="csr")  # natural: an ndarray when every row is written
    assert type(compiled(A=A, B=B)) is type(sparsad.program(SPMM)(A=A, B=B))
    assert "output: dense -> rows" in compiled.show("code") and "w_mark" not in compiled.show("code")
    workspace = sparsad.compile(SPMM, output="workspace")(A=A, B=B, out_format="csr")
    interpreted = sparsad.program(SPMM).run(A=A, B=B)
    assert isinstance(result, sp.csr_matrix) and result.has_sorted_indices
    # the same entries as the row workspace (explicit zeros too), the same sums bit for bit
    assert entries(result) == entries(workspace)
    written = np.diff(A.indptr) > 0
    assert result.nnz == int(written.sum()) * k
    np.testing.assert_allclose(result.toarray(), A @ B, rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(result.toarray(), as_dense(interpreted, result.shape), rtol=1e-13, atol=1e-14)


def as_dense(value, shape) -> np.ndarray:
    """A result of the interpreter (a scipy matrix, or a nested dict when it is empty) as an array."""
    if isinstance(value, dict):
        out = np.zeros(shape)
        for i, row in value.items():
            for j, v in row.items():
                out[i, j] = v
        return out
    return value.toarray()


@settings(max_examples=12, deadline=None)
@given(data=design_matrices())
def test_spmm_jvp_wrt_the_sparse_operand_in_full_rows(data):
    A, rng = data
    B = rng.standard_normal((A.shape[1], 3))
    tangent = A.copy()
    tangent.data = rng.standard_normal(A.nnz)
    jvp = sparsad.jvp(SPMM, wrt="A", with_primal=False)
    result = jvp(A=A, B=B, tangent=tangent)
    interpreted = sparsad.jvp(SPMM, wrt="A", with_primal=False, interpret=True)(A=A, B=B, tangent=tangent)
    np.testing.assert_allclose(result.toarray(), (tangent @ B), rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(result.toarray(), as_dense(interpreted, result.shape), rtol=1e-13, atol=1e-14)
    # a tangent on another pattern than A's (then not read by position): as the interpreter
    other = sp.random(*A.shape, density=0.5, format="csr", random_state=rng)
    again = jvp(A=A, B=B, tangent=other)
    expected = sparsad.jvp(SPMM, wrt="A", with_primal=False, interpret=True)(A=A, B=B, tangent=other)
    np.testing.assert_allclose(again.toarray(), as_dense(expected, again.shape), rtol=1e-13, atol=1e-14)


@settings(max_examples=10, deadline=None)
@given(data=design_matrices())
def test_constant_column_range_and_conditional_writes(data):
    A, rng = data
    B = rng.standard_normal((A.shape[1], 3))
    compiled = sparsad.compile(SPMM_BIASED)
    result = compiled(A=A, B=B, out_format="csr")
    assert "output: dense -> rows" in compiled.show("code")
    expected = np.zeros(A.shape[:1] + (3 if A.nnz else 0,))  # no row written: no column (as interpreted)
    for i, k, a in entries(A):
        expected[i] += a * B[k] + 1.0
    np.testing.assert_allclose(result.toarray(), expected, rtol=1e-13, atol=1e-14)
    assert result.nnz == int((np.diff(A.indptr) > 0).sum()) * 3
    got = sparsad.compile(SPMM_FIRST_TWO)(A=A, B=B, out_format="csr")
    np.testing.assert_allclose(got.toarray()[:, :2], A @ B[:, :2], rtol=1e-13, atol=1e-14)
    assert got.nnz == int((np.diff(A.indptr) > 0).sum()) * 2 and not got.toarray()[:, 2:].any()


def test_full_rows_needs_each_write_directly_in_one_whole_column_loop():
    from types import SimpleNamespace

    from sparsad.codegen.ir import IfThen
    from sparsad.codegen.pattern_outputs import full_rows

    def program(*inner, start=Num(0), end=Ref("n")):
        rows = For("i", Num(0), Ref("m"), (For("j", start, end, inner),))
        return SimpleNamespace(body=(rows,), params=("m", "n"))

    write = Accumulate(OUTPUT, (Ref("i"), Ref("j")), Num(1.0))
    assert full_rows(program(Assign("t", Num(2.0)), write), "i") == (Ref("n"),)
    assert full_rows(program(write, end=Num(4)), "i") == (Num(4),)
    assert full_rows(program(IfThen(Ref("c"), (write,))), "i") is None  # a column may be skipped
    assert full_rows(program(write, start=Num(1)), "i") is None  # column 0 is never written
    assert full_rows(program(write, end=Ref("local")), "i") is None  # may differ from row to row
    transposed = Accumulate(OUTPUT, (Ref("j"), Ref("i")), Num(1.0))
    assert full_rows(program(transposed), "i") is None


@pytest.mark.parametrize("fmt", ["csc", "coo"])
def test_gradient_wrt_a_design_matrix_stored_by_columns_or_coordinates(fmt):
    # read by rows: the row-order copy's pattern carries the result, as the interpreter's
    rng = np.random.default_rng(5)
    X = sp.random(8, 5, density=0.4, random_state=rng, format=fmt)
    X.data[::3] = 0.0  # explicit zeros
    w, y = rng.standard_normal(5), rng.choice([-1.0, 1.0], 8)
    grad = sparsad.grad(LOGREG, wrt="X")
    result = grad(X=X, w=w, y=y)
    assert "output: pattern" in grad.show("code")
    interpreted = sparsad.grad(LOGREG, wrt="X", interpret=True)(X=X, w=w, y=y)
    assert type(result) is type(interpreted)
    Xr = sp.csr_matrix(X)
    expected = masked(Xr, np.outer(-y * sigmoid(-y * (Xr @ w)), w))
    np.testing.assert_allclose(result.toarray(), expected, rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(result.toarray(), interpreted.toarray(), rtol=1e-13, atol=1e-14)


def test_a_limit_assigned_in_a_branch_is_not_inlined_after_it():
    from sparsad.codegen.ir import IfThen

    body = (IfThen(Ref("c"), (Assign("st", Load("pos", Ref("i"))),)), For("p", Ref("st"), Num(2), ()))
    assert inner_loop(body).start == Ref("st")  # may hold an earlier row's value


def test_a_tall_result_with_few_rows_written_keeps_the_row_workspace():
    """The full-rows buffer is rows x columns whatever the rows written: past the memory guard's
    warning threshold (here lowered to 1 MB), a hypersparse A times a dense B is assembled from a
    row workspace instead (no warning, no dense allocation), with the same CSR result."""
    import warnings

    from sparsad import memory

    rows = 40_000
    A = sp.csr_matrix((np.array([2.0, -1.0, 3.0]), (np.array([3, 17, rows - 1]), np.array([0, 2, 1]))),
                      shape=(rows, 3))
    B = np.random.default_rng(5).standard_normal((3, 8))  # the dense result would take 2.6 MB
    memory.set_memory_limit(None, warn="1MB")
    try:
        compiled = sparsad.compile(SPMM)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            result = compiled(A=A, B=B)
        assert compiled._last["kernel"].plan.result_format != "rows"
        small = compiled(A=A[:100], B=B)  # 6.4 KB: full rows
        assert compiled._last["kernel"].plan.result_format == "rows"
    finally:
        memory.set_memory_limit(None)
    assert isinstance(result, sp.csr_matrix) and result.shape == (rows, 8) and result.nnz == 24
    np.testing.assert_allclose(result.toarray(), A @ B, rtol=1e-14)
    np.testing.assert_allclose(small.toarray(), A[:100] @ B, rtol=1e-14)
