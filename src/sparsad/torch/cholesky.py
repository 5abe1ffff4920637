"""Sparse Cholesky for symmetric positive definite SparseMatrix: a reusable factor with
differentiable solves and log-determinant, and sampling from N(0, A^-1) or N(0, A).

The factorisation is SciPy's SuperLU in symmetric mode (fill-reducing symmetric ordering,
diagonal pivots only, so U = D L^T; see `sparsad.ops.solve.CholeskyFactor`). It is computed
once and reused by every solve, log-determinant, backward and jvp of this factor. The gradient of
logdet is the selected inverse on A's pattern, from that factor by a supernodal Takahashi
recurrence (its symbolic phase is kept on the pattern and reused by factors of new values).

Why not CHOLMOD: scikit-sparse ships no wheels on PyPI (source only); 0.5 needs SuiteSparse 7
(Debian has 5.12), 0.4.16 builds only with the system libsuitesparse-dev and a C compiler, and
measured on this project's 2-core machine its factorisation was no faster than SuperLU's symmetric
mode on the SPD matrices of the benchmark. cholespy has wheels but exposes solves only (no factor,
diagonal or log-determinant), so it cannot back logdet, its gradient or sampling.

Gradient convention (masked, as everywhere in sparsad.torch): every stored value of A is its own
variable, so d logdet / dA = A^-T and d(A^-1 b)/dA = -(A^-T g) x^T on A's pattern. For a
symmetric A these are the derivatives along perturbations of single stored entries; the
derivative along a symmetric perturbation E (E[i, j] = E[j, i]) is the sum over both entries.

Example:
    >>> import torch, scipy.sparse as sp
    >>> from sparsad.torch import SparseMatrix
    >>> A = SparseMatrix.from_scipy(sp.diags([[-1.0] * 3, [4.0] * 4, [-1.0] * 3], [-1, 0, 1]), requires_grad=True)
    >>> factor = cholesky(A)
    >>> x = factor.solve(torch.ones(4, dtype=torch.float64))
    >>> factor.logdet().backward()
    >>> A.grad.shape
    (4, 4)
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from sparsad.errors import InputError
from sparsad.ops import solve as _solve
from sparsad.torch.matrix import SparseMatrix, as_sparse_matrix
from sparsad.torch.solve import FactorHandle, SparseLU, _eager, _FactorSolve, _LogAbsDet, _as_columns


class Cholesky(SparseLU):
    """A = P L D L^T P^T of a symmetric positive definite SparseMatrix, reused by every call.

    `solve(b)` and `logdet()` are differentiable in A's values and b (first and second order);
    `sample(count)` draws from N(0, A^-1) (A as a precision matrix) or N(0, A) (covariance=True).

    >>> import torch, sparsad.torch as st
    >>> A = st.SparseMatrix.from_dense(torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=torch.float64))
    >>> b = torch.tensor([1.0, 2.0], dtype=torch.float64)
    >>> st.Cholesky(A).solve(b)
    tensor([0.0909, 0.6364], dtype=torch.float64)
    >>> st.Cholesky(A).sample(5).shape  # one sample per column
    torch.Size([2, 5])
    """

    def __init__(self, A: SparseMatrix, symmetry_rtol: float = 1e-6):
        A = as_sparse_matrix(A, "A")
        handle = FactorHandle(A.pattern, lambda pattern, values: _solve.CholeskyFactor(
            pattern, values, symmetry_rtol=symmetry_rtol))
        super().__init__(A, handle)

    def solve(self, b: torch.Tensor) -> torch.Tensor:  # A = A^T: no transpose option needed
        """x with A x = b, b of shape (n,) or (n, k)."""
        rhs, vector = _as_columns(self.A, b)
        x = _FactorSolve.apply(self.A.pattern, self.handle, False, self.A.values, rhs)
        return x[:, 0] if vector else x

    def logdet(self) -> torch.Tensor:
        """log det A (A positive definite, so det A > 0); gradient A^-T on A's pattern."""
        return _LogAbsDet.apply(self.A.pattern, self.handle, self.A.values)

    def slogdet(self) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.ones((), dtype=self.A.dtype), self.logdet()

    def sample(self, count: int = 1, *, covariance: bool = False, generator: np.random.Generator | int | None = None
               ) -> torch.Tensor:
        """`count` draws as columns of an (n, count) tensor from N(0, A^-1), or N(0, A) with covariance=True.

        The draws are not differentiable in A (they are values, not reparameterised samples)."""
        if not isinstance(count, (int, np.integer)) or count < 1:
            raise InputError(f"count must be a positive int, got {count!r}")
        rng = generator if isinstance(generator, np.random.Generator) else np.random.default_rng(generator)
        factor = self.handle.get(self.A.values.detach())
        draws = factor.sample(int(count), rng, covariance=covariance)
        return torch.as_tensor(draws, dtype=self.A.dtype)

    def __repr__(self) -> str:
        return f"Cholesky(shape={self.A.shape}, nnz={self.A.nnz})"


@torch.compiler.disable  # no custom op yet: a graph break at the call, before any pattern is read
def cholesky(A: SparseMatrix, *, symmetry_rtol: float = 1e-6) -> Cholesky:
    """Factor a symmetric positive definite SparseMatrix once; see `Cholesky`.

    Raises InputError when A is not symmetric (max |A - A^T| > symmetry_rtol max |A|), or not
    positive definite (a nonpositive pivot), naming the entry or pivot.

    >>> import torch, sparsad.torch as st
    >>> A = st.SparseMatrix.from_dense(torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=torch.float64))
    >>> b = torch.tensor([1.0, 2.0], dtype=torch.float64)
    >>> factor = st.cholesky(A)
    >>> factor.solve(b), factor.logdet()
    (tensor([0.0909, 0.6364], dtype=torch.float64), tensor(2.3979, dtype=torch.float64))
    """
    return Cholesky(A, symmetry_rtol=symmetry_rtol)
