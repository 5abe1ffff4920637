"""Sparse linear algebra on `sparsad.jax.SparseMatrix` (or BCOO/BCSR), differentiable in every
JAX transform.

Products are written as gathers and segment sums over the term lists of `sparsad.ops.contract`
(the same index arrays the Numba kernels use), so jit, grad, jvp, vmap, jacfwd and jacrev apply
natively and gradients of sparse operands are masked. Solves are `jax.lax.custom_linear_solve`
around SciPy (triangular, direct) or JAX's CG: implicit gradients, any order, vmap over
right-hand sides.

>>> import jax, jax.numpy as jnp, scipy.sparse as sp
>>> from sparsad.jax import SparseMatrix, spmv
>>> A = SparseMatrix.from_scipy(sp.eye(3, format="csr") * 2.0)
>>> spmv(A, jnp.ones(3)).tolist()
[2.0, 2.0, 2.0]
"""
from __future__ import annotations

from typing import Any

import numpy as np

from sparsad.errors import DTypeError, InputError, ShapeError
from sparsad.jax.matrix import SparseMatrix, as_sparse
from sparsad.ops.contract import Terms, spmm_terms


def _jax():
    import jax

    return jax


def contract(terms: Terms, out: int, operands: dict[int, Any]) -> Any:
    """out[idx[out][t]] += u[idx[u][t]] * v[idx[v][t]] (see sparsad.ops.contract), in jax.numpy.

    >>> import numpy as np, jax.numpy as jnp
    >>> from sparsad.ops import CSRPattern, spmm_terms
    >>> pattern = CSRPattern(np.array([0, 2, 3]), np.array([0, 1, 1]), (2, 2))  # [[1, 2], [0, 3]]
    >>> operands = {0: jnp.array([1.0, 2.0, 3.0]), 1: jnp.array([1.0, 1.0])}  # A's values, x = [1, 1]
    >>> contract(spmm_terms(pattern), 2, operands).tolist()  # A @ x
    [3.0, 3.0]
    """
    jax = _jax()
    u_role, v_role = terms.roles_into(out)
    u, v = operands[u_role], operands[v_role]
    gu, gv = u[terms.idx[u_role]], v[terms.idx[v_role]]
    if out == terms.scalar:
        products = gu * gv
        if products.ndim == 2:
            products = products.sum(axis=1)
    else:
        products = (gu[:, None] if gv.ndim == 2 else gu) * gv
    return jax.ops.segment_sum(products, terms.idx[out], num_segments=terms.sizes[out])


def _dense_operand(A: SparseMatrix, x: Any, name: str, length: int) -> Any:
    import jax.numpy as jnp

    x = jnp.asarray(x) if not hasattr(x, "shape") else x
    if x.ndim not in (1, 2) or x.shape[0] != length:
        raise ShapeError(f"{name} has shape {tuple(x.shape)}; it must be ({length},) or ({length}, C)")
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise DTypeError(f"{name} must be a floating array, got {x.dtype}")
    return x


def spmv(A: Any, x: Any) -> Any:
    """A @ x for a vector x (differentiable in A's values and x).

    >>> import numpy as np, scipy.sparse as sp, jax.numpy as jnp, sparsad.jax as sj
    >>> A = sj.SparseMatrix.from_scipy(sp.csr_matrix(np.array([[4.0, 1.0], [1.0, 3.0]], np.float32)))
    >>> b = jnp.array([1.0, 2.0])
    >>> sj.spmv(A, b).tolist()
    [6.0, 7.0]
    >>> import jax
    >>> jax.grad(lambda v: sj.spmv(A.with_values(v), b).sum())(A.values).tolist()  # one per stored entry
    [1.0, 2.0, 1.0, 2.0]
    """
    A = as_sparse(A, "A")
    x = _dense_operand(A, x, "x", A.shape[1])
    if x.ndim != 1:
        raise ShapeError(f"x must be 1-D for spmv, got shape {tuple(x.shape)}; use spmm")
    return contract(spmm_terms(A.pattern), 2, {0: A.values, 1: x})


