"""formats.pattern: results read on a stored tensor's entries, and the CSF of a sorted n-d COO."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparsad.errors import ShapeError
from sparsad.formats import as_format, csf, from_coordinates
from sparsad.formats.pattern import EntryValues, csf_of_sorted, on_pattern, sorted_unique
from sparsad.formats.validate import validate_fields


@st.composite
def coo_tensors(draw, orders=(2, 3, 4)):
    """A COO tensor from random, unsorted coordinates with repeats (from_coordinates sums them)."""
    order = draw(st.sampled_from(orders))
    shape = tuple(draw(st.integers(1, 4)) for _ in range(order))
    count = draw(st.integers(0, 30))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    coords = np.stack([rng.integers(0, n, count) for n in shape]) if count else np.zeros((order, 0), np.int64)
    return from_coordinates(coords, rng.standard_normal(count), shape, "coo"), rng


@settings(max_examples=60, deadline=None)
@given(coo_tensors())
def test_csf_of_a_sorted_coo_is_the_sorting_conversion_and_shares_its_values(case):
    T, _ = case
    fast = csf_of_sorted(T)
    sorted_path = from_coordinates(*T.coordinates(), T.shape, "csf")
    validate_fields(csf(T.ndim), T.shape, fast.fields)  # a valid CSF
    for field in sorted_path.format.fields():
        np.testing.assert_array_equal(np.asarray(fast[field]), np.asarray(sorted_path[field]))
    assert fast.values is T.values
    assert as_format(T, "csf").values is T.values  # as_format takes this path


@settings(max_examples=60, deadline=None)
@given(coo_tensors(orders=(3, 4)))
def test_on_pattern_reads_any_result_kind_at_the_entries(case):
    T, rng = case
    dense = rng.standard_normal(T.shape)
    coords, _ = T.coordinates()
    expected = dense[tuple(coords)]
    # a dense array, a sparse result holding more entries (in another order), a nested dict
    extra = np.stack([rng.integers(0, n, 10) for n in T.shape])
    everywhere = np.concatenate([coords, extra], axis=1)
    sparse = from_coordinates(everywhere, dense[tuple(everywhere)], T.shape, "coo")
    sparse_dense = sparse.to_numpy()
    nested: dict = {}
    for key, value in zip(coords.T.tolist(), expected.tolist()):
        node = nested
        for k in key[:-1]:
            node = node.setdefault(k, {})
        node[key[-1]] = value
    for result, want in ((dense, expected), (sparse, sparse_dense[tuple(coords)]), (nested, expected),
                         (0.0, np.zeros(T.nnz)), ({}, np.zeros(T.nnz))):
        got = on_pattern(T, result)
        assert got.format == T.format and got.shape == T.shape and got["idx0"] is T["idx0"]
        np.testing.assert_allclose(got.values, want, rtol=0, atol=0)


def test_entry_values_are_taken_as_they_are_only_on_sorted_unique_formats():
    T = from_coordinates(np.array([[0, 1, 1], [1, 0, 2], [0, 0, 1]]), np.array([1.0, 2.0, 3.0]), (2, 3, 2), "coo")
    csf_form = csf_of_sorted(T)
    written = EntryValues._trusted(csf_form.format, csf_form.shape, {**csf_form.fields, "val": np.array([7.0, 8.0, 9.0])})
    assert sorted_unique(T.format) and sorted_unique(csf_form.format)
    got = on_pattern(T, written)
    assert got.values.tolist() == [7.0, 8.0, 9.0] and got.format == T.format
    with pytest.raises(ShapeError):
        on_pattern(T, np.zeros((2, 3, 3)))
    assert not sorted_unique(as_format(np.ones((2, 2)), "csc").format)
    assert not sorted_unique(as_format(np.ones((2, 2, 2)), "dense").format)
