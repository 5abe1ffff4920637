"""Adversarial cases of sparsad.jax.compile_program (review of the bridge), against dense JAX in
float64: inputs outside `wrt` that are traced by jit, vmap or grad."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

import sparsad.jax as sj  # noqa: E402
from sparsad.errors import InputError  # noqa: E402

SPMV = "sum(<i, r> in A) { i -> sum(<j, a> in r) a * x(j) }"
TOL = dict(rtol=1e-12, atol=1e-12)


def test_inputs_outside_wrt_may_be_arguments_of_jit_vmap_and_grad():
    # (a matrix outside wrt passed into a jitted function raised JAX's TracerArrayConversionError)
    with jax.enable_x64(True):
        matrix = sp.random(4, 5, density=0.5, format="csr", random_state=1)
        A = sj.SparseMatrix.from_scipy(matrix)
        dense = jnp.asarray(matrix.toarray())
        x = jnp.arange(1.0, 6.0)
        in_x = sj.compile_program(SPMV, wrt="x")
        in_A = sj.compile_program(SPMV, wrt="A")
        np.testing.assert_allclose(jax.jit(lambda A, x: in_x(A=A, x=x))(A, x), dense @ x, **TOL)
        np.testing.assert_allclose(jax.jit(lambda A, x: in_A(A=A, x=x))(A, x), dense @ x, **TOL)
        np.testing.assert_allclose(jax.jit(jax.grad(lambda x, A: in_x(A=A, x=x).sum()))(x, A), dense.T @ jnp.ones(4),
                                   **TOL)
        values = jnp.stack([A.values, -2.0 * A.values])
        np.testing.assert_allclose(jax.vmap(lambda v: in_x(A=A.with_values(v), x=x))(values),
                                   jnp.stack([dense @ x, -2.0 * dense @ x]), **TOL)
        with pytest.raises(InputError, match="not in wrt"):  # never a silently dropped derivative
            jax.grad(lambda x: in_A(A=A, x=x).sum())(x)
        ranged = sj.compile_program("sum(<i, _> in (lo:hi)) x(i) * x(i)", wrt="x")
        with pytest.raises(InputError, match="static"):
            jax.jit(lambda x, hi: ranged(lo=0, hi=hi, x=x))(x, 3)
        assert float(jax.jit(lambda x: ranged(lo=0, hi=3, x=x))(x)) == 14.0
