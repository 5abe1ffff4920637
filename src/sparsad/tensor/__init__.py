"""High-order tensor AD on einsum graphs (AutoHOOT): nodes, derivatives, optimizer, executors.

>>> import numpy as np
>>> from sparsad import tensor as T
>>> A = T.Variable("A", (3, 3)); x = T.Variable("x", (3,))
>>> y = T.einsum("ij,j,i->", A, x, x)
>>> g = T.grad(y, x)
>>> T.Executor([g]).run({A: np.eye(3), x: np.ones(3)})[0]
array([2., 2., 2.])
"""
from sparsad.tensor.ad import chainjacobian, grad, hessian, hvp, jacobian, jvp, vjp
from sparsad.tensor.executor import Executor, evaluate
from sparsad.tensor.nodes import (
    Add, Constant, Einsum, Elementwise, Identity, Node, Power, SampleAt, Scale, Sub, Sum, TensorInverse,
    Transpose, Variable, Zeros, cos, einsum, exp, log, norm, power, reciprocal, sin, sqrt, square, tanh,
    tensordot, tensorinv, transpose, zeros,
)

__all__ = [
    "Add", "Constant", "Einsum", "Elementwise", "Executor", "Identity", "Node", "SampleAt", "Scale", "Sub", "Sum",
    "TensorInverse", "Transpose", "Variable", "cos", "einsum", "evaluate", "exp", "grad", "hessian",
    "hvp", "jacobian", "jvp", "log", "reciprocal", "sin", "sqrt", "square", "tanh", "tensordot",
    "tensorinv", "transpose", "vjp", "zeros", "Power", "Zeros", "power", "norm", "chainjacobian",
]
from sparsad.tensor.optimize import optimize  # noqa: E402
from sparsad.tensor.source import to_source  # noqa: E402

from sparsad.tensor.networks import mpo, mps  # noqa: E402

__all__ += ["optimize", "to_source", "mps", "mpo"]
