"""The six §7 gradient computations against JAX dense autodiff and central differences (float64)."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import sparsad
from sparsad.programs import PAPER_PROGRAMS

from reference.dense_ad import (central_difference, dict_to_dense, jax_derivative, kernels,
                                pattern_mask, relative_error)

KERNELS = ["batax", "smmm", "smvm", "vva", "vvd", "vsm"]
MODES = {"grad": ["reverse", "tensorized", "forward"], "jacobian": ["tensorized", "forward"]}


def dense(value):
    return value.toarray() if sp.issparse(value) else np.asarray(value, dtype=float)


def make_inputs(name, rng, n, matrix=None):
    kinds = PAPER_PROGRAMS[name].kinds
    inputs = {}
    for arg, kind in kinds.items():
        if kind == "scalar":
            inputs[arg] = float(rng.uniform(0.5, 2.0))
        elif kind in ("matrix", "square"):
            inputs[arg] = matrix if matrix is not None else rng.standard_normal((n + 1, n) if kind == "matrix" else (n, n))
    cols = next((dense(v).shape[1] for v in inputs.values() if np.ndim(dense(v)) == 2), n)
    for arg, kind in kinds.items():
        if kind == "vector":
            inputs[arg] = rng.standard_normal(cols)
    if name == "smmm" and matrix is not None:
        inputs["B"] = matrix.T.tocsr()
    return inputs


def check_kernel(name, inputs, mode, rtol=1e-10):
    fn, wrt, kind = kernels()[name]
    text = PAPER_PROGRAMS[name].text
    derivative = (sparsad.grad if kind == "grad" else sparsad.jacobian)(text, wrt=wrt, mode=mode, interpret=True)
    ours_value = derivative(out_format="value", **inputs)
    dense_inputs = {k: dense(v) for k, v in inputs.items()}
    reference = jax_derivative(fn, wrt, kind, dense_inputs)
    ours = dict_to_dense(ours_value, reference.shape)
    # masked convention: the derivative lives on the pattern of a sparse wrt operand
    mask = pattern_mask(inputs[wrt], np.shape(dense_inputs[wrt]))
    expected = reference * mask.reshape((1,) * (reference.ndim - mask.ndim) + mask.shape)
    assert relative_error(ours, expected) <= rtol, (name, mode)
    return ours, dense_inputs


@pytest.mark.parametrize("name", KERNELS)
def test_kernel_derivatives_match_jax_and_finite_differences(name):
    rng = np.random.default_rng(11)
    inputs = make_inputs(name, rng, n=5)
    fn, wrt, kind = kernels()[name]
    for mode in MODES[kind]:
        ours, dense_inputs = check_kernel(name, inputs, mode)
    numeric = central_difference(lambda d: np.asarray(fn(**d)), dense_inputs, wrt)
    assert relative_error(ours, numeric) <= 1e-7


@pytest.mark.parametrize("name", ["batax", "smmm", "smvm"])
@pytest.mark.parametrize("matrix_name", ["HB/bcspwr01", "HB/ash85"])
def test_kernel_derivatives_on_real_sparse_matrices(suitesparse, name, matrix_name):
    A = suitesparse(matrix_name)
    if name == "smmm" and A.shape[0] != A.shape[1]:
        pytest.skip("SMMM needs A B square-compatible")
    rng = np.random.default_rng(3)
    inputs = make_inputs(name, rng, n=A.shape[1], matrix=A)
    fn, wrt, kind = kernels()[name]
    for mode in (["reverse", "tensorized"] if kind == "grad" else ["tensorized"]):
        check_kernel(name, inputs, mode)


@pytest.mark.parametrize("name", ["vva", "vvd"])
def test_vector_kernels_on_sparse_vectors_from_real_data(suitesparse, name):
    A = suitesparse("HB/bcspwr03")
    row = A.getrow(4)
    V1 = sp.csr_matrix(row)  # 1 x n sparse row
    n = A.shape[1]
    V1_dict = {int(j): float(v) for j, v in zip(row.indices, row.data)}
    V2 = np.random.default_rng(5).standard_normal(n)
    fn, wrt, kind = kernels()[name]
    derivative = (sparsad.grad if kind == "grad" else sparsad.jacobian)(PAPER_PROGRAMS[name].text, wrt="V1", interpret=True)
    ours = derivative(V1=V1_dict, V2=V2, out_format="value")
    dense_v1 = V1.toarray().ravel()
    reference = jax_derivative(fn, "V1", kind, {"V1": dense_v1, "V2": V2})
    mask = np.zeros(n)
    mask[list(V1_dict)] = 1.0
    expected = reference * mask
    got = dict_to_dense(ours, reference.shape)
    assert relative_error(got, expected) <= 1e-12


def test_gradient_of_sparse_operand_is_masked_and_sparse():
    A = sp.random(30, 20, density=0.1, format="csr", random_state=4)
    X = np.random.default_rng(0).standard_normal(20)
    g = sparsad.grad("sum(<i, r> in A) sum(<j, a> in r) a * X(j) * X(j)", wrt="A")
    result = g(A=A, X=X)
    assert sp.issparse(result) and result.nnz == A.nnz
    np.testing.assert_allclose(result.toarray(), (A.toarray() != 0) * (X * X)[None, :], rtol=1e-14)
