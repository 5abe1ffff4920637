"""torch.func, forward mode and torch.compile on every sparsad.torch op, against dense autograd.

Each case is a function of plain tensors (a sparse operand enters as its values on a fixed
pattern) and its dense twin (the same values scattered into a dense matrix). Both run under the
same transform and must agree to 1e-10 in float64.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch
import torch.autograd.forward_ad as fwAD
from torch.func import grad, jacfwd, jacrev, jvp, vjp, vmap

import sparsad.torch as st
from sparsad.torch import SparseMatrix

TOL = dict(rtol=1e-10, atol=1e-10)


def _pattern(m, n, density, seed):
    matrix = sp.random(m, n, density=density, format="csr", random_state=seed)
    matrix.data = np.random.default_rng(seed).standard_normal(matrix.nnz)
    return SparseMatrix.from_scipy(matrix)


def _dense_of(A: SparseMatrix):
    rows = torch.as_tensor(A.pattern.rows)
    cols = torch.as_tensor(np.asarray(A.pattern.indices, dtype=np.int64))
    return lambda values: torch.zeros(A.shape, dtype=values.dtype).index_put((rows, cols), values)


def _on_pattern(S: SparseMatrix):
    rows = torch.as_tensor(S.pattern.rows)
    cols = torch.as_tensor(np.asarray(S.pattern.indices, dtype=np.int64))
    return lambda dense: dense[rows, cols]


def _case(name):
    """(sparse function, dense twin, primal arguments) for op `name`."""
    torch.manual_seed(0)
    A, B = _pattern(5, 4, 0.5, 1), _pattern(4, 3, 0.5, 2)
    S = _pattern(5, 4, 0.4, 3)
    Q = _pattern(5, 5, 0.4, 4)
    dA, dB, dS, dQ = _dense_of(A), _dense_of(B), _dense_of(S), _dense_of(Q)
    a, b, s, q = (M.values.detach().clone() for M in (A, B, S, Q))
    x, X = torch.randn(4, dtype=torch.float64), torch.randn(4, 2, dtype=torch.float64)
    y, r = torch.randn(5, dtype=torch.float64), torch.randn(5, dtype=torch.float64)
    al = torch.tensor(0.7, dtype=torch.float64)
    if name == "spmv":
        return (lambda a, x: st.spmv(A.with_values(a), x)), (lambda a, x: dA(a) @ x), (a, x)
    if name == "spmv_axpby":
        return ((lambda a, x, y, al: st.spmv(A.with_values(a), x, al, 2.0 * al, y)),
                (lambda a, x, y, al: al * (dA(a) @ x) + 2.0 * al * y), (a, x, y, al))
    if name == "spmm":
        return (lambda a, X: st.spmm(A.with_values(a), X)), (lambda a, X: dA(a) @ X), (a, X)
    if name == "spgemm":
        C = st.spgemm(A, B)
        on = _on_pattern(C)
        return ((lambda a, b: st.spgemm(A.with_values(a), B.with_values(b)).values),
                (lambda a, b: on(dA(a) @ dB(b))), (a, b))
    if name == "add":
        C = st.add(A, S)
        on = _on_pattern(C)
        return ((lambda a, s, al: st.add(A.with_values(a), S.with_values(s), al, 1.5).values),
                (lambda a, s, al: on(al * dA(a) + 1.5 * dS(s))), (a, s, al))
    if name == "transpose":
        on = _on_pattern(A.T)
        return (lambda a: st.transpose(A.with_values(a)).values), (lambda a: on(dA(a).T)), (a,)
    if name == "structure":  # diagonal, row sums, scaling
        def sparse(q, r):
            M = st.scale_rows_cols(Q.with_values(q), r, r.exp())
            return st.diagonal(M) * st.row_sum(M)

        def dense(q, r):
            M = r[:, None] * dQ(q) * r.exp()[None, :]
            return torch.diagonal(M) * M.sum(1)
        return sparse, dense, (q, r)
    if name == "gcn_norm":
        on = _on_pattern(st.gcn_norm(Q.with_values(q.abs())))

        def dense(q):
            M = dQ(q) + torch.eye(5, dtype=q.dtype)
            d = M.sum(1).rsqrt()
            return on(d[:, None] * M * d[None, :])
        return (lambda q: st.gcn_norm(Q.with_values(q)).values), dense, (q.abs() + 0.5,)
    raise KeyError(name)


CASES = ["spmv", "spmv_axpby", "spmm", "spgemm", "add", "transpose", "structure", "gcn_norm"]


def _close(got, want):
    if isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _close(g, w)
        return
    torch.testing.assert_close(got, want, **TOL)


@pytest.mark.parametrize("name", CASES)
def test_values_jacrev_jacfwd_match_dense(name):
    sparse, dense, args = _case(name)
    _close(sparse(*args), dense(*args))
    argnums = tuple(range(len(args)))
    _close(jacrev(sparse, argnums=argnums)(*args), jacrev(dense, argnums=argnums)(*args))
    _close(jacfwd(sparse, argnums=argnums)(*args), jacfwd(dense, argnums=argnums)(*args))


@pytest.mark.parametrize("name", CASES)
def test_grad_vjp_jvp_and_hvp_match_dense(name):
    sparse, dense, args = _case(name)
    argnums = tuple(range(len(args)))
    loss = lambda f: (lambda *a: (f(*a) ** 2).sum() + f(*a).sin().sum())  # noqa: E731
    _close(grad(loss(sparse), argnums=argnums)(*args), grad(loss(dense), argnums=argnums)(*args))
    cot = torch.randn_like(sparse(*args))
    _close(vjp(sparse, *args)[1](cot), vjp(dense, *args)[1](cot))
    tangents = tuple(torch.randn_like(t) for t in args)
    _close(jvp(sparse, args, tangents), jvp(dense, args, tangents))
    # forward-over-reverse Hessian-vector product
    hvp = lambda f: jvp(grad(loss(f), argnums=argnums), args, tangents)[1]  # noqa: E731
    _close(hvp(sparse), hvp(dense))
    # reverse-over-forward
    rof = lambda f: grad(lambda *a: jvp(f, a, tangents)[1].square().sum(), argnums=argnums)(*args)  # noqa: E731
    _close(rof(sparse), rof(dense))


@pytest.mark.parametrize("name", CASES)
def test_vmap_over_each_operand_matches_dense(name):
    sparse, dense, args = _case(name)
    for k in range(len(args)):
        batched = torch.stack([args[k] * (1.0 + 0.1 * j) + 0.01 * j for j in range(3)])
        in_dims = tuple(0 if i == k else None for i in range(len(args)))
        call = list(args)
        call[k] = batched
        _close(vmap(sparse, in_dims=in_dims)(*call), vmap(dense, in_dims=in_dims)(*call))
    all_batched = [torch.stack([t, t * 0.5 + 0.1]) for t in args]
    _close(vmap(sparse)(*all_batched), vmap(dense)(*all_batched))


@pytest.mark.parametrize("name", CASES)
def test_forward_ad_with_operands_that_require_grad(name):
    """#12.6: plain torch forward mode on leaves that require grad, and forward-over-reverse."""
    sparse, dense, args = _case(name)
    tangents = [torch.randn_like(t) for t in args]

    def run(f):
        leaves = [t.clone().requires_grad_(True) for t in args]
        with fwAD.dual_level():
            duals = [fwAD.make_dual(t, d) for t, d in zip(leaves, tangents)]
            out = f(*duals)
            jvp_out = fwAD.unpack_dual(out).tangent
            loss = (out ** 2).sum()
            grads = torch.autograd.grad(loss, duals, create_graph=True)
            hvps = [fwAD.unpack_dual(g).tangent for g in grads]
        return jvp_out, hvps

    got, want = run(sparse), run(dense)
    _close(got[0], want[0])
    for g, w in zip(got[1], want[1]):
        if w is None:
            assert g is None or torch.count_nonzero(g) == 0
        else:
            _close(g, w)


