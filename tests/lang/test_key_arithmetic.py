"""Keys computed by arithmetic (i + j, 2 * j, i + 1) size the result from the keys they reach, the
same in the interpreter and in compiled code; a negative computed key is our FormatError in both,
and the compiled message blames the program, not the input."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings, strategies as st

import sparsad
from sparsad.errors import FormatError

PROGRAMS = [
    "sum(<i, r> in A) sum(<j, a> in r) { i -> { j -> { i + j -> a } } }",
    "sum(<i, r> in A) sum(<j, a> in r) { i + j -> a }",
    "sum(<i, r> in A) { i + 1 -> sum(<j, a> in r) a * a }",
    "sum(<i, r> in A) sum(<j, a> in r) { 2 * j -> a }",
]
COMPILED: dict = {}


def _expected_i_plus_j(dense: np.ndarray) -> np.ndarray:
    rows, cols = dense.shape
    out = np.zeros(rows + cols - 1)
    for i in range(rows):
        for j in range(cols):
            out[i + j] += dense[i, j]
    return out


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.integers(1, 6), cols=st.integers(1, 6), seed=st.integers(0, 2**16))
@pytest.mark.parametrize("source", PROGRAMS)
def test_compiled_result_matches_interpreter(source, rows, cols, seed):
    matrix = sp.random(rows, cols, density=0.6, format="csr", random_state=seed)
    interpreted = sparsad.program(source)(A=matrix)
    if source not in COMPILED:
        COMPILED[source] = sparsad.compile(source)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback: it compiles
        compiled = COMPILED[source](A=matrix)
    interpreted, compiled = np.asarray(interpreted), np.asarray(compiled)
    assert compiled.shape == interpreted.shape
    np.testing.assert_allclose(compiled, interpreted, rtol=0, atol=1e-14)


def test_i_plus_j_against_numpy():
    matrix = sp.random(5, 7, density=0.5, format="csr", random_state=3)
    got = sparsad.compile(PROGRAMS[1])(A=matrix)
    np.testing.assert_allclose(got, _expected_i_plus_j(matrix.toarray()), atol=1e-14)


def test_negative_computed_key_is_our_error_on_both_paths():
    source = "sum(<i, r> in A) sum(<j, a> in r) { j - i -> a }"
    matrix = sp.csr_matrix(np.array([[0.0, 1.0], [2.0, 0.0]]))
    with pytest.raises(FormatError):
        sparsad.program(source)(A=matrix)
    with pytest.raises(FormatError, match="the program computes this key"):
        sparsad.compile(source)(A=matrix)
