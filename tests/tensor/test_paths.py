"""The default contraction order ("cheapest") is never costlier than greedy, exact on small einsums.

Costs are opt_einsum's flop counts (the cost model); values are checked against numpy.einsum.
"""
from __future__ import annotations

import numpy as np
import opt_einsum as oe
from hypothesis import given, settings, strategies as st

from sparsad import tensor as T
from sparsad.tensor.cost import graph_cost
from sparsad.tensor.paths import OPTIMAL_MAX_OPERANDS, choose_path

DMRG_PAIRING = "awc,wxst,xyuv,byd,asub,ctvd->"      # <bra| L W1 W2 R |ket>, as in examples/dmrg.py


def flops(subscripts, shapes, strategy):
    return int(oe.contract_path(subscripts, *shapes, shapes=True, optimize=strategy)[1].opt_cost)


@st.composite
def small_einsums(draw):
    """Random einsums of 3-6 operands over up to 8 letters of sizes 1-7, some letters kept."""
    letters = "abcdefgh"[:draw(st.integers(3, 8))]
    sizes = {c: draw(st.integers(1, 7)) for c in letters}
    n = draw(st.integers(3, 6))
    operands = [draw(st.lists(st.sampled_from(letters), min_size=1, max_size=3, unique=True)) for _ in range(n)]
    used = sorted(set("".join("".join(o) for o in operands)))
    out = draw(st.lists(st.sampled_from(used), max_size=2, unique=True))
    subscripts = ",".join("".join(o) for o in operands) + "->" + "".join(out)
    return subscripts, [tuple(sizes[c] for c in o) for o in operands]


@settings(max_examples=40, deadline=None)
@given(small_einsums(), st.integers(0, 2 ** 16))
def test_cheapest_order_is_never_costlier_than_greedy_and_exact_when_small(case, seed):
    subscripts, shapes = case
    steps, cost = choose_path(subscripts, shapes)
    assert cost <= flops(subscripts, shapes, "greedy")
    if len(shapes) <= OPTIMAL_MAX_OPERANDS:
        assert cost == min(flops(subscripts, shapes, "optimal"), flops(subscripts, shapes, "greedy"))
    assert cost == flops(subscripts, shapes, steps)    # the reported cost is the plan's own
    # The graph planned with it computes the einsum.
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(s) for s in shapes]
    nodes = [T.Variable(f"x{i}", s) for i, s in enumerate(shapes)]
    graph = T.optimize(T.einsum(subscripts, *nodes))
    value = T.Executor([graph]).run(dict(zip(nodes, arrays)))[0]
    np.testing.assert_allclose(value, np.einsum(subscripts, *arrays), rtol=1e-10, atol=1e-10)


def dmrg_matvec(chi_left, chi_right, mpo_bond, d):
    """H_eff v of two-site DMRG as the graph HVP the example builds, and its inputs."""
    env_l, env_r = (chi_left, mpo_bond, chi_left), (chi_right, mpo_bond, chi_right)
    site = (mpo_bond, mpo_bond, d, d)
    theta = (chi_left, d, d, chi_right)
    L, R = T.Variable("L", env_l, symmetry=[[0, 2]]), T.Variable("R", env_r, symmetry=[[0, 2]])
    W1, W2 = T.Variable("W1", site, symmetry=[[2, 3]]), T.Variable("W2", site, symmetry=[[2, 3]])
    bra, ket, v = (T.Variable(n, theta) for n in ("bra", "ket", "v"))
    pairing = T.einsum(DMRG_PAIRING, L, W1, W2, R, bra, ket)
    return T.hvp(pairing, [bra, ket], [T.zeros(theta), v])[0], (L, W1, W2, R, v)


def test_dmrg_matvec_gets_the_cheap_order_without_asking():
    # Shapes where opt_einsum's greedy order of H_eff v costs 4x the best one.
    shapes = dict(chi_left=64, chi_right=64, mpo_bond=20, d=10)
    matvec, _ = dmrg_matvec(**shapes)
    default = graph_cost([T.optimize(matvec)])
    greedy = graph_cost([T.optimize(matvec, path="greedy")])
    optimal = graph_cost([T.optimize(matvec, path="optimal")])
    assert default == optimal
    assert greedy > 3 * default


def test_dmrg_matvec_value_with_the_default_order():
    matvec, (L, W1, W2, R, v) = dmrg_matvec(chi_left=3, chi_right=4, mpo_bond=2, d=2)
    rng = np.random.default_rng(0)

    def symmetric(shape, axes):
        x = rng.standard_normal(shape)
        return (x + np.swapaxes(x, *axes)) / 2

    feeds = {L: symmetric(L.shape, (0, 2)), R: symmetric(R.shape, (0, 2)), W1: symmetric(W1.shape, (2, 3)),
             W2: symmetric(W2.shape, (2, 3)), v: rng.standard_normal(v.shape)}
    got = T.Executor([T.optimize(matvec)]).run(feeds)[0]
    want = np.einsum("awc,wxst,xyuv,byd,ctvd->asub", feeds[L], feeds[W1], feeds[W2], feeds[R], feeds[v])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_executor_plans_unsplit_einsums_with_the_cheap_order_too():
    subscripts = "awc,wxst,xyuv,byd,ctvd->asub"
    shapes = [(64, 20, 64), (20, 20, 10, 10), (20, 20, 10, 10), (64, 20, 64), (64, 10, 10, 64)]
    nodes = [T.Variable(f"x{i}", s) for i, s in enumerate(shapes)]
    executor = T.Executor([T.einsum(subscripts, *nodes)])
    (_, expression), = executor._plans.values()
    planned = [step[0] for step in expression.func.contraction_list]    # opt_einsum's ContractExpression
    assert flops(subscripts, shapes, planned) == flops(subscripts, shapes, "optimal")
