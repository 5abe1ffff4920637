"""A derivative called from several threads: each call's result is shaped by the plan that made
it, not by another thread's call of another shape that ran meanwhile."""
from __future__ import annotations

import threading
from unittest import mock

import numpy as np
import scipy.sparse as sp

import sparsad
from sparsad.codegen.numba_backend import Kernel

SPMV = "sum(<i, r> in A) { i -> sum(<j, a> in r) a * x(j) }"


def test_a_zero_jvp_keeps_its_own_shape_when_another_thread_calls_with_another_shape():
    jvp = sparsad.jvp(SPMV, wrt="x", with_primal=False)
    small = sp.random(3, 4, density=0.6, format="csr", random_state=1)
    big = sp.random(5, 6, density=0.6, format="csr", random_state=2)
    run = Kernel.run
    other = []

    def run_while_another_thread_calls(self, arrays, *args, **kwargs):
        result = run(self, arrays, *args, **kwargs)
        if not other:  # once: another thread's whole call between this call's kernel and its result
            other.append(threading.Thread(target=lambda: other.append(jvp(A=big, x=np.ones(6), tangent=np.ones(6)))))
            other[0].start()
            other[0].join()
        return result

    with mock.patch.object(Kernel, "run", run_while_another_thread_calls):
        got = jvp(A=small, x=np.ones(4), tangent=np.zeros(4))
    np.testing.assert_allclose(other[1], big @ np.ones(6), rtol=1e-13)
    assert got.shape == (3,) and not got.any()
    for A, n, tangent in ((big, 6, np.zeros(6)), (small, 4, np.ones(4)), (big, 6, np.ones(6)), (small, 4, np.zeros(4))):
        got = jvp(A=A, x=np.ones(n), tangent=tangent)
        assert got.shape == (A.shape[0],)
        np.testing.assert_allclose(got, A @ tangent, rtol=1e-13)
