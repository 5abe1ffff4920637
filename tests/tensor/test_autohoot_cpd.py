"""AutoHOOT's CP/Tucker/ALS tests (tests/cpd_test.py, tucker_test.py, graph_als_test.py,
sympy_simplify_test.py) as our own: CP gradients, Gauss-Newton products and Hessian blocks against
JAX; the optimized diagonal Hessian block as a Gram Hadamard product times an identity; ALS and
HOOI sweeps that decrease the residual; like terms collected by SymPy."""
from __future__ import annotations

import jax
import numpy as np
import pytest

from sparsad import tensor as T
from sparsad.tensor.graph import count_nodes, topological
from sparsad.tensor.simplify import simplify

S, R = 4, 3


def cp(s=S, r=R):
    A, B, C = (T.Variable(n, (s, r)) for n in "ABC")
    X = T.Variable("X", (s, s, s))
    model = T.einsum("ia,ja,ka->ijk", A, B, C)
    res = model - X
    return (A, B, C, X), model, 0.5 * T.einsum("ijk,ijk->", res, res)


def jax_loss(a, b, c, x):
    r = jax.numpy.einsum("ia,ja,ka->ijk", a, b, c) - x
    return 0.5 * (r * r).sum()


def cp_feed(variables, seed=0):
    rng = np.random.default_rng(seed)
    return {v: rng.standard_normal(v.shape) for v in variables}


def test_cpd_grad(backend, run, jnp):
    xs, _, loss = cp()
    feed = cp_feed(xs)
    want = jax.grad(jax_loss, argnums=(0, 1, 2))(*[jnp.asarray(feed[v]) for v in xs])
    for got, w in zip(run(T.optimize(T.grad(loss, list(xs[:3]))), feed, backend), want):
        np.testing.assert_allclose(got, np.asarray(w), rtol=1e-10)


def test_cpd_jtjvp(backend, run, jnp):
    (A, B, C, X), model, _ = cp()
    V = [T.Variable(f"V{k}", (S, R)) for k in range(3)]
    gn = T.vjp(model, [A, B, C], T.jvp(model, [A, B, C], V))
    feed = cp_feed([A, B, C, X, *V])

    def m(a, b, c):
        return jax.numpy.einsum("ia,ja,ka->ijk", a, b, c)

    primals = tuple(jnp.asarray(feed[v]) for v in (A, B, C))
    _, jv = jax.jvp(m, primals, tuple(jnp.asarray(feed[v]) for v in V))
    want = jax.vjp(m, *primals)[1](jv)
    for nodes in (gn, T.optimize(gn)):
        for got, w in zip(run(nodes, feed, backend), want):
            np.testing.assert_allclose(got, np.asarray(w), rtol=1e-10)


