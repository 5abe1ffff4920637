"""Dense references: the §7 kernels written in jax.numpy, JAX derivatives, central differences."""
from __future__ import annotations

from typing import Callable

import numpy as np


def jax_numpy():
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    return jax, jnp


def kernels():
    """name -> (function of dense arrays, wrt argument, 'grad' or 'jacobian')."""
    _, jnp = jax_numpy()
    return {
        "batax": (lambda beta, A, x: beta * (A.T @ (A @ x)), "x", "jacobian"),
        "smmm": (lambda A, B: jnp.sum(A @ B), "B", "grad"),
        "smvm": (lambda A, X: jnp.sum(A @ X), "X", "grad"),
        "vva": (lambda V1, V2: V1 + V2, "V1", "jacobian"),
        "vvd": (lambda V1, V2: jnp.dot(V1, V2), "V1", "grad"),
        "vsm": (lambda V, s: V * s * s, "s", "jacobian"),
    }


def jax_derivative(fn: Callable, wrt: str, kind: str, inputs: dict) -> np.ndarray:
    jax, jnp = jax_numpy()
    names = list(inputs)
    position = names.index(wrt)
    args = [jnp.asarray(np.asarray(inputs[n], dtype=np.float64)) for n in names]

    def as_kwargs(*a):
        return fn(**dict(zip(names, a)))

    transform = jax.grad if kind == "grad" else jax.jacfwd
    return np.asarray(transform(as_kwargs, argnums=position)(*args))


def central_difference(fn: Callable[[dict], np.ndarray], inputs: dict, wrt: str,
                       step: float = 1e-6) -> np.ndarray:
    """d fn / d inputs[wrt], laid out as output shape + wrt shape."""
    base = np.asarray(inputs[wrt], dtype=np.float64)
    out_shape = np.shape(fn(inputs))
    result = np.zeros(out_shape + base.shape)
    for index in np.ndindex(base.shape or (1,)):
        index = index if base.shape else ()
        up, down = base.copy(), base.copy()
        if base.shape:
            up[index] += step
            down[index] -= step
        else:
            up, down = base + step, base - step
        plus = np.asarray(fn({**inputs, wrt: up}))
        minus = np.asarray(fn({**inputs, wrt: down}))
        result[(Ellipsis,) + tuple(index)] = (plus - minus) / (2 * step)
    return result


def relative_error(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    scale = max(np.max(np.abs(b), initial=0.0), 1e-300)
    return float(np.max(np.abs(a - b), initial=0.0) / scale)


def dict_to_dense(value, shape: tuple[int, ...]) -> np.ndarray:
    """An interpreter value (number or nested dict, missing = 0) as a dense array of `shape`."""
    out = np.zeros(shape)
    if not shape:
        return np.asarray(0.0 if isinstance(value, dict) else float(value))

    def fill(v, prefix):
        if len(prefix) == len(shape):
            out[prefix] += 0.0 if isinstance(v, dict) else v
            return
        if isinstance(v, dict):
            for k, item in v.items():
                fill(item, prefix + (k,))

    fill(value, ())
    return out


def pattern_mask(matrix_or_array, shape) -> np.ndarray:
    """1 where the operand stores an entry (every entry of a dense array), else 0."""
    if hasattr(matrix_or_array, "tocoo"):
        coo = matrix_or_array.tocoo()
        mask = np.zeros(shape)
        mask[coo.row, coo.col] = 1.0
        return mask
    return np.ones(shape)
