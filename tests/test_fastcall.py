"""The repeated-call fast path (sparsad.fastcall): a call like the last compiled one skips the plan
lookup, but never gives a stale answer (inputs changed in place, replaced arrays, other shapes,
dtypes, types, positional or keyword order) and never skips a validation (bad inputs raise the
errors of a first call)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import sparsad
from sparsad.errors import SparsadError

SPMV = "sum(<i, r> in A) { i -> sum(<j, a> in r) a * x(j) }"
RIDGE = """(sum(<i, r> in A) let z = (sum(<j, a> in r) a * x(j)) - y(i) in z * z)
           + lam * (sum(<j, v> in x) v * v)"""
ROWDOT = "sum(<i, r> in M) sum(<j, m> in r) m * u(i)"  # a dense matrix input (2-D ndarray)


@pytest.fixture(scope="module")
def spmv():
    return sparsad.compile(SPMV)


@pytest.fixture(scope="module")
def ridge_grads():
    return {w: sparsad.grad(RIDGE, wrt=w) for w in ("lam", "x")}


def _matrix(seed: int, shape=(6, 5)) -> sp.csr_matrix:
    A = sp.random(*shape, density=0.5, format="csr", random_state=seed)
    A.sum_duplicates()
    return A


def _ridge_grad(A, x, y, lam, wrt):
    return float(x @ x) if wrt == "lam" else 2 * A.T @ (A @ x - y) + 2 * lam * x


def test_a_repeated_call_takes_the_fast_path_and_reads_values_changed_in_place(spmv):
    A, x = _matrix(1), np.random.default_rng(1).standard_normal(5)
    np.testing.assert_allclose(spmv(A=A, x=x), A @ x, rtol=1e-13)
    assert spmv._repeat is not None  # recorded after the compiled call
    x[2] += 3.0  # the dense input, in place
    np.testing.assert_allclose(spmv(A=A, x=x), A @ x, rtol=1e-13)
    A.data *= -2.0  # the sparse input's values, in place
    np.testing.assert_allclose(spmv(A=A, x=x), A @ x, rtol=1e-13)
    columns = slice(A.indptr[0], A.indptr[1])  # row 0's columns, moved in place (kept sorted, unique)
    A.indices[columns] = np.sort((A.indices[columns] + 1) % 5)
    np.testing.assert_allclose(spmv(A=A, x=x), A.toarray() @ x, rtol=1e-13)


def test_an_index_changed_in_place_to_an_invalid_one_raises_on_the_fast_path(spmv):
    A, x = _matrix(2), np.ones(5)
    spmv(A=A, x=x)
    spmv(A=A, x=x)
    A.indices[0] = 99  # out of range for 5 columns: validated again, as on a first call
    with pytest.raises(SparsadError):
        spmv(A=A, x=x)


def test_replaced_arrays_other_shapes_and_dtypes_are_not_reused(spmv):
    rng = np.random.default_rng(3)
    A, x = _matrix(3), rng.standard_normal(5)
    spmv(A=A, x=x)
    A.data = rng.standard_normal(A.nnz)  # a new values array on the same matrix object
    np.testing.assert_allclose(spmv(A=A, x=x), A @ x, rtol=1e-13)
    B = _matrix(4, shape=(8, 7))  # another shape: another plan
    x7 = rng.standard_normal(7)
    np.testing.assert_allclose(spmv(A=B, x=x7), B @ x7, rtol=1e-13)
    x32 = x.astype(np.float32)  # another dtype
    np.testing.assert_allclose(spmv(A=A, x=x32), A @ x32.astype(np.float64), rtol=1e-5)
    xi = np.arange(5)  # an integer array is converted (a copy), not passed on
    np.testing.assert_allclose(spmv(A=A, x=xi), A @ xi.astype(np.float64), rtol=1e-13)
    strided = rng.standard_normal(10)[::2]  # not contiguous
    np.testing.assert_allclose(spmv(A=A, x=strided), A @ strided, rtol=1e-13)
    np.testing.assert_allclose(spmv(A=A, x=x), A @ x, rtol=1e-13)


def test_a_dense_matrix_reshaped_in_place_is_not_read_with_the_old_shape():
    rowdot = sparsad.compile(ROWDOT)
    M, u = np.arange(12.0).reshape(3, 4), np.array([1.0, 2.0, 3.0])
    assert rowdot(M=M, u=u) == pytest.approx(float(u @ M.sum(1)))
    M.shape = (4, 3)  # the same object and buffer, another shape
    u4 = np.array([1.0, -1.0, 2.0, 0.5])
    assert rowdot(M=M, u=u4) == pytest.approx(float(u4 @ M.sum(1)))
    with pytest.raises(SparsadError):  # the old u no longer fits: the error of a first call
        rowdot(M=M, u=u)


def test_positional_and_keyword_calls_in_any_order_agree(spmv):
    A, x = _matrix(5), np.random.default_rng(5).standard_normal(5)
    expected = A @ x
    for call in (lambda: spmv(A, x), lambda: spmv(A=A, x=x), lambda: spmv(x=x, A=A), lambda: spmv(A, x=x)):
        np.testing.assert_allclose(call(), expected, rtol=1e-13)
        np.testing.assert_allclose(call(), expected, rtol=1e-13)  # the repeat of that call


def test_bad_inputs_after_fast_calls_raise_the_errors_of_a_first_call(spmv):
    A, x = _matrix(6), np.ones(5)
    spmv(A=A, x=x)
    spmv(A=A, x=x)
    fresh = sparsad.compile(SPMV)
    for bad in (dict(A=A), dict(A=A, x=x, z=x), dict(A=A, x="text"), dict(A=A, x=np.ones(5, complex)),
                dict(A=A, x={0: 1.0})):
        with pytest.raises(SparsadError) as fast_error:
            spmv(**bad)
        with pytest.raises(SparsadError) as first_error:
            fresh(**bad)
        assert type(fast_error.value) is type(first_error.value)
        np.testing.assert_allclose(spmv(A=A, x=x), A @ x, rtol=1e-13)  # and the next good call is right


def test_scalar_types_are_pinned(ridge_grads):
    rng = np.random.default_rng(7)
    A, x, y = _matrix(7), rng.standard_normal(5), rng.standard_normal(6)
    for lam in (0.3, 2, np.float64(0.7), 0.3):
        for wrt, grad in ridge_grads.items():
            np.testing.assert_allclose(grad(A=A, x=x, y=y, lam=lam), _ridge_grad(A, x, y, float(lam), wrt),
                                       rtol=1e-12, atol=1e-14)


def test_every_derivative_kind_is_right_on_repeated_calls_with_changing_inputs():
    rng = np.random.default_rng(8)
    A, x, y = _matrix(8), rng.standard_normal(5), rng.standard_normal(6)
    kinds = {"grad": (sparsad.grad(RIDGE, wrt="x"), {}), "jacobian": (sparsad.jacobian(RIDGE, wrt="x"), {}),
             "vjp": (sparsad.vjp(RIDGE, wrt="x"), {"cotangent": 1.5}),
             "jvp": (sparsad.jvp(RIDGE, wrt="lam", with_primal=False), {"tangent": 0.5})}
    with warnings.catch_warnings():
        warnings.simplefilter("error", sparsad.errors.FallbackWarning)
        for step in range(4):
            for kind, (derivative, seed) in kinds.items():
                got = derivative(A=A, x=x, y=y, lam=0.3, **seed)
                if kind == "jvp":
                    expected = 0.5 * float(x @ x)
                else:
                    expected = _ridge_grad(A, x, y, 0.3, "x") * seed.get("cotangent", 1.0)
                np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-13)
            x += rng.standard_normal(5)  # in place
            A.data[step % A.nnz] += 1.0  # in place


@settings(max_examples=30, deadline=None)
@given(st.lists(st.sampled_from(["x in place", "x new", "x float32", "x strided", "A values in place",
                                 "A values new", "A index in place", "A new", "positional", "x shorter"]),
                min_size=1, max_size=8), st.integers(0, 2**16))
def test_any_sequence_of_changes_between_calls_gives_the_fresh_answer(spmv, changes, seed):
    rng = np.random.default_rng(seed)
    A, x = _matrix(seed % 97 + 10), rng.standard_normal(5)
    spmv(A=A, x=x)
    for change in changes:
        positional = False
        if change == "x in place":
            x[rng.integers(5)] = rng.standard_normal()
        elif change == "x new":
            x = rng.standard_normal(5)
        elif change == "x float32":
            x = rng.standard_normal(5).astype(np.float32)
        elif change == "x strided":
            x = rng.standard_normal(10)[::2]
        elif change == "A values in place":
            A.data[:] = rng.standard_normal(A.nnz)
        elif change == "A values new":
            A.data = rng.standard_normal(A.nnz)
        elif change == "A index in place" and A.nnz:
            k = int(rng.integers(A.nnz))
            row = int(np.searchsorted(A.indptr, k, side="right") - 1)
            free = sorted(set(range(5)) - set(A.indices[A.indptr[row]:A.indptr[row + 1]]))
            if free:  # move one entry to a free column of its row, keeping the row sorted
                cols = A.indices[A.indptr[row]:A.indptr[row + 1]].copy()
                cols[k - A.indptr[row]] = free[0]
                order = np.argsort(cols)
                A.indices[A.indptr[row]:A.indptr[row + 1]] = cols[order]
                A.data[A.indptr[row]:A.indptr[row + 1]] = A.data[A.indptr[row]:A.indptr[row + 1]][order]
        elif change == "A new":
            A = _matrix(int(rng.integers(1000)))
        elif change == "positional":
            positional = True
        elif change == "x shorter":  # a shape that does not fit A: the error of a first call
            with pytest.raises(SparsadError):
                spmv(A=A, x=rng.standard_normal(4))
        dense_x = np.asarray(x, dtype=np.float64)
        got = spmv(A, x) if positional else spmv(A=A, x=x)
        np.testing.assert_allclose(got, A.toarray() @ dense_x, rtol=1e-5 if x.dtype == np.float32 else 1e-12,
                                   atol=1e-12)


def test_results_keep_the_kind_of_the_inputs_on_repeated_calls():
    scale = sparsad.compile("sum(<i, r> in A) { i -> sum(<j, a> in r) { j -> 2.0 * a } }")
    A = _matrix(9)
    for matrix, kind in ((sp.csr_array(A), sp.csr_array), (A, sp.csr_matrix), (sp.csr_array(A), sp.csr_array)):
        for _ in range(2):  # the full call, then its repeat
            result = scale(A=matrix)
            assert type(result) is kind
            np.testing.assert_allclose(result.toarray(), 2.0 * A.toarray(), rtol=1e-13)


HADAMARD = "sum(<i, r> in A) sum(<j, a> in r) a * B(i)(j)"


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_a_second_operand_read_at_the_first_ones_positions_is_rechecked_on_every_call(fmt):
    """A plan that reads B at A's positions (same pattern on the first call) must not be reused
    once B's pattern differs, even with the same format, shape and number of entries."""
    hadamard = sparsad.compile(HADAMARD)
    A = sp.random(7, 6, density=0.4, format=fmt, random_state=1)
    A.data = np.arange(1.0, A.nnz + 1)
    B = A.copy()
    B.data = B.data * 3.0
    assert np.isclose(hadamard(A=A, B=B), A.multiply(B).sum())
    assert np.isclose(hadamard(A=A, B=B), A.multiply(B).sum())  # repeated: same pattern
    dense = A.toarray()
    shifted = np.roll(dense != 0, 1, axis=1) * 2.0  # another pattern, the same number of entries
    C = sp.csr_matrix(shifted).asformat(fmt)
    assert C.nnz == A.nnz
    for _ in range(2):
        assert np.isclose(hadamard(A=A, B=C), float((dense * shifted).sum()))


