"""The conversion cache (codegen.reuse): an unchanged scipy/numpy input is converted once; any
change — an array swapped for another object, index contents changed in place, a new shape —
is converted (and validated) again, so a call never sees a stale stored form."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from sparsad import compile as compile_program
from sparsad.codegen.reuse import ConversionCache, content_hash

SMV = "sum(<i, r> in A) sum(<j, a> in r) a * x(j)"


def test_an_array_swapped_for_a_new_object_is_seen():
    A = sp.random(12, 9, density=0.3, format="csr", random_state=1)
    x = np.random.default_rng(1).standard_normal(9)
    smv = compile_program(SMV)
    assert smv(A=A, x=x) == pytest.approx(float((A @ x).sum()), rel=1e-12)
    A.data = A.data * 3.0 + 1.0  # a new array object, same shape and dtype
    assert smv(A=A, x=x) == pytest.approx(float((A @ x).sum()), rel=1e-12)
    A.indices = A.indices.copy()  # same contents, new object: converted again, same value
    assert smv(A=A, x=x) == pytest.approx(float((A @ x).sum()), rel=1e-12)


def test_the_cache_converts_once_per_unchanged_object():
    cache = ConversionCache()
    A = sp.random(6, 5, density=0.5, format="csr", random_state=2)
    calls = []
    convert = lambda: calls.append(1) or object()  # noqa: E731
    first = cache.stored("A", A, "csr", convert)
    assert cache.stored("A", A, "csr", convert) is first and len(calls) == 1
    A.indices[:] = A.indices[::-1].copy()  # contents of an index array changed in place
    assert cache.stored("A", A, "csr", convert) is not first and len(calls) == 2
    assert cache.stored("A", A.copy(), "csr", convert) is not None and len(calls) == 3  # another object


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(-2**31, 2**31 - 1), min_size=0, max_size=40), st.integers(0, 39),
       st.integers(1, 2**20))
def test_content_hash_sees_any_single_change_and_the_length(values, where, delta):
    a = np.array(values, dtype=np.int64)
    assert content_hash(a) == content_hash(a.copy())
    if len(a):
        b = a.copy()
        b[where % len(a)] += delta
        assert content_hash(a) != content_hash(b)
    assert content_hash(np.append(a, 0)) != content_hash(a)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(-2**31, 2**31 - 1), min_size=1, max_size=41), st.integers(0, 40),
       st.integers(1, 2**20), st.integers(0, 3))
def test_content_hash_of_odd_lengths_and_unaligned_views(values, where, delta, offset):
    # int32 arrays of odd length end in a partial 64-bit word; a view at an odd offset is unaligned
    base = np.array([7] * offset + values, dtype=np.int32)
    a = base[offset:]
    assert content_hash(a) == content_hash(np.array(values, dtype=np.int32))
    b = a.copy()
    b[where % len(a)] += delta
    assert content_hash(a) != content_hash(b)
    assert content_hash(a[:-1]) != content_hash(a)  # the length is in the sum


def test_a_converted_copy_changed_in_place_is_seen():
    # int64 values are stored as a float64 copy: their contents are checksummed on every call
    x = np.arange(9, dtype=np.int64)
    A = sp.random(12, 9, density=0.3, format="csr", random_state=3)
    smv = compile_program(SMV)
    assert smv(A=A, x=x) == pytest.approx(float((A @ x).sum()), rel=1e-12)
    x[4] += 5
    assert smv(A=A, x=x) == pytest.approx(float((A @ x).sum()), rel=1e-12)
    A.data = A.data.astype(np.float32)  # a copy in the stored form, then changed in place
    assert smv(A=A, x=x) == pytest.approx(float((A @ x).sum()), rel=1e-5)
    A.data[0] += 1.0
    assert smv(A=A, x=x) == pytest.approx(float((A @ x).sum()), rel=1e-5)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["int8", "uint8", "int16", "int32", "uint32", "int64"]),
       st.lists(st.integers(0, 127), min_size=1, max_size=37), st.integers(0, 36), st.integers(1, 100),
       st.integers(1, 3))
def test_content_hash_of_every_integer_width_and_of_strided_views(dtype, values, where, delta, step):
    # narrow integers are read as 64-bit words plus the elements after the last whole word;
    # a strided view is read through a contiguous copy of it
    a = np.array(values, dtype=dtype)
    b = a.copy()
    b[where % len(a)] = (int(b[where % len(a)]) + delta) % 128
    assert (content_hash(a) != content_hash(b)) == (not np.array_equal(a, b))
    strided = np.repeat(a, step)[::step]
    assert content_hash(strided) == content_hash(a)
    assert content_hash(a.astype(np.float64)) != content_hash(b.astype(np.float64)) or np.array_equal(a, b)
