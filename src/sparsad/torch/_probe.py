"""A check that a derivative matrix recovered by colouring holds every nonzero: one more product
with a fixed pseudo-random probe vector, compared with the recovered matrix times that vector.

Compressed products read each stored entry off a sum over one colour; an entry of the true
derivative outside the given pattern is silently added to a neighbour's value or dropped. The
probe product sees every entry, so a pattern that is too small (given by hand, or detected at
another point where an entry vanished) shows up as a row where the two disagree: then our own
error is raised (or, where the values cannot be read, inside torch.func's vmap, those entries
become NaN), never a wrong matrix.

Example:
    >>> import torch, scipy.sparse as sp, sparsad.torch as st
    >>> f = lambda x: x * x + x.roll(1)
    >>> st.jacobian(f, torch.ones(3, dtype=torch.float64), pattern=sp.eye(3, format="csr"))
    Traceback (most recent call last):
    ...
    sparsad.errors.InputError: the derivative has nonzeros outside `pattern`: ...
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from sparsad.errors import InputError, ShapeError
from sparsad.ops.pattern import CSRPattern
from sparsad.torch.matrix import SparseMatrix


def probe_vector(pattern: CSRPattern, length: int, like: torch.Tensor, key: str) -> torch.Tensor:
    """A fixed vector of `length` entries in +-[0.5, 1.5) (no zero, so no entry hides), kept on
    the pattern per (key, dtype, device)."""
    cache = pattern.__dict__.setdefault("_torch_probes", {})
    cache_key = (key, like.dtype, like.device)
    if cache_key not in cache:
        rng = np.random.default_rng(0x5EED)  # (NumPy's: torch's random operations fail inside vmap)
        vector = (rng.random(length) + 0.5) * rng.choice([-1.0, 1.0], length)
        cache[cache_key] = torch.from_numpy(vector).to(dtype=like.dtype, device=like.device)
    return cache[cache_key]


_NUMPY_DTYPES = (torch.float32, torch.float64)


def _tolerance(dtype: torch.dtype) -> float:
    return float(torch.finfo(dtype).eps) ** 0.5  # rounding of the products, not a missed entry


def checked(matrix: SparseMatrix, product: Callable[[torch.Tensor], torch.Tensor], probe: torch.Tensor,
            by_rows: bool, what: str) -> SparseMatrix:
    """`matrix` after comparing `product(probe)` with matrix @ probe (by_rows: probe over the
    columns, a JVP or HVP) or probe @ matrix (a VJP); raises InputError naming the first row
    (column) that disagrees."""
    pattern = matrix.pattern
    size = pattern.shape[0] if by_rows else pattern.shape[1]
    with torch.no_grad():
        expected = product(probe.clone()).detach()  # (a copy: f may update its input in place)
        if tuple(expected.shape) != (size,):
            raise ShapeError(f"the product has shape {tuple(expected.shape)}, but the pattern has {size} "
                             f"{'rows' if by_rows else 'columns'}; f must return a 1-D tensor of that length")
        wrapped = torch._C._functorch.is_functorch_wrapped_tensor
        values = matrix.values.detach()
        if (values.device.type == "cpu" and expected.device.type == "cpu" and values.dtype in _NUMPY_DTYPES
                and expected.dtype == values.dtype and probe.dtype == values.dtype and not wrapped(values)
                and not wrapped(expected) and not wrapped(probe)):
            bad_at = _first_mismatch_numpy(pattern, values, probe, expected, by_rows)
            if bad_at is None:
                return matrix
            raise _outside(what, bad_at[0], bad_at[1])
        from sparsad.torch.linalg import _index

        rows = _index(pattern.rows, probe.device, pattern, "rows")
        cols = _index(pattern.indices, probe.device, pattern, "cols")
        out_at, in_at = (rows, cols) if by_rows else (cols, rows)  # where each entry lands, what it reads
        # one SpMV by index operations (the SparseMatrix product's autograd wrapping costs more here)
        recovered = torch.zeros(size, dtype=values.dtype, device=values.device).index_add(
            0, out_at, values * probe.index_select(0, in_at))
        error = (recovered - expected).abs()
        scale = recovered.abs() + expected.abs()
        bad = error > _tolerance(expected.dtype) * (scale + scale.max())
        try:
            found = bool(bad.any())
        except RuntimeError:  # inside vmap the values cannot be read: NaN where a row disagrees
            return SparseMatrix._wrap(pattern, torch.where(bad[out_at], torch.nan, matrix.values))
    if found:
        first = int(torch.nonzero(bad)[0, 0])
        raise _outside(what, first, float(error[first]))
    return matrix


def _first_mismatch_numpy(pattern: CSRPattern, values: torch.Tensor, probe: torch.Tensor, expected: torch.Tensor,
                          by_rows: bool) -> tuple[int, float] | None:
    """The comparison of `checked` on CPU in NumPy (a few array passes instead of a dozen torch calls,
    each ~5 us of dispatch at these sizes): (first disagreeing index, its error), or None."""
    size = pattern.shape[0] if by_rows else pattern.shape[1]
    out_at, in_at = (pattern.rows, pattern.indices) if by_rows else (pattern.indices, pattern.rows)
    v = values.numpy()
    recovered = np.bincount(out_at, weights=v * probe.numpy()[in_at], minlength=size)
    product = expected.numpy()
    error = np.abs(recovered - product)
    scale = np.abs(recovered) + np.abs(product)
    bad = error > _tolerance(expected.dtype) * (scale + (scale.max() if size else 0.0))
    if not bad.any():
        return None
    first = int(np.flatnonzero(bad)[0])
    return first, float(error[first])


def _outside(what: str, first: int, error: float) -> InputError:
    return InputError(
        f"the derivative has nonzeros outside `pattern`: {what} {first} of the product with a probe vector "
        f"differs from the recovered matrix's by {error:.3g}. Pass a pattern holding every "
        "structural nonzero of the derivative at this x (a pattern detected at another point misses entries "
        "that vanished there), or pattern=None to detect it here, or check=False to skip this check")
