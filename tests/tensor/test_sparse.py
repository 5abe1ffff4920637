"""Sparse Variables (COO, CSR): einsums over them run through pydata/sparse without densifying."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from sparsad import tensor as T
from sparsad.errors import DensifyWarning, FormatError, UnsupportedError

sparse = pytest.importorskip("sparse")


def _no_densify():
    warnings.simplefilter("error", DensifyWarning)


def test_cp_als_updates_on_a_sparse_tensor_match_dense():
    s, R = 7, 3
    rng = np.random.default_rng(0)
    coo = sparse.random((s, s, s), density=0.1, random_state=1)
    X = T.Variable("X", (s, s, s), sparse="coo")
    Xd = T.Variable("Xd", (s, s, s))
    fs = [T.Variable(f"A{n}", (s, R)) for n in range(3)]

    def updates(x):
        model = T.einsum("az,bz,cz->abc", *fs)
        res = x - model
        loss = 0.5 * T.einsum("abc,abc->", res, res)
        ups = [f - T.tensordot(T.tensorinv(T.hessian(loss, [f])[0][0]), T.grad(loss, f)) for f in fs]
        return T.optimize(ups + [loss], dimension_tree=fs)

    vals = {f: rng.random((s, R)) for f in fs}
    with warnings.catch_warnings():
        _no_densify()
        got = T.Executor(updates(X)).run({X: coo, **vals})
    want = T.Executor(updates(Xd)).run({Xd: coo.todense(), **vals})
    for g, w in zip(got, want):
        g = g.todense() if hasattr(g, "todense") else g
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


def test_csr_gradients_and_hvp_without_densifying(suitesparse):
    S = suitesparse("HB/bcsstk01")
    n = S.shape[0]
    rng = np.random.default_rng(2)
    A = T.Variable("S", S.shape, sparse="csr")
    U, V = T.Variable("U", (n, 3)), T.Variable("W", (n, 3))
    loss = T.einsum("ij,ir,jr->", A, U, V) + 0.5 * T.einsum("ir,ir->", U, U)
    D = T.Variable("D", (n, 3))
    nodes = T.optimize(T.grad(loss, [U, V]) + [T.hvp(loss, [U], [D])[0]])
    feed_vals = {U: rng.random((n, 3)), V: rng.random((n, 3)), D: rng.random((n, 3))}
    with warnings.catch_warnings():
        _no_densify()
        got = T.Executor(nodes).run({A: S, **feed_vals})
    dense = S.toarray()
    u, v, d = feed_vals[U], feed_vals[V], feed_vals[D]
    np.testing.assert_allclose(np.asarray(got[0]), dense @ v + u, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(got[1]), dense.T @ u, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(got[2]), d, rtol=1e-12)


def test_sparse_feed_rules():
    X = T.Variable("X", (3, 3), sparse="csr")
    y = T.einsum("ij->i", X)
    ex = T.Executor([y])
    with pytest.raises(FormatError, match="declared sparse"):
        ex.run({X: np.eye(3)})
    np.testing.assert_allclose(np.asarray(ex.run({X: sp.csr_matrix(np.eye(3))})[0]), np.ones(3))
    with pytest.raises(UnsupportedError, match="backend='numpy'"):
        T.Executor([y], backend="torch")
    with pytest.warns(DensifyWarning, match="densifying"):
        T.Executor([T.tensorinv(X, 1)]).run({X: sp.csr_matrix(2 * np.eye(3))})


def test_unoptimized_residual_warns_but_optimized_graph_stays_sparse():
    s = 5
    X = T.Variable("X", (s, s), sparse="coo")
    U, V = T.Variable("U", (s, 2)), T.Variable("V", (s, 2))
    res = X - T.einsum("ir,jr->ij", U, V)
    loss = T.einsum("ij,ij->", res, res)
    rng = np.random.default_rng(3)
    feed = {X: sparse.random((s, s), density=0.3, random_state=0), U: rng.random((s, 2)), V: rng.random((s, 2))}
    with pytest.warns(DensifyWarning):
        (plain,) = T.Executor([loss]).run(feed)
    with warnings.catch_warnings():
        _no_densify()
        (opt,) = T.Executor([T.optimize(loss)]).run(feed)
    assert float(opt) == pytest.approx(float(plain), rel=1e-12)


def test_gradients_wrt_sparse_variables_are_masked_sampled_einsums():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy
    s, R = 6, 2
    coo = sparse.random((s, s, s), density=0.15, random_state=4)
    X = T.Variable("X", (s, s, s), sparse="coo")
    A, B, C = (T.Variable(n, (s, R)) for n in "ABC")
    res = X - T.einsum("ir,jr,kr->ijk", A, B, C)
    loss = 0.5 * T.einsum("ijk,ijk->", res, res) + T.einsum("ijk,ijk->", X, X)
    rng = np.random.default_rng(5)
    vals = {A: rng.random((s, R)), B: rng.random((s, R)), C: rng.random((s, R))}
    g_masked = T.grad(loss, X)
    g_dense = T.grad(loss, X, mask_sparse=False)
    assert isinstance(g_masked, T.SampleAt)
    with warnings.catch_warnings():
        _no_densify()
        (opt,) = T.Executor([T.optimize(g_masked)]).run({X: coo, **vals})
    assert isinstance(opt, sparse.COO) and np.array_equal(opt.coords, coo.coords)

    def f(x, a, b, c):
        r = x - jnp.einsum("ir,jr,kr->ijk", a, b, c)
        return 0.5 * jnp.sum(r * r) + jnp.sum(x * x)

    ref = np.asarray(jax.grad(f)(coo.todense(), vals[A], vals[B], vals[C]))
    np.testing.assert_allclose(opt.data, ref[tuple(coo.coords)], rtol=1e-12)
    with pytest.warns(DensifyWarning):        # unoptimized: the residual X - model is dense
        (plain,) = T.Executor([g_masked]).run({X: coo, **vals})
    np.testing.assert_allclose(plain.todense(), opt.todense(), rtol=1e-12)
    with pytest.warns(DensifyWarning):                           # the dense-equivalent gradient
        (full,) = T.Executor([g_dense]).run({X: coo, **vals})
    np.testing.assert_allclose(np.asarray(full), ref, rtol=1e-12)
