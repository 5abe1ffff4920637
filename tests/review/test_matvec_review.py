"""Review of codegen.matvec (BLAS products of loop nests): derivatives of programs whose nests
match a product only in part equal NumPy's closed forms and the interpreter."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

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


# programs whose nests match a product with a factor repeated (the same IR node twice after the
# lets are substituted), checked with every BLAS path forced on (thresholds 0) at a small size
REPEATED = [
    ("vjp", "sum(<i, r> in M) { i -> sum(<j, a> in r) a * a * v(j) }", "v"),  # scatter: a * a * ct(i)
    ("vjp", "sum(<i, r> in M) sum(<j, a> in r) { j -> a * a * u(i) }", "u"),  # rewrite down the columns
    ("grad", "sum(<i, r> in M) u(i) * tanh(sum(<j, a> in r) a * a * v(j))", "v"),  # hoisted row sums
    ("grad", "sum(<i, r> in M) sum(<j, a> in r) u(i) * a * v(j) * v(j)", "v"),
    ("grad", "sum(<i, r> in M) sum(<k, _> in (0:n)) sum(<j, b> in N(k)) r(k) * b * r(k) * W(i)(j)", "N"),  # gemm
]


@pytest.mark.parametrize("kind, text, wrt", REPEATED)
def test_repeated_factors_with_every_blas_path_forced(monkeypatch, kind, text, wrt):
    import sparsad.codegen.dense_loops as dense_loops
    import sparsad.codegen.matvec as matvec

    for name in ("MATVEC_MIN_SIZE", "VECMAT_MIN_SIZE", "MATMAT_MIN_SIZE"):
        monkeypatch.setattr(matvec, name, 0)
    monkeypatch.setattr(dense_loops, "DOT_MIN_LENGTH", 0)
    rng = np.random.default_rng(len(text))
    inputs = dict(M=rng.standard_normal((6, 5)), N=rng.standard_normal((5, 4)), W=rng.standard_normal((6, 4)),
                  u=rng.standard_normal(6), v=rng.standard_normal(5), n=5)
    inputs = {k: v for k, v in inputs.items() if k in sparsad.program(text).inputs}
    if kind == "vjp":
        inputs["cotangent"] = rng.standard_normal(np.shape(sparsad.program(text)(**inputs)))
    got = getattr(sparsad, kind)(text, wrt=wrt)(**inputs)
    expected = getattr(sparsad, kind)(text, wrt=wrt, interpret=True)(**inputs)
    assert np.allclose(got, expected, rtol=1e-12, atol=1e-12)
