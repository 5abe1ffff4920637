"""Malformed inputs are rejected before a kernel runs; unsupported programs say so; caching.

Also covers the constructs the paper's kernels do not use (if, minus, functions, outer
products, int results, guarded lookups), each against the interpreter.
"""
from __future__ import annotations

import numpy as np
import pytest

from sparsad.codegen import compile_physical, kernel_cache_dir, lower
from sparsad.errors import DTypeError, FormatError, InputError, ProgramTypeError, UnsupportedError
from sparsad.lang.interpret import evaluate
from sparsad.lang.parse import parse
from sparsad.lang.program import program
from sparsad.lang.types import INT, REAL, Dict, Int
from sparsad.lang.values import values_equal

SPMV = parse("sum(<_, i> in (0:A_len)) { i -> sum(<p, j> in A_idx(A_pos(i):A_pos(i + 1))) "
             "A_val(p) * x_V(j) }")
VVD = parse("sum(<_, i> in (0:V2_len)) { V2_row(i) -> V2_val(i) }")

REALS = Dict(Int(dense=True), REAL)
INTS = Dict(Int(dense=True), INT)


def csr_inputs():
    return {"A_len": 3, "A_pos": np.array([0, 2, 3, 5], np.int32),
            "A_idx": np.array([0, 2, 1, 0, 2], np.int32), "A_val": np.arange(1.0, 6.0),
            "x_len": 3, "x_V": np.array([1.0, -1.0, 2.0])}


@pytest.fixture(scope="module")
def spmv():
    types = {"A_len": INT, "A_pos": INTS, "A_idx": INTS, "A_val": REALS, "x_len": INT, "x_V": REALS}
    return compile_physical(SPMV, types)


def test_valid_csr(spmv):
    np.testing.assert_allclose(spmv(**csr_inputs()), [5.0, -3.0, 14.0])


@pytest.mark.parametrize("field, value, named", [
    ("A_idx", np.array([0, 2, 1, 0, 3], np.int32), "x_V"),      # column 3 of a 3-vector
    ("A_idx", np.array([0, -1, 1, 0, 2], np.int32), "x_V"),     # negative column
    ("A_pos", np.array([0, 2, 3, 6], np.int32), "A_idx"),       # row end past the entries
    ("A_pos", np.array([0, 2, 3], np.int32), "A_pos"),          # too short for A_len rows
    ("A_val", np.arange(1.0, 5.0), "A_val"),                   # fewer values than entries
    ("A_len", 4, "A_pos"),
])
def test_out_of_range_indices_raise_format_error(spmv, field, value, named):
    inputs = csr_inputs()
    inputs[field] = value
    with pytest.raises(FormatError, match=named):
        spmv(**inputs)


def test_output_keys_outside_the_declared_extent():
    types = {"V2_len": INT, "V2_row": Dict(Int(dense=True), Int(extent=4)), "V2_val": REALS}
    kernel = compile_physical(VVD, types)
    good = {"V2_len": 2, "V2_row": np.array([0, 3]), "V2_val": np.array([1.0, 2.0])}
    np.testing.assert_array_equal(kernel(**good), [1.0, 0.0, 0.0, 2.0])
    with pytest.raises(FormatError, match="result"):
        kernel(**{**good, "V2_row": np.array([0, 4])})


def test_unknown_output_keys_are_checked_inside_the_kernel():
    # keys read from an int-valued intermediate have no interval: the write is guarded
    program = parse("let c = sum(<_, i> in (0:n)) { i -> idx(i) } in "
                    "sum(<k, v> in c) { c(k) -> val(k) }")
    types = {"n": INT, "idx": INTS, "val": REALS}
    kernel = compile_physical(program, types, output="dense", shape=(3,))
    inputs = {"n": 2, "idx": np.array([2, 0]), "val": np.array([1.0, 5.0])}
    np.testing.assert_array_equal(kernel(**inputs), [5.0, 0.0, 1.0])
    with pytest.raises(FormatError, match="outside"):
        kernel(**{**inputs, "idx": np.array([2, 7])})


