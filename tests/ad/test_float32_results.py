"""Interpreted and compiled derivatives return one dtype: float32 when every real array input is
float32 (as compiled kernels compute), float64 otherwise; for dense, CSR and order-3 COO inputs."""
from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp
from hypothesis import given, settings, strategies as st

import sparsad
from sparsad.formats import from_coordinates

SPMV_LOSS = "sum(<i, r> in A) let e = (sum(<j, a> in r) a * x(j)) in e * e"
SPMV = "sum(<i, r> in A) { i -> sum(<j, a> in r) a * x(j) }"
CUBE = "sum(<i, a> in T) sum(<j, b> in a) sum(<k, t> in b) t * t * x(k)"


def as_dense(value):
    if hasattr(value, "to_numpy"):
        return value.to_numpy()
    return value.toarray() if sp.issparse(value) else np.asarray(value)


def matrix_inputs(seed: int, dtype) -> dict:
    rng = np.random.default_rng(seed)
    A = sp.random(5, 4, density=0.5, format="csr", random_state=seed, dtype=np.float64).astype(dtype)
    return dict(A=A, x=rng.standard_normal(4).astype(dtype))


def cube_inputs(seed: int, dtype) -> dict:
    rng = np.random.default_rng(seed)
    keys = np.unique(rng.integers(0, 3, size=(6, 3)), axis=0)
    T = from_coordinates(keys.T, rng.standard_normal(len(keys)).astype(dtype), (3, 3, 3), "coo")
    return dict(T=T, x=rng.standard_normal(3).astype(dtype))


CASES = [  # (program, wrt, kind, inputs, seed shape from the inputs)
    (SPMV_LOSS, "x", "grad", matrix_inputs, None),
    (SPMV_LOSS, "A", "grad", matrix_inputs, None),
    (SPMV, "x", "vjp", matrix_inputs, lambda I: I["A"].shape[:1]),
    (SPMV, "x", "jvp", matrix_inputs, lambda I: I["x"].shape),
    (SPMV, "A", "jacobian", matrix_inputs, None),
    (CUBE, "T", "grad", cube_inputs, None),
    (CUBE, "x", "grad", cube_inputs, None),
]


def call(case, inputs, interpret):
    text, wrt, kind, _, seed_shape = case
    made = getattr(sparsad, kind)(text, wrt, interpret=interpret)
    if kind == "jvp":
        return made(**inputs, tangent=np.ones(seed_shape(inputs), inputs["x"].dtype))[1]
    if kind == "vjp":
        return made(**inputs, cotangent=np.ones(seed_shape(inputs), inputs["x"].dtype))
    return made(**inputs)


@settings(max_examples=20, deadline=None)
@given(case=st.sampled_from(CASES), dtype=st.sampled_from([np.float32, np.float64]), seed=st.integers(0, 999))
def test_compiled_and_interpreted_derivatives_have_one_dtype(case, dtype, seed):
    inputs = case[3](seed, dtype)
    expected = call(case, inputs, interpret=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", sparsad.FallbackWarning)
        got = call(case, inputs, interpret=False)
    assert got.dtype == expected.dtype == np.dtype(dtype), (case[:3], got.dtype, expected.dtype)
    tolerance = 1e-5 if dtype == np.float32 else 1e-12
    assert np.allclose(as_dense(got), as_dense(expected), rtol=tolerance, atol=tolerance)
