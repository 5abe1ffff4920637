"""Loop-invariant entry tests move out of the loops (codegen.invariant_tests), and only those."""
from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings, strategies as st

import sparsad
from sparsad.codegen.invariant_tests import hoist_entry_tests
from sparsad.codegen.ir import Accumulate, Assign, Fill, For, ForItems, IfThen, Num, Ref
from sparsad.errors import FallbackWarning


def _test(flag: str, container: str):
    return [Assign(flag, Num(False)), ForItems("k", "v", container, (Assign(flag, Num(True)),))]


def _write(container: str, key: str):
    return Accumulate(container, (Ref(key),), Num(1.0))


def test_an_invariant_test_leaves_both_loops_and_the_loops_go_inside_its_conditional():
    inner = For("o", Num(0), Num(3), (*_test("ne", "z"), IfThen(Ref("ne"), (_write("h", "o"),))))
    outer = For("f", Num(0), Num(4), (inner,))
    (row,) = hoist_entry_tests((For("i", Num(0), Num(2), (Fill("z"), outer)),))
    assert row.body[:3] == (Fill("z"), *_test("ne", "z"))
    conditional = row.body[3]
    assert isinstance(conditional, IfThen) and conditional.cond == Ref("ne")
    assert conditional.then == (For("f", Num(0), Num(4), (For("o", Num(0), Num(3), (_write("h", "o"),)),)),)


def test_a_test_of_a_container_the_loop_writes_or_refills_stays_in_the_loop():
    for change in (_write("z", "o"), Fill("z")):
        inner = For("o", Num(0), Num(3), (change, *_test("ne", "z"), IfThen(Ref("ne"), (_write("h", "o"),))))
        body = (For("i", Num(0), Num(2), (inner,)),)
        assert hoist_entry_tests(body) == body


def test_a_test_of_a_row_the_loop_binds_stays_in_the_loop():
    inner = ForItems("q", "row", "M", (*_test("ne", "row"), IfThen(Ref("ne"), (_write("h", "q"),))))
    body = (For("i", Num(0), Num(2), (inner,)),)
    assert hoist_entry_tests(body) == body


def test_top_level_loops_keep_their_shape():
    body = (For("o", Num(0), Num(3), (*_test("ne", "z"), IfThen(Ref("ne"), (_write("h", "o"),)))),)
    assert hoist_entry_tests(body) == body


PROGRAMS = [
    # z's entry test guards writes inside the f and o loops; it does not depend on them
    """sum(<i, r> in A)
  let h = sum(<j, a> in r) a * X(j) in
  let z = sum(<f, hf> in h) if 0 < f then hf * W(f) in
  let h2 = sum(<f, _> in h) sum(<_, o> in (0:2)) { unique(f) -> z(o) * W(f)(o) } in
  sum(<f, v> in h2) cos(v)""",
    # the tested row changes with the loop: the test must stay inside
    """sum(<i, r> in A)
  let h = sum(<j, a> in r) if j < 2 then { j -> a } in
  sum(<f, _> in (0:3)) let t = sum(<k, b> in h) if k < f then b in sum(<q, w> in { f -> t }) 1.0""",
]


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**31 - 1), density=st.sampled_from([0.0, 0.2, 0.6]))
def test_compiled_code_with_hoisted_tests_agrees_with_the_interpreter(seed, density):
    rng = np.random.default_rng(seed)
    A = sp.random(5, 6, density=density, format="csr", random_state=rng)
    A.data[rng.random(A.nnz) < 0.3] = 0.0  # stored zeros are entries
    X, W = rng.standard_normal((6, 3)), rng.standard_normal((3, 2))
    X[:, rng.random(3) < 0.3] = 0.0
    for text in PROGRAMS:
        inputs = {"A": A, "X": X, "W": W} if "W" in text else {"A": A}
        with warnings.catch_warnings():
            warnings.simplefilter("error", FallbackWarning)
            compiled = sparsad.compile(text)(**inputs)
        np.testing.assert_allclose(compiled, sparsad.program(text)(**inputs), rtol=1e-12, atol=1e-12,
                                   err_msg=text)
