"""opt.emptiness against the interpreter: `vanishes_on_empty` never claims a body vanishes that
does not, and `entry_condition` is true exactly when the value is not `{}`, on generated
expressions (hypothesis) over the arrays of a CSR matrix with empty rows."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from hypothesis import given, settings, strategies as st

from sparsad.lang.interpret import evaluate
from sparsad.lang.parse import parse
from sparsad.lang.types import DENSE_INT, INT, REAL, Dict
from sparsad.opt.emptiness import TRUE, entry_condition, vanishes_on_empty

ROW = "sum(<p, j> in A_idx(A_pos(i):A_pos(i + 1))) { unique(j) -> A_val(p) }"
TYPES = {"A_pos": Dict(DENSE_INT, INT), "A_idx": Dict(DENSE_INT, INT), "A_val": Dict(DENSE_INT, REAL),
         "x": Dict(DENSE_INT, REAL), "i": INT, "s": REAL, "r": Dict(INT, REAL)}
ARRAYS = {"A_pos", "A_idx", "A_val", "x"}
keys = st.integers(0, 4).map(str)


def rows(depth: int = 2):
    """Dictionaries {j -> real}: the stored row, filters and maps of it, windows, {}."""
    base = st.sampled_from([ROW, "r", "{}"])
    if depth == 0:
        return base
    inner = rows(depth - 1)
    return st.one_of(
        base,
        st.builds(lambda d, c: f"(sum(<j{depth}, a{depth}> in {d}) if j{depth} < {c} then {{ j{depth} -> a{depth} }})", inner, keys),
        st.builds(lambda d, c: f"(sum(<j{depth}, a{depth}> in {d}) {{ j{depth} -> if {c} < j{depth} then a{depth} }})", inner, keys),
        st.builds(lambda d: f"(sum(<j{depth}, a{depth}> in {d}) {{ j{depth} -> a{depth} * x(j{depth}) }})", inner),
        st.builds(lambda d, c: f"(if i < {c} then {d})", inner, keys),
        st.builds(lambda a, b: f"({a} + {b})", inner, inner),
        st.builds(lambda d, s: f"({d} * {s})", inner, st.sampled_from(["2.0", "s", "(if i < 2 then s)"])),
    )


def numbers(row_names=("r",)):
    """Real-valued expressions built from rows: some vanish on an empty r, most do not."""
    row = st.one_of(rows(1), st.sampled_from(list(row_names)))
    leaf = st.one_of(
        st.sampled_from(["1.0", "s", "{}", "(if i < 2 then 1.0)"]),
        st.builds(lambda d: f"(sum(<k, b> in {d}) b * x(k))", row),
        st.builds(lambda d: f"(sum(<k, b> in {d}) 1.0)", row),
        st.builds(lambda d: f"(sum(<k, b> in {d}) cos(b))", row),
        st.builds(lambda d, c: f"(sum(<k, b> in {d}) if k < {c} then b)", row, keys),
        st.builds(lambda d, c: f"{d}({c})", row, keys),
    )
    return st.recursive(leaf, lambda inner: st.one_of(
        st.builds(lambda a, b, op: f"({a} {op} {b})", inner, inner, st.sampled_from(["+", "*", "-"])),
        st.builds(lambda a: f"exp({a})", inner),
        st.builds(lambda a, c: f"(if i < {c} then {a})", inner, keys),
        st.builds(lambda a, b: f"(let t = {a} in t * {b})", inner, inner),
    ), max_leaves=4)


def environments():
    """A 4 x 5 CSR matrix with empty rows and an explicit zero, a row index, an r (maybe {})."""
    A = sp.csr_array((np.array([1.0, 0.0, -2.0, 3.0]), np.array([0, 2, 4, 1]),
                      np.array([0, 2, 2, 3, 4])), shape=(4, 5))
    return st.builds(lambda i, r: {"A_pos": A.indptr.astype(np.int64), "A_idx": A.indices.astype(np.int64),
                                   "A_val": A.data, "x": np.array([0.5, -1.0, 2.0, 0.0, 1.5]),
                                   "i": i, "s": 0.75, "r": r},
                     st.integers(0, 3), st.sampled_from([{}, {1: 2.0}, {0: 0.0, 3: -1.0}]))


def _is_empty(value) -> bool:
    return isinstance(value, dict) and not value


@settings(max_examples=300, deadline=None)
@given(text=numbers(), env=environments())
def test_a_body_said_to_vanish_is_empty_when_its_row_is(text, env):
    body = parse(text)
    if vanishes_on_empty(body, "r"):
        assert _is_empty(evaluate(body, {**env, "r": {}})), text


@settings(max_examples=300, deadline=None)
@given(text=st.one_of(rows(), numbers()), env=environments())
def test_an_entry_condition_holds_exactly_when_the_value_is_not_empty(text, env):
    value = parse(text)
    condition = entry_condition(value, TYPES, lambda name: name in ARRAYS)
    if condition is None:
        return
    expected = not _is_empty(evaluate(value, env))
    assert (condition == TRUE or evaluate(condition, env)) == expected, (text, str(condition))


def test_a_stored_row_is_tested_by_its_positions_and_a_filter_needs_a_loop():
    row = parse(ROW)
    assert str(entry_condition(row, TYPES, lambda name: name in ARRAYS)) == "A_pos(i) < A_pos(i + 1)"
    filtered = parse(f"sum(<j, a> in {ROW}) if j < 2 then {{ j -> a }}")
    assert entry_condition(filtered, TYPES, lambda name: name in ARRAYS) is None
    assert entry_condition(parse("A_val(3)"), TYPES, lambda name: name in ARRAYS) == TRUE
    assert entry_condition(parse("t"), {**TYPES, "t": REAL}, lambda name: name in ARRAYS, frozenset({"t"})) is None


def test_what_vanishes():
    assert vanishes_on_empty(parse("sum(<j, a> in r) a * x(j)"), "r")
    assert vanishes_on_empty(parse("{ i -> sum(<j, a> in r) a }"), "r")
    assert vanishes_on_empty(parse("(sum(<j, a> in r) a) * s"), "r")
    for body in ("1.0", "(sum(<j, a> in r) 1.0) + 1.0", "exp(sum(<j, a> in r) a)", "if i < 2 then 1.0",
                 "(sum(<j, a> in r) a / 2.0) + s", "let r = x in sum(<j, a> in r) a"):
        assert not vanishes_on_empty(parse(body), "r"), body
    assert not vanishes_on_empty(parse("1.0"), "_")