@pytest.mark.parametrize("fmt", ["csc", "coo"])
def test_inputs_read_through_a_row_order_copy_repeat_correctly(fmt):
    """A CSC/COO input read by rows goes through its row-order copy on every call, also on a
    repeated call (values changed in place are seen)."""
    program = sparsad.compile("sum(<i, r> in A) sum(<j, a> in r) a * B(i)(j + 1)")
    A = sp.random(5, 6, density=0.5, format=fmt, random_state=2)
    B = np.random.default_rng(3).standard_normal((5, 7))
    expected = lambda: float((A.toarray() * B[:, 1:]).sum())  # noqa: E731
    for _ in range(3):
        assert np.isclose(program(A=A, B=B), expected())
        A.data *= 2.0
LSQ = "sum(<i, r> in A) let z = (sum(<j, a> in r) a * x(j)) - y(i) in z * z"


def _lsq(A, x, y) -> float:
    stored_rows = np.diff(sp.csr_matrix(A).indptr) > 0  # the program sums over the rows A stores
    residual = np.where(stored_rows, A.toarray() @ x - y, 0.0)
    return float(residual @ residual)


@pytest.mark.parametrize("fmt", ["csc", "coo"])
def test_repeated_calls_on_an_input_read_out_of_storage_order_read_its_row_order_copy(fmt):
    # a square CSC/COO read by rows runs on a row-order copy; a repeated call must pass that copy,
    # not the user's column-order arrays (read as rows they are the transpose: a wrong value)
    rng = np.random.default_rng(3)
    A = sp.random(7, 7, density=0.4, format=fmt, random_state=4)
    x, y = rng.standard_normal(7), rng.standard_normal(7)
    lsq = sparsad.compile(LSQ)
    for step in range(4):
        if step == 2:
            A.data[:] = rng.standard_normal(A.nnz)  # changed in place: a new row-order copy
        if step == 3 and fmt == "csc":
            A.indices[:] = A.indices[::-1].copy()  # another pattern, same arrays
            A.has_sorted_indices = False
        if step == 3 and fmt == "coo":
            A.row[:] = A.row[::-1].copy()
        assert lsq(A=A, x=x, y=y) == pytest.approx(_lsq(A, x, y), rel=1e-12, abs=1e-12)


