"""Tracer part: tensors assembled from pieces and Python lists (stack/cat, matmul of small tensors, reductions
over the first axis, max/softmax/logsumexp, item writes `t[i] = v`, list appends)."""
from __future__ import annotations

import ast

import numpy as np

from sparsad.coarsen import ssa
from sparsad.coarsen.source import CoarsenUnsupported
from sparsad.coarsen.frontend.values import (
    _IndexVar,
    DYNAMIC,
    _NeedsStaticLoop,
    _Stacked,
    _traced,
    MAX_PIECES,
    STATIC_UNROLL,
    _key_counters,
    _holds_node,
    _aliased,
    _cut,
    _row,
    _short,
    _source_line,
)


MASKED_HISTORY = 1 << 22   # entries a vector written at the counter keeps over a loop (32 MB of float64)


class ContainersMixin:
    """Methods of ``Tracer`` (see ``frontend/__init__.py``) for containers."""

    def rows(self, value, node) -> tuple:
        """A traced tensor iterated over: its rows, as views (unrolled while tracing, so kept short)."""
        if isinstance(value, _Stacked):
            return value.items
        if not value.shape:
            raise CoarsenUnsupported(f"line {node.lineno}: iterating over a 0-d tensor")
        if value.shape[0] > STATIC_UNROLL:
            raise CoarsenUnsupported(f"line {node.lineno}: iterating over the {value.shape[0]} rows of a traced "
                                     f"tensor (more than {STATIC_UNROLL}; index it with range(len(x)))")
        return tuple(ssa.View(value.shape[1:], value, i) for i in range(value.shape[0]))

    def reduce(self, value):
        if isinstance(value, _Stacked):
            total = self.reduce(value.items[0])
            for item in value.items[1:]:
                total = self.op("add", total, self.reduce(item))
            return total
        value = self.const(value)
        if value.shape == ():
            return value
        return ssa.Reduce((), value)

    def entries(self, value, node) -> list:
        """Every entry of a traced tensor as a scalar node (vectors reduced entry by entry; kept short)."""
        if isinstance(value, _Stacked):
            return [e for item in value.items for e in self.entries(item, node)]
        value = self.const(value)
        count = int(np.prod(value.shape)) if value.shape else 1
        if count > MAX_PIECES:
            raise CoarsenUnsupported(f"line {node.lineno}: a reduction entry by entry over {count} entries "
                                     f"(at most {MAX_PIECES})")
        if value.shape == ():
            return [value]
        return [ssa.View((), value, tuple(int(i) for i in index) if len(value.shape) > 1 else int(index[0]))
                for index in np.ndindex(*value.shape)]

    def fold_max(self, values: list, largest: bool = True):
        """max (min) of traced values of one shape; the gradient goes to the selected one (the first of
        equal ones).  Scalars are gathered into a vector first, so that no comparison holds another."""
        values = [v if _traced(v) else self.const(v) for v in values]
        if len(values) == 1:
            return values[0]
        if all(v.shape == () for v in values):
            return self.vector_max(self.materialize(_Stacked(values)), largest)
        while len(values) > 1:
            half = (len(values) + 1) // 2
            firsts, seconds = values[:half], values[len(values) - half:]  # overlapping halves (max is idempotent)
            values = [_cut(self.op("where", self.op("ge" if largest else "le", a, b), a, b))
                      for a, b in zip(firsts, seconds)]
        return values[0]

    def tied_mean(self, values, m, largest: bool = True):
        """The mean of the entries equal to the extremum ``m`` (which is ``m``): the gradient is split
        evenly among tied entries, as torch's max/amax do (``m`` enters only conditions).  Entries are
        read through views, so that conditions compare symbols (never other selections)."""
        test = "ge" if largest else "le"
        if not isinstance(values, ssa.Node):
            if all(self.const(v).shape == () for v in values):
                values = self.materialize(_Stacked([self.const(v) for v in values]))
            else:
                values = [_cut(self.const(v)) for v in values]
        if isinstance(values, ssa.Node):
            values = _cut(values)
            hit = self.op(test, values, m)
            return self.op("div", self.reduce(self.op("where", hit, values, 0.0)),
                           self.reduce(self.op("where", hit, 1.0, 0.0)))
        total = count = None
        for v in values:
            hit = self.op(test, v, m)
            part, one = self.op("where", hit, v, 0.0), self.op("where", hit, 1.0, 0.0)
            total = part if total is None else self.op("add", total, part)
            count = one if count is None else self.op("add", count, one)
        return self.op("div", total, count)

    def first_max(self, values: list, largest: bool = True):
        """Python's ``max(list)`` of scalars: the first extremal item (its gradient goes to it only).
        Entry k is first when ``hit_k - (hits before k) > 0.5``: conditions on sums of symbols."""
        vector = self.materialize(_Stacked([self.const(v) for v in values]))
        n = vector.shape[0]
        items = [ssa.View((), vector, k) for k in range(n)]
        m = self.vector_max(vector, largest)
        test = "ge" if largest else "le"
        hits = self.materialize(_Stacked([self.op("where", self.op(test, item, m), 1.0, 0.0) for item in items]))
        total, before = None, 0.0
        for k in range(n):
            hit = ssa.View((), hits, k)
            term = self.op("where", self.op("gt", self.op("sub", hit, before), 0.5), items[k], 0.0)
            total = term if total is None else self.op("add", total, term)
            before = self.op("add", before, hit)
        return total

    def vector_max(self, vector: ssa.Node, largest: bool = True) -> ssa.Node:
        """max (min) of a vector by halving: ``where(a >= b, a, b)`` on its two (overlapping) halves."""
        while vector.shape[0] > 1:
            n = vector.shape[0]
            half = (n + 1) // 2
            a = ssa.View((half,), vector, slice(0, half))
            b = ssa.View((half,), vector, slice(n - half, n))
            vector = ssa.Op((half,), "where", (ssa.Op((half,), "ge" if largest else "le", (a, b)), a, b))
        return ssa.View((), vector, 0)

    def along_first(self, value, node, dim):
        """The pieces along the reduced axis (``dim`` None: every entry; 0: the first axis)."""
        shape = value.shape if _traced(value) else ()
        if dim is None or (len(shape) == 1 and dim in (0, -1)):
            return self.entries(value, node)
        if dim in (0, -len(shape)) and isinstance(value, _Stacked):
            return list(value.items)
        if dim in (0, -len(shape)) and len(shape) >= 1 and shape[0] <= MAX_PIECES:
            return [ssa.View(shape[1:], value, k) for k in range(shape[0])]
        raise CoarsenUnsupported(f"line {node.lineno}: a reduction over axis {dim} of a tensor of shape "
                                 f"{list(shape)} (only full reductions and the first axis are supported)")

    def reduction(self, name: str, value, kwargs, node):
        """Full reductions, reductions over the first axis, and softmax / logsumexp (max-shifted)."""
        known = {"dim", "axis", "keepdim", "keepdims", "dtype", "ord"}
        if set(kwargs) - known or kwargs.get("keepdim") or kwargs.get("keepdims") or kwargs.get("ord") is not None:
            raise CoarsenUnsupported(f"line {node.lineno}: {name}() with arguments {sorted(kwargs)}")
        if kwargs.get("dtype") is not None and self.dtype is not None and kwargs["dtype"] != self.dtype:
            raise CoarsenUnsupported(f"line {node.lineno}: {name}() in dtype {kwargs['dtype']} (it would round)")
        dim = kwargs.get("dim", kwargs.get("axis"))
        if isinstance(dim, (tuple, list)):
            dim = dim[0] if len(dim) == 1 else "many"
        if name in ("softmax", "log_softmax") and dim is None:
            dim = -1  # jax.nn.softmax's default axis (torch requires one)
        if dim is not None and not isinstance(dim, int):
            raise CoarsenUnsupported(f"line {node.lineno}: {name}() over axes {dim}")
        if name == "norm":
            if dim is not None:
                raise CoarsenUnsupported(f"line {node.lineno}: norm() over an axis")
            # (at an all-zero vector the gradient is NaN where torch's is 0: selecting 0 there with `where`
            # makes the elevated adjoint divide by zero symbolically, so it is left as is)
            return self.op("sqrt", self.reduce(self.op("mul", value, value)))
        if name in ("maximum", "minimum") and dim is not None:
            raise CoarsenUnsupported(f"line {node.lineno}: {name.replace('imum', '')}() with a dim returns values "
                                     "and indices (use amax/amin)")
        if name in ("sum", "mean") and dim is None:
            total = self.reduce(value)
            count = int(np.prod(value.shape)) if value.shape else 1
            return total if name == "sum" else self.op("div", total, float(count))
        shape = value.shape
        largest = name not in ("minimum", "amin")
        if isinstance(value, ssa.Node) and len(shape) == 1 and dim in (None, 0, -1):
            # a vector: vector arithmetic (its max by halving), whatever its length
            if name in ("sum", "mean"):
                return self.reduction(name, value, {}, node)
            m = self.vector_max(value, largest)
            if name in ("maximum", "amax", "minimum", "amin"):
                return self.tied_mean(value, m, largest)
            shifted = self.op("sub", value, m)
            lse = self.op("log", self.reduce(self.op("exp", shifted)))
            if name == "logsumexp":
                return self.op("add", m, lse)
            if name == "log_softmax":
                return self.op("sub", shifted, lse)
            return self.op("exp", self.op("sub", shifted, lse))
        pieces = self.along_first(value, node, dim)
        if name in ("sum", "mean"):
            total = pieces[0]
            for p in pieces[1:]:
                total = self.op("add", total, p)
            return total if name == "sum" else self.op("div", total, float(len(pieces)))
        m = self.fold_max(pieces, largest)
        if name in ("maximum", "amax", "minimum", "amin"):
            return self.tied_mean(pieces, m, largest)
        total = self.op("exp", self.op("sub", pieces[0], m))
        for p in pieces[1:]:
            total = self.op("add", total, self.op("exp", self.op("sub", p, m)))
        lse = self.op("add", m, self.op("log", total))
        if name == "logsumexp":
            return lse
        if dim is None:
            raise CoarsenUnsupported(f"line {node.lineno}: {name}() over every entry of a tensor of shape "
                                     f"{list(shape)}")
        logs = [self.op("sub", p, lse) for p in pieces]
        return _Stacked(logs if name == "log_softmax" else [self.op("exp", p) for p in logs])

    def stack(self, items, dim, node) -> _Stacked:
        if not items:
            raise CoarsenUnsupported(f"line {node.lineno}: stack of an empty list")
        whole = _rows_of_one_vector(items)
        if whole is not None and dim in (0, -1):
            return whole  # (a list grown in a loop compiled whole: its buffer)
        if len(items) > MAX_PIECES:
            raise CoarsenUnsupported(f"line {node.lineno}: stack of {len(items)} pieces (at most {MAX_PIECES})")
        pieces = [v if isinstance(v, _Stacked) else self.const(v) for v in items]
        shapes = {p.shape for p in pieces}
        if len(shapes) != 1:
            raise CoarsenUnsupported(f"line {node.lineno}: stack of pieces of different shapes {sorted(shapes)}")
        ndim = len(pieces[0].shape)
        if dim not in (0, -ndim - 1):
            raise CoarsenUnsupported(f"line {node.lineno}: stack along axis {dim} (only the first axis)")
        return _Stacked([self.materialize(p) if isinstance(p, _Stacked) else p for p in pieces])

    def concatenate(self, items, dim, node):
        """``cat`` of small pieces along the first axis as an assembled tensor (rows kept apart); of larger
        pieces, or along another axis, as the sum of the pieces each padded to its place."""
        plain = items and all(isinstance(v, ssa.Node) or (not _traced(v) and np.ndim(v) > 0) for v in items)
        if plain and any(isinstance(v, ssa.Node) for v in items) and isinstance(dim, int):
            ndim = len(items[0].shape) if isinstance(items[0], ssa.Node) else np.ndim(items[0])
            first = ndim and dim in (0, -ndim)
            rows = sum((v.shape if isinstance(v, ssa.Node) else np.shape(v))[0] for v in items) if ndim else 0
            if ndim and -ndim <= dim < ndim and (not first or rows > MAX_PIECES or ndim > 1 and rows > 16):
                return self.joined(list(items), dim % ndim, node)
        rows = []
        for v in items:
            shape = v.shape if _traced(v) else np.shape(v)
            if len(shape) == 0:
                raise CoarsenUnsupported(f"line {node.lineno}: cat of a 0-d tensor")
            if dim not in (0, -len(shape)):
                raise CoarsenUnsupported(f"line {node.lineno}: cat along axis {dim} (only the first axis)")
            if isinstance(v, _Stacked):
                rows.extend(v.items)
            else:
                v = self.const(v)
                rows.extend(_row(v, k) for k in range(v.shape[0]))
            if len(rows) > MAX_PIECES:
                raise CoarsenUnsupported(f"line {node.lineno}: cat of more than {MAX_PIECES} rows")
        if not rows or len({r.shape for r in rows}) != 1:
            raise CoarsenUnsupported(f"line {node.lineno}: cat of pieces whose trailing shapes differ")
        return _Stacked(rows)

    def matmul(self, a, b, node):
        """``a @ b`` of small tensors as sums of scaled rows/columns (the inner extent is kept short)."""
        sa, sb = (a.shape if _traced(a) else np.shape(a)), (b.shape if _traced(b) else np.shape(b))
        if not (1 <= len(sa) <= 2 and 1 <= len(sb) <= 2) or sa[-1] != sb[0]:
            raise CoarsenUnsupported(f"line {node.lineno}: matmul of shapes {list(sa)} and {list(sb)}")
        n = sa[-1]
        if n > MAX_PIECES:
            raise CoarsenUnsupported(f"line {node.lineno}: matmul with inner extent {n} (at most {MAX_PIECES})")
        if len(sa) == 1 and len(sb) == 1:
            return self.reduce(self.op("mul", a, b))
        a = a if isinstance(a, _Stacked) else self.const(a)
        b = b if isinstance(b, _Stacked) else self.const(b)
        total = None
        for j in range(n):
            left = self.take(a, j if len(sa) == 1 else (slice(None), slice(j, j + 1) if len(sb) == 2 else j), node)
            term = self.op("mul", left, self.take(b, j, node))
            total = term if total is None else self.op("add", total, term)
        return total

    def take(self, value, key, node):
        """``value[key]`` for a static int/slice key (tuples: leading int or full slice, then the rest)."""
        if isinstance(value, _Stacked):
            head, rest = (key[0], key[1:]) if isinstance(key, tuple) else (key, ())
            if isinstance(head, int):
                item = value.items[head]
                return self.take(item, rest, node) if rest else item
            if isinstance(head, slice):
                items = value.items[head]
                if not items:
                    raise CoarsenUnsupported(f"line {node.lineno}: an empty slice")
                if not rest:
                    return _Stacked(items, is_view=True)
                return _Stacked([self.take(item, rest, node) for item in items], is_view=True)
            raise CoarsenUnsupported(f"line {node.lineno}: index {_short(key)} of an assembled tensor")
        if key == ():
            return value
        if any(not isinstance(k, (int, np.integer, slice, type(None), type(Ellipsis))) or isinstance(k, bool)
               for k in (key if isinstance(key, tuple) else (key,))):
            raise CoarsenUnsupported(f"line {node.lineno}: index {_short(key)} (a gather by a list, array or "
                                     "mask; only ints and slices)")
        try:
            shape = tuple(np.empty(value.shape, dtype=np.int8)[key].shape)
        except (IndexError, TypeError, ValueError) as exc:
            raise CoarsenUnsupported(f"line {node.lineno}: index {_short(key)} is not a static int/slice index") from exc
        if 0 in shape:
            raise CoarsenUnsupported(f"line {node.lineno}: an empty slice")
        if isinstance(value, ssa.Const):  # (kept a constant, but remembered as a view: writes reach its base)
            part = ssa.Const(shape, value.value)
            self.const_views[id(part)] = (part, value)
            return part
        return ssa.View(shape, value, key)

    def grow_list(self, name: str, how: str, item, node, env):
        """``name.append(item)`` as a new list bound to ``name`` (the list must be this function's own)."""
        current = env.get(name)
        owned = self.own_lists.get(id(current))
        if not isinstance(current, list) or owned is None or owned[0] is not current:
            raise CoarsenUnsupported(f"line {node.lineno}: `{name}.{how}(...)` changes a list the traced code did "
                                     "not create here (an argument, global or attribute)")
        if _aliased(current, name, env):
            raise CoarsenUnsupported(f"line {node.lineno}: `{name}.{how}(...)` changes a list that another "
                                     "variable also refers to")
        depth = owned[1]
        if len(self.loop_stack) > depth:
            raise _NeedsStaticLoop(f"line {node.lineno}: `{name}.{how}(...)` grows a list inside a loop",
                                   self.loop_stack[depth:])
        if how == "append":
            grown = current + [item]
        else:
            if item is DYNAMIC:
                raise CoarsenUnsupported(f"line {node.lineno}: extend() with a changing value")
            grown = current + list(self.rows(item, node) if _traced(item) else item)
        env = dict(env)
        env[name] = self.new_list(grown, depth)
        return env

    def assign_item(self, target: ast.Subscript, value, env) -> None:
        """``t[key] = value`` as a new tensor bound to ``t`` (only when nothing else refers to ``t``)."""
        name, line = target.value.id, target.lineno
        base = env.get(name)
        if base is None:
            base = self.lookup(name, line)
        key = self.ev_key(target.slice, env)
        if not _traced(base):
            if isinstance(base, (list, dict)) or base is DYNAMIC:
                raise CoarsenUnsupported(f"line {line}: item assignment `{_source_line(target)} = ...` into a "
                                         f"Python {type(base).__name__}")
            raise CoarsenUnsupported(f"line {line}: item assignment into {type(base).__name__} {name!r}")
        counters = _key_counters(key)
        if isinstance(key, _IndexVar) and key.site in self.masked:
            return self.masked_write(name, base, key, value, env, target)
        if counters:
            raise _NeedsStaticLoop(f"line {line}: `{_source_line(target)} = ...` writes at a loop counter", counters)
        why = self.writable(base, name, env)
        if why:
            raise CoarsenUnsupported(f"line {line}: `{_source_line(target)} = ...` writes in place into {name!r}, "
                                     f"which {why}; autograd would see the write there too")
        if key is DYNAMIC or _holds_node(key) or not base.shape:
            raise CoarsenUnsupported(f"line {line}: `{_source_line(target)} = ...` with an index unknown when tracing")
        head, rest = (key[0], key[1:]) if isinstance(key, tuple) else (key, ())
        n = base.shape[0]
        if rest or not isinstance(head, (int, slice)) or isinstance(head, bool) or n > MAX_PIECES:
            raise CoarsenUnsupported(f"line {line}: `{_source_line(target)} = ...`: only writes of rows "
                                     f"(t[i] = v, t[a:b] = v) of tensors of at most {MAX_PIECES} rows are supported")
        items = list(base.items) if isinstance(base, _Stacked) else [_row(base, k) for k in range(n)]
        positions = [head % n] if isinstance(head, int) and -n <= head < n else (
            list(range(n))[head] if isinstance(head, slice) else None)
        if not positions:
            raise CoarsenUnsupported(f"line {line}: `{_source_line(target)} = ...`: index out of range or empty")
        row_shape = base.shape[1:]
        vshape = value.shape if _traced(value) else np.shape(value)
        if isinstance(head, slice) and len(vshape) == len(row_shape) + 1:
            rows = self.rows(value, target) if _traced(value) else list(value)
            if len(rows) == 1:
                rows = list(rows) * len(positions)
            if len(rows) != len(positions):
                raise CoarsenUnsupported(f"line {line}: writing {len(rows)} rows into {len(positions)}")
        else:
            rows = [value] * len(positions)
        for k, row in zip(positions, rows):
            fitted = self.op("add", ssa.Const(row_shape, 0.0), row)  # the row's shape (broadcast as torch does)
            if fitted.shape != row_shape:
                raise CoarsenUnsupported(f"line {line}: a value of shape {list(fitted.shape)} written into a row "
                                         f"of shape {list(row_shape)}")
            items[k] = fitted
        env[name] = _Stacked(items)

    def counter_position(self, key: _IndexVar, length: int, node):
        """``stride * i + offset`` as a traced position in ``0..length-1`` over the whole masked loop (a
        Python negative index is shifted when every iteration's is negative; mixed signs are refused)."""
        loop = self.masked[key.site]
        ends = [key.stride * i + key.offset for i in (loop[0], loop[-1])]
        low, high = min(ends), max(ends)
        if 0 <= low and high < length:
            shift = 0
        elif -length <= low and high < 0:
            shift = length
        else:
            raise CoarsenUnsupported(f"line {node.lineno}: `{_source_line(node)}` reaches positions {low}..{high} "
                                     f"of a tensor of {length} rows over the loop (out of range or wrapping)")
        counter = ssa.LoopIndex((), key.site, key.first)
        return self.op("add", self.op("mul", counter, float(key.stride)), float(key.offset + shift))

    def at_counter(self, shape, key: _IndexVar, node):
        """The mask ``iota == position`` (as ``|iota - position| < 1/2``: both are whole numbers)."""
        position = self.counter_position(key, shape[0], node)
        return self.op("lt", self.op("abs", self.op("sub", ssa.Iota(shape), position)), 0.5)

    def masked_write(self, name: str, base, key: _IndexVar, value, env, target) -> None:
        """``x[i] = v`` in a long loop: ``x = where(iota == i, v, x)`` (``x`` carried as a whole vector)."""
        line = target.lineno
        if isinstance(base, _Stacked):
            base = self.materialize(base)
        if not isinstance(base, ssa.Node) or len(base.shape) != 1:
            raise CoarsenUnsupported(f"line {line}: `{_source_line(target)} = ...` in a loop of more than "
                                     f"{STATIC_UNROLL} iterations: only vectors are written at the counter")
        if base.shape[0] * len(self.masked[key.site]) > MASKED_HISTORY:
            raise CoarsenUnsupported(f"line {line}: `{_source_line(target)} = ...`: the compiled loop would keep "
                                     f"{base.shape[0]} entries for each of {len(self.masked[key.site])} iterations "
                                     f"(more than {MASKED_HISTORY})")
        why = self.writable(base, name, env)
        if why:
            raise CoarsenUnsupported(f"line {line}: `{_source_line(target)} = ...` writes in place into {name!r}, "
                                     f"which {why}; autograd would see the write there too")
        if (_traced(value) and value.shape != ()) or not (_traced(value) or isinstance(value, (int, float))):
            raise CoarsenUnsupported(f"line {line}: `{_source_line(target)} = ...` writes a value that is not a "
                                     "scalar")
        mask = self.at_counter(base.shape, key, target)
        env[name] = self.op("where", mask, value, base)

    def masked_read(self, base: ssa.Node, key: _IndexVar, node):
        """``x[i + c]`` of a vector that changes in a masked loop: ``sum(where(iota == i + c, x, 0))``."""
        mask = self.at_counter(base.shape, key, node)
        return ssa.Reduce((), self.op("where", mask, base, 0.0))

    def writable(self, value, name: str, env) -> str | None:
        """Why an in-place write into ``value`` (bound to ``name``) would be seen elsewhere, or None."""
        while True:
            if isinstance(value, (ssa.Input,)):
                return "is an argument"
            if (isinstance(value, (ssa.View, ssa.Index)) or getattr(value, "is_view", False)
                    or (isinstance(value, ssa.Layout) and value.kind == "reshape")  # (a torch view too)
                    or self.const_views.get(id(value), (None,))[0] is value):
                return "is a view of another tensor"
            if id(value) in self.narrow:
                return f"has dtype {self.narrow[id(value)]} (the write would round); create it with dtype=x.dtype"
            if _aliased(value, name, env, self.const_views):
                return "another variable (or a list) also refers to"
            origin = self.origins.get(id(value)) if isinstance(value, ssa.Carried) else None
            if origin is None or origin[0] is not value:
                return None
            _, value, env = origin  # loop state: the tensor it started from must be free too


def _rows_of_one_vector(items) -> ssa.Node | None:
    """The vector ``v`` when ``items`` is exactly ``[v[0], v[1], ..., v[n - 1]]`` (views), else None."""
    if not items or not all(isinstance(v, ssa.View) and v.shape == () for v in items):
        return None
    base = items[0].base
    if base.shape != (len(items),):
        return None
    if all(v.base is base and v.key == k for k, v in enumerate(items)):
        return base
    return None
