"""Review: a jvp whose tangent is identically zero returns the zero of the primal's shape, compiled
and interpreted alike (found by the BLAS-nest fuzzing of this review: the output's extent comes
from a range bound `k`, so the types alone do not give its shape)."""
from __future__ import annotations

import numpy as np
import pytest

import sparsad

TEXT = "sum(<i, _> in (1:k)) { i -> sum(<j, a> in S(i)) T(i)(j) * u(i) }"  # S is only iterated


@pytest.mark.parametrize("interpret", [False, True])
def test_a_zero_tangent_has_the_primal_shape(interpret):
    rng = np.random.default_rng(0)
    S, T, u = rng.standard_normal((5, 5)), rng.standard_normal((5, 5)), rng.standard_normal(5)
    primal, tangent = sparsad.jvp(TEXT, wrt="S", interpret=interpret)(S=S, T=T, u=u, k=4, tangent=np.ones((5, 5)))
    assert np.shape(primal) == (4,)
    assert isinstance(tangent, np.ndarray) and tangent.shape == (4,) and not tangent.any()
