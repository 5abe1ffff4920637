"""Framework-neutral differentiable sparse linear algebra: patterns, Numba kernels, rules.

Arrays in, arrays out; nothing here imports a front end (torch, jax). The bridges wrap these.
"""
from sparsad.ops.contract import Terms, spmm_terms
from sparsad.ops.pattern import CSRPattern
from sparsad.ops.solve import CholeskyFactor, ConvergenceInfo, ConvergenceWarning, LUFactor, cg, triangular_solve

__all__ = ["CSRPattern", "Terms", "spmm_terms", "LUFactor", "CholeskyFactor", "ConvergenceInfo", "cg", "triangular_solve",
           "ConvergenceWarning"]
