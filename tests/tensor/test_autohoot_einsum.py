"""AutoHOOT's einsum tests (tests/einsum_test.py, graph_merger_test.py) as our own: einsums over
symbols beyond the alphabet, fusion of einsum trees (shared sub-trees cloned, identities and
multi-tier trees), and splitting back into pairwise contractions."""
from __future__ import annotations

import numpy as np
import pytest

from sparsad import tensor as T
from sparsad.tensor.contract_path import contraction_paths
from sparsad.tensor.fuse import fuse
from sparsad.tensor.graph import topological


@pytest.mark.parametrize("n", [60, 120])
def test_large_matmul_chain_with_unicode_subscripts(n, backend, run):
    xs = [T.Variable(f"x{i}", (3, 3)) for i in range(n)]
    chars = [chr(192 + i) for i in range(n + 1)]           # includes '×' and '÷'
    out = T.einsum(",".join(chars[i] + chars[i + 1] for i in range(n)) + "->" + chars[0] + chars[n], *xs)
    rng = np.random.default_rng(0)
    vals = [rng.uniform(-1, 1, (3, 3)) / 2 for _ in range(n)]
    want = np.linalg.multi_dot(vals)
    feed = dict(zip(xs, vals))
    for graph in ([out], T.optimize([out]), contraction_paths([out])):
        np.testing.assert_allclose(run(graph, feed, backend)[0], want, rtol=1e-9, atol=1e-300)
    for node in topological(T.optimize([out])):
        if isinstance(node, T.Einsum):
            assert len(node.inputs) <= 2


def test_fuse_graph_with_identity_and_only_identities(run):
    a = T.Variable("a", (3, 3))
    I3 = T.Identity(3)
    e = T.einsum("ab,bc->ac", T.einsum("ab,bc->ac", a, I3), T.einsum("ab,bc->ac", I3, a))
    (f,) = fuse([e])
    assert len(f.inputs) == 4
    only = T.einsum("ab,bc->ac", T.einsum("ab,bc->ac", I3, I3), I3)
    (g,) = fuse([only])
    assert all(isinstance(o, T.Identity) for o in g.inputs)
    feed = {a: np.random.default_rng(0).random((3, 3))}
    np.testing.assert_allclose(run(f, feed), run(e, feed))
    np.testing.assert_allclose(run(g, {}), np.eye(3))


def test_fuse_multiuse_and_multitier(run):
    a, b, c = (T.Variable(n, (2, 2)) for n in "abc")
    ab = T.einsum("ij,jk->ik", a, b)
    tier2 = T.einsum("ij,jk->ik", ab, T.einsum("ij,jk->ik", ab, c))      # ab used twice
    tier3 = T.einsum("ij,jk->ik", tier2, tier2)
    (f,) = fuse([tier3])
    assert not any(isinstance(o, T.Einsum) for o in f.inputs) and len(f.inputs) == 10
    feed = {v: np.random.default_rng(1).random((2, 2)) for v in (a, b, c)}
    np.testing.assert_allclose(run(f, feed), run(tier3, feed))


def test_fuse_keeps_non_einsum_boundaries(run):
    a, b = T.Variable("a", (2, 2)), T.Variable("b", (2, 2))
    inner = T.tanh(T.einsum("ij,jk->ik", a, b))
    e = T.einsum("ij,jk->ik", inner, a)
    (f,) = fuse([e])
    assert any(isinstance(o, T.Elementwise) for o in f.inputs)
    feed = {a: np.eye(2) + 0.1, b: np.ones((2, 2))}
    np.testing.assert_allclose(run(f, feed), run(e, feed))
