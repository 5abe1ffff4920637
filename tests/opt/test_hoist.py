"""Loop-invariant dictionaries are built once (hoist) and lookups at a loop's own keys read the
entry directly (fuse): each keeps the interpreter's meaning and makes kernels compile or run faster."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings, strategies as st

import sparsad
from sparsad.lang.interpret import evaluate
from sparsad.lang.parse import parse
from sparsad.lang.printer import to_text
from sparsad.lang.syntax import Let, Sum, walk
from sparsad.lang.values import values_equal
from sparsad.opt.fuse import fuse, lookups_at_own_keys
from sparsad.opt.hoist import hoist_invariant_dictionaries

from reference.generated import real_expr


def test_a_row_of_a_second_operand_is_built_once_per_row_not_per_entry():
    program = parse("sum(<i, r> in S) sum(<j, s> in r) s * (sum(<q, w> in T(i)) { unique(w) -> q })(j)")
    hoisted = hoist_invariant_dictionaries(program)
    inner = hoisted.body  # sum over rows: its body now binds the row before the loop over r
    assert isinstance(hoisted, Sum) and isinstance(inner, Let) and isinstance(inner.body, Sum)
    inputs = {"S": {0: {1: 2.0, 3: 1.0}, 2: {0: 5.0}}, "T": {0: {1: 7.0, 3: 4.0}, 2: {1: 1.0}}}
    assert values_equal(evaluate(hoisted, inputs), evaluate(program, inputs))


def test_dictionaries_that_read_the_loop_or_sit_under_an_if_stay():
    reads_loop = parse("sum(<j, a> in r) a * (sum(<q, w> in T(j)) { unique(w) -> q })(j)")
    assert hoist_invariant_dictionaries(reads_loop) == reads_loop
    guarded = parse("sum(<j, a> in r) if j < 3 then a * (sum(<q, w> in B) { unique(w) -> q })(j)")
    assert hoist_invariant_dictionaries(guarded) == guarded


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(expr=real_expr(reals=["s"], ints=[], depth=4), seed=st.integers(0, 2**31))
def test_hoisting_and_own_key_lookups_keep_the_meaning_of_generated_programs(expr, seed):
    rng = np.random.default_rng(seed)
    inputs = {"x": rng.uniform(-1, 1, 3), "M": rng.uniform(-1, 1, (2, 3)), "s": float(rng.uniform(0.5, 1.5))}
    expected = evaluate(expr, inputs)
    for transformed in (hoist_invariant_dictionaries(expr), lookups_at_own_keys(fuse(expr))):
        assert values_equal(evaluate(transformed, inputs), expected, rtol=1e-10, atol=1e-10), to_text(transformed)


def test_hadamard_of_two_csr_matrices_and_its_gradient_compile_with_a_hoisted_row():
    S = sp.random(40, 30, density=0.2, format="csr", random_state=1)
    T = sp.random(40, 30, density=0.2, format="csr", random_state=2)
    text = "sum(<i, r> in S) sum(<j, s> in r) s * T(i)(j)"
    with warnings.catch_warnings():
        warnings.simplefilter("error", sparsad.FallbackWarning)
        value = sparsad.compile(text)(S=S, T=T)
        grad = sparsad.grad(text, "S")(S=S, T=T)
    assert value == pytest.approx(float(S.multiply(T).sum()), rel=1e-12)
    assert np.allclose(grad.toarray(), T.toarray() * (S != 0).toarray(), rtol=1e-12)


@pytest.mark.parametrize("wrt", ["A", "B"])
def test_jacobians_of_a_matrix_product_with_respect_to_matrices_compile(wrt):
    A = sp.random(4, 3, density=0.5, format="csr", random_state=3)
    B = np.random.default_rng(4).standard_normal((3, 2))
    text = "sum(<i, r> in A) { i -> sum(<j, a> in r) sum(<k, b> in B(j)) { k -> a * b } }"
    with warnings.catch_warnings():
        warnings.simplefilter("error", sparsad.FallbackWarning)
        got = sparsad.jacobian(text, wrt)(A=A, B=B, out_format="dense")
    dense_a = A.toarray()
    if wrt == "A":  # d(AB)_ik / dA_pq = [i = p] B_qk, on A's pattern
        expected = np.einsum("ip,qk->ikpq", np.eye(4), B) * (dense_a != 0)[None, None]
    else:  # d(AB)_ik / dB_pq = A_ip [k = q]
        expected = np.einsum("ip,kq->ikpq", dense_a, np.eye(2))
    assert got.shape == expected.shape and np.allclose(got, expected, rtol=1e-12)



def test_a_copy_under_a_binder_that_rebinds_what_the_dictionary_reads_is_not_replaced():
    """Called directly (without the pipeline's renaming apart), hoist checks binders itself: the
    inner `M(y)(...)` reads the inner `y`, another row than the hoisted one."""
    row = "(sum(<p, q> in M(y)) { p -> q })"
    program = parse(f"let y = 0 in sum(<j, a> in r) a * {row}(j) + (sum(<y, b> in r) b * {row}(j))")
    inputs = {"r": {0: 1.0, 1: 2.0}, "M": {0: {0: 1.0, 1: 2.0}, 1: {0: 3.0, 1: 5.0}}}
    hoisted = hoist_invariant_dictionaries(program)
    assert to_text(hoisted).count("M(y)") == 2  # the outer copy hoisted, the inner one kept
    assert values_equal(evaluate(hoisted, inputs), evaluate(program, inputs))
    for shadowing in (f"let y = 1 in b * {row}(j)", f"let <z, y> = <1, 1> in b * {row}(j)"):
        program = parse(f"let y = 0 in sum(<j, a> in r) a * {row}(j) + (sum(<k, b> in r) {shadowing})")
        assert values_equal(evaluate(hoist_invariant_dictionaries(program), inputs), evaluate(program, inputs))


def test_an_inner_loop_over_a_built_dictionary_is_built_once_per_outer_entry():
    # the sum over the columns c of V does not change `t` (a difference of dictionaries, as a
    # softmax tangent): t is built once per entry of r, not once per entry and column
    program = parse("sum(<i, r> in S) sum(<j, a> in r) sum(<c, v> in V(j)) "
                    "sum(<k, w> in (sum(<q, b> in r) { q -> a * b }) - (sum(<q, b> in T(i)) { q -> b })) "
                    "{ i -> { c -> { k -> v * w } } }")
    hoisted = hoist_invariant_dictionaries(program)
    inner = hoisted.body.body  # inside the loop over r: the let binding t, then the loop over V(j)
    assert isinstance(inner, Let) and isinstance(inner.body, Sum) and inner.body.source == parse("V(j)")
    inputs = {"S": {0: {1: 2.0, 3: 1.0}, 2: {0: 5.0, 1: -1.0}}, "T": {0: {1: 7.0, 2: 4.0}, 2: {1: 1.0}},
              "V": {0: {0: 1.0, 1: 2.0}, 1: {1: -3.0}, 3: {0: 0.5}}}
    assert values_equal(evaluate(hoisted, inputs), evaluate(program, inputs))


def test_sources_iterated_in_place_are_not_hoisted():
    # a row, a range and a sum with unique keys are fused where they are used: nothing to build
    for source in ("T(i)", "(0:n)", "sum(<q, b> in T(i)) { unique(q) -> b }"):
        program = parse(f"sum(<j, a> in r) sum(<k, w> in {source}) a * w")
        assert hoist_invariant_dictionaries(program) == program
