"""Jacobians of order 3 and 4 have one output type in the interpreter and in compiled code, chosen
from the types (a dense array when every extent is known and small, a COO StoredTensor when
they are known and the dense array would be big, else a nested dict), with
values equal to NumPy closed forms."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import sparsad
import sparsad.codegen.numba_backend as numba_backend
import sparsad.codegen.outputs as outputs
import sparsad.lang.program as program_module
from sparsad.errors import FallbackWarning
from sparsad.formats import StoredTensor

SPMV = "sum(<i, r> in A) { i -> sum(<j, a> in r) a * x(j) }"
HADAMARD = "sum(<i, r> in A) { i -> sum(<j, a> in r) { j -> a * B(i)(j) } }"


def _inputs(seed: int, fmt: str):
    rng = np.random.default_rng(seed)
    A = sp.random(4, 3, density=0.5, format="csr", random_state=rng)
    return (A if fmt == "csr" else A.toarray()), rng.standard_normal(3), rng.standard_normal((4, 3))


def _dense(result, shape):
    if isinstance(result, np.ndarray):
        return result
    out = np.zeros(shape)

    def fill(value, path):
        if isinstance(value, dict):
            for key, item in value.items():
                fill(item, path + (key,))
        else:
            out[path] = value

    fill(result, ())
    return out


def _jacobians(text, wrt, **inputs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        return (sparsad.jacobian(text, wrt=wrt, interpret=True)(**inputs),
                sparsad.jacobian(text, wrt=wrt)(**inputs))


@pytest.mark.parametrize("fmt", ["csr", "dense"])
def test_order_three_and_four_jacobians_agree_in_type_and_value(fmt):
    A, x, B = _inputs(5, fmt)
    Ad = A.toarray() if sp.issparse(A) else A
    mask = Ad != 0 if fmt == "csr" else np.ones_like(Ad, bool)
    # d(A x)/dA on A's pattern: J[i, k, l] = [i = k] x[l]
    spmv_expected = np.einsum("ik,l->ikl", np.eye(4), x) * mask[None, :, :]
    # d(A ∘ B)/dB: J[i, j, k, l] = A[i, j] [i = k][j = l]
    hadamard_expected = np.einsum("ij,ik,jl->ijkl", Ad, np.eye(4), np.eye(3))
    for (interpreted, compiled), expected in ((_jacobians(SPMV, "A", A=A, x=x), spmv_expected),
                                               (_jacobians(HADAMARD, "B", A=A, B=B), hadamard_expected)):
        assert type(interpreted) is type(compiled) is np.ndarray
        assert interpreted.shape == compiled.shape == expected.shape
        np.testing.assert_allclose(interpreted, expected, atol=1e-12)
        np.testing.assert_allclose(compiled, expected, atol=1e-12)


def test_above_the_dense_limit_both_paths_give_a_coo_tensor(monkeypatch):
    monkeypatch.setattr(numba_backend, "_KERNELS", {})  # kernels built under the real limit are kept per process
    monkeypatch.setattr(outputs, "DENSE_AUTO_LIMIT", 10)
    monkeypatch.setattr(program_module, "DENSE_AUTO_LIMIT", 10)
    A, x, B = _inputs(6, "csr")
    Ad = A.toarray()
    cases = ((_jacobians(SPMV, "A", A=A, x=x), np.einsum("ik,l->ikl", np.eye(4), x) * (Ad != 0)[None, :, :]),
             (_jacobians(HADAMARD, "B", A=A, B=B), np.einsum("ij,ik,jl->ijkl", Ad, np.eye(4), np.eye(3))))
    for (interpreted, compiled), expected in cases:
        for result in (interpreted, compiled):
            assert isinstance(result, StoredTensor) and result.format.name.startswith("coo")
            assert result.shape == expected.shape
            np.testing.assert_allclose(result.to_numpy(), expected, atol=1e-12)
        assert compiled.nnz == interpreted.nnz  # the same stored entries on both paths

