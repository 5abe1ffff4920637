"""Shapes related by a program are compared in both paths; the interpreter's numerics are the
compiled kernels' (IEEE edge cases, float32 kept)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import sparsad
from sparsad.errors import ShapeError

MATVEC = "sum(<i, r> in A) { i -> sum(<j, a> in r) a * x(j) }"


@pytest.mark.parametrize("run", [sparsad.program, sparsad.compile], ids=["interpreter", "compiled"])
@pytest.mark.parametrize("A", [np.ones((3, 4)), sp.csr_matrix(np.ones((3, 4)))], ids=["dense", "csr"])
def test_related_axes_must_agree_in_both_paths(run, A):
    with pytest.raises(ShapeError, match=r"axis 1 of 'A' \(extent 4\) look up axis 0 of 'x' \(extent 3\)"):
        run(MATVEC)(A=A, x=np.ones(3))
    np.testing.assert_allclose(run(MATVEC)(A=A, x=np.ones(4)), [4.0, 4.0, 4.0])


def test_keys_through_a_let_bound_dictionary_keep_their_origin():
    text = "let y = sum(<i, a> in u) { i -> a } in sum(<k, b> in y) b * v(k)"
    with pytest.raises(ShapeError, match="'u'.*'v'"):
        sparsad.program(text)(u=np.ones(3), v=np.ones(5))


def test_sub_array_keys_may_index_a_longer_axis():
    assert sparsad.program("sum(<i, a> in u(0:2)) a * v(i)")(u=np.ones(3), v=np.ones(5)) == 2.0


@pytest.mark.parametrize("text, inputs", [
    ("sum(<i, a> in x) a * y(i + 1)", dict(x=np.ones(3), y=np.ones(3))),
    ("y(5)", dict(y=np.ones(3))),
    ("sum(<i, a> in x) a * B(i)(i + 3)", dict(x=np.ones(3), B=sp.csr_matrix(np.ones((3, 4))))),
])
def test_interpreter_lookups_outside_an_input_are_errors(text, inputs):
    with pytest.raises(ShapeError, match="outside|extent"):
        sparsad.program(text)(**inputs)


EDGE_CASES = [
    ("sum(<i, a> in x) { i -> a / y(i) }", [np.nan, 1.0, -1.0, 0.0], [0.0, -0.0, 0.0, 0.0]),
    ("sum(<i, a> in x) { i -> sin(a) + y(i) }", [np.inf, -np.inf, np.nan, 1.0], [0.0, 0.0, 0.0, 0.0]),
    ("sum(<i, a> in x) { i -> exp(a) * y(i) }", [1000.0, -1000.0, 1.0, np.inf], [1.0, 1.0, 0.0, 0.0]),
    ("sum(<i, a> in x) { i -> log(a) + sqrt(y(i)) }", [0.0, -1.0, np.inf, 2.0], [-1.0, 4.0, 0.0, np.inf]),
    ("sum(<i, a> in x) { i -> a * 1e300 * y(i) }", [1e300, -1e300, 1.0, 0.0], [1.0, 1.0, 0.0, np.inf]),
]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("text, x, y", EDGE_CASES)
def test_interpreter_and_compiled_agree_on_ieee_edge_cases(text, x, y, dtype):
    with np.errstate(over="ignore"):  # 1e300 becomes inf in float32: part of the test
        inputs = dict(x=np.array(x, dtype=dtype), y=np.array(y, dtype=dtype))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # the interpreter computes silently
        interpreted = sparsad.program(text)(**inputs)
    with np.errstate(all="ignore"):
        compiled = sparsad.compile(text)(**inputs)
    assert interpreted.dtype == compiled.dtype == dtype
    numbers = ~np.isnan(compiled)  # a NaN's sign bit means nothing
    np.testing.assert_array_equal(np.isnan(interpreted), ~numbers)
    np.testing.assert_array_equal(np.signbit(interpreted[numbers]), np.signbit(compiled[numbers]))
    np.testing.assert_allclose(interpreted, compiled, rtol=1e-6 if dtype == np.float32 else 1e-12)
