"""Layout maps: reshapes, zero pads and crops of whole tensors, and their code in each backend.

Stencil code rearranges tensors without arithmetic: ``u.reshape(n, n)``, ``F.pad(grid, (1, 1, 1, 1))``,
``padded[1:-1, :-2]``, ``torch.roll``, ``torch.cat``.  The front end expresses all of them with three
linear maps (``roll`` and ``cat`` are sums of padded slices), so the elevation binds each use to a
segment ``Relayout(base, k, *shape)`` and the adjoint applies the transposed map: a reshape's
transpose is the reshape back, a pad's is the crop of the same slices, a crop's the pad.  Nothing
here is differentiated by SymPy (the maps are linear), and no backend sees anything but these three.

Example:
    >>> m = LayoutMap("pad", (slice(1, 3), slice(1, 4)), (2, 3), (4, 5))
    >>> transpose(m)
    LayoutMap(kind='crop', key=(slice(1, 3, None), slice(1, 4, None)), in_shape=(4, 5), out_shape=(2, 3))
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

KINDS = ("reshape", "pad", "crop")


@dataclass(frozen=True)
class LayoutMap:
    """``out = map(v)`` for ``v`` of ``in_shape``: "reshape" (row-major order kept), "pad" (``v`` at the
    static int/slice ``key`` of a zero tensor of ``out_shape``) or "crop" (``v[key]``)."""
    kind: str
    key: Any
    in_shape: tuple
    out_shape: tuple


def transpose(layout: LayoutMap) -> LayoutMap:
    """The adjoint map (cotangents of the output to cotangents of the input)."""
    kind = {"reshape": "reshape", "pad": "crop", "crop": "pad"}[layout.kind]
    return LayoutMap(kind, layout.key, layout.out_shape, layout.in_shape)


def key_text(key) -> str:
    from sparsad.coarsen.codegen import _key_text

    return _key_text(key)


def numba_source(name: str, layout: LayoutMap) -> str:
    """A Numba-compilable helper ``name(v)`` (``v`` an array of ``in_shape``, or a float to broadcast)."""
    out, into = tuple(layout.out_shape), tuple(layout.in_shape)
    lines = [f"def {name}(v):", f"    w = np.zeros({into!r}) + v"]  # (a float broadcast; an array copied once)
    if layout.kind == "reshape":
        lines.append(f"    return w.reshape({out!r})")  # (w is C-contiguous: a fresh array)
    elif layout.kind == "pad":
        lines += [f"    out = np.zeros({out!r})", f"    out[{key_text(layout.key)}] = w", "    return out"]
    else:
        lines.append(f"    return np.ascontiguousarray(w[{key_text(layout.key)}])")
    return "\n".join(lines) + "\n"


def torch_helper(layout: LayoutMap, dtype, device):
    import torch

    into, out, key = tuple(layout.in_shape), tuple(layout.out_shape), layout.key

    def full(v):
        if not isinstance(v, torch.Tensor):
            return torch.full(into, float(v), dtype=dtype, device=device)
        return v if tuple(v.shape) == into else torch.broadcast_to(v, into)

    if layout.kind == "reshape":
        return lambda v: full(v).reshape(out)
    if layout.kind == "crop":
        return lambda v: full(v)[key]

    def pad(v):
        result = torch.zeros(out, dtype=dtype, device=device)
        result[key] = full(v)
        return result
    return pad


def jax_helper(layout: LayoutMap, dtype):
    import jax.numpy as jnp

    into, out, key = tuple(layout.in_shape), tuple(layout.out_shape), layout.key
    if layout.kind == "reshape":
        return lambda v: jnp.reshape(jnp.broadcast_to(jnp.asarray(v, dtype=dtype), into), out)
    if layout.kind == "crop":
        return lambda v: jnp.broadcast_to(jnp.asarray(v, dtype=dtype), into)[key]
    return lambda v: jnp.zeros(out, dtype=dtype).at[key].set(jnp.broadcast_to(jnp.asarray(v, dtype=dtype), into))
