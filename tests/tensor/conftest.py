"""Fixtures of the tensor tests: every executor backend, and JAX in float64 as the reference."""
from __future__ import annotations

import numpy as np
import pytest

EXECUTORS = ("numpy", "torch", "jax")


@pytest.fixture(params=EXECUTORS)
def backend(request):
    """Each in-process executor backend (dask has its own tests: it is slow to start)."""
    return request.param


@pytest.fixture(scope="session")
def jnp():
    """jax.numpy with 64-bit floats: the independent reference of derivative values."""
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    import jax.numpy

    return jax.numpy


@pytest.fixture(scope="session")
def run():
    """run(nodes, feed, backend="numpy", **options) -> NumPy arrays, one per node."""
    from sparsad import tensor as T

    def evaluate(nodes, feed, backend="numpy", **options):
        single = isinstance(nodes, T.Node)
        out = T.Executor([nodes] if single else list(nodes), backend, **options).run(feed, to_numpy=True)
        out = [np.asarray(o) for o in out]
        return out[0] if single else out

    return evaluate