def test_guarded_lookup_reads_zero_outside_like_the_interpreter():
    program = parse("let c = sum(<_, i> in (0:n)) { i -> idx(i) } in sum(<k, v> in c) x(v) * 2.0")
    types = {"n": INT, "idx": INTS, "x": REALS}
    kernel = compile_physical(program, types)
    inputs = {"n": 3, "idx": np.array([1, 9, -2]), "x": np.array([3.0, 4.0])}
    assert "rt.load(x" in kernel.source
    assert kernel(**inputs) == evaluate(program, inputs) == 8.0


def test_input_errors(spmv):
    inputs = csr_inputs()
    with pytest.raises(InputError, match="missing x_V"):
        spmv(**{k: v for k, v in inputs.items() if k != "x_V"})
    with pytest.raises(InputError, match="unexpected y"):
        spmv(**inputs, y=1.0)
    with pytest.raises(DTypeError, match="A_idx"):
        spmv(**{**inputs, "A_idx": inputs["A_idx"].astype(float)})
    with pytest.raises(InputError, match="1-D"):
        spmv(**{**inputs, "x_V": np.ones((3, 1))})
    with pytest.raises(InputError, match="output="):
        compile_physical(SPMV, spmv.input_types, output="fancy")


@pytest.mark.parametrize("text, types, match", [
    ("sum(<i, r> in M) r", {"M": Dict(INT, Dict(INT, REAL))}, "1-D arrays"),
    ("{}", {}, "nothing to compile"),
])
def test_unsupported_programs_name_the_construct(text, types, match):
    with pytest.raises(UnsupportedError, match=match):
        compile_physical(parse(text), types)


def test_a_sum_of_bool_dictionaries_is_a_type_error_on_every_path():
    # bools do not add: the interpreter once added them as ints where compiled code read reals
    text = "let d = sum(<_, i> in (0:n)) { i -> i < 2 } in sum(<k, r> in d) if r then 1.0"
    with pytest.raises(ProgramTypeError, match="dictionary of numbers"):
        compile_physical(parse(text), {"n": INT})
    with pytest.raises(ProgramTypeError, match="dictionary of numbers"):
        program(text)(n=3)


@pytest.mark.parametrize("text", [
    # a depth-3 intermediate, iterated (once unsupported: "deeper than two levels")
    "let d = sum(<_, i> in (0:n)) { i -> { i -> { i -> 1.0 * i } } } in sum(<k, r> in d) sum(<l, q> in r) q",
    # a row of a dictionary expression (once unsupported: "a lookup that yields a dictionary")
    "sum(<_, i> in (0:n)) sum(<j, v> in ((0:n) * (0:n))(i)) v",
    "sum(<_, i> in (0:n)) { i -> sum(<j, v> in ((0:n) * (0:n))(i)) { j -> v } }",
])
@pytest.mark.parametrize("n", [0, 1, 4])
def test_deep_and_looked_up_intermediates_compile_and_agree_with_the_interpreter(text, n):
    kernel = compile_physical(parse(text), {"n": INT})
    assert values_equal(kernel(n=n), evaluate(parse(text), {"n": n}))


def test_kernels_are_cached_in_memory_and_on_disk(spmv):
    types = dict(spmv.input_types)
    assert compile_physical(SPMV, types) is spmv
    assert compile_physical(SPMV, types, output="dict") is not spmv
    spmv(**csr_inputs())
    module = spmv.function.py_func.__module__
    files = list(kernel_cache_dir().glob(f"k_{module.rsplit('_', 1)[-1]}.py"))
    assert len(files) == 1 and files[0].read_text() == spmv.source
    assert spmv.show() == spmv.source and "def kernel(" in spmv.source


