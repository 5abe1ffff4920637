"""Nests over compressed levels run as one loop (codegen.position_nests) when the body reads only
the innermost position, and only while the pointer arrays are non-decreasing: checked against
closed forms in float64 on tensors and matrices drawn by hypothesis (empty fibres, empty
tensors), against the nest's own meaning when a caller's pointer array is written in place to a
decreasing one, and on programs that read outer keys (left as lowered)."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sparsad
from sparsad.codegen.ir import Accumulate, AddTo, Assign, For, IfThen, Load, Num, Op, Ref
from sparsad.codegen.position_nests import flat_nests
from sparsad.formats import from_arrays, from_coordinates

LEVELS = {2: "sum(<i, ti> in T) sum(<j, t> in ti) ",
          3: "sum(<i, ti> in T) sum(<j, tj> in ti) sum(<k, t> in tj) ",
          4: "sum(<i, ti> in T) sum(<j, tj> in ti) sum(<k, tk> in tj) sum(<l, t> in tk) "}


def sqnorm(order: int) -> str:
    return LEVELS[order] + "t * t"


def weighted(order: int) -> str:  # reads the first key: not a flat sum
    return LEVELS[order] + "t * t * w(i)"


def own_arrays(tensor):
    fields = {f: (np.array(a) if isinstance(a, np.ndarray) else a) for f, a in tensor.fields.items()}
    return from_arrays(tensor.format, tensor.shape, **fields)


def nest_sum(T, weights=None) -> float:
    """sum t * t (* w(i)) by walking T's CSF levels as the nest does (pointers as they are)."""
    total = 0.0

    def walk(depth: int, position: int, first_key: int):
        nonlocal total
        if depth == T.ndim:
            t = T["val"][position]
            total += t * t * (weights[first_key] if weights is not None else 1.0)
            return
        start, end = (0, T["len"]) if depth == 0 else (T[f"pos{depth}"][position], T[f"pos{depth}"][position + 1])
        for child in range(start, end):
            walk(depth + 1, child, T["idx0"][child] if depth == 0 else first_key)

    walk(0, 0, -1)
    return total


@st.composite
def tensors(draw):
    order = draw(st.sampled_from([2, 3, 4]))
    shape = tuple(draw(st.integers(1, 5)) for _ in range(order))
    seed = draw(st.integers(0, 2**32 - 1))
    density = draw(st.sampled_from([0.0, 0.1, 0.5, 1.0]))
    rng = np.random.default_rng(seed)
    coords = np.array(np.nonzero(rng.random(shape) < density), dtype=np.int64).reshape(order, -1)
    return coords, rng.standard_normal(coords.shape[1]), shape, draw(st.sampled_from(["coo", "csf"]))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tensors())
def test_flat_sums_and_gradients_match_closed_forms(case):
    coords, values, shape, fmt = case
    T = from_coordinates(coords, values, shape, fmt)
    order = len(shape)
    value = sparsad.compile(sqnorm(order))
    for _ in range(2):
        assert value(T=T) == pytest.approx(float(values @ values), rel=1e-12, abs=1e-300)
    if order >= 3 and T.nnz:
        grad = sparsad.grad(sqnorm(order), wrt="T")
        for _ in range(2):
            np.testing.assert_array_equal(grad(T=T).values, 2 * T.values)


@pytest.mark.parametrize("order", [3, 4])
def test_sums_over_all_leaves_are_one_loop_and_key_reading_programs_keep_the_loop_they_read(order):
    rng = np.random.default_rng(order)
    shape = (4, 3, 3, 5)[:order]
    coords = np.array(np.nonzero(rng.random(shape) < 0.5), dtype=np.int64)
    T = from_coordinates(coords, rng.standard_normal(coords.shape[1]), shape, "csf")
    w = rng.standard_normal(shape[0])
    for program in (sparsad.compile(sqnorm(order)), sparsad.grad(sqnorm(order), wrt="T")):
        program(T=T)
        assert "_fl0_ok" in program.show("code")
    keyed = sparsad.compile(weighted(order))
    assert keyed(T=T, w=w) == pytest.approx(nest_sum(T, w), rel=1e-12)
    # w(i) is read: the loop over i stays, the levels below it (which read no key) may be one loop
    source = keyed.show("code").splitlines()
    top = next(k for k, line in enumerate(source) if line.strip().startswith("for i_"))
    flats = [line for line in source[top:] if "_fl0_ok = False" in line]
    assert all(len(line) - len(line.lstrip()) > len(source[top]) - len(source[top].lstrip()) for line in flats)


def test_a_csr_sum_of_squares_is_one_loop():
    A = sp.random(30, 20, density=0.2, format="csr", random_state=3)
    value = sparsad.compile(sqnorm(2))
    assert value(T=A) == pytest.approx(float(A.data @ A.data), rel=1e-12)
    assert "_fl0_ok" in value.show("code")


@pytest.mark.parametrize("order", [2, 3, 4])
def test_pointers_written_in_place_to_decreasing_ones_run_the_nest(order):
    rng = np.random.default_rng(20 + order)
    shape = (6, 4, 3, 5)[:order]
    coords = np.array(np.nonzero(rng.random(shape) < 0.6), dtype=np.int64)
    T = own_arrays(from_coordinates(coords, rng.standard_normal(coords.shape[1]), shape, "csf"))
    value = sparsad.compile(sqnorm(order))
    for _ in range(2):
        assert value(T=T) == pytest.approx(float(T.values @ T.values), rel=1e-12)
    for depth in range(1, order):
        pos = T[f"pos{depth}"]
        saved = pos.copy()
        run = int(np.argmax(np.diff(pos) > 0))  # a non-empty run: swap its end with the next one
        if run + 2 >= len(pos) or pos[run + 2] == pos[run + 1]:
            continue
        pos[run + 1], pos[run + 2] = pos[run + 2], pos[run + 1]  # now decreasing, still in bounds
        for _ in range(2):  # what the nested loops read on these pointers, not a flat sum
            try:
                got = value(T=T)
            except sparsad.errors.SparsadError:
                continue  # refused as invalid: also never a stale or flat answer
            assert got == pytest.approx(nest_sum(T), rel=1e-12)
        pos[:] = saved
        assert value(T=T) == pytest.approx(float(T.values @ T.values), rel=1e-12)


def test_the_rewrite_keeps_a_nest_whose_body_reads_an_outer_variable_or_writes_what_is_read_after():
    pos = ("pos", Ref("i"))
    end = Load("pos", Op("+", Ref("i"), Num(1)))
    reads_outer = (For("i", Num(0), Ref("n"), (For("r", Load(*pos), end,
                                                 (Accumulate("out", (), Op("*", Load("v", Ref("r")), Ref("i"))),)),)),)
    assert flat_nests(reads_outer, "scalar", {}) == reads_outer
    # an outer assignment read after the nest: kept
    keeps = (For("i", Num(0), Ref("n"), (Assign("x", Ref("i")), For("r", Load(*pos), end,
                                                                     (AddTo("s", Load("v", Ref("r"))),)))),
             Accumulate("out", (), Ref("x")))
    assert flat_nests(keeps, "scalar", {}) == keeps
    # a flat one: the checks, then the loop, then the nest when they fail
    flat = (For("i", Num(0), Ref("n"), (Assign("x", Ref("i")), For("r", Load(*pos), end,
                                                                    (AddTo("s", Load("v", Ref("r"))),)))),
            Accumulate("out", (), Ref("s")))
    rewritten = flat_nests(flat, "scalar", {})
    assert rewritten != flat and isinstance(rewritten[-2], IfThen) and rewritten[-2].then == (flat[0],)
