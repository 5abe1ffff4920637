"""JAX bridge: sparse linear algebra on a pytree SparseMatrix (or BCOO/BCSR) and any sparsad
program as a JAX function, under jit, grad, jvp, vmap, jacfwd and jacrev.

Gradient convention: masked (one number per stored entry). Float64 work needs JAX's x64 mode;
this package never switches it on globally (use `jax.enable_x64(True)` as a context manager).
"""
from sparsad.jax.jacobian import hessian, jacobian
from sparsad.jax.linalg import add, cg, contract, scale, spgemm, spmm, spmv, spsolve, transpose, triangular_solve
from sparsad.jax.matrix import SparseMatrix
from sparsad.jax.program import JaxProgram, compile_program

__all__ = ["SparseMatrix", "spmv", "spmm", "spgemm", "add", "scale", "transpose", "triangular_solve",
           "spsolve", "cg", "contract", "compile_program", "JaxProgram", "jacobian", "hessian"]
