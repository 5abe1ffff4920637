"""Inputs read in an order their storage does not give (a CSC or a 2-D COO read by rows): the
compiled program iterates a row-order copy made once per unchanged input, never a transposition
into hash maps per call. Values and derivatives match closed forms in float64 on random inputs
(empty rows and columns, COO in any order); inputs changed in place are seen; a program that
reads the columns directly (SpMV fused onto CSC) keeps the user's storage."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import sparsad
from sparsad.compiler import CompiledProgram

LSQ = "sum(<i, r> in A) let z = (sum(<j, a> in r) a * x(j)) - y(i) in z * z"
SPMV = "sum(<i, r> in A) { i -> sum(<j, a> in r) a * x(j) }"
ROW_LSE = "sum(<i, r> in A) log(sum(<j, a> in r) exp(a))"


def _matrix(seed: int, rows: int, cols: int, density: float, fmt: str):
    """A random matrix with whole empty rows and columns; a COO in a shuffled entry order."""
    rng = np.random.default_rng(seed)
    A = sp.random(rows, cols, density=density, format="coo", random_state=rng)
    keep = (A.row % 3 != 1) & (A.col % 4 != 2)  # empty rows 1, 4, ... and columns 2, 6, ...
    order = rng.permutation(int(keep.sum()))
    A = sp.coo_matrix((A.data[keep][order], (A.row[keep][order], A.col[keep][order])), shape=A.shape)
    return A if fmt == "coo" else A.asformat(fmt)


def _dense(value):
    return value.toarray() if sp.issparse(value) else np.asarray(value, dtype=np.float64)


def _no_fallback(fn, **inputs):
    with warnings.catch_warnings():
        warnings.simplefilter("error", sparsad.FallbackWarning)
        return fn(**inputs)


shapes = st.tuples(st.integers(0, 2**16), st.integers(1, 14), st.integers(1, 12),
                   st.sampled_from([0.0, 0.15, 0.5]), st.sampled_from(["csc", "coo"]))


@settings(max_examples=12, deadline=None)
@given(shapes)
def test_least_squares_and_its_derivatives_on_column_and_coordinate_storage(case):
    seed, rows, cols, density, fmt = case
    A = _matrix(seed, rows, cols, density, fmt)
    rng = np.random.default_rng(seed + 1)
    x, y = rng.standard_normal(cols), rng.standard_normal(rows)
    dense_A = A.toarray()
    stored_rows = np.diff(A.tocsr().indptr) > 0  # the program sums over the rows A stores
    residual = np.where(stored_rows, dense_A @ x - y, 0.0)
    assert sparsad.compile(LSQ)(A=A, x=x, y=y) == pytest.approx(float(residual @ residual), rel=1e-12, abs=1e-12)
    grad_x = _no_fallback(sparsad.grad(LSQ, wrt="x"), A=A, x=x, y=y)
    np.testing.assert_allclose(_dense(grad_x), 2 * dense_A.T @ residual, rtol=1e-12, atol=1e-12)
    grad_A = _no_fallback(sparsad.grad(LSQ, wrt="A"), A=A, x=x, y=y)
    mask = dense_A != 0
    np.testing.assert_allclose(_dense(grad_A), np.where(mask, 2 * np.outer(residual, x), 0.0),
                               rtol=1e-12, atol=1e-12)
    tangent = A.copy()
    tangent.data = rng.standard_normal(tangent.data.shape[0])
    jvp = _no_fallback(sparsad.jvp(LSQ, wrt="A", with_primal=False), A=A, x=x, y=y, tangent=tangent)
    assert float(jvp) == pytest.approx(float(2 * residual @ (tangent.toarray() @ x)), rel=1e-10, abs=1e-10)


@settings(max_examples=12, deadline=None)
@given(shapes)
def test_spmv_tangent_and_cotangent_of_a_column_stored_matrix(case):
    seed, rows, cols, density, fmt = case
    A = _matrix(seed, rows, cols, density, fmt)
    rng = np.random.default_rng(seed + 2)
    x = rng.standard_normal(cols)
    tangent = A.copy()
    tangent.data = rng.standard_normal(tangent.data.shape[0])
    jvp = _no_fallback(sparsad.jvp(SPMV, wrt="A", with_primal=False), A=A, x=x, tangent=tangent)
    np.testing.assert_allclose(_dense(jvp), tangent.toarray() @ x, rtol=1e-12, atol=1e-12)
    cotangent = rng.standard_normal(rows)
    vjp = _no_fallback(sparsad.vjp(SPMV, wrt="A"), A=A, x=x, cotangent=cotangent)
    np.testing.assert_allclose(_dense(vjp), np.where(A.toarray() != 0, np.outer(cotangent, x), 0.0),
                               rtol=1e-12, atol=1e-12)


def test_a_row_order_copy_is_made_once_and_changes_in_place_are_seen():
    A = _matrix(3, 30, 20, 0.3, "csc")
    rng = np.random.default_rng(4)
    x, y = rng.standard_normal(20), rng.standard_normal(30)
    grad = sparsad.grad(LSQ, wrt="x")
    stored_rows = np.diff(A.tocsr().indptr) > 0
    expected = lambda: 2 * A.toarray().T @ np.where(stored_rows, A.toarray() @ x - y, 0.0)  # noqa: E731
    np.testing.assert_allclose(grad(A=A, x=x, y=y), expected(), rtol=1e-12)
    A.data *= 2.0  # values changed in place: the copy is stale and must be made again
    np.testing.assert_allclose(grad(A=A, x=x, y=y), expected(), rtol=1e-12)
    column = int(np.argmax(np.diff(A.indptr)))  # reverse a column's row indices in place
    lo, hi = A.indptr[column], A.indptr[column + 1]
    A.indices[lo:hi] = A.indices[lo:hi][::-1].copy()
    A.data[lo:hi] = A.data[lo:hi][::-1].copy()
    A.has_sorted_indices = False
    np.testing.assert_allclose(grad(A=A, x=x, y=y), expected(), rtol=1e-12)


def test_only_inputs_read_out_of_order_are_reordered():
    A = _matrix(5, 25, 18, 0.3, "csc")
    x = np.random.default_rng(5).standard_normal(18)
    total = CompiledProgram("sum(<i, r> in A) sum(<j, a> in r) a * x(j)")  # summed in any order
    assert total(A=A, x=x) == pytest.approx(float((A @ x).sum()), rel=1e-12)
    assert total._last["reorder"] == ()
    lse = CompiledProgram(ROW_LSE)  # a function of each whole row: read by rows
    dense_A = A.toarray()
    expected = sum(np.log(np.exp(dense_A[i][dense_A[i] != 0]).sum()) for i in range(25)
                   if (dense_A[i] != 0).any())
    assert lse(A=A) == pytest.approx(float(expected), rel=1e-12)
    assert lse._last["reorder"] == ("A",)
    assert "A_idx(A_pos(j" not in lse.show("physical")  # no column loop rebuilding the rows


HADAMARD = "sum(<i, r> in A) sum(<j, a> in r) a * B(i)(j)"
TTV3 = "sum(<i, ti> in T) { i -> sum(<j, tj> in ti) { j -> sum(<k, t> in tj) t * v(k) } }"


@settings(max_examples=12, deadline=None)
@given(shapes, st.booleans())
def test_a_second_operand_of_the_same_pattern_is_read_by_position(case, same):
    seed, rows, cols, density, fmt = case
    A = _matrix(seed, rows, cols, density, fmt)
    B = A.copy() if same else _matrix(seed + 7, rows, cols, density, fmt)
    B.data = np.random.default_rng(seed).standard_normal(B.data.shape[0])
    program = CompiledProgram(HADAMARD)
    assert _no_fallback(program, A=A, B=B) == pytest.approx(float(A.multiply(B).sum()), rel=1e-12, abs=1e-12)
    if same and A.nnz > 0:  # the pattern of B changes in place: no longer shared, and seen on the next call
        B = B.tocsr() if fmt == "coo" else B
        B.indices[:] = (B.indices + 1) % B.shape[1 if B.format == "csr" else 0]
        B.has_sorted_indices = False
        B.sort_indices()
        assert program(A=A, B=B) == pytest.approx(float(A.multiply(B).sum()), rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("fmt", ["coo", "csf"])
def test_the_tangent_of_an_order_3_tensor_is_read_at_its_positions(fmt):
    rng = np.random.default_rng(11)
    shape = (7, 4, 5)
    dense = np.where(rng.random(shape) < 0.3, rng.standard_normal(shape), 0.0)
    coords = np.array(np.nonzero(dense))
    order = rng.permutation(coords.shape[1])  # a COO in any order
    coords = coords[:, order]
    T = sparsad.formats.from_coordinates(coords, dense[tuple(coords)], shape, fmt)
    tangent_values = rng.standard_normal(coords.shape[1])
    tangent = sparsad.formats.from_coordinates(coords, tangent_values, shape, fmt)
    v = rng.standard_normal(5)
    jvp = _no_fallback(sparsad.jvp(TTV3, wrt="T", with_primal=False), T=T, v=v, tangent=tangent)
    dense_tangent = np.zeros(shape)
    dense_tangent[tuple(coords)] = tangent_values
    expected = np.einsum("ijk,k->ij", dense_tangent, v)
    np.testing.assert_allclose(_dense(jvp), expected * (np.abs(dense).sum(axis=2) > 0), rtol=1e-12, atol=1e-12)
