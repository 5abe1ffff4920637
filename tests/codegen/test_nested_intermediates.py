"""Intermediates nested three or four levels deep (a Jacobian's tangent of a vector with respect
to a matrix, a matrix-by-matrix Jacobian) are built as hash maps of hash-map rows and iterated,
looked up entry by entry and row by row, in compiled kernels that agree with NumPy and the
interpreter."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings, strategies as st

import sparsad
from sparsad.lang.values import values_equal

T3 = "let t = sum(<i, r> in A) sum(<j, a> in r) sum(<k, b> in B(j)) { k -> { i -> { j -> a * b } } } in "
T4 = ("let t = sum(<i, r> in A) sum(<j, a> in r) sum(<k, b> in B(j)) sum(<l, c> in B(i)) "
      "{ l -> { k -> { i -> { j -> a * b * c } } } } in ")

PROGRAMS = {
    # iterated level by level
    "iterate3": (T3 + "sum(<k, u> in t) sum(<i, w> in u) sum(<j, v> in w) v * x(k) * y(i) * y(j)",
                 lambda A, B, x, y: np.einsum("ij,jk,k,i,j->", A, B, x, y, y)),
    # looked up entry by entry (present and absent keys)
    "lookup3": (T3 + "sum(<i, r> in A) sum(<j, a> in r) sum(<k, b> in B(j)) a * t(k)(i)(j) + t(k)(j)(i)",
                lambda A, B, x, y: np.einsum("ij,jk->", A * A, B) + np.einsum("ij,ji,ik->", A != 0, A, B)),
    # a row of a row iterated
    "row_of_row3": (T3 + "sum(<i, r> in A) sum(<k, xk> in x) sum(<j, v> in t(k)(i)) v * xk * y(i)",
                    lambda A, B, x, y: np.einsum("ij,jk,k,i->", A, B, x, y)),
    # four levels, and a result that is itself a matrix read out of the intermediate
    "iterate4": (T4 + "sum(<l, u> in t) sum(<k, w> in u) sum(<i, q> in w) sum(<j, v> in q) v * x(k) * x(l)",
                 lambda A, B, x, y: np.einsum("ij,jk,il,k,l->", A, B, B, x, x)),
    "matrix_out4": (T4 + "sum(<l, u> in t) sum(<k, w> in u) { l -> { k -> sum(<i, q> in w) sum(<j, v> in q) v } }",
                    lambda A, B, x, y: np.einsum("ij,jk,il->lk", A, B, B)),
}


def _inputs(n: int, p: int, density: float, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    A = sp.random(n, n, density=density, format="csr", random_state=seed,
                  data_rvs=rng.standard_normal)
    return dict(A=A, B=rng.standard_normal((n, p)), x=rng.standard_normal(p), y=rng.standard_normal(n))


def _deepest_container(program) -> int:
    return max((c.depth for c in program._last["kernel"].loops.containers), default=0)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
@settings(max_examples=6, deadline=None)
@given(n=st.integers(1, 6), density=st.sampled_from([0.0, 0.3, 0.7, 1.0]), seed=st.integers(0, 2**16))
def test_deep_intermediates_compile_and_match_numpy_and_the_interpreter(name, n, density, seed):
    text, closed_form = PROGRAMS[name]
    everything = _inputs(n, 3, density, seed)
    program = sparsad.compile(text)
    inputs = {k: v for k, v in everything.items() if k in program.inputs}
    with warnings.catch_warnings():
        warnings.simplefilter("error", sparsad.FallbackWarning)
        got = program(**inputs)
    assert _deepest_container(program) >= (4 if name.endswith("4") else 3)
    A = inputs["A"].toarray()
    expected = closed_form(A, everything["B"], everything["x"], everything["y"])
    dense_got = got.toarray() if sp.issparse(got) else np.asarray(got)
    if dense_got.shape != np.shape(expected):  # a matrix result keeps only the keys written
        full = np.zeros(np.shape(expected))
        full[tuple(slice(0, s) for s in dense_got.shape)] = dense_got
        dense_got = full
    np.testing.assert_allclose(dense_got, expected, rtol=1e-10, atol=1e-12)
    assert values_equal(sparsad.program(text)(**inputs), got, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("wrt", ["W", "X"])
def test_a_gcn_jacobian_with_respect_to_a_matrix_compiles_with_a_depth_3_tangent(wrt):
    """d/dW (and d/dX) of sum_i sum_o tanh((A X W)_io): the tangent of z_i = h_i W is {o -> {f -> {o' -> .}}}."""
    rng = np.random.default_rng(7)
    A = sp.random(6, 6, density=0.4, format="csr", random_state=8, data_rvs=rng.standard_normal)
    X, W = rng.standard_normal((6, 4)), rng.standard_normal((4, 3))
    text = ("sum(<i, r> in A) let h = sum(<j, a> in r) a * X(j) in "
            "let z = sum(<f, hf> in h) hf * W(f) in sum(<o, zo> in z) tanh(zo)")
    with warnings.catch_warnings():
        warnings.simplefilter("error", sparsad.FallbackWarning)
        got = sparsad.jacobian(text, wrt)(A=A, X=X, W=W)
    H = A.toarray() @ X
    S = 1.0 - np.tanh(H @ W) ** 2  # d tanh at every (i, o)
    expected = H.T @ S if wrt == "W" else A.toarray().T @ S @ W.T
    got = got.toarray() if sp.issparse(got) else np.asarray(got)
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)
