"""Results in the kind of the inputs: the last step of every program call.

Programs compute on NumPy and SciPy; what comes back should be what came in:

- any torch tensor among the inputs: torch out (dense tensor, torch sparse CSR tensor, 0-d
  tensor for a number), float32 when every floating torch input is float32;
- else any JAX array: JAX out (`jax.Array`, `jax.experimental.sparse.BCSR`);
- else scipy sparse *arrays* (`csr_array`, ...) and no sparse *matrix*: sparse arrays out,
  in the result's own format (`csr_matrix` -> `csr_array`, `coo_matrix` -> `coo_array`);
- else (NumPy, scipy sparse matrices, StoredTensor, numbers): unchanged (ndarray, csr_matrix,
  float).

Dense in, dense out: when no input is sparse (NumPy, dense torch or JAX arrays, numbers), a
matrix result the compiled kernel stored sparse comes back dense, as the interpreter gives it,
up to DENSE_AUTO_LIMIT entries (a bigger one stays sparse rather than allocate silently).

Which container holds a result never changes its values or which entries are stored. The
decision is keyed on the kinds of the inputs only (never on values), so the interpreter path
(`sparsad.program(...)(...)`) and compiled path (`sparsad.compile(...)(...)`) agree. Torch
tensors that require grad are refused where they are read (formats.convert), not here:
differentiate through `sparsad.torch.compile_program`.

>>> import numpy as np, scipy.sparse as sp
>>> type(natural_result(sp.csr_matrix(np.eye(2)), {"A": sp.csr_array(np.eye(2))})).__name__
'csr_array'
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

#: the kinds, by priority (a framework wins over SciPy)
TORCH, JAX, SPARRAY = "torch", "jax", "sparray"

# type -> kind (None: leaves the result alone, "spmatrix": a scipy sparse matrix); filled lazily
_KIND_OF_TYPE: dict[type, str | None] = {float: None, int: None, bool: None, np.ndarray: None}


def _kind_of_type(cls: type) -> str | None:
    kind = _KIND_OF_TYPE.get(cls, "?")
    if kind != "?":
        return kind
    module = cls.__module__ or ""
    kind = None
    if module.startswith("torch"):
        kind = TORCH if any(base.__name__ == "Tensor" for base in cls.__mro__) else None
    elif module.startswith(("jax", "jaxlib")):
        kind = JAX
    elif module.startswith("scipy.sparse"):
        import scipy.sparse as sp

        kind = SPARRAY if issubclass(cls, sp.sparray) else "spmatrix" if issubclass(cls, sp.spmatrix) else None
    _KIND_OF_TYPE[cls] = kind
    return kind


def input_kind(inputs: Mapping[str, Any]) -> tuple[str | None, bool]:
    """(kind, dense): the kind results are returned in for these inputs, "torch", "jax",
    "sparray" or None (leave results as computed; also for mixed scipy arrays and matrices), and
    whether no input is sparse."""
    kinds, dense = set(), True
    for value in inputs.values():
        cls = type(value)
        kind = _kind_of_type(cls)
        if kind is not None:
            kinds.add(kind)
        if dense and cls is not np.ndarray and _is_sparse(value, kind):
            dense = False
    if TORCH in kinds:
        return TORCH, dense
    if JAX in kinds:
        return JAX, dense
    if kinds == {SPARRAY}:
        return SPARRAY, False
    return None, dense


def _is_sparse(value: Any, kind: str | None) -> bool:
    if kind in (SPARRAY, "spmatrix"):
        return True
    if kind == TORCH:
        return str(value.layout) != "torch.strided"
    if kind == JAX:
        return type(value).__name__ in ("BCOO", "BCSR")
    format_ = getattr(value, "format", None)  # a StoredTensor
    return bool(format_ is not None and not getattr(format_, "is_dense", True))


def natural_result(result: Any, inputs: Mapping[str, Any], out_format: str = "natural") -> Any:
    """`result` (a number, ndarray, scipy sparse matrix or nested dict) in the kind of `inputs`.

    Only out_format "natural" changes the container; an explicit scipy format ("csr", "csc",
    "coo") becomes a sparse array when the inputs are sparse arrays; "dense", "dict" and "value"
    are returned as asked.
    """
    kind, dense = input_kind(inputs)
    if result is None or isinstance(result, dict):
        return result
    if dense and out_format == "natural" and _small_sparse_matrix(result):
        result = result.toarray()
    if kind is None:
        return result
    if out_format in ("csr", "csc", "coo"):
        return _as_sparray(result) if kind == SPARRAY else result
    if out_format != "natural":
        return result
    if kind == SPARRAY:
        return _as_sparray(result)
    if kind == TORCH:
        return _as_torch(result, inputs)
    return _as_jax(result)


def _small_sparse_matrix(result: Any) -> bool:
    if getattr(result, "ndim", None) != 2 or not hasattr(result, "tocsr"):
        return False
    from sparsad.lang.types import DENSE_AUTO_LIMIT

    return float(result.shape[0]) * float(result.shape[1]) <= DENSE_AUTO_LIMIT


def _as_sparray(result: Any) -> Any:
    import scipy.sparse as sp

    if not isinstance(result, sp.spmatrix):
        return result
    make = getattr(sp, f"{result.format}_array", None)
    return make(result) if make is not None else result  # shares the arrays (no copy)


def _torch_dtype(inputs: Mapping[str, Any]):
    import torch

    floats = [v.dtype for v in inputs.values() if isinstance(v, torch.Tensor) and v.is_floating_point()]
    return torch.float32 if floats and all(d == torch.float32 for d in floats) else torch.float64


def _torch_device(inputs: Mapping[str, Any]):
    import torch

    return next((v.device for v in inputs.values() if isinstance(v, torch.Tensor)), torch.device("cpu"))


def _as_torch(result: Any, inputs: Mapping[str, Any]) -> Any:
    import scipy.sparse as sp
    import torch

    device = _torch_device(inputs)
    if isinstance(result, (bool, np.bool_)):
        return torch.tensor(bool(result), device=device)
    if isinstance(result, (int, np.integer)):
        return torch.tensor(int(result), dtype=torch.int64, device=device)
    dtype = _torch_dtype(inputs)
    if isinstance(result, (float, np.floating)):
        return torch.tensor(float(result), dtype=dtype, device=device)
    if sp.issparse(result):
        if result.ndim != 2:
            return result
        csr = result.tocsr()
        if not csr.has_sorted_indices:
            csr = csr.sorted_indices()
        with _quiet_beta():
            return torch.sparse_csr_tensor(torch.from_numpy(csr.indptr.astype(np.int64)),
                                           torch.from_numpy(csr.indices.astype(np.int64)),
                                           torch.from_numpy(np.ascontiguousarray(csr.data)).to(dtype),
                                           size=csr.shape, device=device)
    if isinstance(result, np.ndarray):
        array = result if result.flags.c_contiguous else np.ascontiguousarray(result)  # (keeps 0-d)
        tensor = torch.from_numpy(array)
        return tensor.to(device=device, dtype=dtype) if array.dtype.kind == "f" else tensor.to(device)
    return result


def _as_jax(result: Any) -> Any:
    import scipy.sparse as sp

    import jax.numpy as jnp

    if sp.issparse(result):
        if result.ndim != 2:
            return result
        from jax.experimental.sparse import BCSR

        csr = result.tocsr()
        if not csr.has_sorted_indices:
            csr = csr.sorted_indices()
        return BCSR.from_scipy_sparse(csr)
    if isinstance(result, (bool, int, float, np.generic, np.ndarray)):
        return jnp.asarray(result)
    return result


class _quiet_beta:
    """torch warns once that sparse CSR support is in beta; the result is still what was asked."""

    def __enter__(self):
        import warnings

        self._context = warnings.catch_warnings()
        self._context.__enter__()
        warnings.filterwarnings("ignore", message=".*[Ss]parse CSR tensor support is in beta.*")

    def __exit__(self, *exc):
        return self._context.__exit__(*exc)


__all__ = ["input_kind", "natural_result"]
