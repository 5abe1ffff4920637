"""A jvp's tangent comes back in the kind of its primal: a matrix program whose value is full
returns an ndarray (the interpreter's rule, `lang.program.to_natural`), and its tangent, CSR by
its type, was a scipy matrix beside it. Compiled (first and repeated calls) and interpreted,
against the closed form J·t = A * 2 x * t (column-wise)."""
from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp
from hypothesis import given, settings, strategies as st

import sparsad

TEXT = "sum(<i, r> in A) { i -> sum(<j, a> in r) { j -> a * x(j) * x(j) } }"


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 2**16), density=st.sampled_from([0.3, 0.7, 1.0]), dense_input=st.booleans())
def test_the_tangent_has_the_primal_kind(seed, density, dense_input):
    rng = np.random.default_rng(seed)
    values = rng.standard_normal((4, 3)) + 3.0  # no zero where an entry is stored
    values[rng.random((4, 3)) >= density] = 0.0
    A = values if dense_input else sp.csr_matrix(values)
    x, t = rng.standard_normal(3), rng.standard_normal(3)
    expected = values * 2.0 * x * t
    with warnings.catch_warnings():
        warnings.simplefilter("error", sparsad.FallbackWarning)
        compiled = sparsad.jvp(TEXT, "x")
        calls = [compiled(A=A, x=x, tangent=t), compiled(A=A, x=x, tangent=t),  # the second: a repeat
                 sparsad.jvp(TEXT, "x", interpret=True)(A=A, x=x, tangent=t)]
    for primal, tangent in calls:
        assert type(tangent) is type(primal)
        assert np.shape(tangent) == np.shape(primal) == values.shape
        got = tangent.toarray() if sp.issparse(tangent) else tangent
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