def test_a_tangent_read_at_its_matrix_positions_is_checked_for_that_pattern_on_repeated_calls():
    # the plan of a tangent with A's pattern reads it by position; a repeated call with a tangent
    # of the same kind, shape and nnz but another pattern must not run that plan
    rng = np.random.default_rng(5)
    A = _matrix(11, shape=(6, 6))
    x = rng.standard_normal(6)
    mask = A.toarray() != 0
    jvp = sparsad.jvp(SPMV, wrt="A", with_primal=False)
    same = A.copy()
    same.data = rng.standard_normal(A.nnz)
    other = same.copy()
    other.indices = (other.indices + 1) % 6  # same nnz and row counts, other columns
    other.has_sorted_indices = False
    other.sort_indices()
    assert other.nnz == A.nnz and not np.array_equal(other.indices, A.indices)
    for tangent in (same, same, other, other, same):
        got = jvp(A=A, x=x, tangent=tangent)
        got = got.toarray().ravel() if sp.issparse(got) else np.asarray(got)
        np.testing.assert_allclose(got, np.where(mask, tangent.toarray(), 0.0) @ x, rtol=1e-12, atol=1e-12)


def test_the_shared_plan_holds_no_per_call_arrays(spmv):
    """Calls (and threads) share one plan per signature: the arrays a call runs on are its own,
    so a second call planned before the first one's kernel runs cannot swap them."""
    A1, A2 = _matrix(11), _matrix(12)
    x1, x2 = np.ones(5), np.arange(5.0)
    plan1, arrays1, _ = spmv._planned({"A": A1, "x": x1})
    plan2, arrays2, _ = spmv._planned({"A": A2, "x": x2})
    assert plan1 is plan2 and "arrays" not in plan1
    np.testing.assert_allclose(plan1["kernel"].run(arrays1), A1 @ x1)
    np.testing.assert_allclose(plan2["kernel"].run(arrays2), A2 @ x2)


