"""Tracer part: calls that rearrange a tensor's entries without arithmetic (reshape/view/flatten/ravel,
squeeze/unsqueeze, constant pads, roll, concatenation of large pieces).

Each becomes an ``ssa.Layout`` (a reshape or a zero pad) or a combination of those with views and
sums: ``pad(x, value=c)`` is ``Pad(x) + (c - Pad(c))`` (exact: x + 0 inside), ``roll`` is the sum of
the two padded slices it moves, ``cat`` the sum of its padded pieces.  So every backend and the
adjoint know only reshapes, pads and views (``coarsen/layouts.py``).
"""
from __future__ import annotations

import numpy as np

from sparsad.coarsen import ssa
from sparsad.coarsen.source import CoarsenUnsupported
from sparsad.coarsen.frontend.values import DYNAMIC, _Stacked, _holds_node, _traced, _short

#: Functions and methods handled here (names after `values._ALIASES`).
LAYOUT_CALLS = frozenset({"reshape", "view", "flatten", "ravel", "view_as", "reshape_as", "unsqueeze", "squeeze",
                          "pad", "pad_numpy", "roll"})


def _ints(values, what: str, node) -> tuple[int, ...]:
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise CoarsenUnsupported(f"line {node.lineno}: {what} {_short(v)} is not a Python int known when tracing")
        out.append(int(v))
    return tuple(out)


