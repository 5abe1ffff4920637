"""Adversarial cases of sparsad.torch.compile_program (review of the bridge), each against dense
torch autograd in float64."""
from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp
import torch
from torch.func import grad, jacfwd, jvp

import sparsad.torch as st
from sparsad.torch import SparseMatrix

TOL = dict(rtol=1e-10, atol=1e-10)
# one layer whose two weights have different shapes: W (features x out), C (nodes x out)
RELU_LAYER = """
sum(<i, r> in A)
  let h = sum(<j, a> in r) a * X(j) in
  sum(<o, w> in sum(<f, hf> in h) hf * W(f)) relu(w) * C(i)(o)"""


def _matrix(m, n, density, seed):
    matrix = sp.random(m, n, density=density, format="csr", random_state=seed)
    matrix.data = np.random.default_rng(seed).standard_normal(matrix.nnz)
    return matrix


def test_joint_derivatives_of_inputs_of_different_shapes_match_dense():
    # the two weights have one type but different extents: their joint vjp/jvp program does not
    # type-check, and each must get its own (it raised a ShapeError about an internal name)
    matrix = _matrix(6, 6, 0.4, 1)
    A = SparseMatrix.from_scipy(matrix)
    dense_A = torch.tensor(matrix.toarray())
    gen = torch.Generator().manual_seed(0)
    X, W, C = (torch.randn(*s, dtype=torch.float64, generator=gen) for s in ((6, 4), (4, 7), (6, 7)))
    layer = st.compile_program(RELU_LAYER, wrt=("W", "C"))

    def dense(W, C):
        return (torch.relu(dense_A @ X @ W) * C).sum()

    got = torch.autograd.grad(layer(A=A, X=X, W=W.requires_grad_(), C=C.requires_grad_()), (W, C))
    want = torch.autograd.grad(dense(W, C), (W, C))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, **TOL)
    tangents = (torch.randn(4, 7, dtype=torch.float64, generator=gen), torch.randn(6, 7, dtype=torch.float64, generator=gen))
    primals = (W.detach(), C.detach())
    _, got_t = jvp(lambda W, C: layer(A=A, X=X, W=W, C=C), primals, tangents)
    _, want_t = jvp(dense, primals, tangents)
    torch.testing.assert_close(got_t, want_t, **TOL)


def test_a_derivative_program_that_is_zero_runs_no_kernel_and_warns_nothing():
    # the Hessian of an energy in A's values is zero: the jvp of the vjp program w.r.t. A types as
    # {} (it compiled as "the empty dictionary", warned FallbackWarning and ran the interpreter)
    from sparsad.errors import FallbackWarning

    matrix = _matrix(5, 5, 0.5, 3)
    A = SparseMatrix.from_scipy(matrix)
    rows = torch.as_tensor(A.pattern.rows)
    cols = torch.as_tensor(np.asarray(A.pattern.indices, dtype=np.int64))
    energy = st.compile_program("sum(<i, r> in A) sum(<j, a> in r) a * exp(x(i)) * sin(x(j))")
    values, x = A.values.detach().clone(), torch.randn(5, dtype=torch.float64, generator=torch.Generator().manual_seed(1))

    def dense(a, x):
        return (torch.zeros(5, 5, dtype=a.dtype).index_put((rows, cols), a) * torch.outer(x.exp(), x.sin())).sum()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = jacfwd(grad(lambda a, x: energy(A=A.with_values(a), x=x), argnums=(0, 1)), argnums=(0, 1))(values, x)
    assert not [w for w in caught if issubclass(w.category, FallbackWarning) or "sparsad" in str(w.message)]
    want = jacfwd(grad(dense, argnums=(0, 1)), argnums=(0, 1))(values, x)
    for got_row, want_row in zip(got, want):
        for g, w in zip(got_row, want_row):
            torch.testing.assert_close(g, w, **TOL)
