"""StoredTensor built directly is validated like from_arrays (O(nnz), before any use), and JAX's
BCOO/BCSR are read with their index arrays checked first."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import sparsad
from sparsad.errors import DTypeError, FormatError
from sparsad.formats import COO_MATRIX, CSR, DENSE_ROW_MAJOR, StoredTensor, from_arrays

GOOD_CSR = dict(len=3, pos=np.array([0, 1, 1, 3]), idx=np.array([2, 0, 1]), val=np.array([1.0, 2.0, 3.0]))


def test_a_valid_stored_tensor_is_built_and_runs():
    stored = StoredTensor(CSR, (3, 3), GOOD_CSR)
    assert stored.nnz == 3
    np.testing.assert_array_equal(stored.to_numpy(), from_arrays(CSR, (3, 3), **GOOD_CSR).to_numpy())
    total = sparsad.program("sum(<i, r> in A) sum(<j, a> in r) a")(A=stored)
    assert total == pytest.approx(6.0)
    assert StoredTensor("csr", (3, 3), GOOD_CSR).format == CSR


@pytest.mark.parametrize("change, pattern", [
    (dict(pos=np.array([0, 2, 1, 3])), r"field 'pos'.*non-decreasing"),
    (dict(pos=np.array([1, 1, 1, 3])), r"field 'pos'.*start at 0"),
    (dict(pos=np.array([0, 1, 3])), r"field 'pos'.*4"),
    (dict(idx=np.array([2, 0, 7])), r"field 'idx'.*index 7 .*out of range"),
    (dict(idx=np.array([2, -1, 1])), r"field 'idx'.*negative index -1"),
    (dict(idx=np.array([2, 1, 0])), r"field 'idx'.*not sorted"),
    (dict(idx=np.array([2.0, 0.5, 1.0])), r"field 'idx'.*non-integer"),
    (dict(val=np.array([1.0, 2.0])), r"field 'val'.*2 entries"),
    (dict(len=4), r"field 'len'"),
    (dict(extra=np.zeros(2)), r"unknown field"),
])
def test_direct_construction_names_the_bad_field(change, pattern):
    with pytest.raises(FormatError, match=pattern):
        StoredTensor(CSR, (3, 3), {**GOOD_CSR, **change})


def test_bad_shape_format_and_dtype_are_our_errors():
    with pytest.raises(FormatError, match="shape"):
        StoredTensor(CSR, 3, GOOD_CSR)
    with pytest.raises(FormatError, match="shape"):
        StoredTensor(CSR, (3, -1), GOOD_CSR)
    with pytest.raises(FormatError, match="fmt must be a Format"):
        StoredTensor(object(), (3, 3), GOOD_CSR)
    with pytest.raises(FormatError, match="fields must be a mapping"):
        StoredTensor(CSR, (3, 3), [1, 2])
    with pytest.raises(DTypeError, match="field 'val'"):
        StoredTensor(CSR, (3, 3), {**GOOD_CSR, "val": np.array(["a", "b", "c"])})
    with pytest.raises(FormatError, match="field 'M'.*3 entries"):
        StoredTensor(DENSE_ROW_MAJOR, (2, 2), {"rows": 2, "cols": 2, "M": np.zeros(3)})


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(-3, 6), st.integers(-3, 6)), max_size=8), st.integers(1, 5))
def test_coo_fields_from_anywhere_are_accepted_only_when_in_range(pairs, n):
    rows = np.array([p[0] for p in pairs], dtype=np.int64)
    cols = np.array([p[1] for p in pairs], dtype=np.int64)
    fields = {"len": len(pairs), "row": rows, "col": cols, "val": np.ones(len(pairs))}
    ordered = [tuple(p) for p in pairs] == sorted(pairs)
    in_range = all(0 <= r < n and 0 <= c < n for r, c in pairs)
    try:
        stored = StoredTensor(COO_MATRIX, (n, n), fields)
    except FormatError:
        assert not (in_range and ordered and len(set(pairs)) == len(pairs))
        return
    assert in_range
    coords, _ = stored.coordinates()
    assert coords.shape == (2, len(pairs))


def test_jax_sparse_inputs_are_checked_before_use():
    jax = pytest.importorskip("jax")
    from jax.experimental.sparse import BCOO, BCSR

    import sparsad.formats as F

    with jax.enable_x64(True):
        good = BCSR((np.array([1.0, 2.0]), np.array([1, 0]), np.array([0, 1, 2])), shape=(2, 2))
        np.testing.assert_array_equal(F.as_format(good).to_numpy(), [[0.0, 1.0], [2.0, 0.0]])
        bad = BCSR((np.array([1.0, 2.0]), np.array([1, 5]), np.array([0, 1, 2])), shape=(2, 2))
        with pytest.raises(FormatError, match="index 5"):
            F.as_format(bad)
        bad_ptr = BCSR((np.array([1.0, 2.0]), np.array([1, 0]), np.array([0, 2, 1])), shape=(2, 2))
        with pytest.raises(FormatError, match="non-decreasing"):
            sparsad.program("sum(<i, r> in A) sum(<j, a> in r) a")(A=bad_ptr)
        padded = BCOO((np.array([1.0, 9.0]), np.array([[0, 1], [2, 2]])), shape=(2, 2))  # JAX's padding
        np.testing.assert_array_equal(F.as_format(padded).to_numpy(), [[0.0, 1.0], [0.0, 0.0]])
        negative = BCOO((np.array([1.0]), np.array([[0, -1]])), shape=(2, 2))
        with pytest.raises(FormatError, match="negative"):
            F.as_format(negative)
