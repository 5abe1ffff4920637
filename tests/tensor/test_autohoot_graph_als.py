"""AutoHOOT's dimension-tree and solver tests (tests/graph_als_test.py, graph_optimal_tree_test.py,
cg_test.py, s2s_test.py) as our own: sweeps contracted along dimension trees (order 4, with an
identity site, a DMRG-like chain) keep their values and share work; H^{-1} g by conjugate
gradients on graph HVPs; printed source runs to the same values."""
from __future__ import annotations

import inspect

import numpy as np
import pytest
from scipy.sparse.linalg import LinearOperator, cg

from sparsad import tensor as T
from sparsad.tensor.contract_path import split_einsum
from sparsad.tensor.graph import topological


def feed_of(variables, seed=0):
    rng = np.random.default_rng(seed)
    return {v: rng.standard_normal(v.shape) for v in variables}


def test_dimension_tree_4d_shares_the_first_contractions(run):
    X = T.Variable("X", (3, 3, 3, 3))
    sites = [T.Variable(n, (3, 2)) for n in "ABCD"]
    letters = "ijkl"
    nodes = [T.einsum(letters + "," + ",".join(c + "r" for k, c in enumerate(letters) if k != n) + "->"
                      + letters[n] + "r", X, *[s for k, s in enumerate(sites) if k != n]) for n in range(4)]
    opt = T.optimize(nodes, dimension_tree=sites)
    feed = feed_of([X, *sites])
    for a, b in zip(run(nodes, feed), run(opt, feed)):
        np.testing.assert_allclose(b, a, rtol=1e-10)
    big = [n for n in topological(opt) if isinstance(n, T.Einsum) and any(o is X for o in n.inputs)]
    assert len(big) == 2                        # X is contracted twice per sweep, not four times


def test_dimension_tree_with_an_identity_site(run):
    A, C = T.Variable("A", (2, 2)), T.Variable("C", (2, 2))
    B = T.Identity(2)
    X = T.Variable("X", (2, 2, 2))
    nodes = [T.einsum("abc,bm,cm->am", X, B, C), T.einsum("abc,am,cm->bm", X, A, C),
             T.einsum("abc,am,bm->cm", X, A, B)]
    opt = T.optimize(nodes, dimension_tree=[A, B, C])
    feed = feed_of([A, C, X])
    for a, b in zip(run(nodes, feed), run(opt, feed)):
        np.testing.assert_allclose(b, a, rtol=1e-12)


def test_dmrg_chain_tree(run):
    # a DMRG-like environment chain split pairwise keeps its value, each step pairwise
    mps, sites = T.mps(4, [2, 3, 2])
    mpo, ops = T.mpo(4, [2, 2, 2])
    up = "".join(chr(ord("a") + k) for k in range(4))
    down = "".join(chr(ord("e") + k) for k in range(4))
    energy = T.einsum(f"{up},{up}{down},{down}->", mps, mpo, mps)
    (fused,) = T.optimize([energy], passes=("fuse",))
    tree = split_einsum(fused)
    assert all(len(n.inputs) <= 2 for n in topological([tree]) if isinstance(n, T.Einsum))
    rng = np.random.default_rng(0)
    feed = {v: rng.standard_normal(v.shape) for v in sites}
    for w in ops:
        x = rng.standard_normal(w.shape)
        feed[w] = x + np.swapaxes(x, -1, -2)
    np.testing.assert_allclose(run(tree, feed), run(energy, feed), rtol=1e-10)


def test_h_inverse_g_by_conjugate_gradients_on_graph_hvps(run):
    n = 10
    rng = np.random.default_rng(1224)
    a = rng.random((n, n))
    a = a.T @ a + np.eye(n)
    b = rng.random(n)
    A, x, v = T.Variable("A", (n, n)), T.Variable("x", (n,)), T.Variable("v", (n,))
    loss = 0.5 * T.einsum("ab,a,b->", A, x, x)              # Hessian A
    hvp = T.Executor(T.optimize(T.hvp(loss, x, v)))
    op = LinearOperator((n, n), matvec=lambda u: hvp.run({A: a, x: np.zeros(n), v: u})[0])
    sol, info = cg(op, b, rtol=1e-12, atol=0)
    assert info == 0
    np.testing.assert_allclose(a @ sol, b, atol=1e-8)


@pytest.mark.parametrize("graph", ["cp_grads", "hessian", "norm_power"])
def test_source_to_source_runs_to_the_same_values(graph, run):
    A, B = T.Variable("A", (3, 2)), T.Variable("B", (2, 3))
    y = T.einsum("ij,jk->ik", A, B)
    nodes = {"cp_grads": lambda: T.grad(T.einsum("ik,ik->", y, y), [A, B]),
             "hessian": lambda: [T.hessian(T.einsum("ik,ik->", y, y), [A])[0][0]],
             "norm_power": lambda: [T.norm(y) ** 3, T.power(T.einsum("ik->k", y * y) + 1.0, 1.5)]}[graph]()
    opt = T.optimize(nodes)
    namespace: dict = {}
    exec(compile(T.to_source(opt), "<to_source>", "exec"), namespace)
    feed = feed_of([A, B], seed=3)
    params = inspect.signature(namespace["run"]).parameters      # a Hessian of a quadratic needs no A
    got = namespace["run"](**{v.name: feed[v] for v in (A, B) if v.name in params})
    for a, b in zip(run(nodes, feed), got):
        np.testing.assert_allclose(b, a, rtol=1e-12)
