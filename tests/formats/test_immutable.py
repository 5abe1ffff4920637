"""Frozen index arrays (formats.immutable): the index arrays of every tensor sparsad builds are
read-only over an immutable buffer, every way NumPy offers to write them or to make them
writeable again is refused, and `immutable` says so only for such arrays (never for an array
that some other object could write)."""
from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.lib.stride_tricks import as_strided

from sparsad.formats import as_format, from_arrays, from_coordinates
from sparsad.formats.immutable import frozen, immutable
from sparsad.formats.pattern import with_values


def index_fields(tensor) -> dict:
    return {f: a for f, a in tensor.fields.items() if isinstance(a, np.ndarray) and f != tensor.format.values}


def sample(order: int = 3, seed: int = 0):
    rng = np.random.default_rng(seed)
    shape = (4, 3, 5, 2)[:order]
    keep = rng.random(shape) < 0.4
    coords = np.array(np.nonzero(keep), dtype=np.int64)
    return coords, rng.standard_normal(coords.shape[1]), shape


@pytest.mark.parametrize("fmt,order", [("coo", 3), ("csf", 3), ("coo", 4), ("csf", 4), ("csr", 2), ("coo", 2),
                                       ("csc", 2), ("dcsr", 2)])
def test_tensors_sparsad_builds_have_frozen_index_arrays_and_writeable_values(fmt, order):
    coords, values, shape = sample(order)
    tensor = from_coordinates(coords, values, shape, fmt)
    assert index_fields(tensor) and all(immutable(a) for a in index_fields(tensor).values())
    assert tensor.values.flags.writeable and not immutable(tensor.values)
    tensor.values[0] += 1.0  # values stay the caller's to update in place
    stored = tensor.coordinates()[0]
    np.testing.assert_array_equal(stored[:, np.lexsort(stored[::-1])], coords)  # (CSC: in column order)


def test_conversions_and_results_on_the_pattern_keep_them_frozen():
    coords, values, shape = sample(4)
    T = from_coordinates(coords, values, shape, "coo")
    C = as_format(T, "csf")  # the order-4 COO's CSF (csf_of_sorted): shares the values
    assert C.values is T.values and all(immutable(a) for a in index_fields(C).values())
    G = with_values(T, 2 * T.values)
    assert all(G[f] is a for f, a in index_fields(T).items())
    D = as_format(np.arange(12.0).reshape(3, 4) % 3, "csr")  # from numpy
    assert all(immutable(a) for a in index_fields(D).values())


def test_every_way_to_write_a_frozen_array_is_refused():
    coords, values, shape = sample(3)
    idx = from_coordinates(coords, values, shape, "coo")["idx1"]
    before = idx.copy()
    with pytest.raises(ValueError):
        idx[0] = 7
    with pytest.raises(ValueError):
        idx += 1
    with pytest.raises(ValueError):
        np.add(idx, 1, out=idx)
    with pytest.raises(ValueError):
        np.copyto(idx, 0)
    with pytest.raises(ValueError):
        idx.flags.writeable = True
    with pytest.raises(ValueError):
        idx.setflags(write=True)
    with pytest.raises(ValueError):
        idx.resize(len(idx) + 4, refcheck=False)
    with pytest.raises(ValueError):
        idx.sort()
    view = idx[1:]
    with pytest.raises(ValueError):
        view[0] = 7
    with pytest.raises(ValueError):
        view.flags.writeable = True
    assert not as_strided(idx, writeable=True).flags.writeable
    assert not np.frombuffer(idx.base, dtype=idx.dtype).flags.writeable
    np.testing.assert_array_equal(idx, before)


def test_immutable_is_false_for_anything_another_object_can_write():
    owned = np.arange(5)
    assert not immutable(owned)
    owned.flags.writeable = False  # its owner may set it back
    assert not immutable(owned)
    base = np.arange(5)
    view = base[1:]
    view.flags.writeable = False  # read-only view of a writeable array
    assert not immutable(view)
    assert not immutable(np.frombuffer(bytearray(40), dtype=np.int64))
    readonly_of_mutable = np.frombuffer(memoryview(bytearray(40)).toreadonly(), dtype=np.int64)
    assert not readonly_of_mutable.flags.writeable and not immutable(readonly_of_mutable)
    assert immutable(np.frombuffer(b"\0" * 40, dtype=np.int64))
    assert immutable(np.frombuffer(memoryview(b"\0" * 40), dtype=np.int64))


def test_caller_arrays_are_kept_as_they_are():
    coords, values, shape = sample(2)
    pos, idx = np.array([0, 1, 3]), np.array([0, 0, 2])
    own = from_arrays("csr", (2, 3), pos=pos, idx=idx, val=np.ones(3))
    assert own["pos"] is pos and own["idx"] is idx and not immutable(own["idx"])
    idx[0] = 1  # the caller's own array: still theirs to write
    assert own["idx"][0] == 1


def test_pickling_and_copies_keep_frozen_arrays_frozen_and_values_writeable():
    coords, values, shape = sample(4)
    T = from_coordinates(coords, values, shape, "coo")
    for other in (pickle.loads(pickle.dumps(T)), copy.copy(T), copy.deepcopy(T)):
        assert type(other) is type(T) and other.shape == T.shape and other.format == T.format
        assert all(immutable(a) for a in index_fields(other).values())
        np.testing.assert_array_equal(other.coordinates()[0], coords)
        np.testing.assert_array_equal(other.values, T.values)
    clone = pickle.loads(pickle.dumps(T))
    clone.values[0] += 1.0
    assert clone.values[0] != T.values[0]
    own = from_arrays("coo", shape, **{f: (np.array(a) if isinstance(a, np.ndarray) else a)
                                      for f, a in T.fields.items()})
    assert not any(immutable(a) for a in index_fields(pickle.loads(pickle.dumps(own))).values())


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(-2**31, 2**31 - 1), max_size=40), st.sampled_from([np.int32, np.int64]))
def test_frozen_is_an_equal_read_only_copy(items, dtype):
    array = np.array(items, dtype=np.int64)
    result = frozen(array, dtype)
    assert result.dtype == dtype and immutable(result) and not np.shares_memory(result, array)
    np.testing.assert_array_equal(result, array.astype(dtype))
    array[:] = 0  # the source changed later: the copy is not
    np.testing.assert_array_equal(result, np.array(items, dtype=np.int64).astype(dtype))
