"""The physical definitions mean what the formats store: run them through the interpreter.

evaluate(physical_definition("A"), physical_arrays("A")) must equal to_logical() and the dense
array (missing key == zero), on random tensors of every format and on real SuiteSparse matrices.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings, strategies as st

import sparsad.formats as F

interpret = pytest.importorskip("sparsad.lang.interpret",
                                reason="the reference interpreter sparsad.lang.interpret is not there yet")
values = pytest.importorskip("sparsad.lang.values", reason="sparsad.lang.values is not there yet")
evaluate, values_equal = interpret.evaluate, values.values_equal

MATRIX_FORMATS = ["dense", "dense_col_major", "coo", "csr", "csc", "dcsr", "dcsc", "csf"]
ANY_ORDER_FORMATS = ["dense", "dense_col_major", "coo", "csf"]


def dense_dict(array: np.ndarray):
    """Independent reference: the logical dict of a dense array."""
    if array.ndim == 0:
        return float(array)
    return {i: dense_dict(item) for i, item in enumerate(array)}


def check(stored: F.StoredTensor, reference: np.ndarray, name: str = "A") -> None:
    result = evaluate(stored.physical_definition(name), stored.physical_arrays(name))
    assert values_equal(result, stored.to_logical(), rtol=0, atol=0)
    assert values_equal(result, dense_dict(reference), rtol=0, atol=0)


def random_tensor(rng, shape, density):
    return np.where(rng.random(shape) < density, rng.standard_normal(shape), 0.0)


@settings(max_examples=30, deadline=None)
@given(shape=st.tuples(st.integers(0, 6), st.integers(0, 6)),
       density=st.sampled_from([0.0, 0.2, 0.5, 1.0]), seed=st.integers(0, 2**16),
       fmt=st.sampled_from(MATRIX_FORMATS))
def test_matrix_definitions_evaluate_to_the_matrix(shape, density, seed, fmt):
    matrix = random_tensor(np.random.default_rng(seed), shape, density)
    check(F.as_format(matrix, fmt), matrix)


@settings(max_examples=20, deadline=None)
@given(shape=st.tuples(st.integers(1, 4), st.integers(1, 3), st.integers(1, 4)),
       density=st.sampled_from([0.0, 0.3, 1.0]), seed=st.integers(0, 2**16),
       fmt=st.sampled_from(ANY_ORDER_FORMATS))
def test_three_d_definitions_evaluate_to_the_tensor(shape, density, seed, fmt):
    tensor = random_tensor(np.random.default_rng(seed), shape, density)
    check(F.as_format(tensor, fmt), tensor, "T")


@pytest.mark.parametrize("fmt", ["dense", "coo"])
def test_vector_definitions(fmt):
    vector = random_tensor(np.random.default_rng(0), (9,), 0.4)
    check(F.as_format(vector, fmt), vector, "V")


def test_custom_level_formats_evaluate():
    matrix = random_tensor(np.random.default_rng(1), (5, 4), 0.3)
    compressed_dense = F.Format((F.Compressed(), F.Dense()), name="compressed-dense")
    column_coo = F.Format((F.Compressed(unique=False), F.Singleton()), (1, 0), name="column coo")
    for fmt in (compressed_dense, column_coo):
        check(F.as_format(matrix, fmt), matrix)


def test_coo_with_duplicates_adds_them():
    # a COO format that admits duplicate entries: the definition's + merges them
    dup = F.Format((F.Compressed(unique=False, count="len", crd="row"),
                    F.Singleton(unique=False, crd="col")), name="coo with duplicates")
    stored = F.from_arrays(dup, (2, 2), row=[0, 0, 1], col=[1, 1, 0], val=[1.0, 2.5, 4.0])
    expected = np.array([[0.0, 3.5], [4.0, 0.0]])
    np.testing.assert_array_equal(stored.to_numpy(), expected)
    check(stored, expected)


def test_int32_physical_arrays_evaluate():
    matrix = random_tensor(np.random.default_rng(2), (6, 6), 0.3)
    stored = F.as_format(sp.csr_matrix(matrix))
    assert stored["idx"].dtype == np.int32
    check(stored, matrix)


@pytest.mark.parametrize("matrix_name", ["HB/bcspwr01", "HB/bcspwr02", "HB/bcspwr03", "HB/bcspwr04",
                                         "HB/bcspwr05", "HB/ash85"])
@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "dcsr"])
def test_real_matrices(suitesparse, matrix_name, fmt):
    matrix = suitesparse(matrix_name)
    stored = F.as_format(matrix, fmt)
    result = evaluate(stored.physical_definition("A"), stored.physical_arrays("A"))
    assert values_equal(result, stored.to_logical(), rtol=0, atol=0)
    assert values_equal(result, values.from_input(matrix), rtol=0, atol=0)
    np.testing.assert_array_equal(stored.to_numpy(), matrix.toarray())


def test_real_matrix_dense_formats(suitesparse):
    matrix = suitesparse("HB/bcspwr01")
    for fmt in ("dense", "dense_col_major"):
        check(F.as_format(matrix, fmt), matrix.toarray())