@pytest.mark.parametrize("name", CASES)
def test_double_backward_matches_dense(name):
    sparse, dense, args = _case(name)
    v = [torch.randn_like(t) for t in args]

    def second(f):
        leaves = [t.clone().requires_grad_(True) for t in args]
        g = torch.autograd.grad((f(*leaves) ** 3).sum(), leaves, create_graph=True)
        inner = sum((gi * vi).sum() for gi, vi in zip(g, v))
        return torch.autograd.grad(inner, leaves, allow_unused=True)

    got, want = second(sparse), second(dense)
    for g, w in zip(got, want):
        _close(torch.zeros_like(args[0]) if g is None else g, torch.zeros_like(args[0]) if w is None else w)


@pytest.mark.parametrize("name,backend", [(n, "aot_eager") for n in CASES]
                         + [(n, "inductor") for n in ["spmm", "spgemm", "transpose"]])
def test_torch_compile_values_and_gradients(name, backend):
    """fullgraph=True: the ops are custom ops under dynamo (no graph break), values and gradients
    equal dense autograd's."""
    import torch._dynamo

    torch._dynamo.reset()
    sparse, dense, args = _case(name)
    compiled = torch.compile(sparse, backend=backend, fullgraph=True)
    leaves = [t.clone().requires_grad_(True) for t in args]
    out = compiled(*leaves)
    _close(out, dense(*args))
    got = torch.autograd.grad(out.square().sum(), leaves)
    ref_leaves = [t.clone().requires_grad_(True) for t in args]
    want = torch.autograd.grad(dense(*ref_leaves).square().sum(), ref_leaves)
    _close(got, want)
