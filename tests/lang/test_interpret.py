"""The reference interpreter against NumPy/SciPy: every paper program, random and real inputs."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from sparsad.errors import InputError, ProgramError, ShapeError
from sparsad.lang.interpret import evaluate
from sparsad.lang.parse import parse
from sparsad.lang.program import program
from sparsad.lang.values import add, lookup, mul, values_equal
from sparsad.programs import PAPER_PROGRAMS, random_inputs


@pytest.mark.parametrize("name", sorted(PAPER_PROGRAMS))
@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 7), density=st.floats(0.0, 1.0),
       sparse_matrices=st.booleans())
def test_paper_program_matches_numpy(name, seed, n, density, sparse_matrices):
    entry = PAPER_PROGRAMS[name]
    inputs = random_inputs(entry, np.random.default_rng(seed), n=n, density=density,
                           sparse_matrices=sparse_matrices)
    ours = program(entry.text)(**inputs)
    assert values_equal(ours, entry.reference(**inputs), rtol=1e-12, atol=1e-12)


REAL_MATRICES = ["HB/bcspwr01", "HB/ash85", "HB/bcsstk01", "HB/662_bus"]


@pytest.mark.parametrize("matrix_name", REAL_MATRICES)
@pytest.mark.parametrize("name", ["trace", "smvm", "smmm", "batax", "matmul"])
def test_paper_program_on_real_matrices(suitesparse, matrix_name, name):
    A = suitesparse(matrix_name)
    if name in ("trace", "smmm", "matmul") and A.shape[0] != A.shape[1]:
        pytest.skip("needs a square matrix")
    entry = PAPER_PROGRAMS[name]
    rng = np.random.default_rng(7)
    inputs = {}
    for arg, kind in entry.kinds.items():
        if kind == "scalar":
            inputs[arg] = 1.5
        elif kind == "vector":
            inputs[arg] = rng.standard_normal(A.shape[1])
        else:
            inputs[arg] = A if arg in ("A", "M", "M1") else A.T.tocsr()
    ours = program(entry.text)(**inputs)
    reference = entry.reference(**inputs)
    assert values_equal(ours, reference, rtol=1e-10, atol=1e-9)


def test_vector_programs_on_real_sparse_vectors(suitesparse):
    A = suitesparse("HB/bcspwr05")
    rows = [A.getrow(k) for k in range(3)]
    V1 = {int(j): float(v) for j, v in zip(rows[0].indices, rows[0].data)}
    V2 = {int(j): float(v) for j, v in zip(rows[1].indices, rows[1].data)}
    dense1, dense2 = rows[0].toarray().ravel(), rows[1].toarray().ravel()
    assert values_equal(evaluate(parse("V1 + V2"), {"V1": V1, "V2": V2}), dense1 + dense2)
    assert np.isclose(evaluate(parse(PAPER_PROGRAMS["vvd"].text), {"V1": V1, "V2": V2}),
                      dense1 @ dense2)


def test_missing_key_gives_zero_of_the_value_type():
    assert evaluate(parse("V(5)"), {"V": {0: 2.0}}) == 0.0
    assert evaluate(parse("M(5)"), {"M": {0: {1: 2.0}}}) == {}
    assert evaluate(parse("M(5)(1) + 1.0"), {"M": {0: {1: 2.0}}}) == 1.0
    # a shaped input (an array) has no keys outside its shape: that lookup is an error, as compiled
    with pytest.raises(ShapeError, match="key 3 in axis 0 of input 'I', whose extent is 2"):
        evaluate(parse("I(3)"), {"I": np.array([1, 2])}, check_shapes=True)
    assert evaluate(parse("I(3)"), {"I": np.array([1, 2])}) == 0  # physical arrays: a missing key


def test_plus_merges_recursively_and_times_is_outer_product():
    a, b = {0: {0: 1.0}, 1: {2: 2.0}}, {1: {2: 3.0, 3: 4.0}}
    assert add(a, b) == {0: {0: 1.0}, 1: {2: 5.0, 3: 4.0}}
    u, v = {0: 2.0, 2: 3.0}, {1: 5.0}
    assert mul(u, v) == {0: {1: 10.0}, 2: {1: 15.0}}
    assert mul(2.0, u) == {0: 4.0, 2: 6.0}
    assert evaluate(parse("u * v"), {"u": u, "v": v}) == {0: {1: 10.0}, 2: {1: 15.0}}
    assert lookup({}, 3) == {}


@settings(max_examples=50, deadline=None)
@given(st.dictionaries(st.integers(0, 5), st.floats(-10, 10), max_size=5),
       st.dictionaries(st.integers(0, 5), st.floats(-10, 10), max_size=5),
       st.dictionaries(st.integers(0, 5), st.floats(-10, 10), max_size=5))
def test_semiring_laws(a, b, c):
    assert values_equal(add(a, b), add(b, a))
    assert values_equal(add(add(a, b), c), add(a, add(b, c)), rtol=1e-9, atol=1e-9)
    assert values_equal(add(a, {}), a)
    # scaling distributes over +
    assert values_equal(mul(2.5, add(a, b)), add(mul(2.5, a), mul(2.5, b)), rtol=1e-9, atol=1e-9)


def test_sum_folds_from_zero_and_binds_keys():
    assert evaluate(parse("sum(<i, a> in V) a"), {"V": {}}) == {}
    assert program("sum(<i, a> in V) a")(V={}) == 0.0
    assert evaluate(parse("sum(<i, a> in V) { i -> i }"), {"V": {3: 1.0, 5: 2.0}}) == {3: 3, 5: 5}


def test_conditionals_and_comparisons():
    text = "sum(<i, a> in V) if i < 2 then { i -> a } else { i -> -a }"
    assert evaluate(parse(text), {"V": {0: 1.0, 3: 2.0}}) == {0: 1.0, 3: -2.0}
    assert evaluate(parse("sum(<i, a> in V) if not (i = 1) then a"), {"V": {0: 1.0, 1: 5.0}}) == 1.0
    assert program("if b then 1.0")(b=False) == 0.0


def test_range_and_sub_array_keep_positions():
    assert evaluate(parse("(2:5)"), {}) == {2: 2, 3: 3, 4: 4}
    arr = np.array([10.0, 11.0, 12.0, 13.0])
    assert evaluate(parse("arr(1:3)"), {"arr": arr}) == {1: 11.0, 2: 12.0}
    assert evaluate(parse("sum(<p, v> in arr(1:3)) p * v"), {"arr": arr}) == 11.0 + 24.0


def test_functions_and_arithmetic():
    assert evaluate(parse("exp(0.0) + log(1.0) + sigmoid(0.0) + relu(-2.0) + pow(2.0, 3)"), {}) == 1.5 + 8.0
    assert evaluate(parse("7 / 2"), {}) == 3.5
    assert evaluate(parse("-(3) - -2"), {}) == -1
    assert np.isnan(evaluate(parse("sqrt(-1.0)"), {}))
    assert evaluate(parse("log(0.0)"), {}) == float("-inf")


def test_let_and_tupled_let_are_sequential():
    assert evaluate(parse("let <a, b> = <2, a * 3> in a + b"), {}) == 8
    assert evaluate(parse("let x = 2 in let x = x * x in x"), {}) == 4


def test_unbound_variable_and_bad_iteration():
    with pytest.raises(InputError, match="'y'"):
        evaluate(parse("x + y"), {"x": 1.0})
    with pytest.raises(ProgramError, match="line 1, column 1: sum iterates over a dictionary"):
        evaluate(parse("sum(<i, a> in x) a"), {"x": 1.0})
    with pytest.raises(ProgramError, match="condition of if must be a bool"):
        evaluate(parse("if x then 1.0"), {"x": 1.0})


def test_inputs_convert_from_numpy_and_scipy():
    M = sp.csr_matrix(np.array([[0.0, 2.0], [3.0, 0.0]]))
    assert evaluate(parse("M"), {"M": M}) == {0: {1: 2.0}, 1: {0: 3.0}}
    assert evaluate(parse("M"), {"M": np.array([[1.0, 0.0]])}) == {0: {0: 1.0, 1: 0.0}}
    with pytest.raises(InputError, match="dtype"):
        evaluate(parse("M"), {"M": np.array(["a"])})
    with pytest.raises(InputError, match="keys must be integers"):
        evaluate(parse("M"), {"M": {"a": 1.0}})


def test_an_entry_whose_value_is_the_empty_dictionary_is_the_zero_on_both_paths():
    import warnings

    import sparsad

    text = "sum(<k, _> in (sum(<i, a> in x) {i -> {}})) 1.0"  # counts the keys of {i -> {}}: none
    x = np.array([1.0, 2.0, 3.0])
    assert evaluate(parse("sum(<i, a> in x) {i -> {}}"), {"x": x}) == {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the optimized program is {}: nothing to compile
        assert sparsad.program(text)(x=x) == 0.0
        assert sparsad.compile(text)(x=x) == 0.0