# -- the per-call floor: inputs the kernel does not read, the derivative's own repeat, the memory guard --

def test_an_input_the_derivative_does_not_read_is_pinned_by_shape_and_object():
    """d/dlam of the ridge loss never reads A or y: a repeated call does not convert or checksum
    them (their contents cannot change the answer), but another shape, dtype or object takes the
    full path, with the errors of a first call."""
    rng = np.random.default_rng(21)
    A, x, y = _matrix(21), rng.standard_normal(5), rng.standard_normal(6)
    grad = sparsad.grad(RIDGE, wrt="lam")
    for _ in range(2):
        assert grad(A=A, x=x, y=y, lam=0.5) == pytest.approx(float(x @ x), rel=1e-13)
    A.data *= 3.0  # in place: the answer does not depend on A
    x[0] += 1.0  # read: seen
    assert grad(A=A, x=x, y=y, lam=0.5) == pytest.approx(float(x @ x), rel=1e-13)
    wide = _matrix(22, shape=(6, 7))  # another shape: x no longer fits, as on a first call
    with pytest.raises(SparsadError) as repeated:
        grad(A=wide, x=x, y=y, lam=0.5)
    with pytest.raises(SparsadError) as first:
        sparsad.grad(RIDGE, wrt="lam")(A=wide, x=x, y=y, lam=0.5)
    assert type(repeated.value) is type(first.value)
    assert grad(A=A, x=x, y=y, lam=0.5) == pytest.approx(float(x @ x), rel=1e-13)
    bad = A.copy()  # another object, with an index out of range: validated, as on a first call
    bad.indices[0] = 99
    with pytest.raises(SparsadError):
        grad(A=bad, x=x, y=y, lam=0.5)
    assert grad(A=A, x=x, y=y.astype(np.float32), lam=0.5) == pytest.approx(float(x @ x), rel=1e-13)


