"""Matrix-vector nests through BLAS (codegen.matvec): the compiled derivatives equal NumPy's closed
forms and the interpreter on both sides of the run-time size test, for products along the rows
(`M @ v`), down the columns (`u @ M`), transposed reads (`M(j)(i)`), scalar factors, empty and
one-long dimensions, float32 inputs; and the runtime helpers equal a float64 loop on strided blocks."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import sparsad
import sparsad.errors
from sparsad.codegen import runtime as rt
from sparsad.codegen.ir import Num, Op, Ref
from sparsad.codegen.matvec import MATVEC_MIN_SIZE, VECMAT_MIN_SIZE, stride_of

BILINEAR = "sum(<i, r> in M) sum(<j, m> in r) u(i) * m * v(j)"
SCALED_ROWS = "sum(<i, r> in M) { i -> c * w(i) * sum(<j, m> in r) m * v(j) }"
TRANSPOSED_READ = "sum(<i, _> in (0:n)) { i -> sum(<j, a> in y) M(j)(i) * a }"

_SETTINGS = settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
_MADE: dict = {}
dims = st.sampled_from([0, 1, 2, 7, 40, 90])


def _made(kind: str, text: str, wrt: str | None, interpret: bool = False):
    key = (kind, text, wrt, interpret)
    if key not in _MADE:  # one object per case: its compiled kernels are reused across examples
        if kind == "compile":
            _MADE[key] = sparsad.compile(text, formats={"M": "dense"})
        else:
            _MADE[key] = getattr(sparsad, kind)(text, wrt=wrt, interpret=interpret)
    return _MADE[key]


def _compiled(kind: str, text: str, wrt: str | None, **inputs):
    with warnings.catch_warnings():
        warnings.simplefilter("error", sparsad.errors.FallbackWarning)  # compiled, not interpreted
        return _made(kind, text, wrt)(**inputs)


def _close(got, expected, scale: float) -> bool:
    got, expected = np.asarray(got, dtype=float), np.asarray(expected, dtype=float)
    return got.shape == expected.shape and np.allclose(got, expected, rtol=1e-12, atol=1e-12 * scale)


@_SETTINGS
@given(rows=dims, cols=dims, seed=st.integers(0, 2**16))
def test_bilinear_form_derivatives_equal_numpy_and_the_interpreter(rows, cols, seed):
    rng = np.random.default_rng(seed)
    M, u, v = rng.standard_normal((rows, cols)), rng.standard_normal(rows), rng.standard_normal(cols)
    inputs = dict(M=M, u=u, v=v)
    scale = float(np.abs(M).sum() * (np.abs(u).max(initial=0) + np.abs(v).max(initial=0)) + 1.0)
    closed = {"u": M @ v, "v": M.T @ u}
    for wrt in ("u", "v"):
        got = _compiled("grad", BILINEAR, wrt, **inputs)
        assert _close(got, closed[wrt], scale)
        assert _close(_made("grad", BILINEAR, wrt, True)(**inputs), closed[wrt], scale)
        tangent = rng.standard_normal(closed[wrt].shape)
        assert np.isclose(_compiled("jvp", BILINEAR, wrt, **inputs, tangent=tangent)[1], closed[wrt] @ tangent,
                          rtol=1e-12, atol=1e-12 * scale * (np.abs(tangent).max(initial=0) + 1))


@_SETTINGS
@given(rows=dims, cols=dims, seed=st.integers(0, 2**16))
def test_scaled_row_products_and_their_vjps(rows, cols, seed):
    rng = np.random.default_rng(seed)
    M, v, w = rng.standard_normal((rows, cols)), rng.standard_normal(cols), rng.standard_normal(rows)
    c = float(rng.standard_normal())
    inputs = dict(M=M, v=v, w=w, c=c)
    scale = float(np.abs(M).sum() * (np.abs(v).max(initial=0) + 1) * (np.abs(w).max(initial=0) + 1) + 1.0)
    value = _compiled("compile", SCALED_ROWS, None, **inputs)
    assert _close(value, c * w * (M @ v), scale * abs(c))
    ct = rng.standard_normal(rows)
    got = _compiled("vjp", SCALED_ROWS, "v", **inputs, cotangent=ct)
    closed = M.T @ (c * w * ct)
    assert _close(got, closed, scale * abs(c) * (np.abs(ct).max(initial=0) + 1))
    assert _close(_made("vjp", SCALED_ROWS, "v", True)(**inputs, cotangent=ct), closed,
                  scale * abs(c) * (np.abs(ct).max(initial=0) + 1))


@_SETTINGS
@given(rows=dims, cols=dims, narrow=st.booleans(), seed=st.integers(0, 2**16))
def test_columns_read_transposed(rows, cols, narrow, seed):
    rng = np.random.default_rng(seed)
    M, y = rng.standard_normal((rows, cols)), rng.standard_normal(rows)
    n = cols // 2 if narrow else cols  # a block of the first n columns: rows with gaps between them
    inputs = dict(M=M, y=y, n=n)
    scale = float(np.abs(M).sum() * (np.abs(y).max(initial=0) + 1) + 1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", sparsad.errors.FallbackWarning)
        got = sparsad.compile(TRANSPOSED_READ, formats={"M": "dense"})(**inputs)
    # with no rows, no key i holds an entry (each is an empty sum): the interpreter's result is
    # empty, not y @ M's n zeros (its extent is the value n: the keys with an entry size it)
    assert _close(got, y @ M[:, :n] if rows else np.zeros(0), scale)
    assert np.shape(got) == np.shape(sparsad.program(TRANSPOSED_READ)(**inputs))
    ct = rng.standard_normal(n)
    assert _close(_compiled("vjp", TRANSPOSED_READ, "y", **inputs, cotangent=ct), M[:, :n] @ ct,
                  scale * (np.abs(ct).max(initial=0) + 1))


def test_large_nests_call_blas_and_small_ones_stay_scalar():
    rng = np.random.default_rng(3)
    M, u, v = rng.standard_normal((300, 200)), rng.standard_normal(300), rng.standard_normal(200)
    for wrt, closed, helper in (("u", M @ v, "rt.matvec("), ("v", M.T @ u, "rt.vecmat(")):
        g = sparsad.grad(BILINEAR, wrt=wrt)
        assert np.allclose(g(M=M, u=u, v=v), closed, rtol=1e-12, atol=1e-12)
        code = g.show("code")
        assert helper in code
        threshold = MATVEC_MIN_SIZE if helper == "rt.matvec(" else VECMAT_MIN_SIZE
        assert f"{threshold} <=" in code  # the scalar nest stays for small blocks
        small = rng.standard_normal((3, 4)), rng.standard_normal(3), rng.standard_normal(4)
        expected = small[0] @ small[2] if wrt == "u" else small[0].T @ small[1]
        assert np.allclose(g(M=small[0], u=small[1], v=small[2]), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float32_and_float64_inputs(dtype):
    rng = np.random.default_rng(4)
    M, u, v = (rng.standard_normal(s).astype(dtype) for s in ((120, 70), 120, 70))
    M64, u64, v64 = M.astype(float), u.astype(float), v.astype(float)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for wrt, closed in (("u", M64 @ v64), ("v", M64.T @ u64)):
        got = np.asarray(sparsad.grad(BILINEAR, wrt=wrt)(M=M, u=u, v=v), dtype=float)
        assert np.allclose(got, closed, rtol=tol, atol=tol * np.abs(closed).max())


@given(rows=st.integers(0, 9), cols=st.integers(0, 9), gap=st.integers(0, 3), offset=st.integers(0, 4),
       float32=st.booleans(), seed=st.integers(0, 2**16))
@settings(max_examples=40, deadline=None)
def test_runtime_products_equal_a_float64_loop(rows, cols, gap, offset, float32, seed):
    rng = np.random.default_rng(seed)
    stride = cols + gap
    a = rng.standard_normal(offset + rows * stride + 1)
    x = rng.standard_normal(offset + max(rows, cols) + 1)
    if float32:
        a = a.astype(np.float32)
    block = np.array([[float(a[offset + r * stride + t]) for t in range(cols)] for r in range(rows)]).reshape(rows, cols)
    y = rt.matvec(a, offset, rows, cols, stride, x, 1)
    z = rt.vecmat(x, 1, a, offset, rows, cols, stride)
    assert y.dtype == z.dtype == np.float64
    assert np.allclose(y, block @ x[1:1 + cols], rtol=1e-12, atol=1e-12)
    assert np.allclose(z, x[1:1 + rows] @ block, rtol=1e-12, atol=1e-12)
    strided = a[::2] if a.size > 1 else a  # a non-contiguous view: the scalar loop
    if rows * cols and offset + (rows - 1) * stride + cols <= strided.size:
        expect = np.array([[float(strided[offset + r * stride + t]) for t in range(cols)] for r in range(rows)])
        assert np.allclose(rt.matvec(strided, offset, rows, cols, stride, x, 1), expect @ x[1:1 + cols],
                           rtol=1e-12, atol=1e-12)


def test_stride_of_splits_row_addresses():
    i, j, C = Ref("i"), Ref("j"), Ref("C")
    assert stride_of(Op("+", Op("*", i, C), j), "i") == (C, j)
    assert stride_of(Op("+", Op("*", C, i), Num(2)), "i") == (C, Num(2))
    assert stride_of(Op("+", i, j), "i") == (Num(1), j)
    assert stride_of(Op("*", i, i), "i") is None
    assert stride_of(Op("-", Op("*", i, C), j), "i") is None
    assert stride_of(Op("+", Op("*", i, C), Op("*", i, C)), "i") is None


LOGISTIC = "sum(<i, r> in X) softplus(-y(i) * sum(<j, a> in r) a * w(j))"
LEAST_SQUARES = "sum(<i, r> in X) let z = (sum(<j, a> in r) a * w(j)) - y(i) in z * z"


@_SETTINGS
@given(rows=dims, cols=dims, seed=st.integers(0, 2**16))
def test_dense_regression_gradients_split_into_two_products(rows, cols, seed):
    """Each row's dot product is hoisted before the row loop (X @ w) and its scaled-row update
    split off after it (weights @ X): the gradients equal NumPy's and the interpreter's."""
    rng = np.random.default_rng(seed)
    X, w, y = rng.standard_normal((rows, cols)), rng.standard_normal(cols), np.sign(rng.standard_normal(rows))
    inputs = dict(X=X, w=w, y=y)
    margin = y * (X @ w)
    closed = {LOGISTIC: -X.T @ (y * np.exp(-np.logaddexp(0.0, margin))), LEAST_SQUARES: 2.0 * X.T @ (X @ w - y)}
    for text, expected in closed.items():
        scale = float(np.abs(X).sum() * (np.abs(X @ w).max(initial=0) + 2.0) + 1.0)
        assert _close(_compiled("grad", text, "w", **inputs), expected, scale)
        assert _close(_made("grad", text, "w", True)(**inputs), expected, scale)


def test_regression_gradient_code_calls_both_products():
    rng = np.random.default_rng(5)
    X, w, y = rng.standard_normal((100, 80)), rng.standard_normal(80), rng.standard_normal(100)
    g = sparsad.grad(LEAST_SQUARES, wrt="w")
    assert np.allclose(g(X=X, w=w, y=y), 2.0 * X.T @ (X @ w - y), rtol=1e-12, atol=1e-10)
    code = g.show("code")
    assert "rt.matvec(" in code and "rt.vecmat(" in code


MATMUL = "sum(<i, r> in A) { i -> sum(<k, a> in r) a * B(k) }"


@_SETTINGS
@given(m=dims, k=dims, n=st.sampled_from([0, 1, 5, 30]), seed=st.integers(0, 2**16))
def test_matrix_products_and_their_vjps(m, k, n, seed):
    """A @ B and its vjps (A.T @ G: the summed loop outermost; G @ B.T: a transposed block) as
    one gemm above the size test, per-row products or loops below it."""
    rng = np.random.default_rng(seed)
    A, B, G = rng.standard_normal((m, k)), rng.standard_normal((k, n)), rng.standard_normal((m, n))
    scale = float(np.abs(A).sum() * np.abs(B).max(initial=0) + np.abs(G).sum() * (np.abs(A).max(initial=0)
                                                                                 + np.abs(B).max(initial=0)) + 1.0)
    value = _compiled("compile", MATMUL, None, A=A, B=B)
    assert _close(value, A @ B, scale)
    for wrt, closed in (("B", A.T @ G), ("A", G @ B.T)):
        assert _close(_compiled("vjp", MATMUL, wrt, A=A, B=B, cotangent=G), closed, scale)
        assert _close(_made("vjp", MATMUL, wrt, True)(A=A, B=B, cotangent=G), closed, scale)


@given(shape=st.tuples(st.integers(0, 6), st.integers(0, 6), st.integers(0, 6)), transposes=st.tuples(st.booleans(),
       st.booleans()), gaps=st.tuples(st.integers(0, 2), st.integers(0, 2)), float32=st.booleans(),
       seed=st.integers(0, 2**16))
@settings(max_examples=40, deadline=None)
def test_runtime_matrix_product_equals_numpy(shape, transposes, gaps, float32, seed):
    rng = np.random.default_rng(seed)
    m, k, n = shape
    (a_t, b_t), blocks, flats = transposes, [], []
    for (rows, cols), gap in zip(((k, m) if a_t else (m, k), (n, k) if b_t else (k, n)), gaps):
        flat = rng.standard_normal(2 + rows * (cols + gap))
        if float32:
            flat = flat.astype(np.float32)
        blocks.append(np.array([[float(flat[2 + r * (cols + gap) + t]) for t in range(cols)]
                                for r in range(rows)]).reshape(rows, cols))
        flats.append((flat, 2, rows, cols, cols + gap))
    expected = (blocks[0].T if a_t else blocks[0]) @ (blocks[1].T if b_t else blocks[1])
    got = rt.matmat(*flats[0], a_t, *flats[1], b_t)
    assert got.dtype == np.float64 and got.shape == (m * n,)
    tol = 1e-6 if float32 else 1e-12  # float32 operands multiply in float32 (as the scalar loops), sum in float64
    assert np.allclose(got, expected.reshape(-1), rtol=tol, atol=tol)


# -- the rules' refusals, on hand-built loop IR ------------------------------------------------------

def _nests(commuting=lambda write: True) -> "ProductNests":
    from sparsad.codegen.ir import Load as L, LocalGet as G
    from sparsad.codegen.ir_reads import affine_base
    from sparsad.codegen.matvec import ProductNests

    def contiguous(read, var):
        if isinstance(read, L) and not read.guarded:
            base = affine_base(read.index, var)
            return None if base is None else (read.array, base)
        if isinstance(read, G) and read.proven:
            base = affine_base(read.key, var)
            return None if base is None else (f"{read.container}_val", base)
        return None

    return ProductNests(commuting, contiguous, lambda a: a[:-4] if a.endswith("_val") else a)


def _row_read(array="M"):
    from sparsad.codegen.ir import Load
    return Load(array, Op("+", Op("*", Ref("i"), Ref("C")), Ref("j")))


def test_rules_match_the_plain_shapes():
    from sparsad.codegen.ir import Accumulate, AddTo, Assign, For, IfThen, Load
    row_sum = For("i", Num(0), Ref("R"), (Assign("acc", Num(0.0)),
                  For("j", Num(0), Ref("C"), (AddTo("acc", Op("*", _row_read(), Load("x", Ref("j")))),)),
                  Accumulate("out", (Ref("i"),), Ref("acc"))))
    assert isinstance(_nests().hoist(row_sum), IfThen)
    scaled = For("i", Num(0), Ref("R"), (Assign("w", Load("u", Ref("i"))),
                 For("j", Num(0), Ref("C"), (Accumulate("out", (Ref("j"),), Op("*", _row_read(), Ref("w"))),))))
    assert isinstance(_nests().scatter(scaled), IfThen) and isinstance(_nests().rewrite(scaled), IfThen)


def test_rules_refuse_reads_of_what_the_loop_writes():
    from sparsad.codegen.ir import Accumulate, AddTo, Assign, Fill, For, Load, LocalGet
    # the vector is a workspace the row loop refills: its product cannot move before the loop
    refilled = For("i", Num(0), Ref("R"), (Fill("h"), Accumulate("h", (Ref("i"),), Num(1.0)), Assign("acc", Num(0.0)),
                   For("j", Num(0), Ref("C"), (AddTo("acc", Op("*", _row_read(), LocalGet("h", Ref("j"), True))),)),
                   Accumulate("out", (Ref("i"),), Ref("acc"))))
    assert _nests().hoist(refilled) is None
    # the target is read in the loop: its additions cannot move after it
    read_back = For("i", Num(0), Ref("R"), (Assign("w", LocalGet("t", Ref("i"), True)),
                    For("j", Num(0), Ref("C"), (Accumulate("t", (Ref("j"),), Op("*", _row_read(), Ref("w"))),))))
    assert _nests().scatter(read_back) is None and _nests().rewrite(read_back) is None
    # a target whose writes do not commute (a hash map, an ordered output) is left alone
    plain = For("i", Num(0), Ref("R"), (For("j", Num(0), Ref("C"),
                (Accumulate("out", (Ref("i"),), Op("*", _row_read(), Load("x", Ref("j")))),)),))
    assert _nests().rewrite(plain) is not None and _nests(lambda write: False).rewrite(plain) is None
    # rows that overlap (a convolution: x[i + j]) are not a matrix
    conv = For("i", Num(0), Ref("R"), (For("j", Num(0), Ref("C"),
               (Accumulate("out", (Ref("i"),), Op("*", Load("x", Op("+", Ref("i"), Ref("j"))), Load("f", Ref("j")))),)),))
    assert _nests().rewrite(conv) is None
