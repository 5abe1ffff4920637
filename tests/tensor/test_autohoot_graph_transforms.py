"""AutoHOOT's graph-transform tests (tests/graph_transforms_test.py) as our own: distribution,
linearisation of shared einsums, canonical einsums, identity/inverse/scalar/orthonormal pruning
and symmetric simplification, each checked for structure and for unchanged values."""
from __future__ import annotations

import numpy as np
import pytest

from sparsad import tensor as T
from sparsad.tensor.cse import Canonicalizer
from sparsad.tensor.distribute import distribute
from sparsad.tensor.fuse import fuse
from sparsad.tensor.graph import count_nodes, topological
from sparsad.tensor.prune import prune
from sparsad.tensor.simplify import simplify


def same_values(before, after, variables, run, backend="numpy", seed=0, spd=()):
    rng = np.random.default_rng(seed)
    feed = {v: rng.standard_normal(v.shape) for v in variables}
    for v in spd:                              # well-conditioned matrices for inverses
        feed[v] = feed[v] @ feed[v].T + 3 * np.eye(v.shape[0])
    for a, b in zip(run(list(before), feed, backend), run(list(after), feed, backend)):
        np.testing.assert_allclose(b, a, rtol=1e-9, atol=1e-10)


def no_sum_under_einsum(nodes):
    return all(not any(isinstance(o, (T.Add, T.Sub, T.Scale)) for o in n.inputs)
               for n in topological(nodes) if isinstance(n, T.Einsum))


@pytest.mark.parametrize("op", ["add", "sub"])
def test_tree_distribution(op, backend, run):
    a, b, c = (T.Variable(n, (3, 3)) for n in "abc")
    combine = (lambda x, y: x + y) if op == "add" else (lambda x, y: x - y)
    cases = [
        T.einsum("ik,kj->ij", combine(a, b), c),                                     # simple
        T.einsum("ik,kj->ij", c, combine(a, b)),                                     # order
        T.einsum("ik,kj->ij", combine(a, b), combine(b, c)),                         # four terms
        T.einsum("ik,kj->ij", T.einsum("ik,kj->ij", combine(a, b), c), combine(a, c)),  # two layers
        combine(T.einsum("ik,kj->ij", combine(a, b), c), a),                         # sum as output
        T.einsum("ij,jk,kl->il", a, combine(b, c), a),                               # middle
    ]
    for e in cases:
        (d,) = distribute([e])
        assert no_sum_under_einsum([d])
        same_values([e], [d], [a, b, c], run, backend)


def test_distribute_shared_operand_once(run):
    a, b, c = (T.Variable(n, (3, 3)) for n in "abc")
    s = a + b
    e = T.einsum("ik,kj->ij", s, s) + T.einsum("ik,kj->ij", s, c)
    (d,) = distribute([e])
    assert no_sum_under_einsum([d])
    same_values([e], [d], [a, b, c], run)


def test_linearisation_clones_a_shared_einsum(run):
    a, b = T.Variable("a", (3, 3)), T.Variable("b", (3, 3))
    shared = T.einsum("ij,jk->ik", a, b)
    e = T.einsum("ik,kl->il", shared, shared)
    (f,) = fuse([e])
    assert isinstance(f, T.Einsum) and len(f.inputs) == 4 and not any(isinstance(o, T.Einsum) for o in f.inputs)
    same_values([e], [f], [a, b], run)


@pytest.mark.parametrize("x_spec, y_spec", [
    (("ik,kj->ij", "a1", "a2"), ("ml,sm->sl", "a2", "a1")),
    (("or,ob->br", "A", "A"), ("eb,ed->bd", "A", "A")),
    (("ac,ba,bc->", "A", "A", "B"), ("ba,ac,bc->", "A", "A", "B")),
    (("pb,or,ob,pr,st->srtb", "B", "A", "A", "B", "I"), ("eb,ed,fb,fd,ac->abcd", "A", "A", "B", "B", "I")),
])
def test_equal_einsums_have_one_canonical_form(x_spec, y_spec, run):
    nodes = {"a1": T.Variable("a1", (3, 2)), "a2": T.Variable("a2", (2, 3)), "A": T.Variable("A", (3, 3)),
             "B": T.Variable("B", (3, 3)), "I": T.Identity(4)}
    if x_spec[1] == "A" and x_spec[0].startswith("or"):
        nodes["A"] = T.Variable("A", (3, 5))
    x = T.einsum(x_spec[0], *[nodes[k] for k in x_spec[1:]])
    y = T.einsum(y_spec[0], *[nodes[k] for k in y_spec[1:]])
    canon = Canonicalizer()
    assert canon.id(x) == canon.id(y)
    variables = [n for n in nodes.values() if isinstance(n, T.Variable)]
    same_values([x], [y], variables, run)