def test_repeated_derivative_calls_by_keyword_match_their_first_call():
    """Every kind repeated by keyword (the derivative's own repeat) gives what a fresh derivative
    gives, also with the seed first, a dict tangent, keyword orders and the primal value."""
    rng = np.random.default_rng(22)
    A, x = _matrix(23, shape=(6, 5)), rng.standard_normal(5)
    t, ct = rng.standard_normal(5), rng.standard_normal(6)
    makers = {
        "jvp": lambda: sparsad.jvp(SPMV, wrt="x"),
        "jvp tangent only": lambda: sparsad.jvp(SPMV, wrt="x", with_primal=False),
        "vjp": lambda: sparsad.vjp(SPMV, wrt="x"),
        "vjp tuple": lambda: sparsad.vjp(SPMV, argnums=(1,)),
        "vjp dict": lambda: sparsad.vjp(SPMV, wrt=["x"]),
        "value_and_grad": lambda: sparsad.value_and_grad(RIDGE, wrt="x"),
        "jacobian": lambda: sparsad.jacobian(SPMV, wrt="x"),
    }
    calls = {
        "jvp": [dict(A=A, x=x, tangent=t), dict(tangent=t, x=x, A=A), dict(A=A, x=x, tangent={"x": t})],
        "vjp": [dict(A=A, x=x, cotangent=ct), dict(cotangent=ct, A=A, x=x)],
        "value_and_grad": [dict(A=A, x=x, y=ct, lam=0.25), dict(lam=0.25, A=A, y=ct, x=x)],
        "jacobian": [dict(A=A, x=x), dict(x=x, A=A)],
    }

    def same(a, b):
        if isinstance(a, tuple):
            assert isinstance(b, tuple) and len(a) == len(b)
            for p, q in zip(a, b):
                same(p, q)
        elif isinstance(a, dict):
            assert a.keys() == b.keys()
            for k in a:
                same(a[k], b[k])
        else:
            assert type(a) is type(b)
            np.testing.assert_allclose(a.toarray() if sp.issparse(a) else a,
                                       b.toarray() if sp.issparse(b) else b, rtol=1e-13, atol=1e-15)

    for label, make in makers.items():
        derivative = make()
        for kwargs in calls[label.split()[0]]:
            for _ in range(3):  # the first call, then its repeats
                same(derivative(**dict(kwargs)), make()(**dict(kwargs)))


def test_a_repeated_derivative_call_raises_the_errors_of_a_first_call():
    rng = np.random.default_rng(23)
    A, x, ct = _matrix(24), rng.standard_normal(5), rng.standard_normal(6)
    vjp = sparsad.vjp(SPMV, wrt="x")
    jvp = sparsad.jvp(SPMV, wrt="x", with_primal=False)
    for _ in range(2):
        vjp(A=A, x=x, cotangent=ct)
        jvp(A=A, x=x, tangent=x)
    seed_name = jvp.seed_names["x"]  # the tangent's internal name is no input of the caller's
    for derivative, bad in ((vjp, dict(A=A, x=x)), (vjp, dict(A=A, x=x, cotangent=ct, z=1.0)),
                            (jvp, dict(A=A, x=x, **{seed_name: x})), (jvp, dict(A=A, tangent=x)),
                            (jvp, {"A": A, "x": x, "tangent": x, seed_name: x})):
        with pytest.raises(SparsadError):
            derivative(**bad)
    np.testing.assert_allclose(jvp(A=A, x=x, tangent=x), A @ x, rtol=1e-13)


def test_a_zero_jvp_on_a_repeated_call_keeps_its_shape():
    A, x = _matrix(25), np.ones(5)
    jvp = sparsad.jvp(SPMV, wrt="x", with_primal=False)
    for tangent in (np.ones(5), np.zeros(5), np.zeros(5), np.ones(5)):
        got = jvp(A=A, x=x, tangent=tangent)
        assert isinstance(got, np.ndarray) and got.shape == (6,)
        np.testing.assert_allclose(got, A @ tangent, rtol=1e-13)