def spmm(A: Any, X: Any) -> Any:
    """A @ X for X of shape (n,) or (n, C).

    >>> import numpy as np, scipy.sparse as sp, jax.numpy as jnp, sparsad.jax as sj
    >>> A = sj.SparseMatrix.from_scipy(sp.csr_matrix(np.array([[4.0, 1.0], [1.0, 3.0]], np.float32)))
    >>> sj.spmm(A, jnp.eye(2)).tolist()
    [[4.0, 1.0], [1.0, 3.0]]
    """
    A = as_sparse(A, "A")
    X = _dense_operand(A, X, "X", A.shape[1])
    return contract(spmm_terms(A.pattern), 2, {0: A.values, 1: X})


def _natural(result: SparseMatrix, like: Any) -> Any:
    """BCOO/BCSR in -> the same kind out; SparseMatrix otherwise."""
    kind = type(like).__name__
    if kind == "BCOO":
        return result.to_bcoo()
    if kind == "BCSR":
        from jax.experimental import sparse as jsparse

        return jsparse.BCSR.from_bcoo(result.to_bcoo())
    return result


def spgemm(A: Any, B: Any) -> Any:
    """A @ B on the structural product pattern; masked gradients for both operands.

    >>> import numpy as np, scipy.sparse as sp, jax.numpy as jnp, sparsad.jax as sj
    >>> A = sj.SparseMatrix.from_scipy(sp.csr_matrix(np.array([[4.0, 1.0], [1.0, 3.0]], np.float32)))
    >>> sj.spgemm(A, A).to_dense().tolist()
    [[17.0, 7.0], [7.0, 10.0]]
    """
    SA, SB = as_sparse(A, "A"), as_sparse(B, "B")
    pattern, terms = SA.pattern.matmul(SB.pattern)
    return _natural(SparseMatrix(pattern, contract(terms, 2, {0: SA.values, 1: SB.values})), A)


def add(A: Any, B: Any, alpha: Any = 1.0, beta: Any = 1.0) -> Any:
    """alpha A + beta B on the union pattern.

    >>> import numpy as np, scipy.sparse as sp, jax.numpy as jnp, sparsad.jax as sj
    >>> A = sj.SparseMatrix.from_scipy(sp.csr_matrix(np.array([[4.0, 1.0], [1.0, 3.0]], np.float32)))
    >>> sj.add(A, A, beta=-0.5).to_dense().tolist()
    [[2.0, 0.5], [0.5, 1.5]]
    """
    import jax.numpy as jnp

    SA, SB = as_sparse(A, "A"), as_sparse(B, "B")
    pattern, map_a, map_b = SA.pattern.union(SB.pattern)
    values = jnp.zeros(pattern.nnz, dtype=jnp.result_type(SA.values, SB.values))
    values = values.at[map_a].add(alpha * SA.values).at[map_b].add(beta * SB.values)
    return _natural(SparseMatrix(pattern, values), A)


def transpose(A: Any) -> Any:
    """A^T (a differentiable permutation of the values; BCOO/BCSR in, the same kind out).

    >>> import numpy as np, scipy.sparse as sp, sparsad.jax as sj
    >>> U = sj.SparseMatrix.from_scipy(sp.csr_matrix(np.array([[1.0, 2.0], [0.0, 3.0]], np.float32)))
    >>> sj.transpose(U).to_dense().tolist()
    [[1.0, 0.0], [2.0, 3.0]]
    """
    SA = as_sparse(A, "A")
    pattern, perm = SA.pattern.transpose
    return _natural(SparseMatrix(pattern, SA.values[perm]), A)


