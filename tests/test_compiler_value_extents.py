"""Results with an extent that is a value (a range to `k`, a sub-array `x(a:k)`): compiled and
interpreted programs, Jacobians and jvps (with and without the primal) return one type, one shape
and one value. The interpreter sizes such a mode one past its largest key holding an entry; the
kernel notes the keys it writes (`codegen.outputs.OutputPlan.trimmed`)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings, strategies as st

import sparsad

N = 5
# programs whose result has a mode sized by k (derivatives w.r.t. x); compiled once each
TEMPLATES = (
    "sum(<j, _> in (0:k)) { j -> x(j) * x(j) }",
    "sum(<j, v> in x(1:k)) { j + 1 -> v * u(j) }",
    "sum(<j, _> in (0:k)) { j -> sum(<i, a> in A(j)) a * x(i) }",
    "sum(<j, _> in (0:k)) { j -> sum(<i, a> in A(j)) { i -> a * x(i) } }",
    "sum(<j, _> in (1:k)) { j -> sum(<i, _> in (0:j)) { i -> x(i) * x(j) } }",
)


def _dense(value):
    return value.toarray() if sp.issparse(value) else np.asarray(value)


def _assert_same(compiled, interpreted, what: str) -> None:
    assert type(compiled) is type(interpreted), what
    if isinstance(interpreted, dict):
        assert compiled.keys() == interpreted.keys(), what
        for key in interpreted:
            _assert_same(compiled[key], interpreted[key], what)
        return
    assert np.shape(compiled) == np.shape(interpreted), what
    np.testing.assert_allclose(_dense(compiled), _dense(interpreted), rtol=1e-12, atol=1e-12, err_msg=what)


def _inputs(draw_rows, k: int, rng: np.random.Generator) -> dict:
    A = rng.standard_normal((N, N)) * (rng.random((N, N)) < 0.4)
    A[list(draw_rows)] = 0.0  # empty rows: keys with no entry below them
    return dict(x=rng.standard_normal(N), u=rng.standard_normal(N), A=sp.csr_matrix(A), k=k)


def _used(text: str, inputs: dict) -> dict:
    return {name: value for name, value in inputs.items() if name == "k" or f"{name}(" in text}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(template=st.sampled_from(TEMPLATES), k=st.integers(0, N), empty=st.sets(st.integers(0, N - 1)),
       seed=st.integers(0, 2**16), zero_tangent=st.booleans())
def test_value_dependent_extents_agree(template, k, empty, seed, zero_tangent):
    rng = np.random.default_rng(seed)
    inputs = _used(template, _inputs(empty, k, rng))
    tangent = np.zeros(N) if zero_tangent else rng.standard_normal(N)
    with warnings.catch_warnings():
        warnings.simplefilter("error", sparsad.FallbackWarning)  # each one compiles
        _assert_same(sparsad.compile(template)(**inputs), sparsad.program(template)(**inputs), "program")
        _assert_same(sparsad.jacobian(template, "x")(**inputs),
                     sparsad.jacobian(template, "x", interpret=True)(**inputs), "jacobian")
        for with_primal in (True, False):
            compiled = sparsad.jvp(template, "x", with_primal=with_primal)(**inputs, tangent=tangent)
            interpreted = sparsad.jvp(template, "x", with_primal=with_primal, interpret=True)(**inputs,
                                                                                              tangent=tangent)
            if with_primal:
                for c, i, what in zip(compiled, interpreted, ("jvp primal", "jvp tangent")):
                    _assert_same(c, i, what)
            else:
                _assert_same(compiled, interpreted, "jvp tangent without the primal")


@pytest.mark.parametrize("k", [0, 2, 4])
def test_gradient_through_a_value_dependent_extent(k):
    """A scalar program summing a result whose extent is k: the gradient against the closed form."""
    text = "sum(<j, v> in (sum(<i, _> in (0:k)) { i -> x(i) * x(i) })) v * v"
    x = np.random.default_rng(k).standard_normal(N)
    expected = np.zeros(N)
    expected[:k] = 4.0 * x[:k] ** 3
    np.testing.assert_allclose(sparsad.grad(text, "x")(x=x, k=k), expected, rtol=1e-12)
    np.testing.assert_allclose(sparsad.grad(text, "x", interpret=True)(x=x, k=k), expected, rtol=1e-12)


def test_an_empty_last_row_is_not_part_of_the_shape():
    """A row whose sparse input row is empty holds no entry: the interpreter's shape stops before it,
    and so does the kernel's (it was k rows compiled, 2 interpreted)."""
    text = "sum(<j, _> in (0:k)) { j -> sum(<i, a> in A(j)) { i -> a } }"
    A = sp.csr_matrix(np.array([[1.0, 0, 0], [0, 0, 2.0], [0, 0, 0], [0, 0, 0]]))
    compiled, interpreted = sparsad.compile(text)(A=A, k=4), sparsad.program(text)(A=A, k=4)
    assert compiled.shape == interpreted.shape == (2, 3)
    assert np.array_equal(compiled.toarray(), interpreted.toarray())
