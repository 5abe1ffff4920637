"""Reads and writes whose index is proven inside its array are emitted with unsigned indices
(Numba then skips negative-index wraparound, which blocked vectorisation); an index array
pointing outside its array is still refused before the kernel runs."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import sparsad
from sparsad.errors import FormatError

SDDMM_ROWS = "sum(<i, r> in S) { i -> sum(<j, s> in r) sum(<k, v> in V(j)) { k -> s * v } }"


def _inputs(seed: int):
    rng = np.random.default_rng(seed)
    S = sp.random(9, 7, density=0.3, format="csr", random_state=rng)
    S.data = rng.standard_normal(S.nnz)
    return S, rng.standard_normal((7, 4))


def test_proven_indices_are_unsigned_and_values_match_scipy():
    S, V = _inputs(1)
    program = sparsad.compile(SDDMM_ROWS)
    got = program(S=S, V=V)
    np.testing.assert_allclose(got.toarray() if sp.issparse(got) else got, S @ V, rtol=1e-12, atol=1e-12)
    kernel = program.show("code").split("def kernel", 1)[1]
    assert "np.uint64(" in kernel
    assert "V_M[np.uint64(" in kernel  # the dense row read at a stored column index


def test_an_index_outside_its_array_is_refused_before_the_kernel_runs():
    S, V = _inputs(2)
    bad = sp.csr_matrix((S.data, S.indices.copy(), S.indptr), shape=S.shape)
    bad.indices[0] = -3
    with pytest.raises(FormatError):
        sparsad.compile(SDDMM_ROWS)(S=bad, V=V)
