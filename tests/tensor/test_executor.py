"""Executors: NumPy, PyTorch, JAX and Dask agree; plans are reused across feeds; feeds are checked."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparsad import tensor as T
from sparsad.errors import InputError, ShapeError
from sparsad.tensor.executor import numpy_small_einsum


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


# ----- the NumPy backend's planned pairwise products, and reuse between runs ----------------
@st.composite
def _tensor_products(draw):
    """Two operands over distinct letters, some shared (summed), the rest kept in a random order;
    operands may arrive transposed (non-contiguous) as intermediates often do."""
    letters = draw(st.permutations("abcdef"))
    n_a, n_b = draw(st.integers(0, 3)), draw(st.integers(0, 3))
    a = "".join(letters[:n_a])
    shared = [c for c in a if draw(st.booleans())]
    b = list(shared) + list(letters[n_a:n_a + n_b])
    b = "".join(draw(st.permutations(b)))
    out = "".join(draw(st.permutations([c for c in a + b if c not in shared])))
    sizes = {c: draw(st.integers(1, 4)) for c in "abcdef"}
    flips = draw(st.tuples(st.booleans(), st.booleans()))
    return a, b, out, sizes, flips


@settings(max_examples=150, deadline=None)
@given(_tensor_products())
def test_planned_products_match_numpy_einsum(case):
    a, b, out, sizes, (flip_a, flip_b) = case
    rng = np.random.default_rng(0)
    x = rng.standard_normal([sizes[c] for c in a])
    y = rng.standard_normal([sizes[c] for c in b])
    x = np.array(x, order="F") if flip_a else x       # same values, other memory order
    y = y.T.copy().T if flip_b else y
    subs = f"{a},{b}->{out}"
    want = np.einsum(subs, x, y)
    for planned in (numpy_small_einsum(subs, [x.shape, y.shape]), numpy_small_einsum(subs)):
        got = planned(x, y)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["x", "y", "z"]), st.integers(0, 2), st.integers(0, 3)),
                min_size=1, max_size=12))
def test_reuse_never_returns_a_stale_value(runs):
    """reuse=True against reuse=False over random sequences of runs: each run feeds one of three
    arrays to one variable (a new object, or one fed before) and asks for one of four outputs."""
    x, y, z = (T.Variable(n, (3, 3)) for n in "xyz")
    xy = T.einsum("ab,bc->ac", x, y)
    outs = [T.einsum("ab,bc->ac", xy, z), T.einsum("ab,ab->", xy, x), T.tensorinv(xy @ xy.T + T.Identity(3)),
            T.einsum("ab,bc->ac", z, y) + xy]
    rng = np.random.default_rng(1)
    arrays = {n: [rng.standard_normal((3, 3)) for _ in range(3)] for n in "xyz"}
    current = {v: arrays[v.name][0] for v in (x, y, z)}
    cached, plain = T.Executor(outs, reuse=True), T.Executor(outs)
    for name, pick, which in runs:
        var = {"x": x, "y": y, "z": z}[name]
        current[var] = arrays[name][pick]
        (got,) = cached.run(dict(current), out=[outs[which]])
        (want,) = plain.run(dict(current), out=[outs[which]])
        np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize("reuse", [False, True])
def test_compiled_schedule_frees_values_and_keeps_outputs(monkeypatch, reuse):
    """Graphs past SMALL_GRAPH_BYTES free each value after its last use inside the compiled
    schedule; outputs that other nodes also read must survive, and the values stay right."""
    import sparsad.tensor.executor as executor_module

    xs, nodes = _graph()
    feed = dict(zip(xs, _feeds(5)))
    want = T.Executor(nodes).run(feed)
    monkeypatch.setattr(executor_module, "SMALL_GRAPH_BYTES", 0)
    ex = T.Executor(nodes, reuse=reuse)
    steps = ex._step_list(*ex._schedule(ex.nodes))
    assert any(frees for *_, frees in steps)
    for _ in range(2):
        for got, ref in zip(ex.run(feed), want):
            np.testing.assert_allclose(got, ref, rtol=1e-12)
        (first,) = ex.run(feed, out=[nodes[0]])
        np.testing.assert_allclose(first, want[0], rtol=1e-12)


def test_fortran_ordered_feeds_give_the_same_values():
    """A tensor stored in Fortran order (as np.load may return it) is read through its transpose
    by the planned products; values match the C-ordered feed's, for every output."""
    xs, nodes = _graph()
    X, A = T.Variable("X", (4, 3, 5, 2)), T.Variable("A", (2, 3))
    extra = [T.einsum("abcd,abcd->", X, X), T.einsum("abcd,de->abce", X, A), T.einsum("abcd,eb->acde", X, A)]
    rng = np.random.default_rng(8)
    values = _feeds(8) + [rng.standard_normal((4, 3, 5, 2)), rng.standard_normal((2, 3))]
    ex = T.Executor(nodes + extra)
    want = ex.run(dict(zip([*xs, X, A], values)))
    got = ex.run(dict(zip([*xs, X, A], [np.asfortranarray(v) for v in values])))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-13)
