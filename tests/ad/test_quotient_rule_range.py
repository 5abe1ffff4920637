"""The quotient rule's adjoint for the denominator is (l/r)/r, not l/(r*r). For a softmax,
r = sum exp(b) can pass exp(355). Then r*r overflows and the derivative came out silently wrong:
the softmax weights instead of zero, or an attention layer's NaN. The derivatives are checked
against closed forms in float64, both interpreted and compiled."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import sparsad

SOFTMAX_SUM = "sum(<i, a> in x) exp(a) / (sum(<j, b> in x) exp(b))"  # identically 1
SOFTMAX_MEAN = "sum(<i, a> in x) (w(i) * exp(a)) / (sum(<j, b> in x) exp(b))"  # softmax-weighted mean of w


def _softmax_mean_grad(x, w):
    p = np.exp(x - x.max())
    p /= p.sum()
    return p * (w - p @ w)


@settings(max_examples=15, deadline=None)
@given(offset=st.floats(-50.0, 700.0), seed=st.integers(0, 2**16))
@pytest.mark.parametrize("interpret", [True, False])
def test_softmax_derivatives_are_right_at_any_score_scale(interpret, offset, seed):
    rng = np.random.default_rng(seed)
    x = offset + rng.standard_normal(5)
    w = rng.standard_normal(5)
    g = sparsad.grad(SOFTMAX_SUM, wrt="x", interpret=interpret)(x=x)
    np.testing.assert_allclose(g, 0.0, atol=1e-12)
    expected = _softmax_mean_grad(x, w)
    got = sparsad.grad(SOFTMAX_MEAN, wrt="x", interpret=interpret)(x=x, w=w)
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)
    direction = rng.standard_normal(5)
    _, tangent = sparsad.jvp(SOFTMAX_MEAN, wrt="x", interpret=interpret)(x=x, w=w, tangent=direction)
    np.testing.assert_allclose(tangent, expected @ direction, rtol=1e-9, atol=1e-12)
