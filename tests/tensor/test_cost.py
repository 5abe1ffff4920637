"""The cost model, and optimize's guard that never returns the costlier of the two graphs."""
from __future__ import annotations

import numpy as np
import opt_einsum as oe

from sparsad import tensor as T
from sparsad.tensor.cost import NODE_COST, graph_cost, node_cost


def test_einsum_and_inverse_costs():
    A, B, C = T.Variable("A", (4, 5)), T.Variable("B", (5, 6)), T.Variable("C", (6, 7))
    e = T.einsum("ij,jk,kl->il", A, B, C)
    flops, greedy = (oe.contract_path("ij,jk,kl->il", A.shape, B.shape, C.shape, shapes=True,
                                      optimize=strategy)[1].opt_cost for strategy in ("optimal", "greedy"))
    assert node_cost(e) == flops < greedy    # the default path: the exact order where greedy's is worse
    H = T.Variable("H", (3, 4, 3, 4))
    assert node_cost(T.tensorinv(H, 2)) == 12 ** 3
    assert graph_cost([e + e]) == flops + 4 * 7 + 2 * NODE_COST     # e is evaluated once


def nested_inverse_problem():
    """Derivatives through two nested inverses, where distribution and fusion overshoot."""
    A, v = T.Variable("A", (3, 3)), T.Variable("v", (3,))
    eye = T.Constant(3.0 * np.eye(3))

    def inv(x):
        return T.tensorinv(T.einsum("ij,kj->ik", x, x) + eye, 1)

    y = inv(inv(-2.0 * A))
    loss = T.einsum("ij,ij->", y, y) + T.einsum("i,ij,j->", v, y, v)
    V = T.Variable("V", (3, 3))
    return (A, v, V), [loss] + T.grad(loss, [A, v]) + T.hvp(loss, [A], [V])


def test_guard_returns_the_cheaper_graph_with_the_same_values():
    (A, v, V), nodes = nested_inverse_problem()
    guarded = T.optimize(nodes)
    unguarded = T.optimize(nodes, guard=False)
    plain = T.optimize(nodes, passes=("path", "cse"))
    assert graph_cost(guarded) == min(graph_cost(unguarded), graph_cost(plain))
    rng = np.random.default_rng(0)
    feed = {x: 0.5 * rng.standard_normal(x.shape) for x in (A, v, V)}
    want = T.Executor(nodes).run(feed)
    for graph in (guarded, unguarded):
        for w, g in zip(want, T.Executor(graph).run(feed)):
            np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)
