"""Fig. 10 definitions composed with the paper's kernels, compiled, against the interpreter.

`let A = <physical definition> in <logical program>` lowers directly for formats whose keys are
unique (dense, CSR, DCSR, dense row-major, dense and COO vectors): iterating the definition
fuses its loops into the consumer. COO matrices and CSC repeat the row key, so their
definition is built once as a hash map of rows; the fused physical forms the optimizer should
produce for them are also written by hand and compiled.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from sparsad.codegen import compile_physical
from sparsad.lang.interpret import evaluate
from sparsad.lang.parse import parse
from sparsad.lang.syntax import Let
from sparsad.lang.values import values_equal

# the §7 kernels in Logical SDQLite (A a matrix, x/y/V vectors, beta a scalar)
LOGICAL = {
    "batax": "sum(<i, r> in A) sum(<j, v1> in r) sum(<k, v2> in r) { j -> ((beta * v1) * v2) * x(k) }",
    "spmv": "sum(<i, r> in A) { i -> sum(<j, v> in r) v * x(j) }",
    "yAx": "sum(<i, r> in A) sum(<j, v> in r) y(i) * v * x(j)",
    "scale_rows": "sum(<i, r> in A) { i -> sum(<j, v> in r) { j -> v * y(i) } }",
}
FUSABLE = ["csr", "dcsr", "dense"]


def compose(stored: dict, logical: str):
    program = parse(logical)
    for name, tensor in reversed(stored.items()):
        program = Let(name, tensor.physical_definition(name), program)
    return program


# the COO vector only with CSR: every combination is a separate Numba compilation
COMBINATIONS = [(m, "dense") for m in FUSABLE] + [("csr", "coo")]


@pytest.mark.parametrize("kernel", sorted(LOGICAL))
@pytest.mark.parametrize("matrix_format, vector_format", COMBINATIONS)
@settings(max_examples=6, deadline=None)
@given(shape=st.tuples(st.integers(1, 9), st.integers(1, 9), st.floats(0.0, 1.0), st.integers(0, 999)))
def test_composed_programs(make_physical, make_csr, kernel, matrix_format, vector_format, shape):
    rows, cols, density, seed = shape
    a = make_csr(rows, cols, density, seed)
    rng = np.random.default_rng(seed)
    x = np.where(rng.random(cols) < 0.7, rng.standard_normal(cols), 0.0)
    y = rng.standard_normal(rows)
    types, arrays, stored = make_physical(
        {"A": (a, matrix_format), "x": (x, vector_format), "y": (y, "dense")}, {"beta": -0.75})
    program = compose(stored, LOGICAL[kernel])
    result = compile_physical(program, types)(**arrays)
    logical_inputs = {"A": a, "x": x, "y": y, "beta": -0.75}
    if matrix_format == "dense":  # a dense format stores every entry, zeros included
        logical_inputs["A"] = a.toarray()
    expected = evaluate(parse(LOGICAL[kernel]), logical_inputs)
    assert values_equal(result, expected, rtol=1e-12, atol=1e-12)
    assert values_equal(result, evaluate(program, arrays), rtol=1e-12, atol=1e-12)


def test_composed_vvd_reduces_to_one_loop_over_v2(make_physical):
    """§5.3: V1 dense, V2 COO; the derivative `sum(<i, a> in V2) { i -> a }` after composition."""
    rng = np.random.default_rng(5)
    v2 = np.where(rng.random(30) < 0.3, rng.standard_normal(30), 0.0)
    types, arrays, stored = make_physical({"V1": (rng.standard_normal(30), "dense"), "V2": (v2, "coo")})
    program = compose(stored, "sum(<i, a> in V2) { i -> a }")
    kernel = compile_physical(program, types)
    np.testing.assert_array_equal(kernel(**arrays), v2)
    assert kernel.source.count("for ") == 1  # V1's definition is never evaluated


def test_lookup_into_a_definition_materializes_it_once(make_physical, make_csr):
    a = make_csr(8, 6, 0.4, 1)
    x = np.random.default_rng(1).standard_normal(6)
    types, arrays, stored = make_physical({"A": (a, "csr"), "x": (x, "dense")})
    kernel = compile_physical(compose(stored, LOGICAL["spmv"]), types)
    np.testing.assert_allclose(kernel(**arrays), a @ x, rtol=1e-12, atol=1e-12)
    assert [c.kind for c in kernel.loops.containers] == ["workspace"]  # x, built once


@pytest.mark.parametrize("kernel", ["batax", "spmv"])
@pytest.mark.parametrize("matrix_format", ["coo", "csc"])
@settings(max_examples=6, deadline=None)
@given(shape=st.tuples(st.integers(1, 9), st.integers(1, 9), st.floats(0.0, 1.0), st.integers(0, 999)))
def test_repeated_row_keys_build_a_hash_of_rows(make_physical, make_csr, kernel, matrix_format, shape):
    """COO and CSC definitions repeat the row key, so A is built once as a hash map of rows
    (correct but slower than the fused forms the optimizer should produce)."""
    rows, cols, density, seed = shape
    a = make_csr(rows, cols, density, seed)
    x = np.random.default_rng(seed).standard_normal(cols)
    types, arrays, stored = make_physical({"A": (a, matrix_format), "x": (x, "dense")},
                                          {"beta": 2.0})
    compiled = compile_physical(compose(stored, LOGICAL[kernel]), types)
    assert [c.depth for c in compiled.loops.containers if c.kind == "hash"] == [2]
    result = compiled(**arrays)
    expected = a @ x if kernel == "spmv" else 2.0 * (a.T @ (a @ x))
    if kernel == "spmv":
        assert values_equal(result, evaluate(parse(LOGICAL[kernel]), {"A": a, "x": x}), 1e-12, 1e-12)
    dense = np.zeros(rows if kernel == "spmv" else cols)
    dense[: len(result)] = result
    np.testing.assert_allclose(dense, expected, rtol=1e-12, atol=1e-12)


def test_deeper_intermediates_compile(make_physical, make_csr):
    program = parse("let T = sum(<_, i> in (0:n)) { i -> { i -> { i -> 1.0 } } } in "
                    "sum(<i, m> in T) sum(<j, r> in m) sum(<k, v> in r) v * i")
    from sparsad.lang.types import INT

    kernel = compile_physical(program, {"n": INT})
    assert max(c.depth for c in kernel.loops.containers) == 3
    assert kernel(n=5) == evaluate(program, {"n": 5}) == 10.0


# hand-fused physical forms for the formats whose definitions repeat the row key
FUSED = {
    ("coo", "spmv"): "sum(<_, e> in (0:A_len)) { A_row(e) -> A_val(e) * x_V(A_col(e)) }",
    ("csc", "spmv"): "sum(<_, j> in (0:A_len)) sum(<p, i> in A_idx(A_pos(j):A_pos(j + 1))) "
                     "{ i -> A_val(p) * x_V(j) }",
    ("coo", "yAx"): "sum(<_, e> in (0:A_len)) y_V(A_row(e)) * A_val(e) * x_V(A_col(e))",
}


@pytest.mark.parametrize("matrix_format, kernel", [("coo", "spmv"), ("csc", "spmv"), ("coo", "yAx")])
@settings(max_examples=8, deadline=None)
@given(shape=st.tuples(st.integers(1, 9), st.integers(1, 9), st.floats(0.0, 1.0), st.integers(0, 999)))
def test_hand_fused_forms(make_physical, make_csr, matrix_format, kernel, shape):
    rows, cols, density, seed = shape
    a = make_csr(rows, cols, density, seed)
    rng = np.random.default_rng(seed)
    x, y = rng.standard_normal(cols), rng.standard_normal(rows)
    types, arrays, _ = make_physical({"A": (a, matrix_format), "x": (x, "dense"), "y": (y, "dense")})
    program = parse(FUSED[(matrix_format, kernel)])
    result = compile_physical(program, types, shape=(rows,) if kernel == "spmv" else None)(**arrays)
    reference = a @ x if kernel == "spmv" else float(y @ (a @ x))
    np.testing.assert_allclose(result, reference, rtol=1e-12, atol=1e-12)
    assert values_equal(result, evaluate(program, arrays), rtol=1e-12, atol=1e-12)


ROW_LOOKUPS = {
    "iterate_row": "sum(<i, a> in y) sum(<j, v> in A(i)) { j -> a * v }",   # y^T A
    "entry": "sum(<i, a> in y) sum(<j, b> in x) { i -> A(i)(j) * b }",      # A x via lookups
    "copy_rows": "sum(<i, a> in y) { i -> A(i) }",                          # A itself
}


@pytest.mark.parametrize("kernel, matrix_format", [("iterate_row", "csr"), ("entry", "coo"),
                                                   ("copy_rows", "coo")])
def test_lookups_of_rows(make_physical, make_csr, kernel, matrix_format):
    """A looked-up definition is built once (a hash map of rows); rows and entries are read
    from it, absent ones as zero."""
    a = make_csr(7, 5, 0.3, 11)
    rng = np.random.default_rng(11)
    x, y = rng.standard_normal(5), rng.standard_normal(7)
    types, arrays, stored = make_physical({"A": (a, matrix_format), "x": (x, "dense"),
                                           "y": (y, "dense")})
    result = compile_physical(compose(stored, ROW_LOOKUPS[kernel]), types)(**arrays)
    expected = {"iterate_row": y @ a, "entry": a @ x, "copy_rows": a.toarray()}[kernel]
    dense = result.toarray() if hasattr(result, "toarray") else result
    np.testing.assert_allclose(dense, expected, rtol=1e-12, atol=1e-12)
    assert values_equal(result, evaluate(parse(ROW_LOOKUPS[kernel]), {"A": a, "x": x, "y": y}),
                        rtol=1e-12, atol=1e-12)


@settings(max_examples=5, deadline=None)
@given(data=st.data())
def test_generated_programs_composed_with_formats(make_physical, data):
    """Random well-typed programs (sums, lets, ifs, functions, vector intermediates) over a vector
    x and a matrix M in random formats: the kernel agrees with the interpreter. (Each example
    is a Numba compilation, hence few of them; an offline run of 60 found no disagreement.)"""
    from reference.generated import real_expr

    expr = data.draw(real_expr(reals=["s"], ints=[], depth=3))
    fx = data.draw(st.sampled_from(["dense", "coo"]))
    fm = data.draw(st.sampled_from(["csr", "coo", "csc", "dense", "dcsr"]))
    rng = np.random.default_rng(data.draw(st.integers(0, 999)))
    x = np.where(rng.random(3) < 0.7, rng.standard_normal(3), 0.0)
    m = np.where(rng.random((2, 3)) < 0.6, rng.standard_normal((2, 3)), 0.0)
    types, arrays, stored = make_physical({"x": (x, fx), "M": (m, fm)}, {"s": 0.7})
    program = Let("x", stored["x"].physical_definition("x"),
                  Let("M", stored["M"].physical_definition("M"), expr))
    result = compile_physical(program, types)(**arrays)
    assert values_equal(result, evaluate(program, arrays), rtol=1e-9, atol=1e-9)
