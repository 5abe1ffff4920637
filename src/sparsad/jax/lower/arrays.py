"""Array helpers of the lowering: lifting a value into a deeper frame, broadcasting, padding,
segment sums, and arithmetic on numbers and dense dictionaries (`_number_binary`). NumPy where
every operand is static, jax.numpy otherwise.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from sparsad.jax.lower.values import Arr, Frame, Unsupported, DENSE_LIMIT

# -- array helpers ---------------------------------------------------------------------------------
def _jnp():
    import jax.numpy as jnp

    return jnp


def _xp(*arrays):
    return np if all(isinstance(a, (np.ndarray, np.generic, int, float, bool)) for a in arrays) else _jnp()


def take(array, index: np.ndarray, axis: int = 0):
    """`np.take(array, index, axis)` for a static integer `index`: NumPy when `array` is static,
    else one XLA gather (in bounds: no index normalisation; jnp.take's fill mode otherwise).
    Tracing it costs a fraction of jnp.take's, which matters: a program lowers many of them."""
    if isinstance(array, np.ndarray):
        return np.take(array, index, axis=axis)
    extent = array.shape[axis]
    if index.size and (int(index.min()) < 0 or int(index.max()) >= extent):
        return _jnp().take(array, index, axis=axis)
    return gather(array, (index,), axis)


def gather(array, index: tuple, axis: int = 0):
    """`array[(slice(None),) * axis + index]` for static integer arrays `index` (broadcast
    together, in bounds) indexing the axes from `axis` on: one XLA gather. The result's axes:
    `array`'s before `axis`, the index shape, then `array`'s after the indexed ones."""
    import jax

    index = np.broadcast_arrays(*[np.asarray(i) for i in index])
    count = len(index)
    shape = tuple(array.shape)
    kept = shape[axis + count:]
    itype = np.int32 if max(shape, default=0) < 2 ** 31 else np.int64
    starts = np.stack([np.reshape(i, -1) for i in index], axis=-1).astype(itype).reshape(index[0].shape + (count,))
    batch = index[0].ndim
    numbers = jax.lax.GatherDimensionNumbers(
        offset_dims=tuple(range(axis)) + tuple(range(axis + batch, axis + batch + len(kept))),
        collapsed_slice_dims=tuple(range(axis, axis + count)), start_index_map=tuple(range(axis, axis + count)))
    return jax.lax.gather(_jnp().asarray(array), starts, numbers, shape[:axis] + (1,) * count + kept,
                          indices_are_sorted=False, unique_indices=False,
                          mode=jax.lax.GatherScatterMode.PROMISE_IN_BOUNDS)


def lift(value: Arr, frame: Frame) -> Arr:
    """`value` seen from `frame`, a descendant of its own frame (axes added or gathered)."""
    if value.frame is frame:
        return value
    array = value.array
    for step in frame.path_from(value.frame):
        xp = _xp(array)
        before = step.parent.rank
        if step.op == "push":
            array = xp.expand_dims(array, before)
        elif array.shape[before - 1] != 1:
            array = take(array, step.index, axis=before - 1)
    return Arr(array, frame, value.vdims, value.present, value.deep_full, value.vanish, value.iota, value.role)


def _deepest(*frames: Frame) -> Frame:
    return max(frames, key=lambda f: len(_chain(f)))


def _chain(frame: Frame) -> list:
    out = []
    while frame is not None:
        out.append(frame)
        frame = frame.parent
    return out


def _full(array, shape: tuple):
    """`array` broadcast to `shape` (frame axes at full size)."""
    xp = _xp(array)
    return xp.broadcast_to(array, shape)


def _pad_to(array, rank: int, extents: tuple):
    """Pad the dictionary levels (after `rank` frame axes) with zeros up to `extents`."""
    shape = array.shape[rank:]
    if shape == tuple(extents):
        return array
    if any(s > e for s, e in zip(shape, extents)):
        raise Unsupported("a dictionary larger than its context's extent")
    xp = _xp(array)
    widths = [(0, 0)] * rank + [(0, e - s) for s, e in zip(shape, extents)]
    return xp.pad(array, widths)


def _check_size(n: int) -> None:
    if n > DENSE_LIMIT:
        raise Unsupported(f"an intermediate of {n} entries")


def _as_arr(value: Any, frame: Frame) -> Arr:
    if isinstance(value, Arr):
        return lift(value, frame)
    raise Unsupported(f"{type(value).__name__} where a number or dense array is needed")


def _number_binary(op: str, a: Arr, b: Arr, frame: Frame) -> Arr:
    a, b = lift(a, frame), lift(b, frame)
    x, y = a.array, b.array
    rank = frame.rank
    if a.vdims or b.vdims:
        if op not in "+-*":
            raise Unsupported(f"{op} of dictionaries")
        if op in "+-":
            if a.vdims != b.vdims:
                raise Unsupported("adding dictionaries of different orders")
            extents = tuple(max(s, t) for s, t in zip(x.shape[rank:], y.shape[rank:]))
            x, y = _pad_to(x, rank, extents), _pad_to(y, rank, extents)
            present = None
            if a.present is not None and b.present is not None:
                present = np.zeros(extents[0], bool)
                present[:a.present.shape[0]] |= a.present
                present[:b.present.shape[0]] |= b.present
            xp = _xp(x, y)
            return Arr(x + y if op == "+" else x - y, frame, a.vdims, present, a.deep_full and b.deep_full)
        # semi-ring product: scaling, or the outer product of two dictionaries
        xp = _xp(x, y)
        x = xp.reshape(x, x.shape + (1,) * b.vdims)
        y = xp.reshape(y, y.shape[:rank] + (1,) * a.vdims + y.shape[rank:])
        vanish = a.vanish or b.vanish
        if a.vdims and b.vdims:
            present, deep = a.present, a.deep_full and b.present is not None and bool(np.all(b.present)) \
                and b.deep_full
        else:
            d = a if a.vdims else b
            present, deep = d.present, d.deep_full
        if vanish:
            present, deep = None, False
        return Arr(x * y, frame, a.vdims + b.vdims, present, deep)
    xp = _xp(x, y)
    if op == "+":
        return Arr(x + y, frame, vanish=a.vanish and b.vanish)
    if op == "-":
        return Arr(x - y, frame, vanish=a.vanish and b.vanish)
    if op == "*":
        return Arr(x * y, frame, vanish=a.vanish or b.vanish)
    if op == "/":
        return Arr(_real(x) / _real(y), frame)
    if op == "=":
        return Arr(xp.equal(x, y), frame)
    if op == "<":
        return Arr(xp.less(x, y), frame)
    raise Unsupported(op)


def _real(x):
    """Division is on reals (int keys divide as floats, as in the interpreter)."""
    if isinstance(x, np.ndarray) and x.dtype.kind in "biu":
        return x.astype(np.float64)
    return x


_FUNCTIONS: dict[str, Callable] = {}


def _functions() -> dict[str, Callable]:
    if not _FUNCTIONS:
        import jax
        jnp = _jnp()
        _FUNCTIONS.update({
            "exp": jnp.exp, "log": jnp.log, "sin": jnp.sin, "cos": jnp.cos, "tan": jnp.tan, "tanh": jnp.tanh,
            "sinh": jnp.sinh, "cosh": jnp.cosh, "atan": jnp.arctan, "sqrt": jnp.sqrt, "abs": jnp.abs,
            "sigmoid": jax.nn.sigmoid, "log1p": jnp.log1p, "expm1": jnp.expm1,
            "softplus": lambda x: jnp.logaddexp(x, jnp.zeros_like(x)),
            "relu": lambda x: jnp.where(x > 0, x, jnp.zeros_like(x)),  # relu(nan) = 0, as compiled
            "step": lambda x: jnp.where(x > 0, jnp.ones_like(x), jnp.zeros_like(x)),
            "sign": lambda x: jnp.where(x > 0, 1.0, jnp.where(x < 0, -1.0, 0.0)).astype(x.dtype),
            "pow": lambda x, y: jnp.power(x, y),
        })
    return _FUNCTIONS


def _segment_sum(array, index, segments: int, axis: int, sorted_: bool = True):
    import jax

    jnp = _jnp()
    array = jnp.moveaxis(jnp.asarray(array), axis, 0)
    summed = jax.ops.segment_sum(array, index, num_segments=segments, indices_are_sorted=sorted_)
    return jnp.moveaxis(summed, 0, axis)
