"""Every validation error path: a FormatError (DTypeError for value dtypes) naming the field."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import sparsad.formats as F
from sparsad.errors import DTypeError, FormatError, UnsupportedError

POS = np.array([0, 1, 1, 3])
IDX = np.array([2, 0, 1])
VAL = np.array([1.0, 2.0, 3.0])


def csr(**overrides):
    fields = {"pos": POS, "idx": IDX, "val": VAL}
    fields.update(overrides)
    shape = fields.pop("shape", (3, 3))
    return F.from_arrays("csr", shape, name="A", **fields)


def test_valid_baseline():
    np.testing.assert_array_equal(csr().to_numpy(), [[0, 0, 1], [0, 0, 0], [2, 3, 0]])


@pytest.mark.parametrize("overrides, pattern", [
    ({"pos": np.array([0, 1, 3])}, r"'pos'.*has 3 entries but must have 4"),
    ({"pos": np.array([1, 1, 1, 3])}, r"'pos'.*must start at 0"),
    ({"pos": np.array([0, 2, 1, 3])}, r"'pos'.*non-decreasing.*entry 1 is 2"),
    ({"pos": np.array([0, 1, 1, 2])}, r"'pos'.*last entry 2 must equal.*'idx', 3"),
    ({"val": np.array([1.0, 2.0])}, r"'val'.*has 2 entries.*3 positions"),
    ({"val": np.ones((3, 1))}, r"'val'.*1-D"),
    ({"idx": np.array([2, 1, 0])}, r"'idx'.*not sorted.*entry 1 is 1, entry 2 is 0"),
    ({"idx": np.array([2, 1, 1])}, r"'idx'.*index 1 appears twice.*sum the duplicates"),
    ({"idx": np.array([2, 0, 3])}, r"'idx'.*index 3 at entry 2 is out of range.*extent 3"),
    ({"idx": np.array([2, -1, 1])}, r"'idx'.*negative index -1 at entry 1"),
    ({"idx": np.array([2.0, np.nan, 1.0])}, r"'idx'.*nan at entry 1.*finite integers"),
    ({"idx": np.array([2.0, 0.5, 1.0])}, r"'idx'.*non-integer 0.5 at entry 1"),
    ({"idx": np.array([True, False, True])}, r"'idx'.*dtype bool.*int32 or int64"),
    ({"idx": np.array(["2", "0", "1"])}, r"'idx'.*dtype <U1"),
    ({"idx": np.array([[2, 0, 1]])}, r"'idx'.*must be 1-D"),
    ({"shape": (3,)}, r"format 'csr' stores 2-d tensors, not 1-d"),
    ({"shape": (3, -1)}, r"negative extent"),
    ({"shape": "ab"}, r"shape must be a tuple of ints"),
    ({"shape": (4, 3)}, r"'pos'.*must have 5"),
    ({"len": 4}, r"'len'.*is 4 but shape\(3, 3\) gives 3"),
    ({"len": 3.0}, r"'len'.*must be an int"),
    ({"extra": np.zeros(2)}, r"unknown field\(s\) \['extra'\]"),
])
def test_csr_errors_name_the_field(overrides, pattern):
    with pytest.raises(FormatError, match=pattern) as info:
        csr(**overrides)
    assert "input 'A' (csr)" in str(info.value)


def test_missing_field():
    with pytest.raises(FormatError, match=r"missing field\(s\) \['idx'\]"):
        F.from_arrays("csr", (3, 3), pos=POS, val=VAL)


@pytest.mark.parametrize("dtype", [np.complex128, np.complex64])
def test_complex_values_raise_dtype_error(dtype):
    with pytest.raises(DTypeError, match="complex"):
        csr(val=VAL.astype(dtype))
    with pytest.raises(DTypeError, match="complex"):
        F.as_format(np.ones((2, 2), dtype=dtype))
    with pytest.raises(DTypeError, match="complex"):
        F.as_format(sp.csr_matrix(np.eye(2, dtype=dtype)))


def test_other_value_dtypes():
    with pytest.raises(DTypeError, match="not a real number type"):
        csr(val=np.array(["a", "b", "c"]))
    if np.dtype(np.longdouble).itemsize > 8:  # extended precision would be silently rounded
        with pytest.raises(DTypeError, match="use float64 or float32"):
            F.as_format(np.ones(3, dtype=np.longdouble))
    with pytest.raises(DTypeError):
        F.as_format(np.array([object(), object()]))


def test_int32_and_int64_indices_are_accepted_and_kept():
    for dtype in (np.int32, np.int64):
        stored = csr(pos=POS.astype(dtype), idx=IDX.astype(dtype))
        assert stored["pos"].dtype == dtype and stored["idx"].dtype == dtype
    widened = csr(idx=IDX.astype(np.uint8))
    assert widened["idx"].dtype == np.int64


def test_coo_errors():
    with pytest.raises(FormatError, match=r"'col'.*has 1 entries but must have one per position.*2"):
        F.from_arrays("coo", (2, 2), name="C", row=[0, 1], col=[0], val=[1.0, 2.0])
    with pytest.raises(FormatError, match=r"'len'.*is 3 but 'row' has 2 entries"):
        F.from_arrays("coo", (2, 2), len=3, row=[0, 1], col=[0, 1], val=[1.0, 2.0])
    with pytest.raises(FormatError, match=r"'row'.*not sorted"):
        F.from_arrays("coo", (2, 2), row=[1, 0], col=[0, 1], val=[1.0, 2.0])
    # repeated rows are fine in COO, a repeated (row, col) pair is not
    F.from_arrays("coo", (2, 2), row=[0, 0], col=[0, 1], val=[1.0, 2.0])
    with pytest.raises(FormatError, match=r"'col'.*index 1 appears twice"):
        F.from_arrays("coo", (2, 2), row=[0, 0], col=[1, 1], val=[1.0, 2.0])
    with pytest.raises(FormatError, match=r"'row'.*out of range"):
        F.from_arrays("coo", (2, 2), row=[0, 2], col=[0, 1], val=[1.0, 2.0])
    # the vector COO of Fig. 10 forbids repeated rows
    with pytest.raises(FormatError, match=r"'row'.*appears twice"):
        F.from_arrays(F.COO_VECTOR, (3,), row=[1, 1], val=[1.0, 2.0])


def test_unordered_unique_level_still_rejects_duplicates():
    loose = F.Format((F.Compressed(unique=False, ordered=False, count="len", crd="row"),
                      F.Singleton(ordered=False, crd="col")), name="unordered coo")
    ok = F.from_arrays(loose, (2, 2), row=[1, 0, 1], col=[0, 1, 1], val=[1.0, 2.0, 3.0])
    np.testing.assert_array_equal(ok.to_numpy(), [[0, 2], [1, 3]])
    with pytest.raises(FormatError, match=r"tuple \(1, 0\) is stored twice"):
        F.from_arrays(loose, (2, 2), row=[1, 0, 1], col=[0, 1, 0], val=[1.0, 2.0, 3.0])


def test_three_d_csf_errors():
    good = dict(len=2, idx0=[0, 2], pos1=[0, 2, 3], idx1=[1, 3, 1], pos2=[0, 1, 2, 4],
                idx2=[1, 0, 0, 1], val=[1.0, 2.0, 3.0, 4.0])
    stored = F.from_arrays("csf", (3, 4, 2), **good)
    assert stored.to_logical() == {0: {1: {1: 1.0}, 3: {0: 2.0}}, 2: {1: {0: 3.0, 1: 4.0}}}
    with pytest.raises(FormatError, match=r"'pos2'.*has 3 entries but must have 4"):
        F.from_arrays("csf", (3, 4, 2), **{**good, "pos2": [0, 1, 4]})
    with pytest.raises(FormatError, match=r"'idx2'.*appears twice"):
        F.from_arrays("csf", (3, 4, 2), **{**good, "idx2": [1, 0, 1, 1]})
    with pytest.raises(FormatError, match=r"'idx1'.*out of range.*extent 4"):
        F.from_arrays("csf", (3, 4, 2), **{**good, "idx1": [1, 4, 1]})


def test_dense_errors():
    with pytest.raises(FormatError, match=r"'M'.*has 5 entries but the levels have 6"):
        F.from_arrays("dense", (2, 3), name="D", M=np.zeros(5))
    with pytest.raises(FormatError, match=r"'cols'.*is 2 but shape\(2, 3\) gives 3"):
        F.from_arrays("dense", (2, 3), cols=2, M=np.zeros(6))


def test_format_construction_errors():
    with pytest.raises(FormatError, match="at least one level"):
        F.Format(())
    with pytest.raises(FormatError, match="permutation"):
        F.Format((F.Dense(), F.Dense()), (0, 0))
    with pytest.raises(FormatError, match="first level cannot be a singleton"):
        F.Format((F.Singleton(),))
    with pytest.raises(FormatError, match="must be a singleton level"):
        F.Format((F.Compressed(unique=False), F.Compressed()))
    with pytest.raises(FormatError, match="distinct"):
        F.Format((F.Dense("n"), F.Dense("n")))
    with pytest.raises(FormatError, match="identifier"):
        F.Format((F.Dense("a b"),))
    with pytest.raises(FormatError, match="unknown format name 'blocked'"):
        F.as_format(np.eye(2), "blocked")
    with pytest.raises(FormatError, match="stores 2-d tensors, not 3-d"):
        F.as_format(np.zeros((2, 2, 2)), "csr")
    with pytest.raises(FormatError, match="has 2 levels but the tensor has 1 modes"):
        F.as_format(np.zeros(3), F.CSR)
    with pytest.raises(FormatError, match="order must be an int >= 1"):
        F.coo(0)


def test_singleton_format_that_cannot_hold_the_tensor():
    # compressed (unique) rows then a singleton column: only one entry per row fits
    one_per_row = F.Format((F.Compressed(), F.Singleton()), name="one per row")
    np.testing.assert_array_equal(F.as_format(np.eye(3), one_per_row).to_numpy(), np.eye(3))
    with pytest.raises(FormatError, match="cannot hold this tensor"):
        F.as_format(np.ones((2, 2)), one_per_row)


def test_conversion_input_errors():
    with pytest.raises(FormatError, match="0-d array is a scalar"):
        F.as_format(np.float64(3.0))
    with pytest.raises(FormatError, match="nested dict needs a shape"):
        F.as_format({0: 1.0})
    with pytest.raises(FormatError, match="cannot store a set"):
        F.as_format({1, 2})
    bad = sp.csr_matrix((np.array([1.0]), np.array([5]), np.array([0, 1])), shape=(1, 3))
    with pytest.raises(FormatError, match=r"input 'B'.*index 5"):
        F.as_format(bad, name="B")
    with pytest.raises(FormatError, match=r"shape \(3,\) has 1 modes but the format stores 2"):
        F.from_arrays(F.CSR, (3,), pos=POS, idx=IDX, val=VAL)
    with pytest.raises(FormatError, match="coordinates must have shape"):
        F.from_coordinates(np.zeros((1, 2), dtype=int), [1.0, 2.0], (2, 2), "coo")
    with pytest.raises(FormatError, match="coordinates must be integers"):
        F.from_coordinates(np.zeros((2, 2)), [1.0, 2.0], (2, 2), "coo")
    with pytest.raises(FormatError, match="2 coordinates but values of shape"):
        F.from_coordinates(np.zeros((2, 2), dtype=int), [1.0], (2, 2), "coo")


def test_torch_hybrid_tensors_are_unsupported():
    torch = pytest.importorskip("torch")
    with pytest.raises(UnsupportedError, match="hybrid"):
        F.as_format(torch.ones(3, 2).to_sparse(1))
    with pytest.raises(DTypeError, match="complex"):
        F.as_format(torch.ones(2, 2, dtype=torch.complex64))


@pytest.mark.parametrize("value, pattern", [
    ({0: {5: 1.0}}, r"key 5 at depth 1 \(keys \[0\]\) is outside 0..2"),
    ({-1: {0: 1.0}}, r"key -1 at depth 0"),
    ({0: {0: {0: 1.0}}}, r"nested deeper than the 2 modes"),
    ({0: 1.0}, r"expected a dictionary at depth 1"),
    ({0: {0: "x"}}, r"leaf at keys \[0, 0\] is 'x'"),
    ({0: {1.5: 1.0}}, r"key 1.5 at depth 1 is not an integer"),
])
def test_from_logical_errors(value, pattern):
    with pytest.raises(FormatError, match=pattern):
        F.from_logical(value, (2, 3), "csr")


def test_to_scipy_errors():
    stored = F.as_format(np.zeros((2, 2, 2)), "coo")
    with pytest.raises(FormatError, match="only to a scipy coo_array"):
        stored.to_scipy("csr")
    with pytest.raises(FormatError, match="unknown scipy format"):
        F.as_format(np.eye(2)).to_scipy("ell")


from hypothesis import given, settings, strategies as st  # noqa: E402


@settings(max_examples=30, deadline=None)
@given(rows=st.integers(1, 6), cols=st.integers(2, 6), seed=st.integers(0, 2**16),
       index_dtype=st.sampled_from([np.int32, np.int64]))
def test_canonical_scipy_arrays_pass_and_corrupted_ones_fail(rows, cols, seed, index_dtype):
    rng = np.random.default_rng(seed)
    matrix = sp.random(rows, cols, density=0.6, format="csr", random_state=rng)
    pos, idx, val = (matrix.indptr.astype(index_dtype), matrix.indices.astype(index_dtype),
                     matrix.data)
    stored = F.from_arrays("csr", (rows, cols), pos=pos, idx=idx, val=val)
    np.testing.assert_array_equal(stored.to_numpy(), matrix.toarray())
    csc = matrix.tocsc()
    F.from_arrays("csc", (rows, cols), pos=csc.indptr, idx=csc.indices, val=csc.data)
    counts = np.diff(pos)
    if counts.max() >= 2:  # reverse a row with two or more entries: unsorted
        row = int(np.argmax(counts))
        bad = idx.copy()
        bad[pos[row]:pos[row + 1]] = bad[pos[row]:pos[row + 1]][::-1]
        with pytest.raises(FormatError, match="not sorted"):
            F.from_arrays("csr", (rows, cols), pos=pos, idx=bad, val=val)
        bad = idx.copy()
        bad[pos[row] + 1] = bad[pos[row]]
        with pytest.raises(FormatError, match="appears twice"):
            F.from_arrays("csr", (rows, cols), pos=pos, idx=bad, val=val)
    if len(idx):
        with pytest.raises(FormatError, match="out of range"):
            F.from_arrays("csr", (rows, cols - 1), pos=pos, idx=np.full_like(idx, cols - 1), val=val)
        with pytest.raises(FormatError, match="'val'"):
            F.from_arrays("csr", (rows, cols), pos=pos, idx=idx, val=val[:-1])
