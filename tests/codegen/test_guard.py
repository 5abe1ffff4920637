"""The one-function boundary checks (`codegen.guard`) vouch for a call only when every check of
`codegen.bounds` passes; otherwise the node-by-node path raises the FormatError naming the input.
Arrays modified in place after a good call are checked again (nothing is cached between calls)."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import sparsad
from sparsad.codegen import compile_physical
from sparsad.codegen.guard import array_interval, build_guard
from sparsad.errors import FormatError
from sparsad.lang.parse import parse
from sparsad.lang.types import INT, REAL, Dict, Int
from sparsad.programs import PAPER_PROGRAMS

REALS = Dict(Int(dense=True), REAL)
INTS = Dict(Int(dense=True), INT)
SPMV = parse("sum(<_, i> in (0:A_len)) { i -> sum(<p, j> in A_idx(A_pos(i):A_pos(i + 1))) "
             "A_val(p) * x_V(j) }")


def csr_inputs():
    return {"A_len": 3, "A_pos": np.array([0, 2, 3, 5], np.int32),
            "A_idx": np.array([0, 2, 1, 0, 2], np.int32), "A_val": np.arange(1.0, 6.0),
            "x_len": 3, "x_V": np.array([1.0, -1.0, 2.0])}


def matrices(n=40, seed=0):
    rng = np.random.default_rng(seed)
    A = sp.random(n, n, density=0.1, format="csr", random_state=rng)
    B = sp.random(n, n, density=0.1, format="csr", random_state=rng)
    return A, B


def test_array_interval_one_pass():
    for dtype in (np.int32, np.int64):
        a = np.array([5, -3, 9, 0], dtype)
        assert array_interval(a) == (-3, 9)
        assert array_interval(a[:0]) is None
    assert array_interval(np.array([2**62, -(2**62)])) == (-(2**62), 2**62)


@pytest.mark.parametrize("field, value", [
    ("A_idx", np.array([0, 2, 1, 0, 3], np.int32)), ("A_idx", np.array([0, -1, 1, 0, 2], np.int32)),
    ("A_pos", np.array([0, 2, 3, 6], np.int32)), ("A_pos", np.array([0, 2, 3], np.int32)),
    ("A_val", np.arange(1.0, 5.0)), ("A_len", 4), ("A_idx", np.array([0, 2, 1, 0, 2**40])),
    ("A_pos", np.array([0, 2, 3, 5], np.int32)),
])
def test_guard_vouches_exactly_when_the_slow_checks_pass(field, value):
    types = {"A_len": INT, "A_pos": INTS, "A_idx": INTS, "A_val": REALS, "x_len": INT, "x_V": REALS}
    kernel = compile_physical(SPMV, types)
    inputs = csr_inputs()
    inputs[field] = value
    prepared = kernel.prepare(inputs)
    guard = build_guard(kernel)
    try:
        slow = kernel._check_slowly(prepared, True)
    except FormatError:
        assert guard(prepared) is None
    else:
        sizes, extents, _ = guard(prepared)
        assert dict(zip([c.name for c in kernel._workspaces], sizes)) == slow[0] and extents == slow[1]


@pytest.mark.parametrize("kernel_name, wrt", [("smmm", "B"), ("smvm", "X"), ("batax", "x")])
def test_in_place_corruption_after_a_good_call_is_rejected(kernel_name, wrt):
    A, B = matrices()
    n = A.shape[0]
    inputs = {"smmm": dict(A=A, B=B), "smvm": dict(A=A, X=np.ones(n)),
              "batax": dict(beta=1.5, A=A, x=np.ones(n))}[kernel_name]
    api = sparsad.jacobian if kernel_name == "batax" else sparsad.grad
    derivative = api(PAPER_PROGRAMS[kernel_name].text, wrt=wrt)
    stored = {k: v if isinstance(v, float) else sparsad.as_format(v) for k, v in inputs.items()}
    derivative(**stored)
    derivative(**stored)  # steady: the guard is built
    idx = stored["A"]["idx"]
    kept = int(idx[0])
    # a key past n only widens A's column-sum workspace (a dict key: not an error), but a
    # negative one is read outside every array: the same array object, changed in place
    idx[0] = -1
    with pytest.raises(FormatError, match=r"index|A_idx"):
        derivative(**stored)
    idx[0] = kept
    derivative(**stored)


def test_decreasing_row_pointers_of_a_pattern_output_are_rejected():
    A, B = matrices()
    derivative = sparsad.grad(PAPER_PROGRAMS["smmm"].text, wrt="B")
    stored = dict(A=sparsad.as_format(A), B=sparsad.as_format(B))
    expected = derivative(**stored).toarray()
    pos = stored["B"]["pos"]
    row = int(np.argmax(np.diff(pos) > 0)) + 1  # a row end that can move back past its start
    kept = int(pos[row])
    pos[row] = pos[row - 1] - 1 if pos[row - 1] > 0 else -1
    with pytest.raises(FormatError, match="B_pos|index out of range|non-decreasing"):
        derivative(**stored)
    pos[row] = kept
    np.testing.assert_allclose(derivative(**stored).toarray(), expected)


def test_huge_indices_are_compared_exactly():
    """Python ints in the interval arithmetic: no int64 wrap-around can let a bad index pass."""
    program = parse("sum(<_, i> in (0:n)) { i -> x(idx(i) * idx(i)) }")
    kernel = compile_physical(program, {"n": INT, "x": REALS, "idx": INTS})
    good = {"n": 2, "x": np.ones(5), "idx": np.array([1, 2])}
    np.testing.assert_allclose(kernel(**good), [1.0, 1.0])
    with pytest.raises(FormatError, match="x"):
        kernel(**{**good, "idx": np.array([1, 2**32])})  # 2**64 wraps to 0 in int64
