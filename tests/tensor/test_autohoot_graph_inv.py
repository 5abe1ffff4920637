"""AutoHOOT's inverse tests (tests/graph_inv_test.py) as our own: Kronecker-structured inverses
split into inverses of their factors, non-decomposable ones left alone, and A^{-1} A pruned only
where the wiring really is an inverse times its matrix."""
from __future__ import annotations

import numpy as np
import pytest

from sparsad import tensor as T
from sparsad.tensor.fuse import fuse
from sparsad.tensor.graph import count_nodes, topological
from sparsad.tensor.inverse import decompose_inverses
from sparsad.tensor.prune import prune


def feed_of(variables, seed=0):
    """Well-conditioned values: each matrix-shaped unfolding near a multiple of the identity."""
    rng = np.random.default_rng(seed)
    out = {}
    for v in variables:
        x = 0.2 * rng.standard_normal(v.shape)
        if v.ndim == 2 and v.shape[0] == v.shape[1]:
            x += 2 * np.eye(v.shape[0])
        elif v.ndim == 4 and v.shape[0] * v.shape[1] == v.shape[2] * v.shape[3]:
            x += 2 * np.eye(v.shape[0] * v.shape[1]).reshape(v.shape)
        out[v] = x
    return out


def assert_same(before, after, variables, run, backend="numpy"):
    feed = feed_of(variables)
    np.testing.assert_allclose(run(after, feed, backend), run(before, feed, backend), rtol=1e-9, atol=1e-10)


def factor_inverses(node):
    return sorted(n.shape for n in topological([node]) if isinstance(n, T.TensorInverse))


@pytest.mark.parametrize("spec, shapes, factors", [
    ("ab,cd->acbd", [(2, 2), (3, 3)], [(2, 2), (3, 3)]),                       # Kronecker product
    ("ab,bc,de,ef->adcf", [(2, 2)] * 4, [(2, 2), (2, 2)]),                     # products of products
    ("aceg,dbhf->abcdefgh", [(2, 2, 2, 2)] * 2, [(2, 2, 2, 2), (2, 2, 2, 2)]),  # high order
    ("ab,cd,ef->acebdf", [(2, 2), (3, 3), (2, 2)], [(2, 2), (2, 2), (3, 3)]),  # three factors
])
def test_kronecker_inverse_splits(spec, shapes, factors, backend, run):
    xs = [T.Variable(f"x{k}", s) for k, s in enumerate(shapes)]
    inv = T.tensorinv(T.einsum(spec, *xs))
    (d,) = decompose_inverses([fuse([inv])[0]])
    assert factor_inverses(d) == factors
    assert_same(inv, d, xs, run, backend)


def test_kronecker_inverse_of_repeated_inputs(run):
    A = T.Variable("A", (2, 2))
    inv = T.tensorinv(T.einsum("ab,cd->acbd", A, A))
    (d,) = decompose_inverses([inv])
    assert factor_inverses(d) == [(2, 2), (2, 2)]
    assert_same(inv, d, [A], run)


@pytest.mark.parametrize("spec, shapes, ind", [
    ("ab,cd->acbd", [(2, 3), (3, 2)], 2),             # factors are not square
    ("abcd,ef->abcdef", [(4, 4, 2, 2), (2, 2)], 2),   # a split that pairs no factor's rows and columns
])
def test_non_decomposable_inverse_is_left_alone(spec, shapes, ind):
    xs = [T.Variable(f"x{k}", s) for k, s in enumerate(shapes)]
    inv = T.tensorinv(T.einsum(spec, *xs), ind)
    (d,) = decompose_inverses([inv])
    assert d is inv


def test_prune_inverse_simple_and_transposed(run):
    A, B = T.Variable("A", (2, 2)), T.Variable("B", (2, 2))
    M = T.einsum("ab,bc->ac", A, B)
    simple = T.einsum("ac,cd,de->ae", T.tensorinv(M, 1), A, B)
    (p,) = prune(fuse([simple]))
    assert isinstance(p, T.Identity)
    Mt = T.einsum("ab,bc->ca", A, B)                  # inv(M^T) M^T
    transposed = T.einsum("ca,cd,de->ae", T.tensorinv(Mt, 1), A, B)
    (p,) = prune(fuse([transposed]))
    assert isinstance(p, T.Identity)
    assert_same(transposed, p, [A, B], run)


@pytest.mark.parametrize("case", ["wrong_order", "not_matmul", "fewer_inputs", "no_inverse", "set_differs"])
def test_prune_inverse_only_where_it_is_one(case, run):
    A, B = T.Variable("A", (2, 2)), T.Variable("B", (2, 2))
    M = T.einsum("ab,bc->ac", A, B)
    output = {
        "wrong_order": lambda: T.einsum("ac,ed,dc->ae", T.tensorinv(M, 1), A, B),
        "not_matmul": lambda: T.einsum("ac,ab,bc->ac", T.tensorinv(M, 1), A, B),
        "fewer_inputs": lambda: T.einsum("ab,bc->ac", T.tensorinv(T.einsum("ab,bc->ac", A, A), 1), A),
        "no_inverse": lambda: T.einsum("ab,bc->ac", A, B),
        "set_differs": lambda: T.einsum("ab,bc->ac", T.tensorinv(M, 1), A),
    }[case]()
    (p,) = prune(fuse([output]))
    assert count_nodes([p], T.TensorInverse) == count_nodes([output], T.TensorInverse)
    assert_same(output, p, [A, B], run)


def test_prune_several_inverses_in_one_einsum(run):
    A0, A1, A2 = (T.Variable(f"A{k}", (2, 2)) for k in range(3))
    out = T.einsum("ab,bc,cd,de,ef->af", A0, A1, A1, T.tensorinv(T.einsum("ab,bc->ac", A1, A1), 1),
                   T.tensorinv(T.einsum("ab,bc->ac", A2, A2), 1))
    (p,) = prune(fuse([out]))
    assert factor_inverses(p) == [(2, 2)]              # A1 A1 (A1 A1)^{-1} = I; A2's stays
    assert_same(out, p, [A0, A1, A2], run)


def test_prune_inverse_in_a_cp_gram(run):
    A, B, C = (T.Variable(n, (2, 2)) for n in "ABC")
    gram = T.einsum("ab,dc,ac,db->bc", B, C, B, C)
    output = T.einsum("ed,ea,cd,ba,ca,gd->bg", C, C, B, A, B, T.tensorinv(gram, 1))
    (p,) = prune(fuse([output]))
    assert p is A
    assert_same(output, p, [A, B, C], run)
