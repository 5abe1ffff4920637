"""Graph construction: shapes and subscripts checked when a node is built, operators, immutability."""
from __future__ import annotations

import numpy as np
import pytest

from sparsad import tensor as T
from sparsad.errors import FormatError, InputError, ShapeError, UnsupportedError


def test_einsum_shape_and_subscripts():
    A, B = T.Variable("A", (2, 3)), T.Variable("B", (3, 4))
    e = T.einsum("ij,jk->ik", A, B)
    assert e.shape == (2, 4) and e.inputs == (A, B) and e.subscripts == "ij,jk->ik"
    assert T.einsum("ij,jk", A, B).out_sub == "ik"          # NumPy's implicit output rule


def test_einsum_errors_name_operand_and_axis():
    A, B = T.Variable("A", (2, 3)), T.Variable("B", (4, 4))
    with pytest.raises(ShapeError, match=r"axis 0 of operand 1 \(B\) has size 4.*'j' has size 3 at axis 1 of operand 0 \(A\)"):
        T.einsum("ij,jk->ik", A, B)
    with pytest.raises(ShapeError, match=r"operand 0 \(A, shape \(2, 3\)\) has 2 axes but its subscripts 'ijk'"):
        T.einsum("ijk->i", A)
    with pytest.raises(InputError, match="name 2 operand"):
        T.einsum("ij,jk->ik", A)
    with pytest.raises(InputError, match="output subscript 'z'"):
        T.einsum("ij->z", A)
    with pytest.raises(InputError, match="repeat"):
        T.einsum("ij->ii", A)
    with pytest.raises(UnsupportedError, match="ellipsis"):
        T.einsum("...i->i", A)


def test_binary_and_other_node_errors():
    A, B = T.Variable("A", (2, 3)), T.Variable("B", (3, 2))
    with pytest.raises(ShapeError, match=r"differ at axis 0"):
        A + B
    with pytest.raises(ShapeError, match="not square"):
        T.tensorinv(T.Variable("H", (2, 3, 2, 2)), 2)
    with pytest.raises(ShapeError, match="not a permutation"):
        T.Transpose(A, (0, 0))
    with pytest.raises(ShapeError, match="out of range"):
        A.sum(2)
    with pytest.raises(FormatError, match="sparse"):
        T.Variable("S", (2, 2), sparse="bsr")
    with pytest.raises(UnsupportedError, match="unknown function"):
        T.Elementwise("erf", A)


def test_nodes_are_immutable():
    A = T.Variable("A", (2, 3))
    with pytest.raises(AttributeError, match="immutable"):
        A.shape = (3, 2)
    e = T.einsum("ij->ji", A)
    with pytest.raises(AttributeError):
        e.in_subs = ("ab",)


def test_operators_build_the_expected_values():
    A, B = T.Variable("A", (2, 3)), T.Variable("B", (2, 3))
    M, v = T.Variable("M", (3, 3)), T.Variable("v", (3,))
    rng = np.random.default_rng(0)
    a, b, m, vv = rng.random((2, 3)), rng.random((2, 3)), rng.random((3, 3)) + 1, rng.random(3)
    nodes = [A + B, A - B, -A, 2 * A, A / 4, A * B, A ** 2, A.T, A @ M, M @ v, v @ v, A.sum(1),
             T.tensordot(A, M, 1), T.tensorinv(M, 1), T.exp(A), 3.0 + A]
    got = T.Executor(nodes).run({A: a, B: b, M: m, v: vv})
    want = [a + b, a - b, -a, 2 * a, a / 4, a * b, a ** 2, a.T, a @ m, m @ vv, vv @ vv, a.sum(1),
            np.tensordot(a, m, 1), np.linalg.inv(m), np.exp(a), 3.0 + a]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-13)
