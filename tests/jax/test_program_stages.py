"""sparsad.jax.compile_program on programs with top-level lets (sparsad.opt.stages): the chained
stages give the values and gradients of dense JAX (float64, 1e-10) for every wrt input, sparse
values included (masked), under jit, grad and vmap, lowered or by host calls."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

import sparsad.jax as sj  # noqa: E402

TOL = dict(rtol=1e-10, atol=1e-10)
XW = "sum(<k, xr> in X) { k -> sum(<f, x> in xr) sum(<c, w> in W(f)) { c -> x * w } }"
AGG = "sum(<i, r> in A) { i -> sum(<k, a> in r) sum(<c, v> in XW(k)) { c -> a * v } }"

# name: (program, dense reference of (A, X, W), the lets cut)
PROGRAMS = {
    "gcn": (f"let XW = {XW} in {AGG}", lambda A, X, W: A @ (X @ W), ["XW"]),
    "read twice": (f"let XW = {XW} in let s = sum(<k, r> in XW) sum(<c, v> in r) v * v in "
                   "sum(<i, r> in A) { i -> sum(<k, a> in r) sum(<c, v> in XW(k)) { c -> a * v * s } }",
                   lambda A, X, W: (A @ (X @ W)) * ((X @ W) ** 2).sum(), ["XW", "s"]),
    "nested chain": (
        f"let XW = {XW} in "
        "let B = sum(<i, r> in A) { i -> sum(<j, a> in r) { j -> a * (sum(<c, v> in XW(j)) v) } } in "
        "sum(<i, r> in B) { i -> sum(<k, b> in r) sum(<c, v> in XW(k)) { c -> b * v * B(k)(i) } }",
        lambda A, X, W: ((A * (X @ W).sum(1)[None, :]) * (A * (X @ W).sum(1)[None, :]).T) @ (X @ W),
        ["XW", "B"]),
}


def _inputs(seed: int, n: int = 7, f: int = 5, c: int = 3):
    rng = np.random.default_rng(seed)
    matrix = (sp.random(n, n, density=0.35, format="csr", random_state=seed) + sp.eye(n, format="csr")).tocsr()
    matrix.data = rng.standard_normal(matrix.nnz)
    A = sj.SparseMatrix.from_scipy(matrix)
    rows = np.repeat(np.arange(n), np.diff(matrix.indptr))
    return A, (rows, matrix.indices), jnp.asarray(rng.standard_normal((n, f))), jnp.asarray(rng.standard_normal((f, c)))


@pytest.mark.parametrize("name, lower", [(name, "auto") for name in sorted(PROGRAMS)] + [("nested chain", False)])
def test_values_and_gradients_of_every_input_match_dense_jax(name, lower):
    text, reference, cut = PROGRAMS[name]
    with jax.enable_x64(True):
        A, (rows, cols), X, W = _inputs(0)
        layer = sj.compile_program(text, lower=lower)
        seed = jnp.asarray(np.random.default_rng(1).standard_normal((7, 3)))

        def ours(values, X, W):
            return (layer(A=A.with_values(values), X=X, W=W) * seed).sum()

        def dense(values, X, W):
            return (reference(jnp.zeros((7, 7)).at[rows, cols].set(values), X, W) * seed).sum()

        args = (A.values, X, W)
        np.testing.assert_allclose(ours(*args), dense(*args), **TOL)
        plans = [p for p in layer._stages._plans.values() if p]
        assert [entry[1] for entry in plans[0][:-1]] == cut
        for got, want in zip(jax.jit(jax.grad(ours, argnums=(0, 1, 2)))(*args), jax.grad(dense, argnums=(0, 1, 2))(*args)):
            np.testing.assert_allclose(got, want, **TOL)
        Ws = jnp.stack([W, 2.0 * W])
        np.testing.assert_allclose(jax.vmap(jax.grad(ours, argnums=2), in_axes=(None, None, 0))(A.values, X, Ws),
                                   jax.vmap(jax.grad(dense, argnums=2), in_axes=(None, None, 0))(A.values, X, Ws),
                                   **TOL)


def test_sparse_features_make_x_w_a_compiled_stage_and_forward_mode_matches():
    text, reference, _ = PROGRAMS["gcn"]
    with jax.enable_x64(True):
        A, _, _, W = _inputs(2)
        features = sp.random(7, 5, density=0.5, format="csr", random_state=3)
        X = sj.SparseMatrix.from_scipy(features)
        layer = sj.compile_program(text, wrt=("W",))
        dense_A, dense_X = jnp.asarray(A.to_scipy().toarray()), jnp.asarray(features.toarray())
        tangent = jnp.ones_like(W)
        got = jax.jvp(lambda W: layer(A=A, X=X, W=W), (W,), (tangent,))
        want = jax.jvp(lambda W: reference(dense_A, dense_X, W), (W,), (tangent,))
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, **TOL)
        np.testing.assert_allclose(jax.jacrev(lambda W: layer(A=A, X=X, W=W))(W),
                                   jax.jacrev(lambda W: reference(dense_A, dense_X, W))(W), **TOL)