def scale(A: Any, alpha: Any) -> Any:
    """alpha A on A's pattern, differentiable in alpha and A's values.

    >>> import numpy as np, scipy.sparse as sp, sparsad.jax as sj
    >>> A = sj.SparseMatrix.from_scipy(sp.csr_matrix(np.array([[4.0, 1.0], [1.0, 3.0]], np.float32)))
    >>> sj.scale(A, 0.5).values.tolist()
    [2.0, 0.5, 0.5, 1.5]
    """
    SA = as_sparse(A, "A")
    return _natural(SparseMatrix(SA.pattern, alpha * SA.values), A)


# -- solves ---------------------------------------------------------------------------------------

def _callback(fn, like, *args):
    jax = _jax()
    return jax.pure_callback(fn, jax.ShapeDtypeStruct(like.shape, like.dtype), *args, vmap_method="sequential")


def _square(A: SparseMatrix, b: Any, name: str) -> Any:
    """b as an array of A's and b's common floating dtype (custom_linear_solve needs the matvec's
    result and b of one dtype), after checking that A is square and b fits it."""
    import jax.numpy as jnp

    if A.shape[0] != A.shape[1]:
        raise ShapeError(f"{name} must be square, got shape {A.shape}")
    b = b if hasattr(b, "ndim") and hasattr(b, "dtype") else jnp.asarray(b)
    if b.ndim != 1 or b.shape[0] != A.shape[0]:
        raise ShapeError(f"b has shape {tuple(b.shape)}; it must be ({A.shape[0]},)")
    return b.astype(jnp.result_type(A.values.dtype, b.dtype, jnp.float32))


def _linear_solve(A: SparseMatrix, b: Any, solve_host, unit_diagonal: bool = False) -> Any:
    """x = M^{-1} b with implicit derivatives, M = A (or, with `unit_diagonal`, A's off-diagonal part
    plus the identity): custom_linear_solve differentiates through the matvec (our spmv, so through
    A's values) and solves transposed systems for the VJP."""
    jax = _jax()
    pattern = A.pattern
    values = A.values
    if unit_diagonal:  # the matvec must see the matrix the solve inverts, stored diagonal or not
        values = values * (pattern.rows != pattern.indices)

    def matvec(x):
        product = contract(spmm_terms(pattern), 2, {0: values, 1: x})
        return product + x if unit_diagonal else product

    def host(transposed):
        def run(v, r):
            matrix = pattern.to_scipy(np.asarray(v))
            if unit_diagonal:
                import scipy.sparse

                matrix = matrix + scipy.sparse.eye(matrix.shape[0], format="csr")
            return solve_host(matrix.T.tocsr() if transposed else matrix, np.asarray(r), transposed).astype(r.dtype)
        return run

    def solve(_matvec, rhs):
        return _callback(host(False), rhs, jax.lax.stop_gradient(values), rhs)

    def transpose_solve(_vecmat, rhs):
        return _callback(host(True), rhs, jax.lax.stop_gradient(values), rhs)

    return jax.lax.custom_linear_solve(matvec, b, solve, transpose_solve)


def triangular_solve(L: Any, b: Any, lower: bool = True, unit_diagonal: bool = False) -> Any:
    """Solve L x = b for a sparse triangular L (SciPy on the host), differentiable in L's values and b.
    With `unit_diagonal`, L's stored diagonal is ignored and taken as ones.

    >>> import numpy as np, scipy.sparse as sp, jax.numpy as jnp, sparsad.jax as sj
    >>> L = sj.SparseMatrix.from_scipy(sp.csr_matrix(np.array([[2.0, 0.0], [1.0, 4.0]], np.float32)))
    >>> sj.triangular_solve(L, jnp.array([1.0, 2.0])).tolist()
    [0.5, 0.375]
    """
    import scipy.sparse.linalg as spla

    SL = as_sparse(L, "L")
    b = _square(SL, b, "L")
    strict = SL.pattern.indices > SL.pattern.rows if lower else SL.pattern.indices < SL.pattern.rows
    if np.any(strict):
        raise InputError(f"L has entries {'above' if lower else 'below'} the diagonal; it is not "
                         f"{'lower' if lower else 'upper'} triangular (pass lower={not lower}?)")

    def host(matrix, rhs, transposed):
        return spla.spsolve_triangular(matrix, rhs, lower=lower != transposed)

    return _linear_solve(SL, b, host, unit_diagonal)


