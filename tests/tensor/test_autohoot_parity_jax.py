"""The features added for AutoHOOT parity, each against JAX autodiff (float64): derivatives taken
through symmetric and orthonormal Variables (whose declarations let the optimizer simplify),
scalar constants pulled out of einsums, the MPS/MPO builders' networks, and values kept across
runs. Each derivative is computed by our AD, optimized, and compared with jax.grad / jax.hessian
of the same computation written in jax.numpy, at feeds that satisfy the declarations."""
from __future__ import annotations

import numpy as np
import pytest

from sparsad import tensor as T
from sparsad.tensor.graph import topological

jax = pytest.importorskip("jax")


def _symmetric(rng, shape, group):
    x = rng.standard_normal(shape)
    return x + np.swapaxes(x, *group)


def test_dmrg_local_energy_derivatives_with_symmetric_sites(backend, run, jnp):
    """A DMRG two-site energy over environments and MPO sites declared symmetric: the gradient
    and the local Hessian (optimized into one einsum) match jax.grad and jax.hessian."""
    chi, w, d = 3, 2, 2
    L = T.Variable("L", (chi, w, chi), symmetry=[[0, 2]])
    R = T.Variable("R", (chi, w, chi), symmetry=[[0, 2]])
    W1 = T.Variable("W1", (w, w, d, d), symmetry=[[2, 3]])
    W2 = T.Variable("W2", (w, w, d, d), symmetry=[[2, 3]])
    theta = T.Variable("theta", (chi, d, d, chi))
    spec = "awc,wxst,xyuv,byd,asub,ctvd->"
    energy = T.einsum(spec, L, W1, W2, R, theta, theta)
    grad = T.grad(energy, theta)
    hess = T.hessian(energy, [theta])[0][0]
    opt_grad, opt_hess = T.optimize([grad, hess])
    assert not any(isinstance(n, (T.Add, T.Sub)) for n in topological([opt_hess]))
    rng = np.random.default_rng(0)
    vals = {L: _symmetric(rng, L.shape, (0, 2)), R: _symmetric(rng, R.shape, (0, 2)),
            W1: _symmetric(rng, W1.shape, (2, 3)), W2: _symmetric(rng, W2.shape, (2, 3)),
            theta: rng.standard_normal(theta.shape)}
    got_grad, got_hess = run([opt_grad, opt_hess], vals, backend)

    def f(t):
        return jnp.einsum(spec, *[jnp.asarray(vals[v]) for v in (L, W1, W2, R)], t, t)

    t0 = jnp.asarray(vals[theta])
    np.testing.assert_allclose(got_grad, np.asarray(jax.grad(f)(t0)), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got_hess, np.asarray(jax.hessian(f)(t0)), rtol=1e-10, atol=1e-12)


def test_gradient_with_respect_to_a_symmetric_variable(backend, run, jnp):
    """Declaring H symmetric lets the optimizer merge the two halves of x^T H y + y^T H x, but
    the gradient with respect to H itself stays the plain one (every entry independent), as JAX's."""
    H = T.Variable("H", (3, 3), symmetry=[[0, 1]])
    x, y = T.Variable("x", (3,)), T.Variable("y", (3,))
    f = T.einsum("ab,a,b->", H, x, y) + T.einsum("ab,b,a->", H, x, y)
    got = run(T.optimize(T.grad(f, [H, x])), {H: (h := _symmetric(np.random.default_rng(1), (3, 3), (0, 1))),
                                               x: (xv := np.arange(1.0, 4.0)), y: (yv := np.array([2., -1., .5]))},
              backend)

    def g(hh, xx):
        return xx @ hh @ yv + yv @ hh @ xx

    want = jax.grad(g, argnums=(0, 1))(jnp.asarray(h), jnp.asarray(xv))
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, np.asarray(b), rtol=1e-12, atol=1e-12)


def test_derivatives_through_an_orthonormal_factor(backend, run, jnp):
    """f = ||U Uᵀ G||² with U declared column-orthonormal: U Uᵀ is pruned to the identity, so the
    gradient with respect to G no longer reads U; both gradients match JAX at an orthonormal U
    (where U Uᵀ = I holds; the gradient with respect to U is not zero)."""
    U = T.Variable("U", (4, 4), orthonormal="column")
    G = T.Variable("G", (4, 3))
    y = T.einsum("ab,cb,cd->ad", U, U, G)
    f = T.einsum("ad,ad->", y, y)
    grad_u, grad_g = T.optimize(T.grad(f, [U, G]))
    assert all(n is not U for n in topological([grad_g]))
    u = np.linalg.qr(np.random.default_rng(2).standard_normal((4, 4)))[0]
    g = np.random.default_rng(3).standard_normal((4, 3))
    got = run([grad_u, grad_g], {U: u, G: g}, backend)

    def h(uu, gg):
        return ((uu @ uu.T @ gg) ** 2).sum()

    want = jax.grad(h, argnums=(0, 1))(jnp.asarray(u), jnp.asarray(g))
    assert np.abs(np.asarray(want[0])).max() > 1e-3
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, np.asarray(b), rtol=1e-9, atol=1e-10)


