"""A let-bound matrix written and read only at the positions of one stored pattern becomes a vector
over positions (`opt.positions`): the same values as the interpreter and as SciPy closed forms, and
programs whose writes or reads lie elsewhere are left as they are."""
from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp
from hypothesis import given, settings, strategies as st

import sparsad
from sparsad.lang.parse import parse
from sparsad.lang.printer import to_text
from sparsad.opt.positions import index_by_position

SPGEMM = "sum(<i, r> in A) { i -> sum(<k, a> in r) sum(<j, b> in B(k)) { j -> a * b } }"
SDDMM_LIKE = "sum(<i, r> in A) sum(<k, a> in r) sum(<j, b> in B(k)) a * b * C(i)(j)"


def _csr(rng, rows, cols, density):
    matrix = sp.random(rows, cols, density=density, format="csr", random_state=rng)
    matrix.data = rng.standard_normal(matrix.nnz)
    return matrix


@settings(max_examples=10, deadline=None)
@given(st.integers(1, 7), st.integers(1, 7), st.integers(1, 7), st.sampled_from([0.0, 0.3, 0.7]),
       st.integers(0, 2**16))
def test_the_vjp_of_spgemm_wrt_its_second_operand_matches_scipy_and_the_interpreter(n, m, k, density, seed):
    rng = np.random.default_rng(seed)
    A, B = _csr(rng, n, m, density), _csr(rng, m, k, 0.5)
    cotangent = _csr(rng, n, k, 0.6)
    with warnings.catch_warnings():
        warnings.simplefilter("error", sparsad.FallbackWarning)
        derivative = sparsad.vjp(SPGEMM, "B")
        got = derivative(A=A, B=B, cotangent=cotangent)
    assert "Dict.empty" not in derivative._compiled_for("B").show("code")
    reference = sparsad.vjp(SPGEMM, "B", interpret=True)(A=A, B=B, cotangent=cotangent)
    expected = (A.T @ cotangent).toarray() * (B.toarray() != 0)
    dense_got = got.toarray() if sp.issparse(got) else np.asarray(got)
    np.testing.assert_allclose(dense_got, expected, rtol=1e-12, atol=1e-12)
    dense_ref = reference.toarray() if sp.issparse(reference) else np.asarray(reference)
    np.testing.assert_allclose(dense_got, dense_ref, rtol=1e-12, atol=1e-12)


@settings(max_examples=10, deadline=None)
@given(st.integers(1, 6), st.integers(1, 6), st.sampled_from([0.2, 0.6]), st.integers(0, 2**16))
def test_the_gradient_wrt_a_pattern_read_inside_another_loop_matches_scipy(n, k, density, seed):
    rng = np.random.default_rng(seed)
    A, B, C = _csr(rng, n, n, density), _csr(rng, n, k, 0.5), _csr(rng, n, k, 0.5)
    got = sparsad.grad(SDDMM_LIKE, "B")(A=A, B=B, C=C)
    reference = sparsad.grad(SDDMM_LIKE, "B", interpret=True)(A=A, B=B, C=C)
    expected = (A.T @ C).toarray() * (B.toarray() != 0)
    dense_got = got.toarray() if sp.issparse(got) else np.asarray(got)
    np.testing.assert_allclose(dense_got, expected, rtol=1e-12, atol=1e-12)
    dense_ref = reference.toarray() if sp.issparse(reference) else np.asarray(reference)
    np.testing.assert_allclose(dense_got, dense_ref, rtol=1e-12, atol=1e-12)


WRITTEN = "let D = sum(<_, r> in (0:n)) sum(<p, c> in I(P(r):P(r + 1))) { r -> { unique(c) -> V(p) } } in "


def test_reads_at_the_positions_of_the_same_rows_become_position_reads():
    program = parse(WRITTEN + "sum(<_, i> in (0:n)) sum(<q, j> in I(P(i):P(i + 1))) D(i)(j)")
    text = to_text(index_by_position(program))
    assert "D(q)" in text and "{ p -> V(p) }" in text


def test_writes_or_reads_off_the_pattern_are_left_alone():
    cases = [
        # a read at another row than the loop's
        WRITTEN + "sum(<_, i> in (0:n)) sum(<q, j> in I(P(i):P(i + 1))) D(i + 1)(j)",
        # a read through another pattern
        WRITTEN + "sum(<_, i> in (0:n)) sum(<q, j> in J(Q(i):Q(i + 1))) D(i)(j)",
        # a read of a whole row (its keys are columns, not positions)
        WRITTEN + "sum(<_, i> in (0:n)) sum(<c, v> in D(i)) v",
        # a slice of two rows: positions of the next row would be read at this row's keys
        WRITTEN + "sum(<_, i> in (0:n)) sum(<q, j> in I(P(i):P(i + 2))) D(i)(j)",
        # a column not known distinct (no unique): two positions could share one key
        "let D = sum(<_, r> in (0:n)) sum(<p, c> in I(P(r):P(r + 1))) { r -> { c -> V(p) } } in "
        "sum(<_, i> in (0:n)) sum(<q, j> in I(P(i):P(i + 1))) D(i)(j)",
        # a write at a key that is not the column of the loop
        "let D = sum(<_, r> in (0:n)) sum(<p, c> in I(P(r):P(r + 1))) { r -> { unique(c + 1) -> V(p) } } in "
        "sum(<_, i> in (0:n)) sum(<q, j> in I(P(i):P(i + 1))) D(i)(j)",
    ]
    for text in cases:
        program = parse(text)
        assert index_by_position(program) == program, text
