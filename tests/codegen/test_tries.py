"""Nested local containers as tries (`runtime.trie_*`) and the n-d row workspace's flush
(`runtime.flush_tensor_row`): the structures against Python dicts and sorted lists, and the
order 3 and 4 Jacobians whose tangents they hold against JAX's dense Jacobians (float64, small
inputs: empty rows, inner blocks only partly reached, CSR/COO/CSF inputs)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings, strategies as st

import sparsad
from sparsad.codegen import runtime as rt
from sparsad.formats import StoredTensor, from_coordinates
from reference.dense_ad import jax_numpy

# ---- the trie against nested dicts ------------------------------------------------------

paths = st.lists(st.tuples(st.integers(-3, 40), st.integers(-(2**40), 2**40), st.integers(0, 5),
                           st.floats(-4, 4)), max_size=400)


def _fill(nodes, values, table, state, depth, entries, reference):
    for first, second, third, value in entries:
        path = (first, second, third)[:depth]
        node = 0
        level = reference
        for key in path:
            node = rt.trie_child(nodes, values, table, state, node, np.int64(key))
        values[node] += value
        for key in path[:-1]:
            level = level.setdefault(key, {})
        level[path[-1]] = level.get(path[-1], 0.0) + value


def _items(nodes, values, node, depth):
    """The trie under node as nested dicts, children in the order it iterates them."""
    out = {}
    child = nodes[node, rt.TRIE_FIRST]
    while child >= 0:
        key = int(nodes[child, rt.TRIE_KEY])
        out[key] = _items(nodes, values, child, depth - 1) if depth > 1 else float(values[child])
        child = nodes[child, rt.TRIE_NEXT]
    return out


def _ordered(d):
    return [(k, _ordered(v) if isinstance(v, dict) else v) for k, v in d.items()]


@settings(max_examples=25, deadline=None)
@given(depth=st.integers(2, 3), first=paths, second=paths)
def test_a_trie_holds_what_nested_dicts_hold_in_their_order_across_fills(depth, first, second):
    nodes, table, state = rt.trie_new(rt.TRIE_NODES)
    values = np.empty(nodes.shape[0])
    for entries in (first, second):  # a second fill after a reset starts empty
        rt.trie_reset(nodes, table, state)
        reference: dict = {}
        _fill(nodes, values, table, state, depth, entries, reference)
        got = _items(nodes, values, 0, depth)
        assert _ordered(got) == _ordered(reference)  # the same sums in the same order
        for key, second_key, _, _ in entries[:20]:
            row = rt.trie_find(nodes, table, state, 0, key)
            assert row > 0
            inner = reference[key]
            expected = inner.get(second_key, None) if depth == 2 else None
            if depth == 2:
                assert rt.trie_get(nodes, values, table, state, row, second_key, 0.0) == expected
            assert rt.trie_find(nodes, table, state, row, 2**50) == -1  # absent key
        assert rt.trie_find(nodes, table, state, -1, 0) == -1  # the row of a missing row
        assert rt.trie_get(nodes, values, table, state, 0, 10**9, 0.0) == 0.0


# ---- the row workspace's flush ---------------------------------------------------------

@settings(max_examples=40, deadline=None)
@given(extents=st.lists(st.integers(1, 40), min_size=2, max_size=3), data=st.data())
def test_a_row_is_flushed_in_order_whatever_its_cells(extents, data):
    ext = np.array(extents, np.int64)
    cells = int(np.prod(ext))
    # a dense block (every cell of some keys per mode) or scattered cells
    if data.draw(st.booleans()):
        keys = [data.draw(st.sets(st.integers(0, e - 1), min_size=1, max_size=min(e, 4))) for e in extents]
        grid = np.array(np.meshgrid(*[sorted(k) for k in keys], indexing="ij")).reshape(len(extents), -1)
        chosen = np.ravel_multi_index(tuple(grid), extents)
        drop = data.draw(st.integers(0, max(len(chosen) - 1, 0)))  # a block only partly reached
        chosen = chosen[drop:] if len(chosen) > 1 else chosen
    else:
        chosen = np.array(sorted(data.draw(st.sets(st.integers(0, cells - 1), min_size=1, max_size=30))))
    order = np.random.default_rng(len(chosen)).permutation(len(chosen))
    written = np.asarray(chosen, np.int64)[order]  # in the order a kernel wrote them
    val, mark = np.zeros(cells), np.zeros(cells, np.bool_)
    offsets = np.concatenate([[0], np.cumsum(ext)[:-1]]).astype(np.int64)
    level_keys, level_marks = np.empty(ext.sum(), np.int64), np.zeros(ext.sum(), np.bool_)
    level_counts = np.zeros(len(ext), np.int64)
    for c in written:
        mark[c] = True
        val[c] = c + 0.5
        for m, key in enumerate(np.unravel_index(c, extents)):
            if not level_marks[offsets[m] + key]:
                level_marks[offsets[m] + key] = True
                level_keys[offsets[m] + level_counts[m]] = key
                level_counts[m] += 1
    out_crd, out_v = np.full((len(ext) + 1, len(written) + 3), -7, np.int64), np.zeros(len(written) + 3)
    rt.flush_tensor_row(5, written.copy(), len(written), val, mark, ext, level_keys, level_counts,
                        level_marks, offsets, out_crd, out_v, 3)
    expected = sorted(written.tolist())
    assert out_crd[0, 3:].tolist() == [5] * len(written)  # the row, then the cells' keys per mode
    assert out_crd[1:, 3:].tolist() == [list(k) for k in np.unravel_index(np.array(expected, np.int64), extents)]
    assert out_v[3:].tolist() == [c + 0.5 for c in expected]
    assert (out_crd[:, :3] == -7).all()  # the entries before are left alone
    assert not mark.any() and not val.any() and not level_marks.any() and not level_counts.any()


# ---- order 3 and 4 Jacobians against JAX -----------------------------------------------

GCN = """sum(<i, r> in A)
  let h = sum(<j, a> in r) a * X(j) in
  let z = sum(<f, hf> in h) hf * W(f) in
  { i -> sum(<o, zo> in z) { o -> tanh(zo) } }"""
# the derivative w.r.t. X has one entry per stored A(i, j) at (i, j, i, j): the blocks of a row
# spanned by its distinct keys are only partly reached
HADAMARD = "sum(<i, r> in A) { i -> sum(<j, a> in r) { j -> a * X(i)(j) * X(i)(j) } }"
MTTKRP = """sum(<i, ti> in T) { i ->
  sum(<j, tj> in ti) sum(<k, t> in tj)
    sum(<r, b> in B(j)) { r -> t * b * C(k)(r) } }"""


def _sparse(n, m, density, seed, empty_rows):
    rng = np.random.default_rng(seed)
    A = sp.random(n, m, density=density, format="csr", random_state=seed, data_rvs=rng.standard_normal)
    A = A.tolil()
    for i in empty_rows:
        if i < n:
            A.rows[i], A.data[i] = [], []
    return A.tocsr()


def _compare(text, wrt, inputs, dense_fn, dense_inputs, output="workspace"):
    """The compiled Jacobian (the n-d row workspace unless output=None: what "auto" picks)."""
    jax, jnp = jax_numpy()
    derivative = sparsad.jacobian(text, wrt=wrt)
    with warnings.catch_warnings():
        warnings.simplefilter("error", sparsad.FallbackWarning)
        got = (derivative if output is None else derivative.compiled(output=output))(**inputs)
    if output is None and isinstance(got, np.ndarray):  # small: a dense result
        got = from_coordinates(np.array(np.nonzero(np.ones(got.shape))), got.ravel(), got.shape, "coo")
    assert isinstance(got, StoredTensor) and got.format.name.startswith("coo")
    names = list(dense_inputs)
    args = [jnp.asarray(dense_inputs[n], dtype=jnp.float64) for n in names]
    expected = np.asarray(jax.jacfwd(lambda *a: dense_fn(jnp, **dict(zip(names, a))),
                                     argnums=names.index(wrt))(*args))
    assert got.shape == expected.shape
    np.testing.assert_allclose(got.to_numpy(), expected, rtol=1e-10, atol=1e-12)
    coords, _ = got.coordinates()  # sorted and unique, as the interpreter's COO would be
    if coords.shape[1] > 1:
        assert np.all(np.diff(np.ravel_multi_index(tuple(coords), got.shape)) > 0)


@pytest.mark.parametrize("wrt", ["X", "W"])
@settings(max_examples=3, deadline=None)
@given(n=st.integers(1, 6), f=st.integers(1, 3), h=st.integers(1, 3),
       density=st.sampled_from([0.0, 0.4, 1.0]), seed=st.integers(0, 2**16),
       empty=st.lists(st.integers(0, 5), max_size=2))
def test_gcn_jacobians_equal_jax(wrt, n, f, h, density, seed, empty):
    rng = np.random.default_rng(seed)
    A = _sparse(n, n, density, seed, empty)
    X, W = rng.standard_normal((n, f)), rng.standard_normal((f, h))
    _compare(GCN, wrt, dict(A=A, X=X, W=W), lambda j, A, X, W: j.tanh(A @ X @ W),
             dict(A=A.toarray(), X=X, W=W))


@settings(max_examples=4, deadline=None)
@given(n=st.integers(1, 5), m=st.integers(1, 5), density=st.sampled_from([0.3, 0.7, 1.0]),
       seed=st.integers(0, 2**16), empty=st.lists(st.integers(0, 4), max_size=2))
def test_a_jacobian_whose_row_blocks_are_partly_reached_equals_jax(n, m, density, seed, empty):
    A = _sparse(n, m, density, seed, empty)
    X = np.random.default_rng(seed + 1).standard_normal((n, m))
    _compare(HADAMARD, "X", dict(A=A, X=X), lambda j, A, X: A * X * X, dict(A=A.toarray(), X=X))


@pytest.mark.parametrize("fmt", ["coo", "csf"])
@settings(max_examples=3, deadline=None)
@given(shape=st.tuples(st.integers(1, 4), st.integers(1, 4), st.integers(1, 4)), r=st.integers(1, 3),
       nnz=st.integers(0, 12), seed=st.integers(0, 2**16))
def test_mttkrp_jacobians_on_coo_and_csf_tensors_equal_jax(fmt, shape, r, nnz, seed):
    rng = np.random.default_rng(seed)
    cells = rng.choice(int(np.prod(shape)), size=min(nnz, int(np.prod(shape))), replace=False)
    coords = np.array(np.unravel_index(np.sort(cells), shape), dtype=np.int64).reshape(3, -1)
    values = rng.standard_normal(coords.shape[1])
    dense = np.zeros(shape)
    dense[tuple(coords)] = values
    T = from_coordinates(coords, values, shape, fmt)
    B, C = rng.standard_normal((shape[1], r)), rng.standard_normal((shape[2], r))
    # an n-d COO input has no outermost loop fixing the row: the result is what "auto" makes
    _compare(MTTKRP, "B", dict(T=T, B=B, C=C), lambda j, T, B, C: j.einsum("ijk,jr,kr->ir", T, B, C),
             dict(T=dense, B=B, C=C), output=None)


# ---- a fill past the reserved nodes ----------------------------------------------------

def test_a_fill_past_the_reserved_nodes_raises_and_the_trie_is_whole_after_a_reset():
    nodes, table, state = rt.trie_new(16)
    values = np.zeros(16)
    for key in range(15):  # node 0 is the trie itself: 15 entries fit
        values[rt.trie_child(nodes, values, table, state, 0, np.int64(key))] += key
    with pytest.raises(MemoryError, match="outgrew its reserved nodes"):
        rt.trie_child(nodes, values, table, state, 0, np.int64(99))
    # what was there is still found; nothing was written past the pool or the table
    assert [rt.trie_get(nodes, values, table, state, 0, key, -1.0) for key in range(15)] == list(range(15))
    assert state[0] == 16 and rt.trie_find(nodes, table, state, 0, 99) == -1
    rt.trie_reset(nodes, table, state)
    reference: dict = {}
    _fill(nodes, values, table, state, 2, [(k % 3, k, 0, 1.0) for k in range(12)], reference)
    assert _ordered(_items(nodes, values, 0, 2)) == _ordered(reference)


# the GCN layer under other names: a program no other test compiles (kernels are cached by program)
GCN_SMALL_TRIES = """sum(<row, rr> in Adj)
  let hid = sum(<col, av> in rr) av * Feat(col) in
  let pre = sum(<k, hk> in hid) hk * Wt(k) in
  { row -> sum(<o, po> in pre) { o -> tanh(po) } }"""


def _gcn_case():
    jax, jnp = jax_numpy()
    rng = np.random.default_rng(7)
    A = sp.csr_matrix(rng.standard_normal((5, 5)) * (rng.random((5, 5)) < 0.8))
    X, W = rng.standard_normal((5, 3)), rng.standard_normal((3, 2))
    expected = np.asarray(jax.jacfwd(lambda x: jnp.tanh(jnp.asarray(A.toarray()) @ x @ W))(X))
    return A, X, W, expected


def _as_array(got, shape):
    got = got.to_numpy() if isinstance(got, StoredTensor) else np.asarray(got)
    return got.reshape(shape)


def test_a_jacobian_whose_tangent_outgrows_the_tries_grows_them(monkeypatch):
    """A kernel whose row tangent needs more trie nodes than its first reserve (here 16, lowered
    for the test; 2**19 in use) stops with MemoryError before writing past them, and runs again with
    four times as many (kernels are pure): compiled, no warning, the right Jacobian (JAX's), and the
    next call starts with the reserve the last one needed."""
    A, X, W, expected = _gcn_case()
    monkeypatch.setattr(rt, "TRIE_NODES", 16)
    derivative = sparsad.jacobian(GCN_SMALL_TRIES, wrt="Feat")
    compiled = derivative.compiled(output="workspace")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = compiled(Adj=A, Feat=X, Wt=W)
        kernel = compiled._compiled["Feat"].ran_plan()["kernel"]
        assert kernel is not None and "rt.trie_new" in kernel.source  # ran compiled, with tries
        assert kernel._trie_hint > 16
        again = compiled(Adj=A, Feat=X * 2.0, Wt=W)
    np.testing.assert_allclose(_as_array(got, expected.shape), expected, rtol=1e-10, atol=1e-12)
    assert np.all(np.isfinite(_as_array(again, expected.shape)))


def test_tries_that_would_pass_the_memory_limit_fall_back_with_the_right_answer(monkeypatch):
    """The one overflow left: growing the tries past the memory limit (`sparsad.memory`). The call
    then runs in the interpreter with a FallbackWarning and returns the right Jacobian, never a
    partial one."""
    from sparsad import memory

    A, X, W, expected = _gcn_case()
    monkeypatch.setattr(rt, "TRIE_NODES", 16)
    # the program under other names again: a kernel of its own, whose first reserve is 16 nodes
    derivative = sparsad.jacobian(GCN_SMALL_TRIES.replace("hid", "mid").replace("pre", "act"), wrt="Feat")
    memory.set_memory_limit(4_000, warn=4_000)  # room for the result, not for tries of 64 nodes (4.6 KB)
    try:
        with pytest.warns(sparsad.FallbackWarning, match="reserved nodes"):
            got = derivative.compiled(output="workspace")(Adj=A, Feat=X, Wt=W)
    finally:
        memory.set_memory_limit(None)
    np.testing.assert_allclose(_as_array(got, expected.shape), expected, rtol=1e-10, atol=1e-12)