def test_scalar_constants_pulled_out_of_einsums(backend, run, jnp):
    a1, a2 = T.Variable("a1", (3, 3)), T.Variable("a2", (3, 3))
    f = T.einsum("ab,,ab,,bc->", a1, T.Constant(3.0), a2, T.Constant(-0.5), a1)
    hv = T.Variable("v", (3, 3))
    nodes = T.optimize([T.grad(f, a1), T.hvp(f, [a1], [hv])[0]])
    rng = np.random.default_rng(4)
    v1, v2, vv = (rng.standard_normal((3, 3)) for _ in range(3))
    got = run(nodes, {a1: v1, a2: v2, hv: vv}, backend)

    def g(x):
        return jnp.einsum("ab,ab,bc->", x, jnp.asarray(v2), x) * (3.0 * -0.5)

    np.testing.assert_allclose(got[0], np.asarray(jax.grad(g)(jnp.asarray(v1))), rtol=1e-12)
    _, hvp = jax.jvp(jax.grad(g), (jnp.asarray(v1),), (jnp.asarray(vv),))
    np.testing.assert_allclose(got[1], np.asarray(hvp), rtol=1e-12)


def test_mps_energy_gradient_from_the_builders(backend, run, jnp):
    """<psi|H|psi> for an MPS and an MPO made by the builders: the gradient with respect to a
    middle site matches JAX on the same contraction."""
    psi, sites = T.mps(3, ranks=[2, 3], size=2)
    op, mpo_sites = T.mpo(3, ranks=[2, 2], size=2)
    energy = T.einsum("abc,abcdef,def->", psi, op, psi)
    grad = T.optimize(T.grad(energy, sites[1]))
    rng = np.random.default_rng(5)
    vals = {s: rng.standard_normal(s.shape) for s in sites}
    for s in mpo_sites:
        vals[s] = _symmetric(rng, s.shape, (s.ndim - 2, s.ndim - 1))
    got = run(grad, vals, backend)
    # the builders' layouts: MPS (bond, phys), (left, right, phys), (bond, phys);
    # MPO (bond, up, down), (left, right, up, down), (bond, up, down)
    m0, m1, m2 = (jnp.asarray(vals[s]) for s in mpo_sites)

    def f(a1):
        a0, a2 = jnp.asarray(vals[sites[0]]), jnp.asarray(vals[sites[2]])
        state = jnp.einsum("xa,xyb,yc->abc", a0, a1, a2)
        hamiltonian = jnp.einsum("pad,pqbe,qcf->abcdef", m0, m1, m2)
        return jnp.einsum("abc,abcdef,def->", state, hamiltonian, state)

    np.testing.assert_allclose(got, np.asarray(jax.grad(f)(jnp.asarray(vals[sites[1]]))), rtol=1e-10)


def test_values_kept_across_runs_give_jax_gradients(backend, jnp):
    """keep_feeds=True: the data tensor is fed once, then only the factor changes between runs;
    each run's gradient is JAX's for the current factor and the first data."""
    X, A = T.Variable("X", (4, 3)), T.Variable("A", (3, 2))
    residual = X - T.einsum("ir,jr->ij", T.Constant(np.ones((4, 2))), A)
    loss = 0.5 * T.einsum("ij,ij->", residual, residual)
    ex = T.Executor(T.optimize([T.grad(loss, A)]), backend, keep_feeds=True)
    rng = np.random.default_rng(6)
    x = rng.standard_normal((4, 3))
    for step in range(3):
        a = rng.standard_normal((3, 2))
        feed = {X: x, A: a} if step == 0 else {A: a}
        (got,) = ex.run(feed, to_numpy=True)

        def f(aa):
            r = jnp.asarray(x) - jnp.ones((4, 2)) @ aa.T
            return 0.5 * (r * r).sum()

        np.testing.assert_allclose(np.asarray(got), np.asarray(jax.grad(f)(jnp.asarray(a))), rtol=1e-12)
