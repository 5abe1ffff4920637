"""AutoHOOT's einsum-tree tests (tests/graph_generator_test.py, graph_util_test.py,
utilfunc_test.py) as our own: many-operand einsums split into pairwise trees (chosen or given
orders, rings where a greedy order gets stuck), the constrained order of dimension trees (a site's
nearest ancestor, inverses held back to the end), and a graph rebuilt over new Variables.

Each tree is checked for its structure and against numpy.einsum of the original on random values."""
from __future__ import annotations

import numpy as np
import pytest

from sparsad import tensor as T
from sparsad.errors import ShapeError
from sparsad.tensor.contract_path import build_tree, split_einsum
from sparsad.tensor.cse import Canonicalizer
from sparsad.tensor.dimension_tree import constrained_path
from sparsad.tensor.graph import rewrite, topological


def _feed(variables, seed=0):
    rng = np.random.default_rng(seed)
    return {v: rng.standard_normal(v.shape) for v in variables}


def _einsums(node):
    return [n for n in topological([node]) if isinstance(n, T.Einsum)]


def _same_value(tree, original, variables, run):
    feed = _feed(variables)
    np.testing.assert_allclose(run(tree, feed), run(original, feed), rtol=1e-10, atol=1e-12)


def test_four_index_transform_becomes_pairwise(run):
    """The AO-to-MO integral transform: four matrices around a 4-way tensor."""
    C, I = T.Variable("C", (6, 6)), T.Variable("I", (6, 6, 6, 6))
    out = T.einsum("pi,qj,ijkl,rk,sl->pqrs", C, C, I, C, C)
    tree = split_einsum(out)
    assert all(len(n.inputs) == 2 for n in _einsums(tree))
    assert len(_einsums(tree)) == 4                      # one contraction per matrix, O(n^5) each
    _same_value(tree, out, [C, I], run)


def test_ring_with_a_hub_splits_into_pairs(run):
    """A chain A-B-C-D with every site also tied to a hub E: no operand pair shares few letters,
    which left NumPy's own path with the whole einsum; ours is pairwise all the way."""
    n = 4
    A, D = T.Variable("A", (n, n, n)), T.Variable("D", (n, n, n))
    B, C, E = (T.Variable(s, (n, n, n, n)) for s in "BCE")
    out = T.einsum("aeh,bfie,cgjf,dgk,abcd->hijk", A, B, C, D, E)
    tree = split_einsum(out)
    assert all(len(e.inputs) == 2 for e in _einsums(tree))
    _same_value(tree, out, [A, B, C, D, E], run)


@pytest.mark.parametrize("steps, arities", [([(1, 2), (0, 1)], [2, 2]), ([(1, 2), (0, 1, 2)], [2, 3])])
def test_tree_follows_a_given_order(steps, arities, run):
    a, b, c, d = (T.Variable(n, s) for n, s in zip("abcd", [(2, 2), (2, 5), (5, 2), (2, 2)]))
    if len(steps[-1]) == 2:
        operands, subs = [a, b, c], ["ij", "jk", "kl"]
    else:
        operands, subs = [a, b, c, d], ["ij", "jk", "kl", "lm"]
    out_sub = "il" if len(operands) == 3 else "im"
    original = T.einsum(",".join(subs) + "->" + out_sub, *operands)
    tree = build_tree(subs, operands, out_sub, steps)
    einsums = _einsums(tree)
    assert sorted(len(e.inputs) for e in einsums) == arities
    first = einsums[0]                                   # the given first step: b with c
    assert {op.uid for op in first.inputs} == {b.uid, c.uid}
    _same_value(tree, original, operands, run)


def test_a_site_is_contracted_with_its_nearest_neighbour_first(run):
    """Dimension-tree step for site A: the first contraction that involves A (its nearest
    ancestor in the tree) pulls in only what A shares letters with."""
    A, X1, X2 = T.Variable("A", (3, 2)), T.Variable("X1", (3, 4, 4)), T.Variable("X2", (3, 2, 2))
    out = T.einsum("ge,bdi,bej->gdij", A, X1, X2)
    tree = constrained_path(out, [A])
    holding_a = [e for e in _einsums(tree) if any(op is A for op in e.inputs)]
    assert len(holding_a) == 1 and {op.uid for op in holding_a[0].inputs} == {A.uid, X2.uid}
    _same_value(tree, out, [A, X1, X2], run)


def test_inverse_operands_are_held_back_to_the_end(run):
    """An ALS-like update X(abc) A(ad) inv(AᵀA)(ce): the inverse applies to the finished
    contraction, so no intermediate before the last one reads it."""
    A, X = T.Variable("A", (3, 3)), T.Variable("X", (3, 3, 3))
    inverse = T.tensorinv(T.einsum("ab,ac->bc", A, A) + T.Constant(3.0 * np.eye(3)), ind=1)
    out = T.einsum("abc,ad,ce->bde", X, A, inverse)
    tree = constrained_path(out, [A])
    assert any(op is inverse for op in tree.inputs)      # read by the last contraction only
    for e in _einsums(tree):
        if e is not tree:
            assert all(op is not inverse for op in e.inputs)
    _same_value(tree, out, [A, X], run)


def test_constrained_order_contracts_sites_in_turn(run):
    """Sites [B, C] of A·B·C: B is contracted first (with A), C last, and the result is one
    pairwise einsum, not a pure transpose of one."""
    A, B, C = (T.Variable(n, (2, 2)) for n in "ABC")
    out = T.einsum("ab,bc,cd->ad", A, B, C)
    tree = constrained_path(out, [B, C])
    assert len(tree.inputs) == 2 and any(op is C for op in tree.inputs)
    (inner,) = [op for op in tree.inputs if op is not C]
    assert isinstance(inner, T.Einsum) and {op.uid for op in inner.inputs} == {A.uid, B.uid}
    _same_value(tree, out, [A, B, C], run)


def test_einsums_equal_up_to_renaming_and_operand_order():
    a1, a2 = T.Variable("a1", (3, 2)), T.Variable("a2", (2, 3))
    canon = Canonicalizer()
    assert canon.id(T.einsum("ik,kj->ij", a1, a2)) == canon.id(T.einsum("ml,sm->sl", a2, a1))
    assert canon.id(T.einsum("ik,kj->ij", a1, a2)) != canon.id(T.einsum("ik,kj->ji", a1, a2))


def test_graph_rebuilt_over_new_variables(run):
    """A graph written over 2x2 Variables, rebuilt over 3x3 ones (graph.rewrite): the same graph
    as writing it over the new Variables, with shapes checked again."""
    a, b, c = (T.Variable(n, (2, 2)) for n in "abc")
    d = T.einsum("ab,bc->ac", a, b) + c
    bigger = {v.uid: T.Variable(v.name, (3, 3)) for v in (a, b, c)}
    (rebuilt,) = rewrite([d], lambda n: bigger.get(n.uid, n))
    a3, b3, c3 = (bigger[v.uid] for v in (a, b, c))
    direct = T.einsum("ab,bc->ac", a3, b3) + c3
    assert rebuilt.shape == (3, 3)
    assert Canonicalizer().id(rebuilt) == Canonicalizer().id(direct)
    _same_value(rebuilt, direct, [a3, b3, c3], run)
    with pytest.raises(ShapeError, match="einsum 'ab,bc->ac'"):
        rewrite([d], lambda n: {a.uid: a3}.get(n.uid, n))   # only a grows: b no longer fits
