"""NumPy rules: forward against dense, VJPs against dense closed forms, and every VJP/JVP pair
against each other by the dot-product test <v, J u> = <J^T v, u>, on random and SuiteSparse data."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings, strategies as st

from sparsad.ops import rules
from sparsad.ops.pattern import CSRPattern


def parts(matrix):
    matrix = sp.csr_matrix(matrix)
    matrix.sort_indices()
    return CSRPattern(matrix.indptr, matrix.indices, matrix.shape), matrix.data.copy()


def dense(p, values):
    return p.to_scipy(values).toarray()


seeds = st.integers(0, 2**31 - 1)


@settings(max_examples=30, deadline=None)
@given(seeds, st.integers(1, 7), st.integers(1, 7))
def test_spmv_rules(seed, m, n):
    rng = np.random.default_rng(seed)
    p, a = parts(sp.random(m, n, density=0.5, random_state=seed))
    x, y, v = rng.standard_normal(n), rng.standard_normal(m), rng.standard_normal(m)
    alpha, beta = 0.7, -1.2
    D = dense(p, a)
    np.testing.assert_allclose(rules.spmv(p, a, x, alpha, beta, y), alpha * D @ x + beta * y, atol=1e-12)
    g = rules.spmv_vjp(p, a, x, alpha, beta, y, v)
    np.testing.assert_allclose(g["a"], alpha * np.outer(v, x)[p.rows, p.indices], atol=1e-12)
    np.testing.assert_allclose(g["x"], alpha * D.T @ v, atol=1e-12)
    np.testing.assert_allclose([g["alpha"], g["beta"]], [v @ D @ x, v @ y], atol=1e-12)
    np.testing.assert_allclose(g["y"], beta * v)
    da, dx, dy = rng.standard_normal(p.nnz), rng.standard_normal(n), rng.standard_normal(m)
    dw = rules.spmv_jvp(p, a, x, alpha, beta, y, da, dx, 0.3, -0.4, dy)
    lhs = v @ dw
    rhs = g["a"] @ da + g["x"] @ dx + g["alpha"] * 0.3 + g["beta"] * -0.4 + g["y"] @ dy
    np.testing.assert_allclose(lhs, rhs, rtol=1e-10, atol=1e-10)


@settings(max_examples=30, deadline=None)
@given(seeds, st.integers(1, 7), st.integers(1, 7), st.integers(1, 7))
def test_spgemm_and_add_rules(seed, m, n, k):
    rng = np.random.default_rng(seed)
    pa, a = parts(sp.random(m, n, density=0.5, random_state=seed))
    pb, b = parts(sp.random(n, k, density=0.5, random_state=seed + 1))
    pc, c = rules.spgemm(pa, a, pb, b)
    np.testing.assert_allclose(dense(pc, c), dense(pa, a) @ dense(pb, b), atol=1e-12)
    v = rng.standard_normal(pc.nnz)
    ga, gb = rules.spgemm_vjp(pa, a, pb, b, v)
    V = dense(pc, v)
    np.testing.assert_allclose(ga, (V @ dense(pb, b).T)[pa.rows, pa.indices], atol=1e-12)
    np.testing.assert_allclose(gb, (dense(pa, a).T @ V)[pb.rows, pb.indices], atol=1e-12)
    da, db = rng.standard_normal(pa.nnz), rng.standard_normal(pb.nnz)
    np.testing.assert_allclose(v @ rules.spgemm_jvp(pa, a, pb, b, da, db), ga @ da + gb @ db, atol=1e-10)

    pe, e = parts(sp.random(m, n, density=0.4, random_state=seed + 2))
    ps, s = rules.add(pa, a, pe, e, 1.5, -0.5)
    np.testing.assert_allclose(dense(ps, s), 1.5 * dense(pa, a) - 0.5 * dense(pe, e), atol=1e-12)
    w = rng.standard_normal(ps.nnz)
    g = rules.add_vjp(pa, a, pe, e, 1.5, -0.5, w)
    W = dense(ps, w)
    np.testing.assert_allclose(g["alpha"], (W * dense(pa, a)).sum(), atol=1e-12)
    np.testing.assert_allclose(g["beta"], (W * dense(pe, e)).sum(), atol=1e-12)
    da2, de = rng.standard_normal(pa.nnz), rng.standard_normal(pe.nnz)
    jvp = rules.add_jvp(pa, a, pe, e, 1.5, -0.5, da2, de, 0.2, 0.3)
    np.testing.assert_allclose(w @ jvp, g["a"] @ da2 + g["b"] @ de + 0.2 * g["alpha"] + 0.3 * g["beta"], atol=1e-10)


@pytest.mark.parametrize("lower, unit", [(True, False), (False, True)])
def test_trisolve_rules_dot_product(lower, unit):
    rng = np.random.default_rng(4)
    D = rng.standard_normal((8, 8)) * (rng.random((8, 8)) < 0.5) + 4 * np.eye(8)
    p, a = parts(np.tril(D) if lower else np.triu(D))
    b, v = rng.standard_normal(8), rng.standard_normal(8)
    ga, gb = rules.trisolve_vjp(p, a, b, lower, unit, v)
    da, db = rng.standard_normal(p.nnz), rng.standard_normal(8)
    np.testing.assert_allclose(v @ rules.trisolve_jvp(p, a, b, lower, unit, da, db), ga @ da + gb @ db, rtol=1e-10)
    # and the JVP against central differences
    h = 1e-6
    fd = (rules.trisolve(p, a + h * da, b + h * db, lower, unit) - rules.trisolve(p, a - h * da, b - h * db, lower, unit)) / (2 * h)
    np.testing.assert_allclose(rules.trisolve_jvp(p, a, b, lower, unit, da, db), fd, rtol=1e-6, atol=1e-8)


def test_lu_rules_on_suitesparse(suitesparse):
    matrix = suitesparse("HB/bcsstk01")
    p, a = parts(matrix / abs(matrix).max() + sp.eye(matrix.shape[0]))
    rng = np.random.default_rng(5)
    b, v = rng.standard_normal(p.shape[0]), rng.standard_normal(p.shape[0])
    ga, gb = rules.lu_solve_vjp(p, a, b, v)
    A = dense(p, a)
    x = np.linalg.solve(A, b)
    np.testing.assert_allclose(gb, np.linalg.solve(A.T, v), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(ga, -np.outer(gb, x)[p.rows, p.indices], rtol=1e-8, atol=1e-10)
    da, db = rng.standard_normal(p.nnz), rng.standard_normal(p.shape[0])
    np.testing.assert_allclose(v @ rules.lu_solve_jvp(p, a, b, da, db), ga @ da + gb @ db, rtol=1e-8)
