"""opt.positional: a lookup of a unique-keyed comprehension at the key of the entry a loop over
the same source is at becomes that entry's value; any other lookup is left alone."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparsad.lang.interpret import evaluate
from sparsad.lang.parse import parse
from sparsad.lang.printer import to_text
from sparsad.opt.positional import read_by_position

SAME = "let d = sum(<p, j> in I(0:n)) { unique(j) -> V(p) } in sum(<q, k> in I(0:n)) d(k) * W(q)"


def test_a_lookup_at_the_loops_own_key_reads_the_position():
    assert "d(" not in to_text(read_by_position(parse(SAME)))


@pytest.mark.parametrize("text", [
    SAME.replace("in sum(<q, k> in I(0:n))", "in sum(<q, k> in J(0:n))"),  # another source
    SAME.replace("unique(j)", "j"),  # keys not known distinct: entries may add up
    SAME.replace("d(k)", "d(k + 1)"),  # another key
    SAME.replace("I(0:n)) d(k)", "I(1:n)) d(k)"),  # another slice
])
def test_other_lookups_are_left_alone(text):
    expr = parse(text)
    assert read_by_position(expr) == expr


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 9), max_size=8, unique=True), st.integers(0, 2**16))
def test_the_rewrite_keeps_the_value(keys, seed):
    rng = np.random.default_rng(seed)
    n = len(keys)
    inputs = {"I": np.array(keys, dtype=np.int64), "n": n, "V": rng.standard_normal(n),
              "W": rng.standard_normal(n), "X": rng.standard_normal(10)}
    for text in (SAME, SAME.replace("* W(q)", "* X(k)"),
                 "let d = sum(<p, j> in I(0:n)) { unique(j) -> V(p) } in "
                 "sum(<q, k> in I(0:n)) { k -> d(k) + d(k) * X(k) }"):
        expr = parse(text)
        before, after = evaluate(expr, inputs), evaluate(read_by_position(expr), inputs)
        if isinstance(before, dict):
            assert before.keys() == after.keys()
            np.testing.assert_allclose([after[k] for k in before], [before[k] for k in before], rtol=1e-12)
        else:
            assert after == pytest.approx(before, rel=1e-12, abs=1e-12)


# the slice bound once and read by two loops, the second without naming its position
# (common-subexpression elimination of a jvp's tangent row and the primal's row)
BOUND = ("let s = I(0:n) in let d = sum(<p, j> in s) { unique(j) -> V(p) } in "
         "sum(<_, k> in s) d(k) * X(k)")


def test_a_let_bound_slice_read_without_its_position_is_read_by_position():
    rewritten = to_text(read_by_position(parse(BOUND)))
    assert "d(" not in rewritten and "V(pos_" in rewritten


@settings(max_examples=20, deadline=None)
@given(st.lists(st.integers(0, 9), max_size=8, unique=True), st.integers(0, 2**16))
def test_the_rewrite_of_a_let_bound_slice_keeps_the_value(keys, seed):
    rng = np.random.default_rng(seed)
    n = len(keys)
    inputs = {"I": np.array(keys, dtype=np.int64), "n": n, "V": rng.standard_normal(n), "X": rng.standard_normal(10)}
    for text in (BOUND, BOUND.replace("d(k) * X(k)", "{ k -> d(k) }"),
                 BOUND.replace("sum(<_, k> in s) d(k)", "sum(<_, k> in I(1:n)) d(k)")):  # another slice: unchanged
        expr = parse(text)
        before, after = evaluate(expr, inputs), evaluate(read_by_position(expr), inputs)
        if isinstance(before, dict):
            assert before.keys() == after.keys()
            np.testing.assert_allclose([after[k] for k in before], [before[k] for k in before], rtol=1e-12)
        else:
            assert after == pytest.approx(before, rel=1e-12, abs=1e-12)
