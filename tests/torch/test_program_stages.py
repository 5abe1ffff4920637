"""compile_program on programs with top-level lets (sparsad.opt.stages): the chained stages give
the values and the gradients of dense torch autograd (float64, 1e-10) for every wrt input,
sparse values included (masked), under torch.func and torch.compile."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from torch.func import grad, jacrev, jvp, vmap

import sparsad.torch as st
from sparsad.torch import SparseMatrix

TOL = dict(rtol=1e-10, atol=1e-10)
XW = "sum(<k, xr> in X) { k -> sum(<f, x> in xr) sum(<c, w> in W(f)) { c -> x * w } }"


def _agg(h: str) -> str:
    return f"sum(<i, r> in A) {{ i -> sum(<k, a> in r) sum(<c, v> in {h}(k)) {{ c -> a * v }} }}"


# name: (program, dense reference of (A, X, W), the lets cut)
PROGRAMS = {
    "gcn (dense intermediate)": (f"let XW = {XW} in {_agg('XW')}", lambda A, X, W: A @ (X @ W), ["XW"]),
    "read twice": (f"let XW = {XW} in let s = sum(<k, r> in XW) sum(<c, v> in r) v * v in "
                   f"sum(<i, r> in A) {{ i -> sum(<k, a> in r) sum(<c, v> in XW(k)) {{ c -> a * v * s + XW(i)(c) }} }}",
                   lambda A, X, W: (A @ (X @ W)) * ((X @ W) ** 2).sum() + _stored_per_row(A) * (X @ W), ["XW", "s"]),
    "nested chain, sparse intermediate": (
        # B: A's pattern scaled by row sums of X W (a SparseMatrix between the stages)
        f"let XW = {XW} in "
        "let B = sum(<i, r> in A) { i -> sum(<j, a> in r) { j -> a * (sum(<c, v> in XW(j)) v) } } in "
        "sum(<i, r> in B) { i -> sum(<k, b> in r) sum(<c, v> in XW(k)) { c -> b * v * B(k)(i) } }",
        lambda A, X, W: _nested(A, X @ W), ["XW", "B"]),
    "shadowed input": (f"let X = {XW} in {_agg('X')}", lambda A, X, W: A @ (X @ W), ["X_1"]),
}


def _stored_per_row(A):
    """Each row's number of stored entries (the program adds XW(i) once per entry of row i)."""
    return (A.detach() != 0).sum(1, keepdim=True).to(A.dtype)


def _nested(A, XW):
    B = A * XW.sum(1)[None, :]
    return (B * B.T) @ XW


def _inputs(seed: int = 0, n: int = 7, f: int = 5, c: int = 3, sparse_x: bool = False):
    rng = np.random.default_rng(seed)
    matrix = sp.random(n, n, density=0.35, format="csr", random_state=seed) + sp.eye(n, format="csr")
    matrix = matrix.tocsr()
    matrix.data = rng.standard_normal(matrix.nnz)
    A = SparseMatrix.from_scipy(matrix, requires_grad=True)
    if sparse_x:  # X W is then a sparse-dense product: a compiled stage, not a matmul
        features = sp.random(n, f, density=0.5, format="csr", random_state=seed + 1)
        features.data = rng.standard_normal(features.nnz)
        X = SparseMatrix.from_scipy(features, requires_grad=True)
    else:
        X = torch.tensor(rng.standard_normal((n, f)), requires_grad=True)
    W = torch.tensor(rng.standard_normal((f, c)), requires_grad=True)
    return A, X, W


def _dense_of(A: SparseMatrix, values: torch.Tensor) -> torch.Tensor:
    """A's dense matrix as a differentiable function of its values."""
    rows = torch.as_tensor(A.pattern.rows, dtype=torch.long)
    cols = torch.as_tensor(A.pattern.indices, dtype=torch.long)
    return torch.zeros(A.shape, dtype=values.dtype).index_put((rows, cols), values)


def _cut(program) -> list:
    plans = [p for p in program._stages._plans.values() if p]
    assert plans, "the program ran as one op: no let was cut"
    return [entry[1] for entry in plans[0][:-1]]


@pytest.mark.parametrize("sparse_x", [False, True])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_values_and_gradients_of_every_input_match_dense_autograd(name, sparse_x):
    text, reference, cut = PROGRAMS[name]
    A, X, W = _inputs(sparse_x=sparse_x)
    x_leaf = X.values if sparse_x else X
    layer = st.compile_program(text)
    out = layer(A=A, X=X, W=W)
    out = out.to_dense() if isinstance(out, SparseMatrix) else out
    seed = torch.randn(out.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    got = torch.autograd.grad((out * seed).sum(), (A.values, x_leaf, W))
    assert _cut(layer) == cut
    values, x_values = A.values.detach().clone().requires_grad_(), x_leaf.detach().clone().requires_grad_()
    Xd = _dense_of(X, x_values) if sparse_x else x_values
    Wd = W.detach().clone().requires_grad_()
    want_out = reference(_dense_of(A, values), Xd, Wd)
    want = torch.autograd.grad((want_out * seed).sum(), (values, x_values, Wd))
    torch.testing.assert_close(out, want_out, **TOL)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, **TOL)
    # positional inputs (in program.inputs order: A, W, X) reach the same chain
    X = SparseMatrix._wrap(X.pattern, X.values.detach()) if sparse_x else X.detach()
    again = layer(A, W.detach(), X)
    torch.testing.assert_close(again.to_dense() if isinstance(again, SparseMatrix) else again, out.detach(), **TOL)


