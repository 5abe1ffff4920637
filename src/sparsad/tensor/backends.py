"""Array operations of each executor backend, as tables. Front ends are imported lazily here only."""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from sparsad.errors import DensifyWarning, DTypeError, InputError, UnsupportedError, dense_size_message

BACKENDS = ("numpy", "torch", "jax", "dask")


# Executors compute in one real floating dtype; half precision inverts in single precision.
DTYPES = ("float16", "float32", "float64")


def check_dtype(dtype) -> np.dtype:
    """The executor dtype as a NumPy dtype, or our error naming the supported ones."""
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt is None or dt.name not in DTYPES:
        raise DTypeError(f"Executor: dtype={dtype!r} is not supported; use one of {DTYPES} "
                         "(complex and integer tensors are not supported)")
    return dt


@dataclass(frozen=True)
class Backend:
    """What an executor needs from an array library."""

    name: str                       # the opt_einsum backend name
    asarray: Callable[[Any, Any], Any]
    eye: Callable[[int, Any], Any]
    funcs: dict                     # elementwise name -> callable
    sum: Callable[[Any, tuple], Any]
    transpose: Callable[[Any, tuple], Any]
    tensorinv: Callable[[Any, int], Any]    # raises SingularInverse (or returns non-finite values)
    to_numpy: Callable[[Any], np.ndarray]
    all_finite: Callable[[Any], Any]        # a boolean (a traced one under jax.jit)
    power: Callable[[Any, float], Any] = lambda a, p: a ** p


class SingularInverse(Exception):
    """Raised by a backend's tensorinv; the executor turns it into an InputError naming the node."""


def _elementwise(mod) -> dict:
    return {
        "exp": mod.exp, "log": mod.log, "sin": mod.sin, "cos": mod.cos, "tanh": mod.tanh,
        "sqrt": mod.sqrt, "reciprocal": lambda x: 1.0 / x, "square": lambda x: x * x,
        "sech2": lambda x: 1.0 / mod.cosh(x) ** 2,
    }


def _numpy() -> Backend:
    def tensorinv(a, ind):
        wide = a.astype(np.float32) if a.dtype == np.float16 else a
        try:
            inv = np.linalg.tensorinv(wide, ind)
        except np.linalg.LinAlgError as exc:
            raise SingularInverse(str(exc)) from None
        return inv.astype(a.dtype, copy=False)

    return Backend("numpy", lambda a, dt: np.asarray(a, dtype=dt), lambda n, dt: np.eye(n, dtype=dt),
                   _elementwise(np), lambda a, ax: a.sum(axis=ax), lambda a, p: a.transpose(p),
                   tensorinv, np.asarray, lambda a: bool(np.isfinite(a).all()))


def _torch() -> Backend:
    import torch

    dtypes = {np.dtype("float64"): torch.float64, np.dtype("float32"): torch.float32,
              np.dtype("float16"): torch.float16}

    def asarray(a, dt):
        if isinstance(a, torch.Tensor):
            return a.detach().to(dtypes[np.dtype(dt)])
        return torch.as_tensor(np.array(a, dtype=dt), dtype=dtypes[np.dtype(dt)])

    def tensorinv(a, ind):
        wide = a.float() if a.dtype == torch.float16 else a
        try:
            inv = torch.linalg.tensorinv(wide, ind=ind)
        except torch.linalg.LinAlgError as exc:
            raise SingularInverse(str(exc)) from None
        return inv.to(a.dtype)

    return Backend("torch", asarray, lambda n, dt: torch.eye(n, dtype=dtypes[np.dtype(dt)]),
                   _elementwise(torch), lambda a, ax: a.sum(dim=ax) if ax else a,
                   lambda a, p: a.permute(p), tensorinv,
                   lambda a: a.detach().cpu().numpy(), lambda a: bool(torch.isfinite(a).all()))


