"""Review of codegen.matvec (BLAS products of loop nests): derivatives of programs whose nests
match a product only in part equal NumPy's closed forms and the interpreter."""
from __future__ import annotations

import warnings

import numpy as np

import sparsad
import sparsad.errors

SQUARED_ROWS = ("(sum(<i, r> in M) { i -> sum(<j, a> in r) a * v(j) }) + "
                "(sum(<i, r> in M) { i -> sum(<j, a> in r) a * a * v(j) })")


def test_a_row_scaled_by_its_own_entry_is_not_a_plain_transposed_product():
    """The VJP adds `a * a * ct(i)` into out[j]: the scatter rewrite took the matrix read once
    and dropped its second occurrence (the same IR node twice), giving M.T @ ct for (M * M).T @ ct."""
    rng = np.random.default_rng(0)
    M, v, ct = rng.standard_normal((100, 98)), rng.standard_normal(98), rng.standard_normal(100)
    with warnings.catch_warnings():
        warnings.simplefilter("error", sparsad.errors.FallbackWarning)
        vjp = sparsad.vjp(SQUARED_ROWS, wrt="v")
        got = vjp(M=M, v=v, cotangent=ct)
        assert "rt.vecmat(" in vjp.show("code")  # the product still runs through BLAS
    expected = M.T @ ct + (M * M).T @ ct
    assert np.allclose(got, expected, rtol=1e-12, atol=1e-12)
    assert np.allclose(sparsad.vjp(SQUARED_ROWS, wrt="v", interpret=True)(M=M, v=v, cotangent=ct), expected,
                       rtol=1e-12, atol=1e-12)
    weights = rng.standard_normal(100)
    grad = sparsad.grad("sum(<i, r> in M) sum(<j, a> in r) w(i) * a * a * v(j)", wrt="v")(M=M, v=v, w=weights)
    assert np.allclose(grad, (M * M).T @ weights, rtol=1e-12, atol=1e-12)
