"""The paper's physical kernels (§5.3-§5.5) compiled to Numba, against the interpreter and SciPy.

Kernels are cached by compile_physical, so every test below reuses the few compiled ones.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings, strategies as st

from sparsad.codegen import compile_physical
from sparsad.lang.interpret import evaluate
from sparsad.lang.parse import parse
from sparsad.lang.values import values_equal

VVD = parse("sum(<_, i> in (0:V2_len)) { V2_row(i) -> V2_val(i) }")
SPMV = parse("sum(<_, i> in (0:A_len)) { i -> sum(<p, j> in A_idx(A_pos(i):A_pos(i + 1))) "
             "A_val(p) * x_V(j) }")
BATAX = parse("""
sum(<_, i> in (0:A_len))
  let r = sum(<p, j> in A_idx(A_pos(i):A_pos(i + 1))) { j -> A_val(p) } in
  sum(<i1, v1> in r) { i1 -> sum(<i2, v2> in r) { i2 -> beta * v1 * v2 } }
""")
XAX = parse("sum(<_, i> in (0:A_len)) sum(<p, j> in A_idx(A_pos(i):A_pos(i+1))) "
            "A_val(p) * X_V(j)")
# d(y^T A x)/dA, masked to A's pattern: row i is fixed by the outer loop (row workspace)
MASKED = parse("sum(<_, i> in (0:A_len)) { i -> sum(<p, j> in A_idx(A_pos(i):A_pos(i + 1))) "
               "{ j -> y_V(i) * x_V(j) } }")

matrices = st.tuples(st.integers(1, 12), st.integers(1, 12), st.sampled_from([0.0, 0.1, 0.3, 0.8]),
                     st.integers(0, 2**16))


def column_sums(a) -> np.ndarray:
    return np.asarray(a.sum(axis=0)).ravel()


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 40), st.floats(0.0, 1.0), st.integers(0, 2**16))
def test_vvd_gradient_is_the_single_loop_of_section_5(make_physical, n, density, seed):
    rng = np.random.default_rng(seed)
    v2 = np.where(rng.random(n) < density, rng.standard_normal(n), 0.0)
    types, arrays, _ = make_physical({"V1": (rng.standard_normal(n), "dense"), "V2": (v2, "coo")})
    kernel = compile_physical(VVD, types)
    result = kernel(**arrays)
    assert kernel.output == "dense"
    np.testing.assert_allclose(result, v2, rtol=0, atol=0)
    assert values_equal(result, evaluate(VVD, arrays))
    # §5.5: one loop writing straight into the destination, no intermediate
    assert kernel.source.count("for ") == 1 and not kernel.loops.containers


@settings(max_examples=30, deadline=None)
@given(matrices)
def test_spmv_csr_against_scipy_and_interpreter(make_physical, make_csr, shape):
    rows, cols, density, seed = shape
    a = make_csr(rows, cols, density, seed)
    x = np.random.default_rng(seed + 1).standard_normal(cols)
    types, arrays, _ = make_physical({"A": (a, "csr"), "x": (x, "dense")})
    result = compile_physical(SPMV, types)(**arrays)
    np.testing.assert_allclose(result, a @ x, rtol=1e-12, atol=1e-12)
    assert values_equal(result, evaluate(SPMV, arrays), rtol=1e-12, atol=1e-12)


@settings(max_examples=30, deadline=None)
@given(matrices)
def test_scalar_result(make_physical, make_csr, shape):
    rows, cols, density, seed = shape
    a = make_csr(rows, cols, density, seed)
    x = np.random.default_rng(seed + 2).standard_normal(cols)
    types, arrays, _ = make_physical({"A": (a, "csr"), "X": (x, "dense")})
    kernel = compile_physical(XAX, types)
    result = kernel(**arrays)
    assert isinstance(result, float) and kernel.output == "scalar"
    assert result == pytest.approx(column_sums(a) @ x, rel=1e-12, abs=1e-12)
    assert values_equal(result, evaluate(XAX, arrays), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("output", ["auto", "csr", "csc", "coo", "dense", "dict"])
@settings(max_examples=12, deadline=None)
@given(shape=matrices)
def test_batax_gradient_every_output(make_physical, make_csr, output, shape):
    rows, cols, density, seed = shape
    a = make_csr(rows, cols, density, seed)
    types, arrays, _ = make_physical({"A": (a, "csr"), "x": (np.ones(cols), "dense")}, {"beta": 1.5})
    kernel = compile_physical(BATAX, types, output=output)
    result = kernel(**arrays)
    expected = 1.5 * (a.T @ a).toarray()
    if output in ("auto", "csr", "csc", "coo"):
        assert sp.issparse(result) and result.format == {"auto": "csr"}.get(output, output)
        assert result.shape == (cols, cols)
        result_dense = result.toarray()
    elif output == "dense":
        result_dense = result
    else:
        assert isinstance(result, dict)
        result_dense = np.zeros((cols, cols))
        for i, row in result.items():
            for j, v in row.items():
                result_dense[i, j] = v
    np.testing.assert_allclose(result_dense, expected, rtol=1e-12, atol=1e-12)
    assert values_equal(result, evaluate(BATAX, arrays), rtol=1e-12, atol=1e-12)


def test_batax_dps_writes_into_the_result_without_tmp1_tmp2(make_physical, make_csr):
    types, _, _ = make_physical({"A": (make_csr(4, 4, 0.5, 0), "csr"),
                                 "x": (np.ones(4), "dense")}, {"beta": 1.0})
    kernel = compile_physical(BATAX, types, output="dict")
    # the only local container is the row `r` (a dense workspace: its keys come from A_idx)
    assert [(c.kind, c.name.split("_")[0]) for c in kernel.loops.containers] == [("workspace", "r")]
    assert "tmp" not in kernel.source


@pytest.mark.parametrize("output", ["auto", "workspace", "coo", "dense"])
@settings(max_examples=12, deadline=None)
@given(shape=matrices)
def test_masked_gradient_reuses_the_pattern_of_a(make_physical, make_csr, output, shape):
    rows, cols, density, seed = shape
    a = make_csr(rows, cols, density, seed)
    rng = np.random.default_rng(seed)
    x, y = rng.standard_normal(cols), rng.standard_normal(rows)
    types, arrays, _ = make_physical({"A": (a, "csr"), "x": (x, "dense"), "y": (y, "dense")})
    kernel = compile_physical(MASKED, types, output=output)
    result = kernel(**arrays)
    pattern = a.copy()
    pattern.data[:] = 1.0
    expected = pattern.multiply(np.outer(y, x)).toarray()
    if output in ("auto", "workspace"):
        assert kernel.output == {"auto": "pattern"}.get(output, output) and result.format == "csr"
        assert result.has_sorted_indices
        assert result.nnz == a.nnz  # exactly A's pattern (explicit zeros kept)
    if output == "auto":  # A's indptr and indices, values written at A's positions
        assert (result.indptr == a.indptr).all() and (result.indices == a.indices).all()
        assert "out_v[np.uint64(p_" in kernel.source and "w_mark" not in kernel.source
    dense = result if isinstance(result, np.ndarray) else result.toarray()
    np.testing.assert_allclose(dense, expected, rtol=1e-12, atol=1e-12)
    assert values_equal(result, evaluate(MASKED, arrays), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["HB/bcspwr10", "Gaertner/nopoly"])
def test_real_matrices(make_physical, suitesparse, name):
    a = suitesparse(name)
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal(a.shape[1]), rng.standard_normal(a.shape[0])
    types, arrays, _ = make_physical({"A": (a, "csr"), "x": (x, "dense"), "X": (x, "dense"),
                                      "y": (y, "dense")}, {"beta": 0.5})
    np.testing.assert_allclose(compile_physical(SPMV, types)(**arrays), a @ x, rtol=1e-12, atol=1e-10)
    scale = column_sums(abs(a)) @ abs(x)  # the sum cancels: compare relative to its terms
    assert compile_physical(XAX, types)(**arrays) == pytest.approx(column_sums(a) @ x, abs=1e-13 * scale)
    batax = compile_physical(BATAX, types)(**arrays)
    difference = batax - 0.5 * (a.T @ a)
    assert abs(difference).max() <= 1e-10 * max(1.0, abs(batax).max())
    masked = compile_physical(MASKED, types)(**arrays)
    assert (masked.indptr == a.indptr).all() and (masked.indices == a.indices).all()
    np.testing.assert_allclose(masked.data, y[np.repeat(np.arange(a.shape[0]), np.diff(a.indptr))]
                               * x[a.indices], rtol=1e-14)
    v2 = a[0].toarray().ravel() + a[:, 1].toarray().ravel() if a.shape[0] == a.shape[1] else x
    types, arrays, _ = make_physical({"V1": (x, "dense"), "V2": (v2, "coo")})
    np.testing.assert_array_equal(compile_physical(VVD, types)(**arrays), v2)


def test_float32_and_int64_indices(make_physical, make_csr):
    a = make_csr(9, 7, 0.4, 3)
    x = np.random.default_rng(3).standard_normal(7)
    types, arrays, _ = make_physical({"A": (a, "csr"), "x": (x, "dense")})
    kernel = compile_physical(SPMV, types)
    single = {k: (v.astype(np.float32) if isinstance(v, np.ndarray) and v.dtype.kind == "f" else v)
              for k, v in arrays.items()}
    result = kernel(**single)
    assert result.dtype == np.float32
    np.testing.assert_allclose(result, (a @ x).astype(np.float32), rtol=1e-5, atol=1e-5)
    wide = {k: (v.astype(np.int64) if isinstance(v, np.ndarray) and v.dtype.kind == "i" else v)
            for k, v in arrays.items()}
    np.testing.assert_allclose(kernel(**wide), a @ x, rtol=1e-12, atol=1e-12)
    # float32 through the sparse outputs: triplets assembled to CSR, and the row workspace
    types, arrays, _ = make_physical({"A": (a, "csr"), "x": (x, "dense"), "y": (np.ones(9), "dense")},
                                     {"beta": 1.5})
    single = {k: (v.astype(np.float32) if isinstance(v, np.ndarray) and v.dtype.kind == "f" else v)
              for k, v in arrays.items()}
    batax = compile_physical(BATAX, types)(**single)
    assert batax.dtype == np.float32
    np.testing.assert_allclose(batax.toarray(), 1.5 * (a.T @ a).toarray(), rtol=1e-5, atol=1e-5)
    masked = compile_physical(MASKED, types)(**single)
    assert masked.dtype == np.float32 and masked.nnz == a.nnz