def test_a_lower_memory_limit_is_enforced_on_a_repeated_call():
    from sparsad import memory
    from sparsad.errors import MemoryLimitError

    outer = sparsad.compile("sum(<i, a> in u) sum(<j, b> in v) { i -> { j -> a * b } }", output="dense")
    u, v = np.ones(300), np.ones(200)
    for _ in range(2):
        assert outer(u=u, v=v).shape == (300, 200)
    try:
        memory.set_memory_limit(100_000)  # below the 480 kB result
        with pytest.raises(MemoryLimitError):
            outer(u=u, v=v)
    finally:
        memory.set_memory_limit(None)
    assert outer(u=u, v=v).shape == (300, 200)


def test_repeats_that_skip_the_kernel_input_checks_still_see_new_index_dtypes_and_stored_tensors(spmv):
    """Repeats after the first pass the kernel the arrays they checked the first time (their dtype,
    shape and layout pinned): an index array swapped for another dtype, or a StoredTensor's arrays
    replaced or reshaped, are prepared (or refused) again."""
    from sparsad.formats import as_format

    rng = np.random.default_rng(26)
    A, x = _matrix(26), rng.standard_normal(5)
    for _ in range(3):
        np.testing.assert_allclose(spmv(A=A, x=x), A @ x, rtol=1e-13)
    A.indices = A.indices.astype(np.int64)  # another object and dtype: converted again
    A.indptr = A.indptr.astype(np.int64)
    for _ in range(2):
        np.testing.assert_allclose(spmv(A=A, x=x), A @ x, rtol=1e-13)
    stored = as_format(A, "csr", name="A")
    for _ in range(3):
        np.testing.assert_allclose(spmv(A=stored, x=x), A @ x, rtol=1e-13)
    values = stored.values
    values.shape = (values.size, 1)  # the caller's own array, reshaped in place
    with pytest.raises(SparsadError):
        spmv(A=stored, x=x)
    values.shape = (values.size,)
    np.testing.assert_allclose(spmv(A=stored, x=x), A @ x, rtol=1e-13)


def test_repeated_positional_derivative_calls_match_a_fresh_derivative_and_raise_its_errors():
    rng = np.random.default_rng(27)
    A, x, y = _matrix(27), rng.standard_normal(5), rng.standard_normal(6)
    vjp = sparsad.vjp(SPMV, wrt="x")
    grad = sparsad.grad(RIDGE, wrt="lam")
    for _ in range(3):
        np.testing.assert_allclose(vjp(A, x, cotangent=y), A.T @ y, rtol=1e-13)
        np.testing.assert_allclose(vjp(A, cotangent=y, x=x), A.T @ y, rtol=1e-13)
        assert grad(A, 0.5, x, y) == pytest.approx(float(x @ x), rel=1e-13)
    for bad in ((A, x, x), (A, "x"), (A,)):  # too many, a string, a missing input: a first call's errors
        with pytest.raises(SparsadError) as repeated:
            vjp(*bad, cotangent=y)
        with pytest.raises(SparsadError) as first:
            sparsad.vjp(SPMV, wrt="x")(*bad, cotangent=y)
        assert type(repeated.value) is type(first.value)
    with pytest.raises(SparsadError):
        vjp(A, x, x=x, cotangent=y)  # x twice


def test_a_call_interleaved_with_another_shape_records_its_own_stored_forms():
    """Another caller (a thread) may bind its own input of the same name between this call's plan
    and its record: the record is made from this call's stored forms, so that a later call of the
    other shape does not take this call's plan (a wrong shape, or a FormatError on valid inputs)."""
    from unittest import mock

    from sparsad.codegen.numba_backend import Kernel

    row_sums = sparsad.compile("sum(<i, r> in A) { i -> sum(<j, a> in r) a * c }")
    small, big = _matrix(21, (3, 3)), _matrix(22, (5, 5))
    run = Kernel.run
    interleaved = []

    def run_then_interleave(self, arrays, *args, **kwargs):
        result = run(self, arrays, *args, **kwargs)
        if not interleaved:  # once: the other caller's whole call between this call's run and record
            interleaved.append(True)
            row_sums(A=big, c=2.0)
        return result

    with mock.patch.object(Kernel, "run", run_then_interleave):
        first = row_sums(A=small, c=2.0)
    np.testing.assert_allclose(first, 2.0 * small.sum(axis=1).A1)
    for A in (big, big, small, small):
        np.testing.assert_allclose(row_sums(A=A, c=2.0), 2.0 * A.sum(axis=1).A1, rtol=1e-13)
