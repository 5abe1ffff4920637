"""AutoHOOT's executor tests (tests/executor_test.py) as our own: values kept across runs,
no stale reuse between dependent runs, and feeds checked against declared symmetry and
orthonormality."""
from __future__ import annotations

import numpy as np
import pytest

from sparsad import tensor as T
from sparsad.errors import InputError


def test_values_kept_across_runs(backend):
    x = T.Variable("x", (3, 3))
    y = x.sum()
    z = 2.0 * y
    ex = T.Executor([y, z], backend, keep_feeds=True)
    (yv,) = ex.run({x: np.eye(3)}, out=[y], to_numpy=True)
    (zv,) = ex.run({}, out=[z], to_numpy=True)          # x is not fed again
    assert float(yv) == 3.0 and float(zv) == 6.0
    (zv,) = ex.run({x: 2 * np.eye(3)}, out=[z], to_numpy=True)   # a new feed replaces the kept one
    assert float(zv) == 12.0
    with pytest.raises(InputError, match="no value fed"):
        T.Executor([z], backend).run({})                # without keep_feeds nothing is remembered


def test_dependent_runs_reuse_nothing_stale(backend):
    A, B = T.Variable("A", (3, 3)), T.Variable("B", (3, 3))
    AA, BB, AB = (T.einsum("ab,ab->", p, q) for p, q in ((A, A), (B, B), (A, B)))
    out_a, out_b = AA + AB, AB + BB
    rng = np.random.default_rng(0)
    a1, a2, b = (rng.standard_normal((3, 3)) for _ in range(3))
    for reuse in (False, True):
        ex = T.Executor([out_a, out_b], backend, reuse=reuse)
        (va,) = ex.run({A: a1, B: b}, out=[out_a], to_numpy=True)
        (vb,) = ex.run({A: a2, B: b}, out=[out_b], to_numpy=True)
        np.testing.assert_allclose(va, np.sum(a1 * a1) + np.sum(a1 * b))
        np.testing.assert_allclose(vb, np.sum(a2 * b) + np.sum(b * b))


def test_feeds_are_checked_against_declared_symmetry(backend):
    A = T.Variable("A", (3, 3), symmetry=[[0, 1]])
    out = T.einsum("ab,bc->ac", A, A)
    a = np.random.default_rng(1).random((3, 3))
    ex = T.Executor([out], backend)
    np.testing.assert_allclose(ex.run({A: a + a.T}, to_numpy=True)[0], (a + a.T) @ (a + a.T))
    with pytest.raises(InputError, match="symmetric"):
        ex.run({A: a})


def test_feeds_are_checked_against_declared_orthonormality(backend):
    A = T.Variable("A", (3, 3), orthonormal="row")
    out = T.einsum("ab,bc->ac", A, A)
    q = np.linalg.svd(np.random.default_rng(2).random((3, 3)))[0]
    ex = T.Executor([out], backend)
    np.testing.assert_allclose(ex.run({A: q}, to_numpy=True)[0], q @ q, atol=1e-12)
    with pytest.raises(InputError, match="orthonormal"):
        ex.run({A: 2 * q})
