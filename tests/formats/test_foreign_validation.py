"""Malformed scipy / torch / pydata containers are refused with FormatError before any library call
trusts their arrays (scipy's and torch's own routines crash the process on some of them)."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings, strategies as st

import sparsad
import sparsad.formats as F
from sparsad.errors import FormatError

torch = pytest.importorskip("torch")


def _bad_csr(indptr, indices, shape=(3, 3)):
    data = np.ones(max(len(indices), 1))[: len(indices)]
    return sp.csr_matrix((data, np.asarray(indices), np.asarray(indptr)), shape=shape)


@pytest.mark.parametrize("indptr, indices, pattern", [
    ([0, 3, 1, 3], [0, 1, 2], r"indptr must be non-decreasing.*entry 1 is 3"),
    ([0, 1, 2, 3], [0, 5, 1], r"indices.*index 5 at entry 1 is out of range"),
    ([0, 1, 2, 3], [0, -1, 1], r"indices.*negative index -1"),
])
def test_scipy_csr_with_bad_arrays_is_refused_everywhere(indptr, indices, pattern):
    try:
        matrix = _bad_csr(indptr, indices)
    except ValueError:
        pytest.skip("scipy refused these arrays itself")
    with pytest.raises(FormatError, match=pattern):
        F.as_format(matrix)
    with pytest.raises(FormatError, match=pattern):
        F.as_format(matrix, "coo")
    with pytest.raises(FormatError, match=pattern):
        sparsad.program("sum(<i, r> in A) sum(<j, a> in r) a")(A=matrix)
    with pytest.raises(FormatError, match=pattern):
        sparsad.compile("sum(<i, r> in A) sum(<j, a> in r) a")(A=matrix)


def test_scipy_coo_out_of_range_is_refused():
    matrix = sp.coo_matrix((np.ones(2), (np.array([0, 1]), np.array([0, 1]))), shape=(2, 2))
    matrix.row[1] = 7  # corrupted after construction
    with pytest.raises(FormatError, match=r"mode 0: index 7 .* out of range"):
        F.as_format(matrix)


def _coo(indices, values=None, shape=(3, 3)):
    indices = torch.as_tensor(indices)
    values = torch.ones(indices.shape[1], dtype=torch.float64) if values is None else values
    return torch.sparse_coo_tensor(indices, values, shape)


@pytest.mark.parametrize("indices, pattern", [
    ([[0, -1], [0, 1]], r"mode 0: negative index -1"),
    ([[0, 1], [0, 3]], r"mode 1: index 3 .* out of range"),
])
def test_torch_coo_with_bad_indices_is_refused_before_coalesce(indices, pattern):
    tensor = _coo(indices)
    for call in (lambda: F.as_format(tensor), lambda: F.as_format(tensor, "csr"),
                 lambda: sparsad.program("sum(<i, r> in A) sum(<j, a> in r) a")(A=tensor),
                 lambda: sparsad.compile("sum(<i, r> in A) sum(<j, a> in r) a")(A=tensor)):
        with pytest.raises(FormatError, match=pattern):
            call()


def test_torch_csr_with_bad_pointers_is_refused():
    tensor = torch.sparse_csr_tensor(torch.tensor([0, 2, 1, 3]), torch.tensor([0, 1, 2]),
                                     torch.ones(3, dtype=torch.float64), (3, 3), check_invariants=False)
    with pytest.raises(FormatError, match=r"crow_indices must be non-decreasing"):
        F.as_format(tensor)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 5), st.integers(1, 5), st.data())
def test_random_corruptions_of_csr_arrays_never_pass_silently(rows, cols, data):
    """Any corruption of a valid CSR either still describes the same kind of matrix (scipy's
    reading of it is then ours) or raises FormatError; nothing else escapes."""
    matrix = sp.random(rows, cols, density=0.5, format="csr", random_state=data.draw(st.integers(0, 99)))
    indptr, indices = matrix.indptr.copy(), matrix.indices.copy()
    target = data.draw(st.sampled_from(["indptr", "indices"]))
    array = indptr if target == "indptr" else indices
    if array.size == 0:
        return
    position = data.draw(st.integers(0, array.size - 1))
    array[position] = data.draw(st.integers(-3, max(rows, cols) + 3))
    try:
        corrupted = sp.csr_matrix((matrix.data, indices, indptr), shape=(rows, cols))
    except ValueError:
        return  # scipy's constructor caught it
    try:
        stored = F.as_format(corrupted)
    except FormatError:
        return
    # accepted: then the arrays were valid, and the stored tensor is what scipy reads from them
    np.testing.assert_array_equal(stored.to_numpy(), corrupted.toarray())


def test_scipy_lil_with_inconsistent_rows_is_refused():
    """scipy converts a lil matrix's per-row lists without checking them (a row with more
    columns than values read past its data)."""
    matrix = sp.lil_matrix((3, 3))
    matrix[0, 1] = 1.0
    matrix.rows[0] = [1, 2]
    with pytest.raises(FormatError, match="lil row 0 has 2 column indices but 1 values"):
        F.as_format(matrix)
    np.testing.assert_array_equal(F.as_format(sp.lil_matrix(np.eye(3))).to_numpy(), np.eye(3))


def test_pydata_compressed_arrays_are_checked_before_pydata_reads_them():
    sparse = pytest.importorskip("sparse")
    bad_index = sparse.GCXS((np.ones(3), np.array([0, 7, 1]), np.array([0, 1, 2, 3])), shape=(3, 3),
                            compressed_axes=[0])
    with pytest.raises(FormatError, match="index 7"):
        F.as_format(bad_index)
    bad_pointers = sparse.GCXS((np.ones(3), np.array([0, 1, 1]), np.array([0, 3, 1, 3])), shape=(3, 3),
                               compressed_axes=[0])  # decoded silently wrong by pydata itself
    with pytest.raises(FormatError, match="non-decreasing"):
        sparsad.program("sum(<i, r> in A) sum(<j, a> in r) a")(A=bad_pointers)
    for axes in ([0], [1], [0, 2]):
        dense = np.arange(24.0).reshape(2, 3, 4) if len(axes) == 2 else np.arange(12.0).reshape(3, 4)
        good = sparse.GCXS.from_numpy(dense, compressed_axes=axes)
        np.testing.assert_array_equal(F.as_format(good).to_numpy(), dense)
