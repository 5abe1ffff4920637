"""Helpers for the code generation tests: physical inputs of stored tensors, random matrices."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from sparsad.formats import as_format
from sparsad.lang.types import REAL


def physical(tensors: dict, scalars: dict | None = None) -> tuple[dict, dict, dict]:
    """(types, arrays, stored) for {name: value in a format} plus real scalars."""
    types, arrays, stored = {}, {}, {}
    for name, (value, fmt) in tensors.items():
        tensor = as_format(value, fmt)
        stored[name] = tensor
        types.update(tensor.physical_types(name))
        arrays.update(tensor.physical_arrays(name))
    for name, value in (scalars or {}).items():
        types[name] = REAL
        arrays[name] = value
    return types, arrays, stored


def random_csr(rows: int, cols: int, density: float, seed: int) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)
    matrix = sp.random(rows, cols, density=density, format="csr", random_state=rng)
    matrix.data = rng.standard_normal(matrix.nnz)
    return matrix


@pytest.fixture(scope="session")
def make_physical():
    return physical


@pytest.fixture(scope="session")
def make_csr():
    return random_csr
