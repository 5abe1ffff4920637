"""jvp and vjp compile through the same pipeline as grad, agree with NumPy closed forms, and give the
same output type compiled and interpreted (dense w.r.t. dense inputs, CSR for sparse matrices)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import sparsad

SPMV = "sum(<i, r> in A) { i -> sum(<j, a> in r) a * x(j) }"
SPMM = "sum(<i, r> in A) { i -> sum(<j, a> in r) sum(<k, b> in B(j)) { k -> a * b } }"
ROW_LSE = "sum(<i, r> in A) { i -> log(sum(<j, a> in r) exp(a)) }"
SDDMM = "sum(<i, r> in A) sum(<j, a> in r) a * (sum(<k, u> in U(i)) u * V(j)(k))"
LSQ = "sum(<i, r> in A) let e = (sum(<j, a> in r) a * x(j)) - y(i) in e * e"


@pytest.fixture
def data():
    rng = np.random.default_rng(7)
    A = sp.random(9, 6, density=0.35, random_state=4, format="csr")
    return dict(rng=rng, A=A, x=rng.standard_normal(6), y=rng.standard_normal(9),
                B=rng.standard_normal((6, 4)), U=rng.standard_normal((9, 3)), V=rng.standard_normal((6, 3)))


def compiled_and_interpreted(make, inputs):
    """The compiled result (no FallbackWarning allowed) and the interpreted one."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", sparsad.FallbackWarning)
        got = make(False)(**inputs)
    return got, make(True)(**inputs)


def dense(value):
    return value.toarray() if sp.issparse(value) else np.asarray(value)


def test_spmv_jvp_and_vjp(data):
    A, x = data["A"], data["x"]
    dx, ct = data["rng"].standard_normal(6), data["rng"].standard_normal(9)
    (value, got), (_, ref) = compiled_and_interpreted(lambda i: sparsad.jvp(SPMV, "x", interpret=i),
                                                      dict(A=A, x=x, tangent=dx))
    assert np.allclose(value, A @ x, rtol=1e-12)  # jvp returns (primal, tangent)
    assert isinstance(got, np.ndarray) and np.allclose(got, A @ dx, rtol=1e-12) and np.allclose(ref, got)
    got, ref = compiled_and_interpreted(lambda i: sparsad.vjp(SPMV, "x", interpret=i),
                                        dict(A=A, x=x, cotangent=ct))
    assert isinstance(got, np.ndarray) and np.allclose(got, A.T @ ct, rtol=1e-12) and np.allclose(ref, got)
    # w.r.t. the sparse matrix: the outer product masked to A's pattern, as CSR both ways
    got, ref = compiled_and_interpreted(lambda i: sparsad.vjp(SPMV, "A", interpret=i),
                                        dict(A=A, x=x, cotangent=ct))
    mask = (A != 0).toarray()
    assert sp.issparse(got) and sp.issparse(ref)
    assert np.allclose(dense(got), np.outer(ct, x) * mask, rtol=1e-12) and np.allclose(dense(ref), dense(got))


def test_spmm_jvp_and_vjp_with_respect_to_the_dense_operand(data):
    A, B = data["A"], data["B"]
    dB, CT = data["rng"].standard_normal(B.shape), data["rng"].standard_normal((9, 4))
    (_, got), (_, ref) = compiled_and_interpreted(lambda i: sparsad.jvp(SPMM, "B", interpret=i),
                                                  dict(A=A, B=B, tangent=dB))
    assert type(got) is type(ref)
    assert np.allclose(dense(got), A @ dB, rtol=1e-12) and np.allclose(dense(ref), dense(got))
    got, ref = compiled_and_interpreted(lambda i: sparsad.vjp(SPMM, "B", interpret=i),
                                        dict(A=A, B=B, cotangent=CT))
    assert isinstance(got, np.ndarray) and isinstance(ref, np.ndarray)
    assert np.allclose(got, A.T @ CT, rtol=1e-12) and np.allclose(ref, got)


def test_row_log_sum_exp_vjp_is_the_row_softmax_on_the_pattern(data):
    A = data["A"]
    ct = data["rng"].standard_normal(9)
    got, ref = compiled_and_interpreted(lambda i: sparsad.vjp(ROW_LSE, "A", interpret=i),
                                        dict(A=A, cotangent=ct))
    expected = A.copy().tocsr()
    for i in range(A.shape[0]):
        lo, hi = expected.indptr[i], expected.indptr[i + 1]
        if hi > lo:
            e = np.exp(A.data[lo:hi] - A.data[lo:hi].max())
            expected.data[lo:hi] = ct[i] * e / e.sum()
    assert sp.issparse(got) and np.allclose(dense(got), expected.toarray(), rtol=1e-12)
    assert np.allclose(dense(ref), dense(got))


