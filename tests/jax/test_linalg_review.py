"""Adversarial cases of sparsad.jax's solves (review of the bridge), against dense JAX autodiff
in float64."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

import sparsad.jax as sj  # noqa: E402

TOL = dict(rtol=1e-8, atol=1e-10)


def _spd(n, seed):
    matrix = sp.random(n, n, density=0.5, format="csr", random_state=seed)
    matrix.data = np.random.default_rng(seed).standard_normal(matrix.nnz)
    return (matrix @ matrix.T + n * sp.eye(n)).tocsr()


def _dense_of(A):
    rows, cols = A.pattern.rows, A.pattern.indices.astype(np.int64)
    return lambda values: jnp.zeros(A.shape, values.dtype).at[rows, cols].set(values)


def test_second_derivatives_of_cg_in_the_values_of_a_symmetric_matrix_match_dense():
    # one stored entry at a time is no symmetric perturbation: the transposed operator of the
    # perturbed matrix is not the operator itself (with symmetric=True the Hessian was wrong)
    with jax.enable_x64(True):
        A = sj.SparseMatrix.from_scipy(_spd(5, 3))
        dense = _dense_of(A)
        b = jnp.arange(1.0, 6.0)
        tangent = jnp.asarray(np.random.default_rng(0).standard_normal(A.nnz))

        def hvp(solve):  # a Hessian-vector product of |x(A)|^2 in A's values
            loss = lambda values: (solve(values) ** 2).sum()  # noqa: E731
            return jax.jit(lambda v: jax.jvp(jax.grad(loss), (v,), (tangent,))[1])(A.values)
        got = hvp(lambda v: sj.cg(A.with_values(v), b))
        want = hvp(lambda v: jnp.linalg.solve(dense(v), b))
        np.testing.assert_allclose(got, want, **TOL)


@pytest.mark.parametrize("solve", ["spsolve", "cg", "triangular_solve"])
@pytest.mark.parametrize("a_dtype,b_dtype", [(np.float64, np.float32), (np.float32, np.float64)])
def test_solves_take_matrix_and_right_hand_side_of_different_dtypes(solve, a_dtype, b_dtype):
    # (a float64 matrix with a float32 b raised JAX's "cotangent type does not match")
    with jax.enable_x64(True):
        matrix = _spd(5, 1)
        if solve == "triangular_solve":
            matrix = sp.tril(matrix).tocsr()
        A = sj.SparseMatrix.from_scipy(matrix, dtype=a_dtype)
        b = jnp.arange(1.0, 6.0, dtype=b_dtype)
        function = getattr(sj, solve)
        x = function(A, b)
        assert x.dtype == jnp.float64
        np.testing.assert_allclose(x, np.linalg.solve(matrix.toarray(), np.arange(1.0, 6.0)), rtol=1e-5)
        dense = _dense_of(A)
        got = jax.grad(lambda v, bb: (function(A.with_values(v), bb) ** 2).sum(), (0, 1))(A.values, b)
        want = jax.grad(lambda v, bb: (jnp.linalg.solve(dense(v).astype(jnp.float64), bb.astype(jnp.float64)) ** 2)
                        .sum(), (0, 1))(A.values, b)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6)


def test_cg_with_nan_or_inf_in_the_matrix_or_right_hand_side_returns_nan_not_zeros():
    # (JAX's CG stops at once on a NaN residual and returned x0 = 0, a finite wrong answer)
    with jax.enable_x64(True):
        A = sj.SparseMatrix.from_scipy(_spd(4, 2))
        b = jnp.arange(1.0, 5.0)
        assert np.isnan(np.asarray(sj.cg(A.with_values(A.values.at[0].set(jnp.nan)), b))).all()
        assert np.isnan(np.asarray(sj.cg(A, b.at[1].set(jnp.inf)))).all()
        assert np.isnan(np.asarray(jax.jit(lambda bb: sj.cg(A, bb))(b.at[2].set(jnp.nan)))).all()
        np.testing.assert_allclose(sj.cg(A, b), np.linalg.solve(_spd(4, 2).toarray(), np.arange(1.0, 5.0)), **TOL)