def _jax() -> Backend:
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    def tensorinv(a, ind):
        # JAX returns inf/nan for a singular matrix (no exception): the executor checks finiteness
        wide = a.astype(jnp.float32) if a.dtype == jnp.float16 else a
        return jnp.linalg.tensorinv(wide, ind).astype(a.dtype)

    return Backend("jax", lambda a, dt: jnp.asarray(a, dtype=dt), lambda n, dt: jnp.eye(n, dtype=dt),
                   _elementwise(jnp), lambda a, ax: a.sum(axis=ax), lambda a, p: jnp.transpose(a, p),
                   tensorinv, np.asarray, lambda a: jnp.isfinite(a).all())


def _checked_inv_block(block: np.ndarray) -> np.ndarray:
    try:
        inv = np.linalg.inv(block.astype(np.float32) if block.dtype == np.float16 else block)
    except np.linalg.LinAlgError as exc:
        raise SingularInverse(str(exc)) from None
    if not np.isfinite(inv).all():
        raise SingularInverse("the inverse has non-finite entries")
    return inv.astype(block.dtype, copy=False)


def _dask() -> Backend:
    import dask.array as da

    def tensorinv(a, ind):
        rows = int(np.prod(a.shape[:ind]))
        square = a.reshape(rows, -1).rechunk((rows, rows))
        inv = square.map_blocks(_checked_inv_block, dtype=a.dtype)     # checked when computed
        return inv.reshape(a.shape[ind:] + a.shape[:ind])

    def asarray(a, dt):
        if isinstance(a, da.Array):
            return a.astype(dt)
        return da.from_array(np.asarray(a, dtype=dt))

    return Backend("dask", asarray, lambda n, dt: da.eye(n, dtype=dt), _elementwise(da),
                   lambda a, ax: a.sum(axis=ax), lambda a, p: a.transpose(p), tensorinv,
                   lambda a: np.asarray(a.compute() if hasattr(a, "compute") else a),
                   lambda a: True)


_FACTORIES = {"numpy": _numpy, "torch": _torch, "jax": _jax, "dask": _dask}
_CACHE: dict[str, Backend] = {}


def get_backend(name: str) -> Backend:
    if name not in _FACTORIES:
        raise InputError(f"Executor: backend={name!r}; choose one of {BACKENDS}")
    if name not in _CACHE:
        _CACHE[name] = _FACTORIES[name]()
    return _CACHE[name]


# ----- sparse operands (pydata/sparse, scipy.sparse) --------------------------------------
def is_sparse(array) -> bool:
    import scipy.sparse as sp

    if sp.issparse(array):
        return True
    mod = type(array).__module__
    return mod.startswith("sparse")


def to_pydata(array):
    """scipy.sparse -> pydata COO without densifying; pydata arrays pass through."""
    import scipy.sparse as sp
    import sparse

    if sp.issparse(array):
        return sparse.COO.from_scipy_sparse(array)
    return array


def sparse_einsum(subscripts: str, *arrays):
    """einsum with at least one sparse operand, never densifying a sparse input."""
    import sparse

    ops = [to_pydata(a) if is_sparse(a) else np.asarray(a) for a in arrays]
    result = sparse.einsum(subscripts, *ops)
    # The result is a new tensor: store it densely when it is mostly full anyway. A full
    # contraction is a scalar (pydata/sparse >= 0.19 returns it as a 0-d COO).
    if isinstance(result, sparse.SparseArray) and (
            result.ndim == 0 or (result.size and result.nnz > 0.25 * result.size)):
        return result.todense()
    return result


def densify(array, what: str):
    """Explicitly materialise a sparse array where no sparse kernel exists, with a warning."""
    if not is_sparse(array):
        return array
    warnings.warn(f"{what}: densifying a sparse operand of shape {array.shape} "
                  f"({dense_size_message(array.shape)})", DensifyWarning, stacklevel=3)
    return to_pydata(array).todense()


def check_sparse_backend(name: str) -> None:
    if name != "numpy":
        raise UnsupportedError(f"sparse Variables run on backend='numpy' (pydata/sparse); got {name!r}")
