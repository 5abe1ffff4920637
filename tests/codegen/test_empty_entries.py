"""A key whose value is the empty dictionary is no entry: compiled code agrees with the interpreter.

Compiled loops run over every row of a stored CSR level and every entry a fused generator makes;
a body that does not vanish on an empty row (a key count, a constant, a key-only test, exp of a
sum over nothing) must still see only the rows that have entries. Explicit zeros stored in a
matrix are entries (numbers), on both paths; so are the all-zero rows of a dense array.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings, strategies as st

import sparsad
from sparsad.errors import FallbackWarning

PROGRAMS = [
    "sum(<i, r> in A) 1.0",
    "sum(<i, _> in A) 2.0",
    "sum(<i, r> in A) sum(<k, v> in { i -> sum(<j, a> in r) if 1 < j then { j -> a } }) 1.0",
    "sum(<i, r> in A) { i -> exp(sum(<j, a> in r) a) }",
    "sum(<i, r> in A) if i < 2 then 1.0",
    "sum(<i, r> in sum(<i0, r0> in A) { unique(i0) -> sum(<j, a> in r0) if j < 2 then { j -> a } }) "
    "{ i -> sum(<k, b> in r) cos(b) }",
    "let M = sum(<i, r> in A) { i -> sum(<j, a> in r) { j -> if j < 1 then a } } in "
    "sum(<i, w> in M) sum(<k, b> in w) 1.0",
    "let F = sum(<i, r> in A) { i -> sum(<j, a> in r) a } in sum(<i, w> in F) { i -> 1.0 }",
    "sum(<i, r> in A) sum(<j, a> in r) a * x(j)",
    # a let-bound number that may be {} (a sum over nothing, a failed if) becomes an entry's value
    "sum(<i, r> in A) let t = sum(<j, a> in r) if 1 < j then a in sum(<k, v> in { i -> t }) 1.0",
    "sum(<i, r> in A) let t = (if 1 < i then 2.0) in sum(<k, v> in { i -> t }) 1.0",
]


@st.composite
def matrices(draw):
    """A matrix with empty rows and columns and explicit zeros, in one of scipy's formats."""
    n, m = draw(st.integers(1, 5)), draw(st.integers(3, 5))
    stored = np.array(draw(st.lists(st.booleans(), min_size=n * m, max_size=n * m))).reshape(n, m)
    stored[np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)))] = False  # empty rows
    values = np.array(draw(st.lists(st.sampled_from([0.0, -0.5, 0.25, 1.5]), min_size=n * m,
                                    max_size=n * m))).reshape(n, m)
    rows, cols = np.nonzero(stored)
    matrix = sp.coo_array((values[rows, cols], (rows, cols)), shape=(n, m))
    return draw(st.sampled_from(["csr", "csc", "coo"])), matrix


def _both(text: str, **inputs):
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)  # compiled code, not a fallback
        compiled = sparsad.compile(text)(**inputs)
    return sparsad.program(text)(**inputs), compiled


@pytest.mark.parametrize("text", PROGRAMS)
@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(matrix=matrices())
def test_empty_rows_count_on_neither_path(text, matrix):
    kind, coo = matrix
    A = coo.asformat(kind)
    x = np.linspace(-1.0, 1.0, A.shape[1])
    inputs = {"A": A, "x": x} if "x(" in text else {"A": A}
    interpreted, compiled = _both(text, **inputs)
    np.testing.assert_allclose(np.asarray(compiled, dtype=float), np.asarray(interpreted, dtype=float),
                               rtol=1e-12, atol=1e-12, err_msg=text)


def test_the_two_programs_of_the_issue():
    A = sp.csr_array(np.array([[1.0, 2.0, 0.0], [0.0, 0.0, 0.0], [3.0, 0.0, 0.0]]))
    assert _both(PROGRAMS[0], A=A) == (2.0, 2.0)
    assert _both(PROGRAMS[2], A=A) == (0.0, 0.0)


def test_explicit_zeros_are_entries_on_both_paths():
    # row 0 stores a 0.0 and a 2.0, row 1 nothing, row 2 a 0.0
    A = sp.csr_array((np.array([0.0, 2.0, 0.0]), np.array([0, 1, 2]), np.array([0, 2, 2, 3])), shape=(3, 3))
    assert A.nnz == 3
    assert _both("sum(<i, r> in A) sum(<j, a> in r) 1.0", A=A) == (3.0, 3.0)
    assert _both("sum(<i, r> in A) 1.0", A=A) == (2.0, 2.0)
    interpreted, compiled = _both("sum(<i, r> in A) { i -> sum(<j, a> in r) 1.0 }", A=A)
    np.testing.assert_array_equal(interpreted, [2.0, 0.0, 1.0])
    np.testing.assert_array_equal(compiled, [2.0, 0.0, 1.0])


def test_dense_rows_of_zeros_are_entries_and_rows_of_no_columns_are_not():
    D = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 2.0]])
    assert _both("sum(<i, r> in A) 1.0", A=D) == (3.0, 3.0)
    assert _both("sum(<i, r> in A) sum(<j, a> in r) 1.0", A=D) == (9.0, 9.0)
    assert _both("sum(<i, r> in A) 1.0", A=np.zeros((3, 0))) == (0.0, 0.0)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(lo=st.integers(0, 8), width=st.integers(0, 8), shift=st.integers(-12, 12))
def test_a_read_guarded_by_a_range_is_checked_on_the_guarded_keys(lo, width, shift):
    """x(i) for i in (lo:hi) read at j - shift: the read happens only where lo <= j - shift < hi,
    so no bounds error whatever the shift (the check narrows j - shift by the guard)."""
    hi = min(lo + width, 8)
    text = "sum(<j, b> in V) b * (sum(<_, i> in (lo:hi)) { i -> x(i) })(j - c)"
    x, V = np.arange(1.0, 9.0), np.linspace(0.5, 2.0, 8)
    expected = sum(V[j] * x[j - shift] for j in range(8) if lo <= j - shift < hi)
    interpreted, compiled = _both(text, x=x, V=V, lo=lo, hi=hi, c=shift)
    assert interpreted == pytest.approx(expected) and compiled == pytest.approx(expected)


@pytest.mark.parametrize("layout", ["coo", "csf", "dense", "ddc", "dcd"])
def test_empty_slices_and_fibers_of_a_stored_tensor_are_no_entries(layout):
    """Dense levels above compressed ones store empty fibers; neither path counts them."""
    from sparsad.formats import as_format
    from sparsad.formats.format import Format
    from sparsad.formats.levels import Compressed, Dense

    formats = {"ddc": Format((Dense("len0"), Dense("len1"), Compressed(pos="pos", crd="idx")), name="ddc"),
               "dcd": Format((Dense("len0"), Compressed(pos="pos", crd="idx"), Dense("len2")), name="dcd")}
    T = np.zeros((3, 2, 4))
    T[0, 0, [1, 3]] = [1.0, -2.0]
    T[2, 1, 0] = 0.5  # slice 1 is empty, fiber (0, 1) is empty
    stored = as_format(T, formats.get(layout, layout))
    dense = layout == "dense"  # a dense tensor stores every entry, zeros included
    slices = "sum(<i, s> in T) 1.0"
    fibers = "sum(<i, s> in T) sum(<j, f> in s) 1.0"
    assert _both(slices, T=stored) == ((3.0, 3.0) if dense else (2.0, 2.0))
    assert _both(fibers, T=stored) == ((6.0, 6.0) if dense else (2.0, 2.0))