def spsolve(A: Any, b: Any) -> Any:
    """Solve A x = b by a sparse direct solver (SuperLU on the host), differentiable in A's values and b.

    >>> import numpy as np, scipy.sparse as sp, jax.numpy as jnp, sparsad.jax as sj
    >>> A = sj.SparseMatrix.from_scipy(sp.csr_matrix(np.array([[4.0, 1.0], [1.0, 3.0]], np.float32)))
    >>> b = jnp.array([1.0, 2.0])
    >>> [round(v, 6) for v in sj.spsolve(A, b).tolist()]  # (1/11, 7/11)
    [0.090909, 0.636364]
    """
    import scipy.sparse.linalg as spla

    SA = as_sparse(A, "A")
    b = _square(SA, b, "A")
    return _linear_solve(SA, b, lambda matrix, rhs, _transposed: spla.spsolve(matrix.tocsc(), rhs))


def cg(A: Any, b: Any, x0: Any = None, *, rtol: float = 1e-12, atol: float = 0.0, maxiter: int | None = None,
       M: Any = None, tol: float | None = None) -> Any:
    """Conjugate gradients for symmetric positive definite A (JAX's CG over our spmv), with implicit
    gradients: the backward pass is one more CG solve, not a differentiation of the iterations.

    Arguments as SciPy's `cg` (x0, rtol, atol, maxiter, M: a callable or matrix applying the
    preconditioner); `tol` is the deprecated name of rtol. Returns x (JAX's CG reports no info).

    >>> import numpy as np, scipy.sparse as sp, jax.numpy as jnp, sparsad.jax as sj
    >>> A = sj.SparseMatrix.from_scipy(sp.csr_matrix(np.array([[4.0, 1.0], [1.0, 3.0]], np.float32)))
    >>> b = jnp.array([1.0, 2.0])
    >>> [round(v, 5) for v in sj.cg(A, b, rtol=1e-6).tolist()]
    [0.09091, 0.63636]
    """
    import jax.numpy as jnp

    jax = _jax()
    SA = as_sparse(A, "A")
    b = _square(SA, b, "A")
    if tol is not None:
        import warnings

        warnings.warn("cg(tol=...) is deprecated; use rtol=... (and atol=...) as in SciPy", DeprecationWarning,
                      stacklevel=2)
        rtol = tol
    if rtol <= 0 and atol <= 0:
        raise InputError(f"rtol or atol must be positive, got rtol={rtol}, atol={atol}")
    pattern = SA.pattern

    def matvec(x):
        return contract(spmm_terms(pattern), 2, {0: SA.values, 1: x})

    def solve(mv, rhs):
        x = jax.scipy.sparse.linalg.cg(mv, rhs, x0=x0, tol=rtol, atol=atol, maxiter=maxiter, M=M)[0]
        # JAX's CG stops at once on a NaN residual and returns x0 (zeros): a NaN or inf in A or b
        # would come back as a finite, wrong x. One more product tells: then x is NaN.
        finite = jnp.isfinite(jnp.sum(mv(x)) + jnp.sum(rhs))
        return jnp.where(finite, x, jnp.nan)

    # not symmetric=True: that takes the transposed operator to be the operator itself, also
    # where a derivative perturbs A's values one stored entry at a time (A + dA is then not
    # symmetric), and second derivatives in A's values come out wrong. The transpose solve runs
    # CG on the operator JAX derives by transposing matvec (the same matrix, numerically).
    return jax.lax.custom_linear_solve(matvec, b, solve, transpose_solve=solve)