CONSTRUCTS = [
    # if / not / comparisons, minus and negation, functions, int results
    "sum(<_, i> in (0:n)) { i -> if idx(i) < 2 then -x(i) else exp(x(i)) - 1.0 }",
    "sum(<_, i> in (0:n)) if not (i = 2) then { i -> sigmoid(x(i)) + pow(x(i), 2.0) }",
    "sum(<_, i> in (0:n)) { idx(i) -> 1 }",
    "sum(<_, i> in (0:n)) idx(i) * idx(i)",
    "sum(<_, i> in (0:n)) { i -> x(i) } - sum(<_, j> in (0:n)) { idx(j) -> 2.0 * x(j) }",
    # outer product of two vectors built from arrays, and a scalar times a nested dict
    "let u = sum(<_, i> in (0:n)) { idx(i) -> x(i) } in u * u",
    "(sum(<_, i> in (0:n)) x(i)) * sum(<_, i> in (0:n)) { i -> { idx(i) -> relu(x(i)) } }",
    # a let of a scalar sum used in a loop, and a sum over a singleton
    "let s = sum(<_, i> in (0:n)) x(i) * x(i) in sum(<_, i> in (0:n)) { i -> x(i) / s }",
    "sum(<k, v> in { 2 -> 3.0 }) { k -> v * x(k) }",
]


# each (program, output) pair is one Numba compilation: typed-dict outputs (slow to compile)
# only where they add something (nested keys, int values, an outer product)
CASES = [(text, "auto") for text in CONSTRUCTS] + [(CONSTRUCTS[i], "dict") for i in (2, 5, 6)]


@pytest.mark.parametrize("text, output", CASES)
def test_constructs_against_the_interpreter(text, output):
    program = parse(text)
    types = {"n": INT, "x": REALS, "idx": Dict(Int(dense=True), Int(extent=5))}
    rng = np.random.default_rng(len(text))
    inputs = {"n": 5, "x": rng.standard_normal(5), "idx": rng.integers(0, 5, 5)}
    result = compile_physical(program, types, output=output)(**inputs)
    assert values_equal(result, evaluate(program, inputs), rtol=1e-12, atol=1e-12)


def test_lowering_of_spmv_accumulates_the_row_in_a_local():
    types = {"A_len": INT, "A_pos": INTS, "A_idx": INTS, "A_val": REALS, "x_len": INT, "x_V": REALS}
    loops = lower(SPMV, types)
    assert loops.depth == 1 and loops.leaf == "real" and not loops.containers
    kernel = compile_physical(SPMV, types)
    assert "acc_" in kernel.source and kernel.source.count("out[") == 1


def test_append_buffers_rerun_when_full_and_remember_the_size():
    # every pair of entries of a row gives a triplet: far more than the stored values
    program = parse("sum(<_, i> in (0:A_len)) let r = sum(<p, j> in A_idx(A_pos(i):A_pos(i + 1))) "
                    "{ j -> A_val(p) } in sum(<i1, v1> in r) { i1 -> sum(<i2, v2> in r) "
                    "{ i2 -> v1 * v2 } }")
    types = {"A_len": INT, "A_pos": INTS, "A_idx": Dict(Int(dense=True), Int(extent=40)),
             "A_val": REALS}
    kernel = compile_physical(program, types, output="csc")
    dense = np.random.default_rng(0).standard_normal((3, 40))
    import scipy.sparse as sp

    a = sp.csr_matrix(dense)
    inputs = {"A_len": 3, "A_pos": a.indptr, "A_idx": a.indices, "A_val": a.data}
    first = kernel(**inputs)
    assert kernel._capacity_hint == 3 * 40 * 40
    np.testing.assert_allclose(first.toarray(), dense.T @ dense, rtol=1e-12, atol=1e-12)
    assert first.format == "csc" and first.has_sorted_indices
    np.testing.assert_allclose(kernel(**inputs).toarray(), first.toarray())


