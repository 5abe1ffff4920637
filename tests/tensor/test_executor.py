"""Executors: NumPy, PyTorch, JAX and Dask agree; plans are reused across feeds; feeds are checked."""
from __future__ import annotations

import numpy as np
import pytest

from sparsad import tensor as T
from sparsad.errors import InputError, ShapeError


def _graph():
    A, B, x = T.Variable("A", (4, 5)), T.Variable("B", (5, 3)), T.Variable("x", (3,))
    y = T.einsum("ij,jk,k->i", A, B, x)
    loss = T.einsum("i,i->", T.tanh(y), y) + T.log(T.square(x).sum())
    H = T.hessian(loss, [x])[0][0]
    nodes = T.grad(loss, [A, B, x]) + [H, T.tensorinv(H + T.Constant(10 * np.eye(3))), B.T.sum(0)]
    return (A, B, x), nodes


def _feeds(seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((4, 5)), rng.standard_normal((5, 3)), rng.standard_normal(3)]


@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_backends_agree_with_numpy(backend):
    pytest.importorskip(backend)
    xs, nodes = _graph()
    ref = T.Executor(nodes, "numpy")
    other = T.Executor(nodes, backend)
    for seed in range(3):          # plan once, run many feeds
        feed = dict(zip(xs, _feeds(seed)))
        for a, b in zip(ref.run(feed), other.run(feed, to_numpy=True)):
            np.testing.assert_allclose(np.asarray(b), a, rtol=1e-11, atol=1e-12)


def test_float32_runs_in_float32():
    xs, nodes = _graph()
    out = T.Executor(nodes, dtype=np.float32).run(dict(zip(xs, _feeds(0))))
    ref = T.Executor(nodes).run(dict(zip(xs, _feeds(0))))
    for a, b in zip(out, ref):
        assert a.dtype == np.float32
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=1e-4)


def test_feed_errors_and_partial_outputs():
    (A, B, x), nodes = _graph()
    ex = T.Executor(nodes)
    a, b, xv = _feeds(1)
    with pytest.raises(InputError, match=r"no value fed for Variable\(s\) \['x'\]"):
        ex.run({A: a, B: b})
    with pytest.raises(ShapeError, match="feed for 'A'"):
        ex.run({A: a.T, B: b, x: xv})
    with pytest.raises(InputError, match="names no Variable"):
        ex.run({"C": a})
    with pytest.raises(InputError, match=r"\['A', 'B'\]"):
        ex.run({"x": xv}, out=[nodes[3]])       # the Hessian w.r.t. x needs A and B too


def test_run_subset_by_name():
    (A, B, x), nodes = _graph()
    last = nodes[-1]
    ex = T.Executor(nodes)
    (val,) = ex.run({"B": _feeds(2)[1]}, out=[last])
    np.testing.assert_allclose(val, _feeds(2)[1].sum(1))


def test_dask_executor_on_local_cluster():
    distributed = pytest.importorskip("distributed")
    xs, nodes = _graph()
    feed = dict(zip(xs, _feeds(4)))
    ref = T.Executor(nodes).run(feed)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        assert len(client.scheduler_info()["workers"]) == 2
        ex = T.Executor(nodes, backend="dask", client=client, chunks=2)
        for a, b in zip(ref, ex.run(feed)):
            np.testing.assert_allclose(b, a, rtol=1e-11, atol=1e-12)
