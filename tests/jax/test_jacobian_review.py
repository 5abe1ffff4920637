"""Adversarial cases of sparsad.jax.jacobian / hessian (review of the colouring): patterns that
are too small or stale never give a wrong matrix; errors are our own."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

import sparsad.jax as sj  # noqa: E402
from sparsad.errors import InputError  # noqa: E402


def tridiagonal(x):
    return 2 * x + jnp.pad(x[1:] ** 2, (0, 1)) - jnp.pad(x[:-1], (1, 0))


def chain(x):
    return jnp.sum(x[1:] ** 2 * x[:-1]) + jnp.sum(x ** 3)


FULL = sp.diags([1.0, 1.0, 1.0], [-1, 0, 1], shape=(6, 6)).tocsr()


def test_a_pattern_missing_nonzeros_raises_or_gives_nan_under_jit():
    with jax.enable_x64(True):
        x = jnp.asarray(np.random.default_rng(0).standard_normal(6))
        for small in (sp.eye(6, format="csr"), sp.csr_matrix((6, 6))):
            with pytest.raises(InputError, match="outside `pattern`"):
                sj.jacobian(tridiagonal, x, pattern=small)
        np.testing.assert_allclose(sj.jacobian(tridiagonal, x, pattern=FULL).to_dense(), jax.jacfwd(tridiagonal)(x),
                                   rtol=1e-12, atol=1e-12)
        assert sj.jacobian(tridiagonal, x, pattern=sp.eye(6, format="csr"), check=False).nnz == 6  # as asked
        diagonal = sp.eye(6, format="csr")
        jitted = jax.jit(lambda v: sj.jacobian(tridiagonal, v, pattern=diagonal).values)(x)
        assert np.isnan(np.asarray(jitted)).all()
        exact = jax.jit(lambda v: sj.jacobian(tridiagonal, v, pattern=FULL).values)(x)
        np.testing.assert_allclose(exact, sj.jacobian(tridiagonal, x).values, rtol=1e-12, atol=1e-12)
        # a detected pattern reused for another function
        detected = sj.jacobian(tridiagonal, x)
        with pytest.raises(InputError, match="outside `pattern`"):
            sj.jacobian(lambda z: tridiagonal(z) + jnp.roll(z, 2), x, pattern=detected)


def test_hessian_checks_its_pattern_and_wants_a_scalar_function():
    with jax.enable_x64(True):
        x = jnp.asarray(np.random.default_rng(1).standard_normal(6))
        with pytest.raises(InputError, match="outside `pattern`"):
            sj.hessian(chain, x, pattern=sp.eye(6, format="csr"))
        H = sj.hessian(chain, x, pattern=sp.triu(FULL).tocsr())
        np.testing.assert_allclose(H.to_dense(), jax.hessian(chain)(x), rtol=1e-12, atol=1e-12)
        for vector_valued in (lambda z: z * z, lambda z: chain(z).reshape(1)):
            with pytest.raises(InputError, match="scalar"):  # (was a ValueError from unpacking)
                sj.hessian(vector_valued, x)
