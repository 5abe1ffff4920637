"""A lookup outside an input's axis is the same ShapeError in the interpreter, in compiled code and
in every derivative (grad, jvp, vjp), on CSR, COO, CSF and dense inputs; in range, the value and
the derivatives match NumPy closed forms (float64)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings, strategies as st

import sparsad
from sparsad.errors import FallbackWarning, ShapeError
from sparsad.formats import as_format
from sparsad.lang.keyranges import doubtful, key_checks
from sparsad.lang.parse import parse
from sparsad.lang.types import tensor

SHIFTED = "sum(<i, r> in A) sum(<j, a> in r) a * B(i)(j + k)"
SHIFTED_3D = "sum(<i, r> in T) sum(<j, s> in r) sum(<l, a> in s) a * C(i)(j)(l + k)"
SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
COMPILED: dict = {}  # one compiled program per (kind, format): hypothesis varies data and offsets


def _compiled(kind: str, fmt: str):
    if (kind, fmt) not in COMPILED:
        COMPILED[kind, fmt] = {
            "value": lambda: sparsad.compile(SHIFTED),
            "grad": lambda: sparsad.grad(SHIFTED, wrt="A"),
            "jvp": lambda: sparsad.jvp(SHIFTED, wrt="A"),
            "vjp": lambda: sparsad.vjp(SHIFTED, wrt="A"),
        }[kind]()
    return COMPILED[kind, fmt]


def _operand(dense: np.ndarray, fmt: str):
    if fmt == "dense":
        return dense
    if fmt in ("csr", "coo"):
        return sp.csr_matrix(dense).asformat(fmt)
    return as_format(dense, fmt, name="B")


def _case(seed: int, n: int, m: int):
    rng = np.random.default_rng(seed)
    A = sp.random(n, m, density=0.5, format="csr", random_state=rng)
    B = rng.standard_normal((n, m)) * (rng.random((n, m)) < 0.6)
    return A, B


def _reach(A: sp.csr_matrix, k: int, m: int) -> bool:
    """Whether every lookup B(i)(j + k) of SHIFTED stays within B's columns."""
    cols = A.tocoo().col
    return cols.size == 0 or (cols.min() + k >= 0 and cols.max() + k < m)


def _shifted(B: np.ndarray, k: int) -> np.ndarray:
    """S[i, j] = B[i, j + k] where that is inside B, else 0 (the unused entries)."""
    m = B.shape[1]
    S = np.zeros_like(B)
    for j in range(m):
        if 0 <= j + k < m:
            S[:, j] = B[:, j + k]
    return S


@pytest.mark.parametrize("fmt", ["csr", "coo", "csc", "dense"])
@SETTINGS
@given(seed=st.integers(0, 2**16), k=st.integers(-5, 5), n=st.integers(1, 4), m=st.integers(1, 5))
def test_shifted_lookup_raises_or_matches_numpy_in_both_paths(fmt, seed, k, n, m):
    A, Bd = _case(seed, n, m)
    B = _operand(Bd, fmt)
    inputs = dict(A=A, B=B, k=k)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        if not _reach(A, k, m):
            with pytest.raises(ShapeError, match="axis 1 of input 'B'"):
                sparsad.program(SHIFTED)(**inputs)
            with pytest.raises(ShapeError, match="axis 1 of input 'B'"):
                _compiled("value", fmt)(**inputs)
            return
        expected = float((A.toarray() * _shifted(Bd, k)).sum())
        assert sparsad.program(SHIFTED)(**inputs) == pytest.approx(expected, abs=1e-12)
        assert _compiled("value", fmt)(**inputs) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("kind", ["grad", "jvp", "vjp"])
@SETTINGS
@given(seed=st.integers(0, 2**16), k=st.integers(-4, 4), n=st.integers(1, 4), m=st.integers(1, 5))
def test_derivatives_of_a_shifted_lookup_raise_or_match_closed_forms(kind, seed, k, n, m):
    A, Bd = _case(seed, n, m)
    B = sp.csr_matrix(Bd)
    inputs = dict(A=A, B=B, k=k)
    dA = sp.csr_matrix((np.random.default_rng(seed + 1).standard_normal(A.nnz), A.indices, A.indptr),
                       shape=A.shape)
    if kind == "jvp":
        inputs["tangent"] = dA
    if kind == "vjp":
        inputs["cotangent"] = 1.5
    interpreted = {"grad": sparsad.grad(SHIFTED, wrt="A", interpret=True),
                   "jvp": sparsad.jvp(SHIFTED, wrt="A", interpret=True),
                   "vjp": sparsad.vjp(SHIFTED, wrt="A", interpret=True)}[kind]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        if not _reach(A, k, m):
            for derivative in (interpreted, _compiled(kind, "csr")):
                with pytest.raises(ShapeError, match="axis 1 of input 'B'"):
                    derivative(**inputs)
            return
        shifted = _shifted(Bd, k)
        if kind == "jvp":
            expected = float((dA.toarray() * shifted).sum())
            assert interpreted(**inputs)[1] == pytest.approx(expected, abs=1e-12)
            assert _compiled(kind, "csr")(**inputs)[1] == pytest.approx(expected, abs=1e-12)
            return
        scale = 1.5 if kind == "vjp" else 1.0
        mask = np.zeros(A.shape, bool)
        coo = A.tocoo()
        mask[coo.row, coo.col] = True
        expected = scale * shifted * mask  # the gradient on A's pattern
        for derivative in (interpreted, _compiled(kind, "csr")):
            got = derivative(**inputs)
            got = got.toarray() if sp.issparse(got) else np.asarray(got)
            np.testing.assert_allclose(got, expected, atol=1e-12)