def test_second_derivatives_through_the_chain_match_dense():
    text, reference, _ = PROGRAMS["read twice"]
    A, X, W = _inputs(2)
    A = SparseMatrix._wrap(A.pattern, A.values.detach())
    layer = st.compile_program(text, wrt=("W",))
    dense_A = A.to_dense()
    v = torch.randn(W.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(3))

    def hvp(f):
        Wl = W.detach().clone().requires_grad_()
        (g,) = torch.autograd.grad(f(Wl), Wl, create_graph=True)
        return torch.autograd.grad((g * v).sum(), Wl)[0]

    got = hvp(lambda W: (layer(A=A, X=X.detach(), W=W) ** 2).sum())
    want = hvp(lambda W: (reference(dense_A, X.detach(), W) ** 2).sum())
    torch.testing.assert_close(got, want, **TOL)


def test_torch_func_transforms_through_the_chain_match_dense():
    text, reference, _ = PROGRAMS["gcn (dense intermediate)"]
    A, X, W = _inputs(4)
    A = SparseMatrix._wrap(A.pattern, A.values.detach())
    X, W = X.detach(), W.detach()
    layer = st.compile_program(text, wrt=("W", "X"))
    dense_A = A.to_dense()

    def ours(W):
        return layer(A=A, X=X, W=W)

    def dense(W):
        return reference(dense_A, X, W)

    torch.testing.assert_close(grad(lambda W: (ours(W) ** 2).sum())(W), grad(lambda W: (dense(W) ** 2).sum())(W), **TOL)
    torch.testing.assert_close(jacrev(ours)(W), jacrev(dense)(W), **TOL)
    tangent = torch.randn(W.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    for got, want in zip(jvp(ours, (W,), (tangent,)), jvp(dense, (W,), (tangent,))):
        torch.testing.assert_close(got, want, **TOL)
    Ws = torch.stack([W, 2 * W, -W])
    torch.testing.assert_close(vmap(ours)(Ws), vmap(dense)(Ws), **TOL)
    torch.testing.assert_close(vmap(grad(lambda W: ours(W).sum()))(Ws), vmap(grad(lambda W: dense(W).sum()))(Ws), **TOL)


def test_torch_compile_fullgraph_matches_dense():
    text, reference, _ = PROGRAMS["nested chain, sparse intermediate"]
    A, X, W = _inputs(6)
    A = SparseMatrix._wrap(A.pattern, A.values.detach())
    layer = st.compile_program(text, wrt=("W",), out_format="dense")
    compiled = torch.compile(lambda W: (layer(A=A, X=X.detach(), W=W) ** 2).sum(), fullgraph=True,
                             backend="aot_eager")
    Wl = W.detach().clone().requires_grad_()
    loss = compiled(Wl)
    loss.backward()
    Wd = W.detach().clone().requires_grad_()
    want = (reference(A.to_dense(), X.detach(), Wd) ** 2).sum()
    want.backward()
    torch.testing.assert_close(loss, want, **TOL)
    torch.testing.assert_close(Wl.grad, Wd.grad, **TOL)
    W2 = 2.0 * W.detach()  # a second call: the graph, guarded, with new values
    torch.testing.assert_close(compiled(W2), (reference(A.to_dense(), X.detach(), W2) ** 2).sum(), **TOL)
    traced = [plan for key, plan in layer._stages._plans.items() if key[0] == "traced"]
    assert traced and [entry[1] for entry in traced[0][:-1]] == ["XW", "B"]  # stages as custom ops


def test_a_let_inside_a_loop_is_not_cut_and_an_input_outside_wrt_is_refused():
    text = ("sum(<i, r> in A) { i -> let t = sum(<j, a> in r) a * X(j)(0) in "
            "sum(<j, a> in r) { j -> a * t } }")
    assert st.compile_program(text)._stages is None
    A, X, W = _inputs(8)
    layer = st.compile_program(PROGRAMS["gcn (dense intermediate)"][0], wrt=("W",))
    with pytest.raises(ValueError, match="'X' requires grad but is not in wrt"):
        layer(A=SparseMatrix._wrap(A.pattern, A.values.detach()), X=X, W=W)
