"""The benchmark's kernels are right: optimized CP-GN HVP equals the hand-written formula, and the
memory estimate that guards the OOM rows shrinks under optimization."""
from __future__ import annotations

import numpy as np

from bench.autohoot import LEVELS, feed_for, handwritten_gn_hvp, kernel_graph, peak_bytes
from sparsad import tensor as T


def test_optimized_gn_hvp_equals_handwritten():
    variables, nodes = kernel_graph("GN HVP", 5)
    feed = feed_for(variables, seed=3)
    X, A, B, C, *V = variables
    got = T.Executor(T.optimize(nodes)).run(feed)
    want = handwritten_gn_hvp(feed[A], feed[B], feed[C], *[feed[v] for v in V])
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-11)


def test_memory_estimate_falls_with_each_optimization_level():
    _, nodes = kernel_graph("ALS Hessian", 12)
    est = [peak_bytes(nodes if p is None else T.optimize(nodes, passes=p)) for p in LEVELS.values()]
    assert est[0] > 10 * est[-1]
    assert est[-1] >= 8 * 12 ** 4          # the explicit Hessian itself is s^4 entries