def test_scalar_programs_jvp_and_vjp_match_the_gradient(data):
    A, U, V = data["A"], data["U"], data["V"]
    dU = data["rng"].standard_normal(U.shape)
    grad_u = (A @ V)  # d/dU sum A .* (U V^T) = A V
    (_, got), (_, ref) = compiled_and_interpreted(lambda i: sparsad.jvp(SDDMM, "U", interpret=i),
                                                  dict(A=A, U=U, V=V, tangent=dU))
    assert got == pytest.approx(float(np.sum(grad_u * dU)), rel=1e-12) and ref == pytest.approx(got)
    got, ref = compiled_and_interpreted(lambda i: sparsad.vjp(SDDMM, "V", interpret=i),
                                        dict(A=A, U=U, V=V, cotangent=2.5))
    assert isinstance(got, np.ndarray) and isinstance(ref, np.ndarray)
    assert np.allclose(got, 2.5 * (A.T @ U), rtol=1e-12) and np.allclose(ref, got)
    x, y = data["x"], data["y"]
    dx = data["rng"].standard_normal(6)
    (value, got), (ref_value, ref) = compiled_and_interpreted(lambda i: sparsad.jvp(LSQ, "x", interpret=i),
                                                             dict(A=A, x=x, y=y, tangent=dx))
    # a row of A with no entries is no key of A: the sum over A's rows skips it (docs/language.md)
    stored = np.diff(A.indptr) > 0
    residual = (A @ x - y)[stored]
    assert value == pytest.approx(float(residual @ residual), rel=1e-12) and ref_value == pytest.approx(value)
    assert got == pytest.approx(float(2 * residual @ (A @ dx)[stored]), rel=1e-12) and ref == pytest.approx(got)


def test_gradients_with_respect_to_dense_operands_are_ndarrays_both_ways(data):
    A, U, V = data["A"], data["U"], data["V"]
    got, ref = compiled_and_interpreted(lambda i: sparsad.grad(SDDMM, "U", interpret=i), dict(A=A, U=U, V=V))
    assert isinstance(got, np.ndarray) and isinstance(ref, np.ndarray) and got.shape == U.shape
    assert np.allclose(got, A @ V, rtol=1e-12) and np.allclose(ref, got)
    got = sparsad.grad(SDDMM, "A")(A=A, U=U, V=V)
    assert sp.issparse(got) and np.allclose(got.toarray(), (U @ V.T) * (A != 0).toarray(), rtol=1e-12)


def test_forward_mode_by_directions_says_it_is_interpreted(data):
    with pytest.warns(sparsad.FallbackWarning, match="mode='forward'"):
        sparsad.grad(LSQ, "x", mode="forward")(A=data["A"], x=data["x"], y=data["y"])


GCN = ("sum(<i, r> in A) let h = sum(<j, a> in r) sum(<k, x> in X(j)) { k -> a * x } in "
       "sum(<k, hv> in h) sum(<c, w> in W(k)) hv * w * hv * w")


def test_gcn_layer_gradients_with_respect_to_dense_weights_and_features(data):
    A = data["A"]
    rng = data["rng"]
    X, W = rng.standard_normal((6, 4)), rng.standard_normal((4, 3))
    H = A @ X
    with warnings.catch_warnings():
        warnings.simplefilter("error", sparsad.FallbackWarning)
        grad_w = sparsad.grad(GCN, "W")(A=A, X=X, W=W)
        grad_x = sparsad.grad(GCN, "X")(A=A, X=X, W=W)
        grad_a = sparsad.grad(GCN, "A")(A=A, X=X, W=W)
    assert isinstance(grad_w, np.ndarray) and grad_w.shape == W.shape
    assert np.allclose(grad_w, 2 * W * (H ** 2).sum(axis=0)[:, None], rtol=1e-12)
    assert isinstance(grad_x, np.ndarray)
    assert np.allclose(grad_x, A.T @ (2 * H * (W ** 2).sum(axis=1)[None, :]), rtol=1e-12)
    full = (2 * H * (W ** 2).sum(axis=1)[None, :]) @ X.T  # d/dA_ij before masking
    assert sp.issparse(grad_a) and np.allclose(grad_a.toarray(), full * (A != 0).toarray(), rtol=1e-12)
    interpreted = sparsad.grad(GCN, "W", interpret=True)(A=A, X=X, W=W)
    assert isinstance(interpreted, np.ndarray) and np.allclose(interpreted, grad_w, rtol=1e-12)
