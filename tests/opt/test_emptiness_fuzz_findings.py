"""The emptiness fuzz target's findings (tests/fuzz/cases.py, seeds of the campaign on main 4290d3a):
each minimized program, on its input, compiles to the interpreter's answer (docs/language.md, empty
entries), and again on random matrices with empty rows and stored zeros.

Two mechanisms were wrong:
- `unique` on a key holds among the singleton's siblings only. Fusing a sum over a singleton bound
  the marked key itself, so the marker travelled to where the name was used: the transposed
  `{j0 -> {i0 -> a0}}` then claimed its rows distinct, and a row read by a consumer that does not
  add up over entries (a count, exp, `+ 0.5`) was one row per stored entry.
- a value that may be `{}` (`if c then a`) let-bound by a fusion was taken for an entry by a
  consumer fused later in the same sweep: pairs of a filtered row were counted unfiltered.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings, strategies as st

import sparsad
from sparsad.errors import FallbackWarning

TRANSPOSE = "let M = sum(<i0, r0> in A) sum(<j0, a0> in r0) {} in "
FILTERED = "sum(<i0, r0> in A) { unique(i0) -> sum(<j0, a0> in r0) { j0 -> if not (j0 = 2) then a0 * 2.0 } }"


def coo(shape, rows, cols, data):
    return sp.coo_array((np.array(data, dtype=float), (np.array(rows), np.array(cols))), shape=shape)


# (seed, minimized program, inputs on which main's compiled code disagreed with the interpreter)
FINDINGS = [
    (530195991, TRANSPOSE.format("if not (i0 = 1) then { j0 -> { i0 -> a0 } }")
     + "sum(<i, r> in M) sum(<k, v> in { i -> r }) 1.0",
     dict(A=coo((4, 4), [1, 2, 3], [3, 2, 2], [0.0, 0.0, 0.909]))),
    (530198211, TRANSPOSE.format("if i0 < 3 then { j0 -> { i0 -> a0 } }")
     + "sum(<i, r> in M) { i -> sum(<k, b> in r) sum(<l, c> in r) 1.0 }",
     dict(A=coo((5, 5), [0, 0, 1, 2, 2, 2, 2, 3, 4, 4, 4], [2, 3, 0, 0, 1, 3, 4, 2, 1, 2, 3],
                [-0.48, 0.093, 0.475, -0.809, 0.0, -0.887, -0.75, 0.0, 0.0, 0.912, 0.318]))),
    (530198324, TRANSPOSE.format("if not (i0 = 0) then { j0 -> { i0 -> a0 } }")
     + "sum(<i, r> in M) { i -> (sum(<k, b> in r) b * x(k)) + 0.5 }",
     dict(A=coo((3, 3), [0, 1, 1, 2, 2], [1, 1, 2, 0, 1], [-0.632, 0.502, 0.805, 0.597, -0.589]),
          x=np.array([0.755, 0.404, -0.873]))),
    (530195976, TRANSPOSE.format("if 0 < i0 then { j0 -> { i0 -> a0 } }")
     + "sum(<i, r> in M) sum(<k, v> in { i -> sum(<j0, a0> in r) { j0 -> if 1 < j0 then a0 * 2.0 } }) "
       "exp(sum(<k, b> in v) b)",
     dict(A=coo((4, 5), [2, 2, 2, 2, 3, 3, 3], [0, 1, 2, 3, 2, 3, 4],
                [-0.571, -0.168, -0.352, 0.0, 0.859, -0.525, 0.746]))),
    (530194540, TRANSPOSE.format("if i0 < 2 then { j0 -> { i0 -> a0 } }")
     + "let F = sum(<i, r> in M) { i -> sum(<j0, a0> in r) if j0 < 4 then { j0 -> a0 } } in "
       "sum(<i, w> in F) { i -> let t = sum(<k, b> in w) if k < 3 then b in sum(<q, w> in { 0 -> t }) 1.0 }",
     dict(A=coo((2, 5), [0, 0, 0, 1, 1, 1], [0, 1, 4, 0, 1, 4], [-0.872, 0.175, 0.196, -0.744, 0.55, 0.907]))),
    (530194161, f"sum(<i, r> in {FILTERED}) sum(<k, v> in {{ i -> sum(<j0, a0> in r) {{ j0 -> a0 * x(j0) }} }}) "
     "sum(<k, b> in v) sum(<l, c> in v) 1.0",
     dict(A=coo((3, 3), [1], [2], [0.0]).tocsr(), x=np.array([-0.406, 0.917, 0.543]))),
    (530194208, f"let F = sum(<i, r> in {FILTERED}) {{ i -> sum(<j0, a0> in r) {{ j0 -> a0 * x(j0) }} }} in "
     "sum(<i, w> in F) { i -> sum(<k, b> in w) sum(<l, c> in w) 1.0 }",
     dict(A=np.array([[-0.864, 0.0, 0.0, 0.0, 0.0], [0.0] * 5, [0.0] * 5]),
          x=np.array([-0.096, 0.658, 0.96, 0.291, 0.567]))),
    (530198993, "let M = sum(<i0, r0> in A) { i0 -> sum(<j0, a0> in r0) { j0 -> if j0 = 0 then a0 * 2.0 } } in "
     "let F = sum(<i, r> in M) { i -> sum(<j0, a0> in r) { j0 -> a0 * x(j0) } } in "
     "sum(<i, w> in F) { i -> sum(<k, b> in w) cos(b) }",
     dict(A=np.zeros((2, 3)), x=np.array([0.234, 0.223, 0.019]))),
]
IDS = [str(seed) for seed, _, _ in FINDINGS]


def _both(text: str, **inputs):
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)  # compiled code, not a fallback
        compiled = sparsad.compile(text)(**inputs)
    return sparsad.program(text)(**inputs), compiled


def _assert_agree(text, inputs):
    interpreted, compiled = _both(text, **inputs)
    np.testing.assert_allclose(np.asarray(compiled, dtype=float), np.asarray(interpreted, dtype=float),
                               rtol=1e-12, atol=1e-12, err_msg=text)


@pytest.mark.parametrize("seed, text, inputs", FINDINGS, ids=IDS)
def test_the_campaign_finding_compiles_to_the_interpreters_answer(seed, text, inputs):
    _assert_agree(text, inputs)


def test_a_transposed_filtered_matrix_counts_its_rows_not_its_entries():
    # columns 2 and 3 hold entries outside row 1: two rows of M, built from three entries
    A = coo((4, 4), [1, 2, 3, 0], [3, 2, 2, 3], [0.0, 0.0, 0.909, 1.0])
    text = TRANSPOSE.format("if not (i0 = 1) then { j0 -> { i0 -> a0 } }") + "sum(<i, r> in M) 1.0"
    assert _both(text, A=A) == (2.0, 2.0)


@st.composite
def matrices(draw, square: bool):
    """A matrix with empty rows and columns and explicit zeros, in one of scipy's formats or dense."""
    n = draw(st.integers(1, 5))
    m = n if square else draw(st.integers(1, 5))
    stored = np.array(draw(st.lists(st.booleans(), min_size=n * m, max_size=n * m)), dtype=bool).reshape(n, m)
    stored[np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)))] = False  # empty rows
    values = np.array(draw(st.lists(st.sampled_from([0.0, -0.5, 0.25, 1.5]), min_size=n * m,
                                    max_size=n * m))).reshape(n, m)
    rows, cols = np.nonzero(stored)
    matrix = coo((n, m), rows, cols, values[rows, cols])
    kind = draw(st.sampled_from(["csr", "csc", "coo", "dense"]))
    return matrix.toarray() if kind == "dense" else matrix.asformat(kind)


@pytest.mark.parametrize("seed, text, inputs", FINDINGS, ids=IDS)
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_the_finding_agrees_on_random_matrices(seed, text, inputs, data):
    A = data.draw(matrices(square="x" in inputs and "let M" in text))
    drawn = {"A": A}
    if "x" in inputs:
        drawn["x"] = np.linspace(-1.0, 1.0, A.shape[1])
    _assert_agree(text, drawn)