def test_cpd_hessian_blocks(backend, run, jnp):
    xs, _, loss = cp()
    H = T.hessian(loss, list(xs[:3]))
    feed = cp_feed(xs)
    want = jax.hessian(jax_loss, argnums=(0, 1, 2))(*[jnp.asarray(feed[v]) for v in xs])
    blocks = [H[i][j] for i in range(3) for j in range(3)]
    got = run(T.optimize(blocks), feed, backend)
    for k, g in enumerate(got):
        np.testing.assert_allclose(g, np.asarray(want[k // 3][k % 3]), rtol=1e-9, atol=1e-10)


def test_cpd_diagonal_hessian_is_a_gram_product(run):
    (A, B, C, X), _, loss = cp()
    H_aa = T.optimize(T.hessian(loss, [A])[0][0])
    # (B^T B * C^T C) (x) I: no X, one identity, both R x R Gram matrices
    nodes = topological([H_aa])
    assert not any(n is X for n in nodes)
    assert count_nodes([H_aa], T.Identity) == 1
    grams = [n for n in nodes if isinstance(n, T.Einsum) and n.shape == (R, R)]
    assert len(grams) >= 2
    feed = cp_feed([A, B, C, X])
    b, c = feed[B], feed[C]
    np.testing.assert_allclose(run(H_aa, feed),
                               np.einsum("ac,bd->abcd", np.eye(S), (b.T @ b) * (c.T @ c)), rtol=1e-10)


def test_cpd_als_sweeps_decrease_the_residual(run):
    (A, B, C, X), _, loss = cp(s=5, r=2)
    sites = [A, B, C]
    ups = [a - T.tensordot(T.tensorinv(T.hessian(loss, [a])[0][0]), T.grad(loss, a)) for a in sites]
    opt = T.optimize(ups, dimension_tree=sites)
    rng = np.random.default_rng(0)
    true = [rng.standard_normal((5, 2)) for _ in range(3)]
    x = np.einsum("ia,ja,ka->ijk", *true)
    vals = dict(zip(sites, [rng.standard_normal((5, 2)) for _ in range(3)]))
    ex = T.Executor(opt + [loss])
    before = ex.run({X: x, **vals}, out=[loss])[0]
    for _ in range(30):
        for k, a in enumerate(sites):
            vals[a] = ex.run({X: x, **vals}, out=[opt[k]])[0]
    after = ex.run({X: x, **vals}, out=[loss])[0]
    assert after < 1e-6 * before


def test_tucker_hooi_reaches_the_noise_floor():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    import tucker_hooi

    rng = np.random.default_rng(1)
    core = rng.standard_normal((2, 2, 2))
    factors = [np.linalg.qr(rng.standard_normal((s, 2)))[0] for s in (5, 6, 4)]
    clean = np.einsum("abc,ia,jb,kc->ijk", core, *factors)
    noise = 1e-3 * rng.standard_normal((5, 6, 4))
    x = clean + noise
    _, history = tucker_hooi.hooi(x, (2, 2, 2), n_iter=3)
    # the best rank-(2, 2, 2) fit is no worse than the planted one
    assert history[-1] <= np.linalg.norm(noise) / np.linalg.norm(x) * (1 + 1e-9)


@pytest.mark.parametrize("shape, ranks", [((5, 6, 4), (2, 3, 2)), ((4, 3, 5, 3), (2, 2, 3, 2))])
def test_tucker_hooi_graph_keeps_no_pure_transpose(shape, ranks, run):
    """The optimized TTMc graph of HOOI (orders 3 and 4) has no node that only permutes axes,
    and computes what the unoptimized Jacobian-based TTMcs compute."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    import tucker_hooi

    X, factors, ttmcs, objective = tucker_hooi.tucker_graph(shape, ranks)
    for n in topological(ttmcs + [objective]):
        assert not isinstance(n, T.Transpose)
        if isinstance(n, T.Einsum) and len(n.inputs) == 1:
            (sub,) = n.in_subs
            assert sorted(sub) != sorted(n.out_sub), f"pure transpose {sub}->{n.out_sub}"
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape)
    vals = [np.linalg.qr(rng.standard_normal((s, r)))[0] for s, r in zip(shape, ranks)]
    got = run(ttmcs, {X: x, **dict(zip(factors, vals))})
    letters = "abcd"[:len(shape)]
    for n, y in enumerate(got):
        others = [k for k in range(len(shape)) if k != n]
        spec = letters + "," + ",".join(f"{letters[k]}{k}" for k in others) + "->" + letters[n] + \
            "".join(str(k) for k in others)
        want = np.einsum(spec.replace("0", "A").replace("1", "B").replace("2", "C").replace("3", "D"),
                         x, *[vals[k] for k in others])
        np.testing.assert_allclose(y, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("case", ["add", "minus", "einsum"])
def test_sympy_collects_like_terms(case, run):
    a, b = T.Variable("a", (3, 3)), T.Variable("b", (3, 3))
    e = {"add": lambda: a + a + 2 * a,
         "minus": lambda: a + b - a,
         "einsum": lambda: T.einsum("ij,jk->ik", a, b) + T.einsum("pq,qr->pr", a, b) - 2 * a}[case]()
    (s,) = simplify([e])
    expected_terms = {"add": 1, "minus": 1, "einsum": 2}[case]
    terms = [n for n in topological([s]) if not isinstance(n, (T.Add, T.Sub, T.Scale, T.Variable))]
    assert len([n for n in topological([s]) if isinstance(n, (T.Add, T.Sub))]) == expected_terms - 1
    assert len(terms) <= 1
    feed = cp_feed([a, b])
    np.testing.assert_allclose(run(s, feed), run(e, feed), rtol=1e-12)
