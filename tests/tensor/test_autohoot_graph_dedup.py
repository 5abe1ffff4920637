"""AutoHOOT's de-duplication tests (tests/graph_dedup_test.py) as our own: CSE merges equal
sub-graphs, sees through transposes (even chains of them) and through declared symmetries, and
keeps apart what only looks alike. (AutoHOOT's clone/declone has no counterpart: our nodes are
immutable and shared, so there is nothing to de-clone.)"""
from __future__ import annotations

import numpy as np

from sparsad import tensor as T
from sparsad.tensor.cse import Canonicalizer, cse
from sparsad.tensor.graph import topological


def values_agree(x, y, variables, run, symmetric=()):
    rng = np.random.default_rng(0)
    feed = {v: rng.standard_normal(v.shape) for v in variables}
    for v in symmetric:                         # symmetrise over each declared pair of axes
        value = feed[v]
        for group in v.symmetry:
            for a, b in zip(group, group[1:]):
                value = value + np.swapaxes(value, a, b)
        feed[v] = value
    a, b = run([x, y], feed)
    return np.allclose(a, b, rtol=1e-10, atol=1e-12)


def test_dedup_equal_sums():
    a, b = T.Variable("a", (2, 2)), T.Variable("b", (2, 2))
    (z,) = cse([(a + b) + (a + b)])
    assert z.inputs[0] is z.inputs[1]


def test_dedup_many():
    a, b = T.Variable("a", (2, 2)), T.Variable("b", (2, 2))
    x = [T.einsum("ij,jk->ik", a, b) for _ in range(6)] + [T.einsum("pq,qr->pr", a, b)]
    z = x[0]
    for y in x[1:]:
        z = z + y
    (out,) = cse([z])
    assert sum(isinstance(n, T.Einsum) for n in topological([out])) == 1


def test_remove_transposes(run):
    a = T.Variable("a", (2, 2, 2, 2))
    b, c, d = (T.Variable(n, (2, 2)) for n in "bcd")
    ab1, ab2 = T.einsum("abcd,de->abce", a, b), T.einsum("abcd,de->ecba", a, b)
    abc1, abc2 = T.einsum("abce,ce->abe", ab1, c), T.einsum("ecba,ce->eba", ab2, c)
    abcd1, abcd2 = T.einsum("abe,be->ae", abc1, d), T.einsum("eba,be->ae", abc2, d)
    out = cse([abcd1, abcd2])
    assert out[0] is out[1]
    assert values_agree(abcd1, abcd2, [a, b, c, d], run)


def test_remove_chains_of_transposes(run):
    a = T.Variable("a", (2, 3, 4, 5))
    ret1 = T.einsum("dcba->badc", T.einsum("abcd->dcba", a))
    ret2 = T.einsum("abdc->badc", T.einsum("abcd->abdc", a))
    canon = Canonicalizer()
    assert canon.id(ret1) == canon.id(ret2)
    assert values_agree(ret1, ret2, [a], run)
    (opt,) = T.optimize([ret1])
    assert isinstance(opt, T.Einsum) and opt.inputs[0] is a


def test_collapse_symmetric_expr(run):
    h = T.Variable("h", (2, 2, 2, 2), symmetry=[[0, 1], [2, 3]])
    a = T.Variable("a", (2, 2))
    out1, out2 = T.einsum("ijkl,ik->jl", h, a), T.einsum("ijkl,jl->ik", h, a)
    canon = Canonicalizer()
    assert canon.id(out1) == canon.id(out2)
    assert values_agree(out1, out2, [h, a], run, symmetric=[h])
    # operand order does not matter either (these are equal too, given the symmetry)
    assert canon.id(out1) == canon.id(T.einsum("jl,ijkl->ik", a, h))


def test_collapse_symmetric_network(run):
    H1 = T.Variable("H1", (2, 2, 2), symmetry=[[0, 2]])
    H2 = T.Variable("H2", (2, 2, 2, 2), symmetry=[[0, 2]])
    H3 = T.Variable("H3", (2, 2, 2), symmetry=[[0, 1]])
    A1, A2, A3 = T.Variable("A1", (2, 2)), T.Variable("A2", (2, 2, 2)), T.Variable("A3", (2, 2))
    out1 = T.einsum("ca,dab,eb,cfh,dgif,ejg->hij", A1, A2, A3, H1, H2, H3)
    out2 = T.einsum("fi,gij,hj,adf,begd,che->abc", A1, A2, A3, H1, H2, H3)
    canon = Canonicalizer()
    assert canon.id(out1) == canon.id(out2)
    assert values_agree(out1, out2, [H1, H2, H3, A1, A2, A3], run, symmetric=[H1, H2, H3])


def test_cannot_collapse_without_symmetry(run):
    h = T.Variable("h", (2, 2, 2, 2))
    a = T.Variable("a", (2, 2))
    out1, out2 = T.einsum("ijkl,ik->jl", h, a), T.einsum("ijkl,jl->ik", h, a)
    canon = Canonicalizer()
    assert canon.id(out1) != canon.id(out2)
    assert not values_agree(out1, out2, [h, a], run)
    hs = T.Variable("hs", (2, 2, 2, 2), symmetry=[[0, 1], [2, 3]])
    assert canon.id(T.einsum("ijkl,ik->jl", hs, a)) != canon.id(T.einsum("ijkl,ik->jkl", hs, a))


def test_collapse_expr_with_identity(run):
    a = T.Variable("a", (2, 2))
    I2 = T.Identity(2)
    out1, out2 = T.einsum("ab,bc->ac", a, I2), T.einsum("ab,cb->ac", a, I2)
    canon = Canonicalizer()
    assert canon.id(out1) == canon.id(out2)
    assert values_agree(out1, out2, [a], run)


def test_collapse_symmetry_with_several_contracted_indices(run):
    H = T.Variable("H", (2, 2), symmetry=[[0, 1]])
    x1, x2 = T.Variable("x1", (2,)), T.Variable("x2", (2,))
    inner1, inner2 = T.einsum("ab,a,b->", H, x1, x2), T.einsum("ab,b,a->", H, x1, x2)
    out = cse([inner1 + inner2])
    assert out[0].inputs[0] is out[0].inputs[1]
    assert values_agree(inner1, inner2, [H, x1, x2], run, symmetric=[H])
