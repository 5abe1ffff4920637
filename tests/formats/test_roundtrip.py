"""Conversions: numpy / scipy / torch / pydata into every format and back, and logical dicts."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings, strategies as st

import sparsad.formats as F
from sparsad.errors import FormatError, InputError

MATRIX_FORMATS = ["dense", "dense_col_major", "coo", "csr", "csc", "dcsr", "dcsc", "csf"]
ANY_ORDER_FORMATS = ["dense", "dense_col_major", "coo", "csf"]


def random_tensor(rng, shape, density, dtype=np.float64):
    values = rng.standard_normal(shape).astype(dtype)
    return np.where(rng.random(shape) < density, values, 0).astype(dtype)


def as_dict(array: np.ndarray) -> dict:
    """Independent reference: the logical dict of a dense array (every entry)."""
    if array.ndim == 1:
        return {i: float(x) for i, x in enumerate(array)}
    return {i: as_dict(row) for i, row in enumerate(array)}


def prune(d):
    """Drop zero leaves and empty dicts (missing key == zero)."""
    if isinstance(d, dict):
        out = {k: prune(x) for k, x in d.items()}
        return {k: x for k, x in out.items() if x != {} and x != 0}
    return d


shapes_2d = st.tuples(st.integers(0, 7), st.integers(0, 7))
densities = st.sampled_from([0.0, 0.1, 0.4, 1.0])


@settings(max_examples=30, deadline=None)
@given(shape=shapes_2d, density=densities, seed=st.integers(0, 2**16),
       fmt=st.sampled_from(MATRIX_FORMATS), scipy_out=st.sampled_from(F.SCIPY_FORMATS))
def test_matrix_round_trips(shape, density, seed, fmt, scipy_out):
    matrix = random_tensor(np.random.default_rng(seed), shape, density)
    stored = F.as_format(matrix, fmt)
    assert stored.shape == shape
    np.testing.assert_array_equal(stored.to_numpy(), matrix)
    out = stored.to_scipy(scipy_out)
    assert out.format == scipy_out
    np.testing.assert_array_equal(out.toarray(), matrix)
    assert out.nnz == np.count_nonzero(matrix) or scipy_out == "dia"
    assert prune(stored.to_logical()) == prune(as_dict(matrix)) if matrix.size else True
    # through scipy and back: same array, same stored pattern
    again = F.as_format(sp.csr_matrix(matrix), fmt)
    np.testing.assert_array_equal(again.to_numpy(), matrix)


@settings(max_examples=25, deadline=None)
@given(shape=st.tuples(st.integers(1, 4), st.integers(1, 4), st.integers(1, 4)),
       density=densities, seed=st.integers(0, 2**16), fmt=st.sampled_from(ANY_ORDER_FORMATS))
def test_three_d_round_trips(shape, density, seed, fmt):
    tensor = random_tensor(np.random.default_rng(seed), shape, density)
    stored = F.as_format(tensor, fmt)
    np.testing.assert_array_equal(stored.to_numpy(), tensor)
    assert prune(stored.to_logical()) == prune(as_dict(tensor))
    coords, values = stored.coordinates()
    np.testing.assert_array_equal(tensor[tuple(coords)], values)


@pytest.mark.parametrize("fmt", ["dense", "coo", "csf"])
def test_vectors_round_trip(fmt):
    vector = np.array([0.0, 1.5, 0.0, -2.0, 0.0])
    stored = F.as_format(vector, fmt)
    np.testing.assert_array_equal(stored.to_numpy(), vector)
    expected = as_dict(vector) if fmt == "dense" else {1: 1.5, 3: -2.0}
    assert stored.to_logical() == expected


def test_csf_and_coo_three_d_arrays():
    tensor = np.zeros((3, 4, 2))
    tensor[0, 1, 1] = 1.0
    tensor[0, 3, 0] = 2.0
    tensor[2, 1, 0] = 3.0
    tensor[2, 1, 1] = 4.0
    csf = F.as_format(tensor, "csf")
    assert csf["len"] == 2
    np.testing.assert_array_equal(csf["idx0"], [0, 2])
    np.testing.assert_array_equal(csf["pos1"], [0, 2, 3])
    np.testing.assert_array_equal(csf["idx1"], [1, 3, 1])
    np.testing.assert_array_equal(csf["pos2"], [0, 1, 2, 4])
    np.testing.assert_array_equal(csf["idx2"], [1, 0, 0, 1])
    np.testing.assert_array_equal(csf["val"], [1, 2, 3, 4])
    coo3 = F.as_format(tensor, "coo")
    np.testing.assert_array_equal(coo3["idx0"], [0, 0, 2, 2])
    np.testing.assert_array_equal(coo3["idx1"], [1, 3, 1, 1])
    np.testing.assert_array_equal(coo3["idx2"], [1, 0, 0, 1])
    assert csf.to_logical() == coo3.to_logical() == {0: {1: {1: 1.0}, 3: {0: 2.0}},
                                                     2: {1: {0: 3.0, 1: 4.0}}}


def test_csr_arrays_match_scipy():
    matrix = random_tensor(np.random.default_rng(1), (6, 5), 0.4)
    stored = F.as_format(matrix, "csr")
    reference = sp.csr_matrix(matrix)
    np.testing.assert_array_equal(stored["pos"], reference.indptr)
    np.testing.assert_array_equal(stored["idx"], reference.indices)
    np.testing.assert_array_equal(stored["val"], reference.data)
    csc = F.as_format(matrix, "csc")
    reference = sp.csc_matrix(matrix)
    assert csc["len"] == 5
    np.testing.assert_array_equal(csc["pos"], reference.indptr)
    np.testing.assert_array_equal(csc["idx"], reference.indices)
    np.testing.assert_array_equal(csc["val"], reference.data)
    dense_cm = F.as_format(matrix, "dense_col_major")
    np.testing.assert_array_equal(dense_cm["M"], matrix.ravel(order="F"))


def test_csr_logical_keeps_every_row_and_csc_only_stored_entries():
    matrix = np.array([[0.0, 2.0], [0.0, 0.0]])
    assert F.as_format(matrix, "csr").to_logical() == {0: {1: 2.0}, 1: {}}
    assert F.as_format(matrix, "csc").to_logical() == {0: {1: 2.0}}
    assert F.as_format(matrix, "coo").to_logical() == {0: {1: 2.0}}
    assert F.as_format(matrix).to_logical() == {0: {0: 0.0, 1: 2.0}, 1: {0: 0.0, 1: 0.0}}


@pytest.mark.parametrize("kind", ["csr", "csc", "coo", "bsr", "dia", "lil", "dok"])
@pytest.mark.parametrize("array_class", [False, True])
def test_every_scipy_format_converts_in(kind, array_class):
    matrix = random_tensor(np.random.default_rng(2), (6, 4), 0.35)
    maker = getattr(sp, f"{kind}_{'array' if array_class else 'matrix'}")
    value = maker(matrix)
    stored = F.as_format(value)
    expected = {"csr": "csr", "csc": "csc", "coo": "coo matrix"}.get(kind, "csr")
    assert stored.format.name == expected
    np.testing.assert_array_equal(stored.to_numpy(), matrix)
    for fmt in MATRIX_FORMATS:
        np.testing.assert_array_equal(F.as_format(value, fmt).to_numpy(), matrix)


def test_scipy_input_is_canonicalised_and_index_dtype_kept():
    # unsorted column indices and a duplicate (0, 1) entry, int32 indices
    value = sp.csr_matrix((np.array([1.0, 2.0, 5.0]), np.array([2, 1, 1], dtype=np.int32),
                           np.array([0, 3, 3], dtype=np.int32)), shape=(2, 3))
    stored = F.as_format(value)
    np.testing.assert_array_equal(stored["idx"], [1, 2])
    np.testing.assert_array_equal(stored["val"], [7.0, 1.0])
    assert stored["idx"].dtype == np.int32 and stored["pos"].dtype == np.int32
    np.testing.assert_array_equal(stored.to_numpy(), value.toarray())


def test_explicit_zeros_of_sparse_inputs_are_kept():
    value = sp.csr_matrix((np.array([0.0, 3.0]), np.array([0, 1]), np.array([0, 1, 2])), shape=(2, 2))
    stored = F.as_format(value, "coo")
    assert stored.nnz == 2
    assert stored.to_logical() == {0: {0: 0.0}, 1: {1: 3.0}}
    assert stored.to_scipy("csr").nnz == 2


def test_one_and_n_dimensional_scipy_arrays():
    vector = np.array([0.0, 1.0, 0.0, 2.0])
    stored = F.as_format(sp.coo_array(vector))
    assert stored.format is F.COO_VECTOR
    np.testing.assert_array_equal(stored.to_numpy(), vector)
    tensor = random_tensor(np.random.default_rng(3), (2, 3, 4), 0.5)
    stored = F.as_format(sp.coo_array(tensor))
    np.testing.assert_array_equal(stored.to_numpy(), tensor)
    back = stored.to_scipy("coo", array=True)
    np.testing.assert_array_equal(back.toarray(), tensor)


def test_float32_is_kept_and_integers_widen():
    matrix32 = random_tensor(np.random.default_rng(4), (4, 4), 0.5, np.float32)
    for fmt in MATRIX_FORMATS:
        stored = F.as_format(matrix32, fmt)
        assert stored.dtype == np.float32
        assert stored.to_numpy().dtype == np.float32
    stored = F.as_format(np.array([[1, 0], [0, 2]]), "csr")
    assert stored.dtype == np.float64
    assert F.as_format(np.array([1, 0], dtype=np.float16)).dtype == np.float32


def test_torch_inputs():
    torch = pytest.importorskip("torch")
    matrix = random_tensor(np.random.default_rng(5), (5, 4), 0.4)
    dense = torch.tensor(matrix, requires_grad=True)
    with pytest.raises(InputError, match="compile_program"):  # a gradient is never dropped silently
        F.as_format(dense)
    with torch.no_grad():
        stored = F.as_format(dense)
    assert stored.format.is_dense
    np.testing.assert_array_equal(stored.to_numpy(), matrix)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's beta warning for sparse CSR
        cases = {"coo matrix": dense.detach().to_sparse(), "csr": dense.detach().to_sparse_csr(),
                 "csc": dense.detach().to_sparse_csc()}
        for expected, value in cases.items():
            stored = F.as_format(value)
            assert stored.format.name == expected
            np.testing.assert_array_equal(stored.to_numpy(), matrix)
    f32 = F.as_format(dense.detach().float().to_sparse(), "csr")
    assert f32.dtype == np.float32
    tensor3 = random_tensor(np.random.default_rng(6), (2, 3, 2), 0.5)
    stored = F.as_format(torch.tensor(tensor3).to_sparse())
    assert stored.format.name == "coo 3-d"
    np.testing.assert_array_equal(stored.to_numpy(), tensor3)


def test_pydata_sparse_inputs():
    sparse = pytest.importorskip("sparse")
    tensor = random_tensor(np.random.default_rng(7), (3, 2, 4), 0.4)
    stored = F.as_format(sparse.COO.from_numpy(tensor))
    assert stored.format.name == "coo 3-d"
    np.testing.assert_array_equal(stored.to_numpy(), tensor)
    matrix = tensor[0]
    np.testing.assert_array_equal(F.as_format(sparse.GCXS.from_numpy(matrix), "csc").to_numpy(), matrix)
    with pytest.raises(FormatError, match="fill value"):
        F.as_format(sparse.COO.from_numpy(np.ones((2, 2)), fill_value=1.0))


def test_converting_between_formats():
    matrix = random_tensor(np.random.default_rng(8), (5, 6), 0.3)
    stored = F.as_format(matrix, "csr")
    assert F.as_format(stored) is stored
    assert F.as_format(stored, "csr") is stored
    for fmt in MATRIX_FORMATS:
        converted = F.as_format(stored, fmt)
        np.testing.assert_array_equal(converted.to_numpy(), matrix)
        # sparse formats hold the non-zeros whichever format they came from
        if not converted.format.is_dense:
            assert converted.nnz == np.count_nonzero(matrix)
            assert F.as_format(F.as_format(matrix, "dense"), fmt).nnz == np.count_nonzero(matrix)


@settings(max_examples=25, deadline=None)
@given(shape=shapes_2d, density=densities, seed=st.integers(0, 2**16),
       out=st.sampled_from(["dense", "numpy", *F.SCIPY_FORMATS, "dcsr", "csf"]))
def test_from_logical(shape, density, seed, out):
    matrix = random_tensor(np.random.default_rng(seed), shape, density)
    logical = prune(as_dict(matrix)) if matrix.size else {}
    result = F.from_logical(logical, shape, out)
    if out in ("dense", "numpy"):
        assert isinstance(result, np.ndarray)
        np.testing.assert_array_equal(result, matrix)
    elif out in F.SCIPY_FORMATS:
        assert sp.issparse(result) and result.format == out and result.shape == shape
        np.testing.assert_array_equal(result.toarray(), matrix)
    else:
        assert isinstance(result, F.StoredTensor)
        np.testing.assert_array_equal(result.to_numpy(), matrix)


def test_from_logical_accepts_zeros_and_int_leaves():
    shape = (3, 2)
    value = {0: {1: 2}, 1: {}, 2: 0}
    np.testing.assert_array_equal(F.from_logical(value, shape, "dense"), [[0, 2.0], [0, 0], [0, 0]])
    np.testing.assert_array_equal(F.from_logical({}, shape, "csr").toarray(), np.zeros(shape))
    vector = F.from_logical({2: 1.5}, (4,), "coo")
    assert isinstance(vector, F.StoredTensor)
    np.testing.assert_array_equal(vector.to_numpy(), [0, 0, 1.5, 0])


def test_from_arrays_builds_validated_tensors():
    stored = F.from_arrays("csr", (3, 3), pos=np.array([0, 1, 1, 3], dtype=np.int32),
                           idx=np.array([2, 0, 1], dtype=np.int32), val=np.array([1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(stored.to_numpy(), [[0, 0, 1], [0, 0, 0], [2, 3, 0]])
    assert stored["pos"].dtype == np.int32
    assert stored["len"] == 3
    coo = F.from_arrays(F.COO_VECTOR, (5,), len=2, row=[1, 4], val=[1.0, 2.0])
    np.testing.assert_array_equal(coo.to_numpy(), [0, 1, 0, 0, 2])
    dense = F.from_arrays("dense", (2, 2), rows=2, cols=2, M=np.arange(4.0))
    np.testing.assert_array_equal(dense.to_numpy(), [[0, 1], [2, 3]])
    # integer-valued float indices are accepted (widened to int64)
    coo = F.from_arrays("coo", (2, 2), row=np.array([0.0, 1.0]), col=np.array([1.0, 0.0]), val=[1.0, 2.0])
    np.testing.assert_array_equal(coo.to_numpy(), [[0, 1], [2, 0]])


def test_custom_level_formats_need_no_new_code():
    # a "compressed rows, dense columns" blocked layout and a column-major COO
    matrix = random_tensor(np.random.default_rng(9), (6, 3), 0.3)
    matrix[2] = 0
    rows_then_dense = F.Format((F.Compressed(), F.Dense()), name="compressed-dense")
    stored = F.as_format(matrix, rows_then_dense)
    np.testing.assert_array_equal(stored.to_numpy(), matrix)
    assert stored["nnz"] == np.count_nonzero(matrix.any(axis=1))
    np.testing.assert_array_equal(stored.to_scipy("csr").toarray(), matrix)
    col_coo = F.Format((F.Compressed(unique=False), F.Singleton()), (1, 0), name="column coo")
    stored = F.as_format(matrix, col_coo)
    np.testing.assert_array_equal(stored.to_numpy(), matrix)
    assert prune(stored.to_logical()) == prune(as_dict(matrix))


def test_logical_type_and_repr():
    stored = F.as_format(np.zeros((2, 3)), "csr")
    from sparsad.lang.types import extents, tensor_order

    assert tensor_order(stored.logical_type()) == 2
    assert extents(stored.logical_type()) == (2, 3)
    assert "csr" in repr(stored)


def test_storing_a_large_sparse_input_densely_warns():
    from sparsad.errors import DensifyWarning

    big = sp.random(400, 400, density=0.001, random_state=0, format="csr")
    with pytest.warns(DensifyWarning, match=r"takes 1.2 MiB"):
        stored = F.as_format(big, "dense")
    np.testing.assert_array_equal(stored.to_numpy(), big.toarray())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        F.as_format(big, "csr")  # sparse formats never warn
        F.as_format(big.toarray(), "dense")  # nor does a dense input stored densely
        F.as_format(sp.random(10, 10, density=0.1, format="csr"), "dense")  # nor a small one
        F.as_format(stored, "dense_col_major")  # dense to dense


def test_objects_with_array_protocol_convert_like_numpy():
    class ArrayLike:  # stands in for jax and other array libraries
        def __array__(self, dtype=None, copy=None):
            return np.array([[0.0, 1.0], [2.0, 0.0]])

    stored = F.as_format(ArrayLike(), "csr")
    np.testing.assert_array_equal(stored.to_numpy(), [[0.0, 1.0], [2.0, 0.0]])
    assert F.as_format([[1.0, 0.0]]).to_logical() == {0: {0: 1.0, 1: 0.0}}