def test_numba_csr_assembly_matches_scipy():
    import scipy.sparse as sp
    from hypothesis import given, settings, strategies as st

    from sparsad.codegen.runtime import coo_to_csr

    @settings(max_examples=40, deadline=None)
    @given(st.integers(1, 8), st.integers(1, 50), st.integers(0, 200), st.integers(0, 999))
    def check(n, m, count, seed):
        rng = np.random.default_rng(seed)
        rows, cols = rng.integers(0, n, count), rng.integers(0, m, count)
        values = rng.standard_normal(count)
        indptr, indices, data = coo_to_csr(count, rows, cols, values, n, m)
        ours = sp.csr_matrix((data, indices, indptr), shape=(n, m))
        assert ours.has_sorted_indices and ours.nnz == len({(r, c) for r, c in zip(rows, cols)})
        reference = sp.coo_matrix((values, (rows, cols)), shape=(n, m)).toarray()
        np.testing.assert_allclose(ours.toarray(), reference, rtol=1e-12, atol=1e-12)

    check()


def test_empty_inputs(spmv):
    empty = {"A_len": 0, "A_pos": np.zeros(1, np.int32), "A_idx": np.zeros(0, np.int32),
             "A_val": np.zeros(0), "x_len": 0, "x_V": np.zeros(0)}
    assert spmv(**empty).shape == (0,)
    rows = {**csr_inputs(), "A_pos": np.zeros(4, np.int32), "A_idx": np.zeros(0, np.int32),
            "A_val": np.zeros(0)}
    np.testing.assert_array_equal(spmv(**rows), np.zeros(3))


def test_unused_inputs_are_not_parameters_and_validate_false_runs_the_same(spmv):
    types = {**spmv.input_types, "M": Dict(INT, Dict(INT, REAL)), "unused": REALS}
    kernel = compile_physical(SPMV, types)
    assert "M" not in kernel.loops.params and "unused" not in kernel.source
    inputs = csr_inputs()
    np.testing.assert_array_equal(kernel(**inputs, unused=np.ones(2)), spmv(**inputs))
    np.testing.assert_array_equal(kernel.run(inputs, validate=False), spmv(**inputs))


def test_inputs_whose_names_cannot_be_parameters():
    # primes (forward-mode AD), keywords, builtins and generated names are renamed inside
    program = parse("sum(<_, i> in (0:n)) { i -> x'(i) * max + out }")
    types = {"n": INT, "x'": REALS, "max": REAL, "out": REAL}
    kernel = compile_physical(program, types)
    inputs = {"n": 3, "x'": np.array([1.0, 2.0, 3.0]), "max": 2.0, "out": 0.5}
    np.testing.assert_allclose(kernel(**inputs), [2.5, 4.5, 6.5])
    assert "in_xp" in kernel.source and "in_max" in kernel.source


def test_errors_name_the_inputs_as_the_caller_named_them():
    program = parse("sum(<_, i> in (0:n)) { i -> x'(idx(i)) }")
    types = {"n": INT, "x'": REALS, "idx": INTS}
    kernel = compile_physical(program, types)
    with pytest.raises(FormatError, match="x' at 5"):
        kernel(**{"n": 2, "x'": np.ones(3), "idx": np.array([0, 5])})


def test_pattern_output_rejects_overlapping_rows():
    program = parse("sum(<_, i> in (0:A_len)) { i -> sum(<p, j> in A_idx(A_pos(i):A_pos(i + 1))) "
                    "{ j -> A_val(p) * 2.0 } }")
    types = {"A_len": INT, "A_pos": INTS, "A_idx": Dict(Int(dense=True), Int(extent=3)),
             "A_val": REALS}
    kernel = compile_physical(program, types)
    assert kernel.output == "pattern"
    inputs = {k: csr_inputs()[k] for k in ("A_len", "A_pos", "A_idx", "A_val")}
    np.testing.assert_allclose(kernel(**inputs).toarray(),
                               [[2.0, 0.0, 4.0], [0.0, 6.0, 0.0], [8.0, 0.0, 10.0]])
    with pytest.raises(FormatError, match="non-decreasing"):
        kernel(**{**inputs, "A_pos": np.array([0, 3, 2, 5], np.int32)})