def _shape_args(args, node) -> tuple[int, ...]:
    """``reshape(2, 3)`` / ``reshape((2, 3))`` / ``reshape([2, 3])`` / ``reshape(6)``."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)):  # (torch.Size is a tuple)
        args = tuple(args[0])
    return _ints(args, "shape entry", node)


def _resolved(shape: tuple[int, ...], size: int, node) -> tuple[int, ...]:
    """``shape`` with its -1 (at most one) worked out; must hold ``size`` entries."""
    unknown = [k for k, d in enumerate(shape) if d == -1]
    if len(unknown) > 1 or any(d < -1 for d in shape):
        raise CoarsenUnsupported(f"line {node.lineno}: reshape to {list(shape)}")
    known = int(np.prod([d for d in shape if d != -1], dtype=np.int64)) if shape else 1
    if unknown:
        if known == 0 or size % known:
            raise CoarsenUnsupported(f"line {node.lineno}: reshape of {size} entries to {list(shape)}")
        shape = shape[:unknown[0]] + (size // known,) + shape[unknown[0] + 1:]
    if int(np.prod(shape, dtype=np.int64)) != size:
        raise CoarsenUnsupported(f"line {node.lineno}: reshape of {size} entries to {list(shape)}")
    return shape


def _dim(d, ndim: int, node, extra: int = 0) -> int:
    """A dimension index normalised to 0..ndim+extra-1 (``extra``: unsqueeze accepts one past the end)."""
    (d,) = _ints((d,), "dimension", node)
    span = ndim + extra
    if not -span <= d < span:
        raise CoarsenUnsupported(f"line {node.lineno}: dimension {d} of a {ndim}-d tensor")
    return d % span if span else 0


class LayoutsMixin:
    """Methods of ``Tracer`` (see ``frontend/__init__.py``) for layout calls."""

    def layout_call(self, name: str, value, args, kwargs, node):
        """``name(value, *args, **kwargs)`` for a name in LAYOUT_CALLS (functions and methods alike)."""
        if any(a is DYNAMIC for a in list(args) + list(kwargs.values())) or any(_holds_node(a) for a in args):
            raise CoarsenUnsupported(f"line {node.lineno}: {name}() with traced or changing arguments")
        value = self.layout_operand(value, name, node)
        shape = value.shape
        if name in ("reshape", "view"):
            wanted = kwargs.pop("shape", kwargs.pop("newshape", None))
            if kwargs.pop("order", "C") != "C" or kwargs or (wanted is not None) == bool(args):
                raise CoarsenUnsupported(f"line {node.lineno}: {name}() with these arguments")
            return self.reshape(value, _shape_args(args if wanted is None else (wanted,), node), node)
        if name in ("view_as", "reshape_as") and len(args) == 1 and not kwargs:
            other = args[0]
            target = other.shape if _traced(other) else getattr(other, "shape", None)
            if target is None:
                raise CoarsenUnsupported(f"line {node.lineno}: {name}() of {_short(other)}")
            return self.reshape(value, tuple(int(d) for d in target), node)
        if name in ("flatten", "ravel"):
            start = kwargs.pop("start_dim", args[0] if args else 0)
            end = kwargs.pop("end_dim", args[1] if len(args) > 1 else -1)
            if kwargs.pop("order", "C") != "C" or kwargs or len(args) > 2 or (name == "ravel" and args):
                raise CoarsenUnsupported(f"line {node.lineno}: {name}() with these arguments")
            if not shape:
                return self.reshape(value, (1,), node)
            start, end = _dim(start, len(shape), node), _dim(end, len(shape), node)
            if start > end:
                raise CoarsenUnsupported(f"line {node.lineno}: {name}() with start_dim after end_dim")
            merged = int(np.prod(shape[start:end + 1], dtype=np.int64))
            return self.reshape(value, shape[:start] + (merged,) + shape[end + 1:], node)
        if name == "unsqueeze":
            d = kwargs.pop("dim", args[0] if args else None)
            if d is None or kwargs or len(args) > 1:
                raise CoarsenUnsupported(f"line {node.lineno}: unsqueeze() with these arguments")
            d = _dim(d, len(shape), node, extra=1)
            return self.reshape(value, shape[:d] + (1,) + shape[d:], node)
        if name == "squeeze":
            d = kwargs.pop("dim", kwargs.pop("axis", args[0] if args else None))
            if kwargs or len(args) > 1:
                raise CoarsenUnsupported(f"line {node.lineno}: squeeze() with these arguments")
            if d is None:
                dims = [k for k, extent in enumerate(shape) if extent == 1]
            else:
                dims = [_dim(e, len(shape), node) for e in (d if isinstance(d, (tuple, list)) else (d,))]
                dims = [k for k in dims if shape[k] == 1]
            return self.reshape(value, tuple(e for k, e in enumerate(shape) if k not in dims), node)
        if name == "pad":
            return self.pad_torch(value, args, kwargs, node)
        if name == "pad_numpy":
            return self.pad_numpy(value, args, kwargs, node)
        if name == "roll":
            shifts = kwargs.pop("shifts", kwargs.pop("shift", args[0] if args else None))
            dims = kwargs.pop("dims", kwargs.pop("axis", args[1] if len(args) > 1 else None))
            if shifts is None or kwargs or len(args) > 2:
                raise CoarsenUnsupported(f"line {node.lineno}: roll() with these arguments")
            return self.roll(value, shifts, dims, node)
        raise CoarsenUnsupported(f"line {node.lineno}: {name}() with these arguments is not supported")

    def layout_operand(self, value, name: str, node) -> ssa.Node:
        if isinstance(value, _Stacked):
            value = self.const(value)  # (a vector of traced scalars; anything larger is refused there)
        if not isinstance(value, ssa.Node):
            raise CoarsenUnsupported(f"line {node.lineno}: {name}() of {_short(value)}")
        return value

    def reshape(self, value: ssa.Node, shape: tuple[int, ...], node) -> ssa.Node:
        size = int(np.prod(value.shape, dtype=np.int64))
        shape = _resolved(tuple(shape), size, node)
        if shape == value.shape:
            return value
        if isinstance(value, ssa.Const):  # uniform: any arrangement of it is the same constant
            part = ssa.Const(shape, value.value)
            self.const_views[id(part)] = (part, value)  # (a view all the same: writes reach its base)
            return part
        return ssa.Layout(shape, value, "reshape")

    def padded(self, value: ssa.Node, widths, fill: float, node) -> ssa.Node:
        """``value`` with ``widths[k] = (before, after)`` entries ``fill`` around axis k."""
        widths = [_ints(pair, "pad width", node) for pair in widths]
        if any(w < 0 for pair in widths for w in pair):
            raise CoarsenUnsupported(f"line {node.lineno}: a negative pad width (a crop: slice the tensor instead)")
        if not any(w for pair in widths for w in pair):
            return value
        shape = tuple(n + b + a for n, (b, a) in zip(value.shape, widths))
        key = tuple(slice(b, b + n) for n, (b, _a) in zip(value.shape, widths))
        if isinstance(value, ssa.Const) and value.value == 0.0 and fill == 0.0:
            return ssa.Const(shape, 0.0)
        result = ssa.Layout(shape, value, "pad", key)
        if fill != 0.0:  # Pad(x) + (c - Pad(c)): x + 0 inside (exact), 0 + c outside
            border = ssa.Op(shape, "sub", (ssa.Const((), fill), ssa.Layout(shape, ssa.Const(value.shape, fill),
                                                                           "pad", key)))
            result = ssa.Op(shape, "add", (result, border))
        return result

    def pad_torch(self, value: ssa.Node, args, kwargs, node) -> ssa.Node:
        """``torch.nn.functional.pad(x, pad, mode="constant", value=0)``: pairs from the last axis back."""
        widths = kwargs.pop("pad", args[0] if args else None)
        mode = kwargs.pop("mode", args[1] if len(args) > 1 else "constant")
        fill = kwargs.pop("value", args[2] if len(args) > 2 else None)
        if widths is None or kwargs or len(args) > 3 or not isinstance(widths, (tuple, list)) or len(widths) % 2:
            raise CoarsenUnsupported(f"line {node.lineno}: pad() with these arguments")
        if mode != "constant":
            raise CoarsenUnsupported(f"line {node.lineno}: pad(mode={mode!r}) (only mode='constant')")
        if len(widths) // 2 > len(value.shape):
            raise CoarsenUnsupported(f"line {node.lineno}: pad() of more axes than the tensor has")
        pairs = [(0, 0)] * len(value.shape)
        for k in range(len(widths) // 2):
            pairs[len(value.shape) - 1 - k] = (widths[2 * k], widths[2 * k + 1])
        return self.padded(value, pairs, self.fill_value(fill, node), node)

    def pad_numpy(self, value: ssa.Node, args, kwargs, node) -> ssa.Node:
        """``np.pad`` / ``jnp.pad(x, pad_width, mode="constant", constant_values=0)``."""
        widths = kwargs.pop("pad_width", args[0] if args else None)
        mode = kwargs.pop("mode", args[1] if len(args) > 1 else "constant")
        fill = kwargs.pop("constant_values", 0.0)
        if widths is None or kwargs or len(args) > 2:
            raise CoarsenUnsupported(f"line {node.lineno}: pad() with these arguments")
        if mode != "constant":
            raise CoarsenUnsupported(f"line {node.lineno}: pad(mode={mode!r}) (only mode='constant')")
        ndim = len(value.shape)
        try:
            table = np.broadcast_to(np.asarray(widths), (ndim, 2))
        except ValueError as exc:
            raise CoarsenUnsupported(f"line {node.lineno}: pad widths {_short(widths)}") from exc
        if not np.issubdtype(table.dtype, np.integer):
            raise CoarsenUnsupported(f"line {node.lineno}: pad widths {_short(widths)} are not ints")
        return self.padded(value, [tuple(int(w) for w in row) for row in table], self.fill_value(fill, node), node)

    def fill_value(self, fill, node) -> float:
        if fill is None:
            return 0.0
        if isinstance(fill, bool) or not isinstance(fill, (int, float, np.integer, np.floating)):
            raise CoarsenUnsupported(f"line {node.lineno}: pad value {_short(fill)} (a Python number known when "
                                     "tracing)")
        return float(fill)

    def roll(self, value: ssa.Node, shifts, dims, node) -> ssa.Node:
        """``torch.roll`` / ``jnp.roll``: each shift is the sum of the two padded slices it moves."""
        if dims is None:
            if isinstance(shifts, (tuple, list)) and len(shifts) != 1:
                raise CoarsenUnsupported(f"line {node.lineno}: roll() of several shifts without dims")
            shift = shifts[0] if isinstance(shifts, (tuple, list)) else shifts
            flat = self.reshape(value, (-1,), node)
            return self.reshape(self.roll(flat, (shift,), (0,), node), value.shape, node)
        shifts = tuple(shifts) if isinstance(shifts, (tuple, list)) else (shifts,)
        dims = tuple(dims) if isinstance(dims, (tuple, list)) else (dims,)
        if len(shifts) != len(dims):
            raise CoarsenUnsupported(f"line {node.lineno}: roll() with {len(shifts)} shifts and {len(dims)} dims")
        for shift, d in zip(_ints(shifts, "shift", node), dims):
            d = _dim(d, len(value.shape), node)
            n = value.shape[d]
            s = shift % n if n else 0
            if s == 0:
                continue
            head = tuple(slice(None) for _ in range(d))
            tail = self.take(value, head + (slice(n - s, n),), node)  # moves to the front
            rest = self.take(value, head + (slice(0, n - s),), node)
            value = self.joined([tail, rest], d, node)
        return value

    def joined(self, items: list, d: int, node) -> ssa.Node:
        """Concatenation along axis ``d`` as the sum of the pieces, each padded to its place."""
        items = [self.layout_operand(self.const(v), "cat", node) for v in items]
        ndim = len(items[0].shape)
        if any(len(v.shape) != ndim for v in items) or not ndim:
            raise CoarsenUnsupported(f"line {node.lineno}: cat of tensors with different numbers of axes")
        if any(v.shape[:d] + v.shape[d + 1:] != items[0].shape[:d] + items[0].shape[d + 1:] for v in items):
            raise CoarsenUnsupported(f"line {node.lineno}: cat of pieces whose other extents differ")
        total = sum(v.shape[d] for v in items)
        result, offset = None, 0
        for v in items:
            widths = [(0, 0)] * ndim
            widths[d] = (offset, total - offset - v.shape[d])
            offset += v.shape[d]
            part = self.padded(v, widths, 0.0, node)
            result = part if result is None else ssa.Op(part.shape, "add", (result, part))
        return result
