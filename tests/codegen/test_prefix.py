"""Prefix workspaces (codegen.prefix): a let-bound vector written over whole column ranges keeps
a count instead of marks and a key list. The key set must stay exact: a row with no entries
gives an empty vector (not zeros), so a nonlinear consumer (cos, a count of keys) sees the
difference; every value is checked against the interpreter and NumPy."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import sparsad
from sparsad.codegen.ir import Accumulate, Container, Fill, For, ForItems, IfThen, Load, Num, Ref
from sparsad.codegen.prefix import prefix_workspaces

H = [Container("h", "workspace", None, "real"), Container("g", "workspace", None, "real")]


def _write(target: str, key: str):
    return Accumulate(target, (Ref(key),), Num(1.0))


def test_a_write_at_every_key_of_a_range_from_zero_is_a_prefix():
    body = (Fill("h"), For("j", Num(0), Ref("N"), (_write("h", "j"),)),
            Fill("g"), ForItems("k", "v", "h", (_write("g", "k"),)))
    found = prefix_workspaces(body, H)
    assert found.names == {"h", "g"}  # g is written at each key of the prefix h
    assert [u.container for u in found.updates["j"]] == ["h"]
    assert found.updates["k"][0].end == Ref("h_n")


@pytest.mark.parametrize("body", [
    (Fill("h"), For("j", Num(1), Ref("N"), (_write("h", "j"),))),  # the range does not start at 0
    (Fill("h"), For("j", Num(0), Ref("N"), (IfThen(Ref("c"), (_write("h", "j"),)),))),  # filtered
    (Fill("h"), For("j", Num(0), Ref("N"), (For("p", Load("pos", Ref("j")), Ref("M"),  # a row per key
                                                 (_write("h", "j"),)),))),
    (For("j", Num(0), Ref("N"), (Fill("h"), _write("h", "j"))),),  # emptied inside the loop
    (Fill("h"), For("j", Num(0), Ref("N"), (_write("h", "p"),))),  # a key no loop binds
])
def test_writes_that_may_skip_keys_keep_the_marks(body):
    assert "h" not in prefix_workspaces(body, H).names


def test_an_inner_loop_with_fixed_bounds_is_counted_when_it_is_not_empty():
    body = (Fill("h"), For("j", Num(0), Ref("N"), (For("q", Num(0), Ref("M"), (_write("h", "j"),)),)))
    (update,) = prefix_workspaces(body, H).updates["j"]
    assert update.inner == ((Num(0), Ref("M")),)


# -- compiled against the interpreter and NumPy -----------------------------------------------

COS_COUNT = """
sum(<i, r> in A)
  let h = sum(<j, a> in r) a * X(j) in
  let z = sum(<f, hf> in h) hf * W(f) in
  sum(<o, zo> in z) cos(zo)"""  # cos(0) = 1: an empty h must give an empty z, not zeros


def _cos_count(A, X, W):
    Z = A @ X @ W
    nonempty = (np.diff(A.indptr) > 0) & (X.shape[1] > 0)  # no columns of X: h has no keys
    return float(np.cos(Z[nonempty]).sum())


def _inputs(seed: int, n: int, f: int, h: int, density: float):
    rng = np.random.default_rng(seed)
    A = sp.random(n, n, density=density, format="csr", random_state=rng)
    A.data = rng.standard_normal(A.nnz)
    return A, rng.standard_normal((n, f)), rng.standard_normal((f, h))


def _check_cos_count(A, X, W):
    compiled = sparsad.compile(COS_COUNT)(A=A, X=X, W=W)
    interpreted = sparsad.program(COS_COUNT)(A=A, X=X, W=W)
    assert compiled == pytest.approx(interpreted, rel=1e-12, abs=1e-12)
    assert compiled == pytest.approx(_cos_count(A, X, W), rel=1e-12, abs=1e-12)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), density=st.sampled_from([0.0, 0.15, 0.4, 0.8]))
def test_empty_rows_give_empty_vectors(seed, density):  # one shape: one kernel
    _check_cos_count(*_inputs(seed, 7, 3, 2, density))


@pytest.mark.parametrize("f, h", [(0, 2), (3, 0)])
def test_empty_column_ranges_give_empty_vectors(f, h):
    _check_cos_count(*_inputs(5, 6, f, h, 0.4))


def test_the_gcn_derivative_counts_instead_of_marking_and_matches_numpy():
    """The rows h and z are prefixes (counted, not marked), and so is the row written from z(j):
    its writes wait on z's entry test (an empty z reads {}, not 0.0, as the interpreter has it;
    `opt.emptiness`), which is loop-invariant, so it runs once per row of A, before the loops
    (`codegen.invariant_tests`), and stops at z's first entry instead of a pass over z."""
    layer = """
sum(<i, r> in A)
  let h = sum(<j, a> in r) a * X(j) in
  let z = sum(<f, hf> in h) hf * W(f) in
  { i -> sum(<o, zo> in z) { o -> tanh(zo) } }"""
    A, X, W = _inputs(3, 9, 4, 3, 0.3)
    ct = np.random.default_rng(4).standard_normal((9, 3))
    vjp = sparsad.vjp(layer, wrt="X")
    got = vjp(A=A, X=X, W=W, cotangent=ct)
    G = ct * (1 - np.tanh(A @ X @ W) ** 2)
    assert isinstance(got, np.ndarray) and got.shape == X.shape
    np.testing.assert_allclose(got, A.T @ (G @ W.T), rtol=1e-12, atol=1e-12)
    kernel = vjp.show("code").split("def kernel", 1)[1]
    assert "_mark" not in kernel  # every intermediate row is a prefix
    lines = kernel.splitlines()
    for n, line in enumerate(lines):  # every entry-test loop stops at its first entry
        if line.strip().startswith("nonempty") and line.strip().endswith("= True"):
            assert lines[n + 1].strip() == "break", "\n".join(lines[n - 3:n + 2])


def test_a_sum_into_one_key_runs_in_a_register_and_reads_proven_keys_unguarded():
    """W @ z per row of h: the inner loop sums into h2[f] (f fixed in it) and reads z at keys of
    the range z was written over: no guard, one add per row entry."""
    text = """
sum(<i, r> in A)
  let h = sum(<j, a> in r) a * X(j) in
  let z = sum(<f, hf> in h) hf * W(f) in
  let h2 = sum(<f, _> in h) sum(<_, o> in (0:W_cols)) { unique(f) -> z(o) * W(f)(o) } in
  sum(<f, v> in h2) cos(v)"""
    A, X, W = _inputs(8, 7, 3, 2, 0.4)
    program = sparsad.compile(text)
    Z = A @ X @ W
    H2 = Z @ W.T
    nonempty = np.diff(A.indptr) > 0
    expected = float(np.cos(H2[nonempty]).sum())
    assert program(A=A, X=X, W=W, W_cols=2) == pytest.approx(expected, rel=1e-12)
    assert sparsad.program(text)(A=A, X=X, W=W, W_cols=2) == pytest.approx(expected, rel=1e-12)
    kernel = program.show("code").split("def kernel", 1)[1]
    # z(o) reads proven keys unguarded; z's entry test runs before the f and o loops, so the
    # sum into h2[f] is a register again
    assert "_sum_" in kernel and "rt.load" not in kernel
    assert "_mark" not in kernel
