"""A gradient (or vjp) that is identically zero has wrt's type: zeros of a dense input's shape, or
a sparse input's pattern with zero values; the same type as a non-zero gradient, in both paths."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import sparsad
from sparsad.errors import FallbackWarning

NONZERO = "sum(<i, r> in A) sum(<j, a> in r) a * a * x(j)"
ZERO_IN_A = ["sum(<i, a> in x) a * 2.0 + 0.0 * sum(<i, r> in A) 1.0",
             "sum(<i, r> in A) sum(<j, a> in r) x(j)",
             "sum(<i, r> in A) sum(<j, a> in r) 1.0 + 0.0 * sum(<i, b> in x) b"]


@pytest.mark.parametrize("interpret", [True, False])
@pytest.mark.parametrize("fmt", ["csr", "coo", "dense"])
@pytest.mark.parametrize("text", ZERO_IN_A)
def test_zero_gradient_has_the_type_and_pattern_of_a_nonzero_one(text, fmt, interpret):
    rng = np.random.default_rng(3)
    A = sp.random(5, 4, density=0.4, format="csr", random_state=rng)
    A_in = A.toarray() if fmt == "dense" else A.asformat(fmt)
    x = rng.standard_normal(4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        zero = sparsad.grad(text, wrt="A", interpret=interpret)(A=A_in, x=x)
        nonzero = sparsad.grad(NONZERO, wrt="A", interpret=interpret)(A=A_in, x=x)
    assert type(zero) is type(nonzero)
    assert zero.shape == nonzero.shape == A.shape
    if sp.issparse(zero):  # on A's pattern, every value zero
        assert zero.format == nonzero.format
        np.testing.assert_array_equal(zero.indptr, nonzero.indptr)
        np.testing.assert_array_equal(zero.indices, nonzero.indices)
        assert not zero.data.any()
    else:
        np.testing.assert_array_equal(zero, np.zeros(A.shape))
    # the non-zero one against its closed form: d/dA sum a^2 x_j = 2 a x_j on A's pattern
    expected = 2 * A.toarray() * x[None, :]
    got = nonzero.toarray() if sp.issparse(nonzero) else nonzero
    np.testing.assert_allclose(got, expected, atol=1e-12)


@pytest.mark.parametrize("interpret", [True, False])
def test_zero_gradient_wrt_a_vector_and_zero_vjp(interpret):
    A = sp.random(5, 4, density=0.4, format="csr", random_state=1)
    x = np.arange(4.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        g = sparsad.grad("sum(<i, r> in A) 3.0 + 0.0 * sum(<i, a> in x) 1.0", wrt="x", interpret=interpret)(A=A, x=x)
        v = sparsad.vjp("sum(<i, r> in A) { i -> 2.0 } + 0.0 * sum(<i, a> in x) { 0 -> 1.0 }", wrt="x",
                        interpret=interpret)(A=A, x=x, cotangent=np.ones(5))
    for result in (g, v):
        assert isinstance(result, np.ndarray)
        np.testing.assert_array_equal(result, np.zeros(4))


@pytest.mark.parametrize("interpret", [True, False])
def test_zero_jacobian_has_the_output_by_input_shape(interpret):
    A = sp.random(4, 3, density=0.5, format="csr", random_state=2)
    x = np.arange(3.0)
    text = "sum(<i, r> in A) { i -> sum(<j, a> in r) a } + 0.0 * sum(<i, a> in x) { i -> a }"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        J = sparsad.jacobian(text, wrt="x", interpret=interpret)(A=A, x=x)
    assert sp.issparse(J) and J.shape == (4, 3) and not J.toarray().any()


@pytest.mark.parametrize("compiler_can_type", [True, False])
def test_a_zero_tangent_in_a_singleton_types_as_zero_and_the_jacobian_compiles(compiler_can_type, monkeypatch):
    """{j -> zero tangent} is the zero (it once typed as {int -> real}, which made `tensor 2 +
    real` a type error in compiled Jacobians of softmax-weighted sums). Were the derivative
    program ill-typed for the compiler, that is our fault: the interpreter runs it with a
    FallbackWarning, never the user's error. d/dV of sum_j p_ij V_j is p ⊗ I on M's pattern."""
    import sparsad.compiler
    from sparsad.errors import ProgramTypeError

    if not compiler_can_type:
        def untypable(*args, **kwargs):
            raise ProgramTypeError("simulated: the derivative program does not type-check")

        monkeypatch.setattr(sparsad.compiler, "infer", untypable)
    rng = np.random.default_rng(4)
    M = sp.random(4, 4, density=0.6, format="csr", random_state=rng)
    V, Q, K = rng.standard_normal((4, 2)), rng.standard_normal((4, 2)), rng.standard_normal((4, 2))
    text = """sum(<i, r> in M)
      let s = sum(<j, _> in r) { j -> sum(<k, q> in Q(i)) q * K(j)(k) } in
      let z = sum(<j, e> in s) exp(e) in
      { i -> sum(<j, e> in s) (exp(e) / z) * V(j) }"""
    if compiler_can_type:
        with warnings.catch_warnings():
            warnings.simplefilter("error", FallbackWarning)
            J = sparsad.jacobian(text, wrt="V")(M=M, V=V, Q=Q, K=K)
    else:
        with pytest.warns(FallbackWarning, match="does not type-check"):
            J = sparsad.jacobian(text, wrt="V")(M=M, V=V, Q=Q, K=K)
    scores = np.where(M.toarray() != 0, np.exp(Q @ K.T), 0.0)
    P = scores / np.where(scores.sum(axis=1, keepdims=True) == 0, 1, scores.sum(axis=1, keepdims=True))
    expected = np.einsum("ij,dc->idjc", P, np.eye(2))  # J[i, d, j, c] = P[i, j] [d = c]
    np.testing.assert_allclose(np.asarray(J), expected, atol=1e-12)
