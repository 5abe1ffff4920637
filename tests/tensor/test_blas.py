"""Small runs use one BLAS thread and restore the thread count; values are unchanged."""
from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import pytest

from sparsad import tensor as T
from sparsad.tensor import executor as executor_module
from sparsad.tensor.blas import one_blas_thread


def test_one_blas_thread_sets_one_and_restores_nested():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    blas = threadpoolctl.ThreadpoolController().select(user_api="blas")
    before = [lib.num_threads for lib in blas.lib_controllers]
    with one_blas_thread():
        with one_blas_thread():
            assert all(lib.num_threads == 1 for lib in blas.lib_controllers)
        assert all(lib.num_threads == 1 for lib in blas.lib_controllers)
    assert [lib.num_threads for lib in blas.lib_controllers] == before


@pytest.mark.parametrize("threshold, expect_serial", [(10**7, True), (0, False)])
def test_executor_runs_small_graphs_serially(monkeypatch, threshold, expect_serial):
    used = []

    @contextmanager
    def recording():
        used.append(True)
        yield

    monkeypatch.setattr(executor_module, "one_blas_thread", recording)
    A, B, C = (T.Variable(n, (80, 80)) for n in "ABC")   # products BLAS would thread
    y = T.einsum("ij,jk,kl->il", A, B, C)
    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal((80, 80)) for _ in range(3))
    got = T.Executor([y], serial_below_flops=threshold).run({A: a, B: b, C: c})[0]
    np.testing.assert_allclose(got, a @ b @ c, rtol=1e-12)
    assert bool(used) == expect_serial


def test_executor_leaves_threads_alone_when_no_product_would_be_threaded(monkeypatch):
    used = []

    @contextmanager
    def recording():
        used.append(True)
        yield

    monkeypatch.setattr(executor_module, "one_blas_thread", recording)
    A, B = T.Variable("A", (8, 8)), T.Variable("B", (8, 8))
    a = np.arange(64.0).reshape(8, 8)
    got = T.Executor([T.einsum("ij,jk->ik", A, B)]).run({A: a, B: a})[0]
    np.testing.assert_allclose(got, a @ a)
    assert not used
