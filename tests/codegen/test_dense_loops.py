"""Dense loop nests (codegen.dense_loops): interchanged nests and BLAS dot products give the
interpreter's values (to rounding) and NumPy's, on both sides of their run-time tests."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import sparsad
import sparsad.errors
from sparsad.codegen.dense_loops import DOT_MIN_LENGTH, GATHER_SWAP_BELOW, affine_base, reads
from sparsad.codegen.ir import Load, Num, Op, Ref

CONV = "sum(<i, _> in (0:n)) { i -> sum(<k, w> in f) w * x(i + k) }"
MATVEC = "sum(<i, r> in M) { i -> sum(<j, v> in r) v * x(j) }"
DOT = "sum(<i, a> in x) a * y(i)"

_SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
_DERIVATIVES: dict = {}


def _derivative(kind: str, text: str, wrt: str, interpret: bool):
    key = (kind, text, wrt, interpret)
    if key not in _DERIVATIVES:  # one object per case: its compiled kernels are reused across examples
        _DERIVATIVES[key] = getattr(sparsad, kind)(text, wrt=wrt, interpret=interpret)
    return _DERIVATIVES[key]


def _close(a, b, scale):
    return np.allclose(np.asarray(a, dtype=float), np.asarray(b, dtype=float), rtol=1e-12, atol=1e-12 * scale)


@_SETTINGS
@given(signal=st.integers(1, 700), taps=st.integers(1, 9), seed=st.integers(0, 2**16),
       wrt=st.sampled_from(["f", "x"]))
def test_convolution_vjp_equals_numpy_and_the_interpreter(signal, taps, seed, wrt):
    rng = np.random.default_rng(seed)
    taps = min(taps, signal)
    x, f = rng.standard_normal(signal), rng.standard_normal(taps)
    n = signal - taps + 1
    ct = rng.standard_normal(n)
    inputs = dict(f=f, x=x, n=n)
    with warnings.catch_warnings():
        warnings.simplefilter("error", sparsad.errors.FallbackWarning)  # compiled, not interpreted
        got = _derivative("vjp", CONV, wrt, False)(**inputs, cotangent=ct)
    reference = _derivative("vjp", CONV, wrt, True)(**inputs, cotangent=ct)
    closed = np.correlate(x, ct, mode="valid") if wrt == "f" else np.convolve(ct, f, mode="full")
    scale = float(np.abs(closed).max() + 1.0)
    assert np.asarray(got).shape == closed.shape
    assert _close(got, closed, scale) and _close(got, reference, scale)


def test_long_convolution_runs_its_short_loop_outside_and_its_dot_products_in_blas():
    vjp = sparsad.vjp(CONV, wrt="f")
    rng = np.random.default_rng(1)
    x, f = rng.standard_normal(5000), rng.standard_normal(5)
    ct = rng.standard_normal(x.size - 4)
    got = vjp(f=f, x=x, n=x.size - 4, cotangent=ct)
    assert np.allclose(got, np.correlate(x, ct, mode="valid"), rtol=1e-12)
    code = vjp.show("code")
    assert "rt.dot(" in code and f"{DOT_MIN_LENGTH} <=" in code


@pytest.mark.parametrize("dtypes", [(np.float32, np.float32), (np.float32, np.float64), (np.float64, np.float64)])
def test_convolution_vjp_on_float32_and_mixed_inputs(dtypes):
    rng = np.random.default_rng(2)
    x, f = rng.standard_normal(900).astype(dtypes[0]), rng.standard_normal(4).astype(dtypes[1])
    ct = rng.standard_normal(897)
    for wrt in ("f", "x"):
        got = sparsad.vjp(CONV, wrt=wrt)(f=f, x=x, n=897, cotangent=ct)
        x64, f64 = x.astype(float), f.astype(float)
        closed = np.correlate(x64, ct, mode="valid") if wrt == "f" else np.convolve(ct, f64, mode="full")
        tol = 1e-5 if np.float32 in dtypes else 1e-12
        assert np.allclose(np.asarray(got, dtype=float), closed, rtol=tol, atol=tol * np.abs(closed).max())


@_SETTINGS
@given(rows=st.integers(1, 6), cols=st.sampled_from([1, 7, 255, 256, 300, 1000]), seed=st.integers(0, 2**16))
def test_dense_matrix_vector_rows_as_dot_products(rows, cols, seed):
    rng = np.random.default_rng(seed)
    M, x = rng.standard_normal((rows, cols)), rng.standard_normal(cols)
    program = sparsad.compile(MATVEC, formats={"M": "dense"})
    got = program(M=M, x=x)
    scale = float(np.abs(M).sum() + 1.0)
    assert _close(got, M @ x, scale)
    vjp = _derivative("vjp", MATVEC, "x", False)
    ct = rng.standard_normal(rows)
    assert _close(vjp(M=M, x=x, cotangent=ct), M.T @ ct, scale)
    assert _close(_derivative("vjp", MATVEC, "x", True)(M=M, x=x, cotangent=ct), M.T @ ct, scale)


@_SETTINGS
@given(n=st.sampled_from([1, 255, 256, 257, 2000]), seed=st.integers(0, 2**16))
def test_scalar_dot_and_its_gradient(n, seed):
    rng = np.random.default_rng(seed)
    x, y = rng.standard_normal(n), rng.standard_normal(n)
    value = sparsad.compile(DOT)(x=x, y=y)
    assert np.isclose(value, x @ y, rtol=1e-12, atol=1e-12 * np.abs(x * y).sum())
    grad = _derivative("grad", DOT, "y", False)(x=x, y=y)
    assert _close(grad, x, 1.0)


def test_affine_base_and_reads():
    k, i = Ref("k"), Ref("i")
    assert affine_base(k, "k") == Num(0)
    assert affine_base(Op("+", i, k), "k") == i
    assert affine_base(Op("+", Op("+", k, i), Num(3)), "k") == Op("+", i, Num(3))
    assert affine_base(Op("-", Op("+", i, k), Num(1)), "k") == Op("-", i, Num(1))
    assert affine_base(Op("+", k, k), "k") is None
    assert affine_base(Op("-", i, k), "k") is None
    assert affine_base(Load("idx", k), "k") is None
    assert reads(Op("*", Load("x", Op("+", i, k)), Ref("c"))) == {"x", "i", "k", "c"}


SPMM = "sum(<k, xr> in X) { k -> sum(<f, x> in xr) sum(<c, w> in W(f)) { c -> x * w } }"


@pytest.mark.parametrize("per_row", [3, 40])  # rows shorter and longer than W's columns
@pytest.mark.parametrize("width", [2, 16])  # below and above GATHER_SWAP_BELOW
def test_a_gather_through_an_assigned_index_is_swapped_only_for_a_very_short_loop(per_row, width):
    """X (sparse) @ W: the short loop over W's columns reads W(f) at f = X's column index, a name
    assigned in the nest; run outside, the loop over X's entries would gather W with a stride of
    W's width, so the nest is swapped only when W has fewer than GATHER_SWAP_BELOW columns (a run-
    time test), and the values equal SciPy's on rows of both lengths and either branch."""
    import scipy.sparse as sp

    rng = np.random.default_rng(per_row)
    X = sp.random(30, 200, density=per_row / 200, random_state=per_row, format="csr")
    W = rng.standard_normal((200, width))
    program = sparsad.compile(SPMM)
    got = program(X=X, W=W, out_format="dense")
    assert np.allclose(got, X @ W, rtol=1e-12, atol=1e-12)
    assert f"(W_cols < {GATHER_SWAP_BELOW})" in program.show("code")  # the swap's bound on the width