@pytest.mark.parametrize("fmt", ["csf", "coo", "dense"])
@pytest.mark.parametrize("k", [-2, 0, 1])
def test_three_mode_shifted_lookup(fmt, k):
    rng = np.random.default_rng(7)
    Td = rng.standard_normal((3, 2, 4)) * (rng.random((3, 2, 4)) < 0.5)
    Td[0, 0, 0] = Td[2, 1, 3] = 1.0  # reaches the first and last entries of the last axis
    Cd = rng.standard_normal((3, 2, 4))
    T = as_format(Td, "csf", name="T")
    C = Cd if fmt == "dense" else as_format(Cd, fmt, name="C")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        if k != 0:
            for run in (sparsad.program(SHIFTED_3D), sparsad.compile(SHIFTED_3D)):
                with pytest.raises(ShapeError, match="axis 2 of input 'C'"):
                    run(T=T, C=C, k=k)
            return
        expected = float((Td * Cd).sum())
        assert sparsad.compile(SHIFTED_3D)(T=T, C=C, k=k) == pytest.approx(expected, abs=1e-12)


def test_constant_offsets_raise_in_compiled_code_too():
    A = sp.csr_matrix(np.array([[0.0, 1.0, 0.0], [2.0, 0.0, 3.0], [0.0, 0.0, 0.0]]))
    B = sp.csr_matrix(np.ones((3, 3)))
    for text in ("sum(<i, r> in A) sum(<j, a> in r) a * B(i)(i + 3)",
                 "sum(<i, r> in A) { i -> sum(<j, a> in r) a * B(i + 2)(j) }"):
        for run in (sparsad.program(text), sparsad.compile(text), sparsad.grad(text, wrt="A"),
                    sparsad.grad(text, wrt="A", interpret=True)):
            if "{" in text and isinstance(run, sparsad.ad.api.Derivative):
                continue  # not a scalar program
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FallbackWarning)
                with pytest.raises(ShapeError, match="input 'B'"):
                    run(A=A, B=B)


def test_key_checks_skip_keys_the_type_checker_relates():
    types = {"A": tensor(2, (3, 4)), "x": tensor(1, (4,)), "k": parse_int()}
    related = key_checks(parse("sum(<i, r> in A) sum(<j, a> in r) a * x(j)"), types)
    shifted = key_checks(parse("sum(<i, r> in A) sum(<j, a> in r) a * x(j + k)"), types)
    assert related == ()
    assert [(c.name, c.axis, c.extent) for c in shifted] == [("x", 0, 4)]
    assert doubtful(shifted, {"k": 0}) == []
    assert doubtful(shifted, {"k": 1}) == list(shifted)
    in_range = key_checks(parse("sum(<p, i> in (1:4)) x(i) * x(p)"), types)
    assert len(in_range) == 2 and doubtful(in_range, {}) == []
    past_the_end = key_checks(parse("sum(<p, i> in (1:4)) x(i) * x(p + 1)"), types)  # (1:4) is {k -> k}
    assert doubtful(past_the_end, {}) == [past_the_end[1]]
    window = key_checks(parse("sum(<i, a> in x) a * (sum(<j, y> in x(i:k)) y)"), types)
    assert [(c.name, c.axis) for c in window] == [("x", 0)]
    assert doubtful(window, {"k": 4}) == [] and doubtful(window, {"k": 5}) == list(window)


@pytest.mark.parametrize("m", [4, 5, 6])
def test_sub_array_past_the_end_raises_in_every_path(m):
    x = np.arange(1.0, 6.0)
    text = "sum(<i, a> in x) a * (sum(<k, y> in x(i:m)) y)"
    runs = (sparsad.program(text), sparsad.compile(text), sparsad.grad(text, wrt="x"),
            sparsad.grad(text, wrt="x", interpret=True), sparsad.jvp(text, wrt="x"))
    extra = {"tangent": np.ones(5)}
    for run in runs:
        inputs = dict(x=x, m=m, **(extra if getattr(run, "kind", None) == "jvp" else {}))
        if m > 5:
            with pytest.raises(ShapeError, match="axis 0 of input 'x'"):
                run(**inputs)
            continue
        # closed forms: f = sum_i x_i * S_i with S_i = sum_{i <= k < m} x_k
        suffix = np.array([x[i:m].sum() for i in range(5)])
        value = float(x @ suffix)
        gradient = suffix + np.array([x[: min(k, m - 1) + 1].sum() if k < m else 0.0 for k in range(5)])
        result = run(**inputs)
        if run in runs[:2]:
            assert result == pytest.approx(value, rel=1e-12)
        elif "tangent" in inputs:  # jvp: (primal, tangent)
            assert result[0] == pytest.approx(value, rel=1e-12)
            assert result[1] == pytest.approx(float(gradient.sum()), rel=1e-12)
        else:
            np.testing.assert_allclose(result, gradient, rtol=1e-12)


def parse_int():
    from sparsad.lang.types import INT

    return INT
