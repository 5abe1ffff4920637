"""A derivative called again (the repeat path of `fastcall`) gives what its first call gave: the
same result type on the same pattern, with the new values. Pins two merge interactions: results on
an order-3+ input's entries, and SpMM-like results assembled in full rows."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import sparsad
from sparsad.errors import FallbackWarning
from sparsad.formats import StoredTensor, from_coordinates

LEVELS3 = "sum(<i, ti> in T) sum(<j, tj> in ti) sum(<k, t> in tj) "
SPMM = "sum(<i, r> in A) { i -> sum(<j, a> in r) sum(<k, b> in B(j)) { k -> a * b } }"


def _tensor(rng, fmt):
    coords = np.stack([rng.integers(0, n, 30) for n in (4, 3, 5)])
    return from_coordinates(coords, rng.standard_normal(30), (4, 3, 5), fmt)


@pytest.mark.parametrize("fmt", ["coo", "csf"])
@pytest.mark.parametrize("text, closed", [
    (LEVELS3 + "t * t", lambda c, v: 2 * v),  # written on T's entries in order
    (LEVELS3 + "t * T(i)(j)(k)", lambda c, v: 2 * v),  # read back on T's pattern
])
@pytest.mark.parametrize("kind", ["grad", "vjp", "jacobian"])
def test_order_3_derivatives_stay_on_the_entries_when_called_again(fmt, text, closed, kind):
    rng = np.random.default_rng(3)
    derivative = getattr(sparsad, kind)(text, wrt="T")
    for _ in range(3):  # the first call, then repeats; a new tensor each time
        T = _tensor(rng, fmt)
        coords, values = T.coordinates()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FallbackWarning)
            result = derivative(T=T, cotangent=1.0) if kind == "vjp" else derivative(T=T)
        assert type(result) is StoredTensor and result.format == T.format
        np.testing.assert_array_equal(result.coordinates()[0], coords)
        np.testing.assert_allclose(result.values, closed(coords, values), rtol=1e-12, atol=1e-12)


def test_full_row_results_are_csr_on_every_call():
    rng = np.random.default_rng(4)
    A = sp.random(9, 6, density=0.3, format="csr", random_state=rng)
    compiled = sparsad.compile(SPMM)
    jvp = sparsad.jvp(SPMM, wrt="A", with_primal=False)
    for _ in range(3):
        B = rng.standard_normal((6, 4))
        result = compiled(A=A, B=B)
        assert isinstance(result, sp.csr_matrix)
        np.testing.assert_allclose(result.toarray(), A @ B, rtol=1e-13, atol=1e-14)
        tangent = A.copy()
        tangent.data = rng.standard_normal(A.nnz)
        change = jvp(A=A, B=B, tangent=tangent)
        assert isinstance(change, sp.csr_matrix)
        np.testing.assert_allclose(change.toarray(), tangent @ B, rtol=1e-13, atol=1e-14)