def test_prune_identity_keeps_only_structural_ones(run):
    a = T.Variable("a", (3, 3))
    I3 = T.Identity(3)
    e = T.einsum("ab,bc,cd->ad", a, I3, a)
    (p,) = prune([e])
    assert count_nodes([p], T.Identity) == 0
    same_values([e], [p], [a], run)
    kept = T.einsum("ab,cd->abcd", a, I3)                  # both letters are outputs
    (p,) = prune([kept])
    assert count_nodes([p], T.Identity) == 1
    dup = T.einsum("ab,bc,cd,de->ae", a, I3, I3, a)
    (p,) = prune([dup])
    assert count_nodes([p], T.Identity) == 0
    same_values([dup], [p], [a], run)


def test_simplify_inverse_with_identity(run):
    a = T.Variable("a", (3, 3))
    e = T.einsum("ab,bc->ac", T.tensorinv(T.einsum("ab,bc->ac", a, T.Identity(3)), 1), a)
    opt = T.optimize(e, guard=False)
    assert count_nodes([opt], T.TensorInverse) == 0 and count_nodes([opt], T.Identity) == 1
    same_values([e], [opt], [a], run, spd=[a])


def test_simplify_inverse_of_redundant_einsum(run):
    a = T.Variable("a", (3, 3))
    inner = T.einsum("ab->ab", T.einsum("ab,bc->ac", a, T.Identity(3)))
    e = T.einsum("ab,bc->ac", T.tensorinv(inner, 1), a)
    opt = T.optimize(e, guard=False)
    assert isinstance(opt, T.Identity)
    same_values([e], [opt], [a], run, spd=[a])


def test_simplify_symmetric_einsum_expr(run):
    H = T.Variable("H", (2, 2), symmetry=[[0, 1]])
    x1, x2 = T.Variable("x1", (2,)), T.Variable("x2", (2,))
    out = 0.5 * T.einsum("ab,a,b->", H, x1, x2) + 0.5 * T.einsum("ab,b,a->", H, x1, x2)
    (s,) = simplify([out])
    assert isinstance(s, T.Einsum)
    rng = np.random.default_rng(0)
    h = rng.standard_normal((2, 2))
    feed = {H: h + h.T, x1: rng.standard_normal(2), x2: rng.standard_normal(2)}
    np.testing.assert_allclose(run(s, feed), run(out, feed))
    # without the declaration the two terms differ and stay apart
    G = T.Variable("G", (2, 2))
    (s,) = simplify([0.5 * T.einsum("ab,a,b->", G, x1, x2) + 0.5 * T.einsum("ab,b,a->", G, x1, x2)])
    assert isinstance(s, T.Add)


def test_prune_scalar_nodes(backend, run):
    a1, a2 = T.Variable("a1", (3, 3)), T.Variable("a2", (3, 3))
    out = T.einsum("ab,,ab->ab", a1, T.Constant(3.0), a2)
    (p,) = prune([out])
    assert isinstance(p, T.Scale) and float(p.coef) == 3.0
    same_values([out], [p], [a1, a2], run, backend)


def orthonormal(n, seed):
    return np.linalg.qr(np.random.default_rng(seed).standard_normal((n, n)))[0]


def test_prune_orthonormal_matmuls(run):
    a1 = T.Variable("a1", (3, 3), orthonormal="column")
    a2 = T.Variable("a2", (3, 3), orthonormal="column")
    out = T.einsum("ab,cb,de,fe->acdf", a1, a1, a2, a2)
    (p,) = prune([out])
    assert isinstance(p, T.Einsum) and len(p.inputs) == 2 and all(isinstance(i, T.Identity) for i in p.inputs)
    feed = {a1: orthonormal(3, 0), a2: orthonormal(3, 1)}
    np.testing.assert_allclose(run(p, feed), run(out, feed), atol=1e-12)


def test_prune_orthonormal_chain_matmuls(run):
    a1 = T.Variable("a1", (3, 3), orthonormal="column")
    a2 = T.Variable("a2", (3, 3))
    out = T.einsum("ab,bc,dc,de,ef,gf->ag", a2, a1, a1, a2, a1, a1)
    (p,) = prune([out])
    assert count_nodes([p], T.Identity) == 0
    assert sorted(o.label for o in p.inputs) == ["a2", "a2"]
    feed = {a1: orthonormal(3, 2), a2: np.random.default_rng(3).standard_normal((3, 3))}
    np.testing.assert_allclose(run(p, feed), run(out, feed), atol=1e-12)


def test_row_orthonormal_tall_factor(run):
    # a Tucker factor: U (5 x 2) with U^T U = I
    u = T.Variable("U", (5, 2), orthonormal="row")
    x = T.Variable("x", (2,))
    out = T.einsum("ia,ib,b->a", u, u, x)
    assert T.optimize(out) is x
    with pytest.raises(ValueError):
        T.Variable("U", (2, 5), orthonormal="row")
