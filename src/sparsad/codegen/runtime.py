"""Small Numba helpers that generated kernels call (imported as `rt`).

Their semantics follow `sparsad.lang.functions` (arguments are read as floats) and the
language's rule that a missing key reads as zero.
"""
from __future__ import annotations

import numpy as np
from numba import njit

_JIT = dict(cache=True, error_model="numpy", inline="always")


@njit(**_JIT)
def load(array, index):
    """array[index], or zero outside 0..len-1 (a missing key)."""
    if 0 <= index < array.shape[0]:
        return array[index]
    return array.dtype.type(0)


@njit(cache=True)
def grow(array):
    """A copy of array with twice the room (at least 16), for append-style outputs."""
    bigger = np.empty(max(2 * array.shape[0], 16), array.dtype)
    bigger[:array.shape[0]] = array
    return bigger


@njit(**_JIT)
def sigmoid(x):
    if x >= 0:
        return 1.0 / (1.0 + np.exp(-x))
    z = np.exp(x)
    return z / (1.0 + z)


@njit(**_JIT)
def softplus(x):
    return max(x, 0.0) + np.log1p(np.exp(-abs(x)))


@njit(**_JIT)
def relu(x):
    return x if x > 0 else 0.0


@njit(**_JIT)
def step(x):
    return 1.0 if x > 0 else 0.0


@njit(**_JIT)
def sign(x):
    if x > 0:
        return 1.0
    if x < 0:
        return -1.0
    return 0.0


@njit(**_JIT)
def power(x, y):
    if x == 0.0 and y < 0:
        return np.inf
    if x < 0 and y != np.floor(y):
        return np.nan  # a real power of a negative base (numba would go complex)
    return x ** y


# language function -> code template ({0}, {1} are the float arguments)
FUNCTION_CODE = {
    "exp": "np.exp({0})", "log": "np.log({0})", "sin": "np.sin({0})", "cos": "np.cos({0})",
    "tan": "np.tan({0})", "tanh": "np.tanh({0})", "sinh": "np.sinh({0})", "cosh": "np.cosh({0})",
    "atan": "np.arctan({0})", "sqrt": "np.sqrt({0})", "abs": "abs({0})",
    "log1p": "np.log1p({0})", "expm1": "np.expm1({0})", "pow": "rt.power({0}, {1})",
    "sigmoid": "rt.sigmoid({0})", "relu": "rt.relu({0})", "softplus": "rt.softplus({0})",
    "step": "rt.step({0})", "sign": "rt.sign({0})",
}
