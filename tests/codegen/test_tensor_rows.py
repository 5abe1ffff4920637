"""Results of order 3 and 4 (matrix-by-matrix Jacobians) accumulated one outer row at a time in a
workspace (codegen.tensor_rows): the COO tensor they give equals the interpreter's result, its
arrays are valid and in order, whatever the shapes and patterns."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings, strategies as st

import sparsad
from sparsad.formats import StoredTensor

GCN = """sum(<i, r> in A)
  let h = sum(<j, a> in r) a * X(j) in
  let z = sum(<f, hf> in h) hf * W(f) in
  { i -> sum(<o, zo> in z) { o -> tanh(zo) } }"""
ATTENTION = """sum(<i, r> in A)
  let s = sum(<j, _> in r) { j -> sum(<k, q> in X(i)) q * W(j)(k) } in
  let z = sum(<j, e> in s) exp(e) in
  { i -> sum(<j, e> in s) (exp(e) / z) * X(j) }"""
PRODUCT = "sum(<i, r> in A) { i -> sum(<j, a> in r) sum(<k, b> in X(j)) { k -> a * b } }"
MATVEC = "sum(<i, r> in A) { i -> sum(<j, a> in r) a * x(j) }"

CASES = [(GCN, "X"), (GCN, "W"), (GCN, "A"), (ATTENTION, "W"), (ATTENTION, "X"), (PRODUCT, "A"),
         (PRODUCT, "X"), (MATVEC, "A")]


def _inputs(n: int, p: int, density: float, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    A = sp.random(n, n, density=density, format="csr", random_state=seed, data_rvs=rng.standard_normal)
    return dict(A=A, X=0.5 * rng.standard_normal((n, p)), W=0.5 * rng.standard_normal((n if p == 0 else p, p)),
                x=rng.standard_normal(n))


@pytest.mark.parametrize("text,wrt", CASES, ids=[f"{i}-{w}" for i, (_, w) in enumerate(CASES)])
@settings(max_examples=4, deadline=None)
@given(n=st.integers(1, 6), p=st.integers(1, 3), density=st.sampled_from([0.0, 0.3, 1.0]),
       seed=st.integers(0, 2**16))
def test_row_workspace_jacobians_equal_the_interpreter(text, wrt, n, p, density, seed):
    everything = _inputs(n, p, density, seed)
    if text is ATTENTION:  # scores Q K^T over A's pattern: W is n x p like X
        everything["W"] = 0.5 * np.random.default_rng(seed + 1).standard_normal((n, p))
    derivative = sparsad.jacobian(text, wrt=wrt)
    inputs = {k: v for k, v in everything.items() if k in sparsad.program(text).inputs}
    with warnings.catch_warnings():
        warnings.simplefilter("error", sparsad.FallbackWarning)
        got = derivative.compiled(output="workspace")(**inputs)
    expected = sparsad.jacobian(text, wrt=wrt, interpret=True)(**inputs)
    assert isinstance(got, StoredTensor) and got.ndim >= 3
    assert np.allclose(got.to_numpy(), np.asarray(expected.to_numpy() if isinstance(expected, StoredTensor)
                                                  else expected).reshape(got.shape), rtol=1e-12, atol=1e-14)
    # the arrays are a valid COO tensor (validated again), sorted and unique
    StoredTensor(got.format, got.shape, got.fields)
    coords, _ = got.coordinates()
    if coords.shape[1] > 1:
        keys = np.ravel_multi_index(tuple(coords), got.shape)
        assert np.all(np.diff(keys) > 0)


def test_large_results_choose_the_row_workspace_and_equal_the_interpreter():
    # 130 x 8 x 130 x 8 entries > DENSE_AUTO_LIMIT: "auto" makes a sparse tensor, row by row
    inputs = _inputs(130, 8, 0.02, 3)
    inputs = {k: inputs[k] for k in ("A", "X", "W")}
    derivative = sparsad.jacobian(GCN, wrt="X")
    got = derivative(**inputs)
    kernel = derivative._compiled_for("X")._last["kernel"]
    assert (kernel.plan.kind, kernel.plan.result_format) == ("workspace", "tensor")
    expected = sparsad.jacobian(GCN, wrt="X", interpret=True)(**inputs)
    dense_expected = expected.to_numpy() if isinstance(expected, StoredTensor) else np.asarray(expected)
    assert np.allclose(got.to_numpy(), dense_expected, rtol=1e-12, atol=1e-14)
    assert got.nnz == inputs["A"].nnz * 8 * 8  # each entry once: (i, o, j, f) for A_ij stored


def test_the_row_workspace_is_sized_by_the_memory_guard_before_it_is_allocated():
    from sparsad import memory
    from sparsad.errors import DensifyWarning, MemoryLimitError

    # one stored entry, but a row workspace of 1 x 3000 x 3000 cells (153 MB): refused, not allocated
    A = sp.csr_matrix(([1.0], ([0], [0])), shape=(3000, 3000))
    X = np.ones((3000, 1))
    derivative = sparsad.jacobian(PRODUCT, wrt="A").compiled(output="workspace")
    memory.set_memory_limit("64MB", warn="1MB")
    try:
        with pytest.raises(MemoryLimitError, match="row workspace"), warnings.catch_warnings():
            warnings.simplefilter("ignore", DensifyWarning)
            derivative(A=A, X=X)
    finally:
        memory.set_memory_limit(None)


# the GCN layer under names of its own (kernels are cached by program, and these calls run under
# a lowered memory guard)
GCN_GUARDED = """sum(<u, ur> in Adj)
  let hu = sum(<v, av> in ur) av * Feat(v) in
  let zu = sum(<k, hk> in hu) hk * Wt(k) in
  { u -> sum(<o, zo> in zu) { o -> tanh(zo) } }"""


@pytest.mark.parametrize("warn", [None, "4KB"])
def test_a_result_over_the_warning_threshold_warns_on_every_call_and_is_right(warn):
    """The Jacobian (6 x 2 x 6 x 3 = 216 entries, 8.6 KB of COO arrays) warns on the first call and
    on the repeated one alike when it is over the memory guard's warning threshold (the first call
    outgrows the buffers the guard lets pass quietly and grows through the guard; the second is
    sized from the first), on neither when it is not; the repeated call's arrays (views of buffers
    sized by the first call) are the same tensor."""
    from sparsad.memory import set_memory_limit

    rng = np.random.default_rng(3)
    A = sp.csr_matrix(rng.standard_normal((6, 6)))
    X, W = rng.standard_normal((6, 3)), rng.standard_normal((3, 2))
    derivative = sparsad.jacobian(GCN_GUARDED, wrt="Feat")
    expected = sparsad.jacobian(GCN_GUARDED, wrt="Feat", interpret=True)(Adj=A, Feat=X, Wt=W)
    expected = expected.to_numpy() if isinstance(expected, StoredTensor) else np.asarray(expected)
    set_memory_limit("1GB" if warn else None, warn)
    try:
        for _ in range(3):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                got = derivative.compiled(output="workspace")(Adj=A, Feat=X, Wt=W)
            densify = [w for w in caught if issubclass(w.category, sparsad.DensifyWarning)]
            assert not [w for w in caught if issubclass(w.category, sparsad.FallbackWarning)]
            assert len(densify) == (1 if warn else 0), [str(w.message) for w in densify]
            assert isinstance(got, StoredTensor) and got.nnz == 216
            StoredTensor(got.format, got.shape, got.fields)  # valid arrays
            np.testing.assert_allclose(got.to_numpy(), expected.reshape(got.shape), rtol=1e-12, atol=1e-14)
    finally:
        set_memory_limit(None)
