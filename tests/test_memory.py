"""The memory guard: outputs are sized before they are allocated; over the limit, our error."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import sparsad
from sparsad import memory
from sparsad.errors import DensifyWarning, MemoryLimitError, OptionError


@pytest.fixture
def small_limit():
    memory.set_memory_limit("64MB", warn="1MB")
    yield
    memory.set_memory_limit(None)


def test_parse_size():
    assert memory.parse_size("2GB") == 2 << 30
    assert memory.parse_size("512 MiB") == 512 << 20
    assert memory.parse_size(1e6) == 1_000_000
    assert 0 < memory.parse_size("0.25") <= memory.available_memory()
    for bad in ("lots", "-1GB", 0, "1XB"):
        with pytest.raises(OptionError):
            memory.parse_size(bad)


def test_huge_dense_compiled_result_is_refused_before_allocation(small_limit):
    outer = sparsad.compile("sum(<i, a> in x) sum(<j, b> in y) { i -> { j -> a * b } }", output="dense")
    x = np.ones(10**6)
    with pytest.raises(MemoryLimitError, match=r"1000000 x 1000000.*7\.3 TiB.*output='coo'"):
        outer(x=x, y=x)


def test_growing_sparse_result_buffers_stop_at_the_limit(small_limit):
    outer = sparsad.compile("sum(<i, a> in x) sum(<j, b> in y) { i -> { j -> a * b } }")
    x = np.ones(20_000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DensifyWarning)
        with pytest.raises(MemoryLimitError, match="result buffers"):
            outer(x=x, y=x)


def test_out_format_dense_of_a_huge_sparse_result_is_refused(small_limit):
    square = sparsad.compile("sum(<i, r> in A) { i -> sum(<j, a> in r) { j -> a * a } }")
    A = sp.random(3_000, 3_000, density=1e-4, format="csr", random_state=0)
    assert square(A=A).shape == (3_000, 3_000)
    with pytest.raises(MemoryLimitError, match="out_format='csr'"):
        square(out_format="dense", A=A)
    with pytest.raises(MemoryLimitError, match="keep the result sparse"):
        sparsad.program("sum(<i, r> in A) { i -> sum(<j, a> in r) { j -> a * a } }")(out_format="dense", A=A)


def test_moderate_dense_results_warn(small_limit):
    outer = sparsad.compile("sum(<i, a> in x) sum(<j, b> in y) { i -> { j -> a * b } }", output="dense")
    x = np.ones(600)
    with pytest.warns(DensifyWarning, match="600 x 600"):
        result = outer(x=x, y=x)
    np.testing.assert_array_equal(result, np.ones((600, 600)))


def test_storing_coordinates_densely_beyond_the_limit_is_refused(small_limit):
    coords = np.array([[0], [0]])
    with pytest.raises(MemoryLimitError, match="pick a sparse format"):
        sparsad.formats.from_coordinates(coords, np.ones(1), (100_000, 100_000), "dense")
    stored = sparsad.formats.from_coordinates(coords, np.ones(1), (100_000, 100_000), "csr")
    assert stored.nnz == 1
