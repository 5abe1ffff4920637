"""Shared fixtures: the real data of ../shared/data (skipped with a reason when absent)."""
from __future__ import annotations

import pytest

from sparsad._data import load_suitesparse, shared_data_dir


@pytest.fixture(scope="session")
def data_dir():
    root = shared_data_dir()
    if root is None:
        pytest.skip("../shared/data is absent (set SPARSAD_DATA to point at it)")
    return root


@pytest.fixture(scope="session")
def suitesparse():
    """Loader fixture: suitesparse('HB/bcspwr01') -> scipy CSR, skipping when the file is absent."""

    def load(name: str):
        matrix = load_suitesparse(name)
        if matrix is None:
            pytest.skip(f"SuiteSparse matrix {name} not found under ../shared/data")
        return matrix

    return load


@pytest.fixture
def x64():
    """JAX in 64-bit mode for one test (JAX is imported only by tests that ask for it)."""
    import jax

    previous = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", previous)
