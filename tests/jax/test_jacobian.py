"""sparsad.jax.jacobian / hessian by colouring against dense jax.jacfwd / jax.hessian (float64)."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings, strategies as st

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

import sparsad.jax as sj  # noqa: E402
from sparsad.errors import FormatError, InputError, ShapeError  # noqa: E402

TOL = dict(rtol=1e-12, atol=1e-12)


@pytest.fixture(autouse=True)
def x64():
    with jax.enable_x64(True):
        yield


def poisson_residual(side: int):
    def residual(u):
        grid = u.reshape(side, side)
        padded = jnp.pad(grid, 1)
        lap = 4 * grid - padded[:-2, 1:-1] - padded[2:, 1:-1] - padded[1:-1, :-2] - padded[1:-1, 2:]
        return (lap + 0.1 * grid ** 3).reshape(-1)
    return residual


def poisson_pattern(side: int):
    one = sp.diags([np.ones(side - 1), np.ones(side), np.ones(side - 1)], [-1, 0, 1])
    return sp.kronsum(one, one).tocsr()


def test_jacobian_of_poisson_residual_given_detected_and_under_jit():
    side = 7
    f = poisson_residual(side)
    u = jnp.asarray(np.random.default_rng(0).standard_normal(side * side))
    dense = np.asarray(jax.jacfwd(f)(u))
    for pattern in (None, poisson_pattern(side)):
        np.testing.assert_allclose(np.asarray(sj.jacobian(f, u, pattern=pattern).to_dense()), dense, **TOL)
    jitted = jax.jit(lambda v: sj.jacobian(f, v, pattern=poisson_pattern(side)).values)
    np.testing.assert_allclose(np.asarray(jitted(u)), np.asarray(sj.jacobian(f, u, poisson_pattern(side)).values),
                               **TOL)


@settings(max_examples=4, deadline=None)
@given(density=st.floats(0.05, 0.6), seed=st.integers(0, 2**31))
def test_hessian_star_and_distance1_match_dense(density, seed):
    """Random coupling graphs on a fixed n (fixed shapes: JAX compiles once for all examples)."""
    n = 8
    rng = np.random.default_rng(seed)
    mask = np.triu(rng.random((n, n)) < density, 1)
    weights = jnp.asarray(np.where(mask, rng.standard_normal((n, n)), 0.0))

    def f(x):
        return jnp.sum(weights * jnp.sin(x[:, None] + 2 * x[None, :]) * x[None, :]) + jnp.sum(x ** 3)

    x = jnp.asarray(rng.standard_normal(n))
    dense = np.asarray(jax.hessian(f)(x))
    pattern = sp.csr_matrix((mask | np.eye(n, dtype=bool)).astype(float))  # one triangle: symmetrised inside
    for colouring in ("star", "distance1"):
        H = sj.hessian(f, x, pattern=pattern, colouring=colouring)
        np.testing.assert_allclose(np.asarray(H.to_dense()), dense, **TOL)


def test_hessian_with_detected_pattern():
    f = lambda x: jnp.sum(x[1:] ** 2 * x[:-1]) + jnp.sum(jnp.cos(x))  # noqa: E731
    x = jnp.linspace(0.1, 1.0, 6)
    H = sj.hessian(f, x)
    np.testing.assert_allclose(np.asarray(H.to_dense()), np.asarray(jax.hessian(f)(x)), **TOL)
    assert H.pattern.nnz == 6 + 2 * 5  # tridiagonal


def test_bad_arguments_raise_our_errors():
    f = poisson_residual(3)
    with pytest.raises(ShapeError, match="pattern has shape"):
        sj.jacobian(f, jnp.ones(9), pattern=sp.eye(4).tocsr())
    bad = sp.eye(9, format="coo")
    bad.col[0] = -1  # scipy's constructor let it through; its conversions would read out of bounds
    with pytest.raises(FormatError, match="pattern"):
        sj.jacobian(f, jnp.ones(9), pattern=bad)
    with pytest.raises(InputError, match="1-D"):
        sj.jacobian(f, jnp.ones((3, 3)))
    looped = lambda v: jax.lax.fori_loop(0, 2, lambda i, w: f(w), v)  # noqa: E731 - no structural pattern
    with pytest.raises(InputError, match="concrete x.*no sparsity rule for primitive 'scan'"):
        jax.jit(lambda v: sj.jacobian(looped, v).values)(jnp.ones(9))
    with pytest.raises(InputError, match="colouring must be"):
        sj.hessian(lambda x: jnp.sum(x ** 2), jnp.ones(3), colouring="acyclic")


def test_plan_arrays_kept_on_a_pattern_first_used_under_jit_serve_later_calls():
    """The seeds and gather indices are kept on the pattern; built while tracing under jit, they
    must still be concrete arrays (no leaked tracer) for calls outside jit, in float64 and
    float32, and under vmap."""
    side = 5
    f = poisson_residual(side)
    pattern = sj.SparseMatrix.from_scipy(poisson_pattern(side)).pattern
    u = jnp.asarray(np.random.default_rng(1).standard_normal(side * side))
    dense = np.asarray(jax.jacfwd(f)(u))
    first = jax.jit(lambda v: sj.jacobian(f, v, pattern=pattern).to_dense())(u)
    np.testing.assert_allclose(np.asarray(first), dense, **TOL)
    np.testing.assert_allclose(np.asarray(sj.jacobian(f, u, pattern=pattern).to_dense()), dense, **TOL)
    single = sj.jacobian(f, u.astype(jnp.float32), pattern=pattern)
    assert single.values.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(single.to_dense()), dense, rtol=1e-4, atol=1e-4)
    batch = jnp.stack([u, 2 * u])
    stacked = jax.vmap(lambda v: sj.jacobian(f, v, pattern=pattern).values)(batch)
    for k in range(2):
        expected = np.asarray(jax.jacfwd(f)(batch[k]))[np.asarray(pattern.rows), np.asarray(pattern.indices)]
        np.testing.assert_allclose(np.asarray(stacked[k]), expected, **TOL)


def test_detection_sees_dependencies_whose_derivative_vanishes_at_x():
    """y = A (x * x) on a random sparse A, at an x with zeros: the dense Jacobian at x misses the
    columns of the zeros, the random points near x must not; the detected pattern reused at
    another point gives jax.jacfwd's answer there."""
    rng = np.random.default_rng(7)
    A = (rng.random((6, 8)) < 0.4) * rng.uniform(0.5, 2.0, (6, 8))
    f = lambda x: jnp.asarray(A) @ (x * x)  # noqa: E731
    x = rng.standard_normal(8)
    x[[1, 4, 5]] = 0.0
    J = sj.jacobian(f, jnp.asarray(x))
    detected = np.zeros(A.shape, dtype=bool)
    detected[J.pattern.rows, J.pattern.indices] = True
    np.testing.assert_array_equal(detected, A != 0)
    y = jnp.asarray(rng.standard_normal(8))
    np.testing.assert_allclose(np.asarray(sj.jacobian(f, y, pattern=J).to_dense()), np.asarray(jax.jacfwd(f)(y)), **TOL)
