"""PyTorch bridge: SparseMatrix (CSR pattern + differentiable values) and sparse linear algebra.

Gradient convention: masked. The gradient with respect to a SparseMatrix lives on its pattern
(`A.grad` is a SparseMatrix with A's pattern); see docs/torch.md.
"""
from sparsad.errors import require

require("torch", "torch")  # a clear "pip install 'sparsad[torch]'" instead of a bare ModuleNotFoundError

from sparsad.torch.check import gradcheck, gradgradcheck
from sparsad.torch.linalg import (
    add,
    coo_indices,
    diagonal,
    gcn_norm,
    identity,
    row_sum,
    scale,
    scale_rows_cols,
    spgemm,
    spmm,
    spmv,
    transpose,
)
from sparsad.torch.matrix import DenseResultWarning, SparseMatrix
from sparsad.ops.solve import ConvergenceInfo, ConvergenceWarning
from sparsad.torch.cholesky import Cholesky, cholesky
from sparsad.torch.krylov import LinearOperator, bicgstab, cg, gmres, minres
from sparsad.torch.fixed_point import fixed_point
from sparsad.torch.jacobian import hessian, jacobian
from sparsad.torch.layers import TAGConv
from sparsad.torch.structure import abs, add_scalar, diag, eye, power, sum, to_torch_coo, trace, tril, triu
from sparsad.torch.program import TorchProgram, compile_program
from sparsad.torch.solve import SparseLU, logdet, slogdet, splu, splu_solve, spsolve, triangular_solve

__all__ = [
    "SparseMatrix", "DenseResultWarning", "spmv", "spmm", "spgemm", "add", "scale", "transpose",
    "diagonal", "coo_indices", "row_sum", "identity", "scale_rows_cols", "gcn_norm", "triangular_solve", "spsolve", "cg",
    "gradcheck", "gradgradcheck", "compile_program", "TorchProgram",
    "cholesky", "Cholesky", "logdet", "slogdet", "splu", "splu_solve", "SparseLU",
    "minres", "gmres", "bicgstab", "LinearOperator", "ConvergenceInfo", "ConvergenceWarning", "fixed_point",
    "jacobian", "hessian", "TAGConv", "abs", "add_scalar", "diag", "eye", "power", "sum", "to_torch_coo", "trace",
    "tril", "triu",
]
