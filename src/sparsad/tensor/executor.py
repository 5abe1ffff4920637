"""Run einsum graphs on NumPy, PyTorch, JAX or Dask: plan once, run many feeds."""
from __future__ import annotations

import math
from functools import partial
from typing import Any, Mapping, Sequence

import numpy as np
import opt_einsum as oe

from sparsad.errors import DTypeError, FormatError, InputError, ShapeError
from sparsad.tensor.backends import (
    SingularInverse, check_dtype, check_sparse_backend, densify, get_backend, is_sparse, sparse_einsum,
    to_pydata,
)
from sparsad.tensor.graph import einsum_view, topological
from sparsad.tensor.blas import one_blas_thread
from sparsad.tensor.paths import choose_path
from sparsad.tensor.straightline import compile_steps
from sparsad.tensor.nodes import (
    Add, Constant, Einsum, Elementwise, Identity, Node, Power, SampleAt, Scale, Sub, Sum, TensorInverse,
    Transpose, Variable,
)


SMALL_GRAPH_BYTES = 8 * 2**20
# Runs estimated below this many flops (about a millisecond of one core) use one BLAS thread...
SERIAL_BELOW_FLOPS = 10**7
# ... when one of their products is big enough for OpenBLAS to thread it at all (it keeps products
# under 65536 * 4 multiply-adds on one thread), else switching threads is pure overhead.
BLAS_THREADS_FROM_FLOPS = 2 * 65536 * 4


def singular_error(node: TensorInverse, detail: str) -> InputError:
    x = node.inputs[0]
    return InputError(f"tensorinv ({node.label}): {x.label} of shape {x.shape} is singular or not finite "
                      f"({detail}); regularise it (add a multiple of the identity) or check the feeds")


def _dtype_kind(value) -> str:
    """'f', 'c', 'i', ... for NumPy, PyTorch, JAX, Dask and sparse arrays and Python scalars/lists."""
    dtype = getattr(value, "dtype", None)
    if dtype is None:
        return np.asarray(value).dtype.kind
    if type(dtype).__module__ == "torch":
        return "c" if dtype.is_complex else ("f" if dtype.is_floating_point else
                                             ("b" if str(dtype) == "torch.bool" else "i"))
    return np.dtype(dtype).kind


def check_feed_dtype(var: Variable, value) -> None:
    """Complex, string and object feeds are refused (a cast would drop the imaginary part)."""
    try:
        kind = _dtype_kind(value)
    except (TypeError, ValueError):
        kind = "O"
    if kind == "c":
        raise DTypeError(f"feed for {var.name!r}: complex values are not supported (they would silently "
                         "lose their imaginary part); feed the real and imaginary parts as two Variables")
    if kind not in "biuf":
        raise DTypeError(f"feed for {var.name!r}: a {type(value).__name__} of non-numeric dtype; "
                         "feed a real numeric array")


def _host(value) -> np.ndarray:
    """A feed as a NumPy array (sparse feeds: their stored values)."""
    if is_sparse(value):
        return to_pydata(value).data
    if type(value).__module__.startswith("torch"):
        return value.detach().cpu().numpy()
    if hasattr(value, "compute"):
        return np.asarray(value.compute())
    return np.asarray(value)


def check_feed_structure(var: Variable, value, dtype: np.dtype) -> None:
    """A Variable declared symmetric or orthonormal must be fed such a value: the optimizer
    simplified the graph assuming it, so a feed that is not would give a wrong answer."""
    if not var.symmetry and not var.orthonormal:
        return
    data = _host(value).astype(np.float64)
    scale = float(np.abs(data).max()) if data.size else 0.0
    tol = 1e-6 if dtype == np.float64 else 1e-2
    for group in var.symmetry:
        for a, b in zip(group, group[1:]):       # neighbouring swaps generate every permutation
            gap = float(np.abs(data - np.swapaxes(data, a, b)).max()) if data.size else 0.0
            if gap > tol * max(scale, 1.0):
                raise InputError(f"feed for {var.name!r}: declared symmetric in axes {list(group)} but "
                                 f"swapping axes {a} and {b} changes it by up to {gap:.3g}; feed a "
                                 "symmetric value or drop symmetry=")
    if var.orthonormal:
        gram = data @ data.T if var.orthonormal == "column" else data.T @ data
        gap = float(np.abs(gram - np.eye(gram.shape[0])).max()) if gram.size else 0.0
        if gap > tol:
            product = "M @ M.T" if var.orthonormal == "column" else "M.T @ M"
            raise InputError(f"feed for {var.name!r}: declared orthonormal={var.orthonormal!r} but {product} "
                             f"differs from the identity by {gap:.3g}; orthonormalise it (e.g. a QR "
                             "factor) or drop orthonormal=")


def check_feed_finite(var: Variable, value) -> None:
    """check_finite=True: a feed holding NaN or inf is an error naming the Variable."""
    data = _host(value)
    bad = int(data.size - np.count_nonzero(np.isfinite(data)))
    if bad:
        raise InputError(f"feed for {var.name!r}: {bad} of {data.size} entries are NaN or infinite "
                         "(check_finite=True); clean the data or mask those entries")


def canonical_subscripts(in_subs: Sequence[str], out: str) -> str:
    """The same einsum spelled with a, b, c, ... so every backend accepts it."""
    mapping: dict[str, str] = {}
    for ch in "".join(in_subs) + out:
        if ch not in mapping:
            mapping[ch] = oe.get_symbol(len(mapping))
    rename = lambda s: "".join(mapping[c] for c in s)  # noqa: E731
    return ",".join(rename(s) for s in in_subs) + "->" + rename(out)


def sampled_einsum(in_subs: Sequence[str], out: str, arrays: Sequence, coords: np.ndarray) -> np.ndarray:
    """einsum(in_subs -> out) evaluated only at the output coordinates `coords` (ndim x nnz).

    Each operand is indexed by the coordinates of its output letters, which turns those axes into
    one batch axis over the stored entries; the rest is an ordinary einsum with that batch axis.
    """
    batch = oe.get_symbol(0)
    rename = {ch: oe.get_symbol(i + 1) for i, ch in enumerate(dict.fromkeys("".join(in_subs) + out))}
    subs, ops = [], []
    for sub, array in zip(in_subs, arrays):
        sampled = [j for j, ch in enumerate(sub) if ch in out]
        if is_sparse(array):
            if len(sampled) == len(sub) and len(set(sub)) == len(sub):
                # Read the sparse operand at the coordinates without densifying it.
                subs.append(batch)
                ops.append(gather_sparse(to_pydata(array), tuple(coords[out.index(ch)] for ch in sub)))
                continue
            array = densify(array, "sampled einsum operand")
        array = np.asarray(array)
        if not sampled:
            subs.append("".join(rename[c] for c in sub))
            ops.append(array)
            continue
        rest = [j for j in range(len(sub)) if j not in sampled]
        moved = np.transpose(array, sampled + rest)
        picked = moved[tuple(coords[out.index(sub[j])] for j in sampled)]
        subs.append(batch + "".join(rename[sub[j]] for j in rest))
        ops.append(picked)
    return oe.contract(",".join(subs) + "->" + batch, *ops)


def numpy_small_einsum(subs: str, shapes: Sequence[tuple] | None = None):
    """A direct NumPy call for a one- or two-operand einsum (no per-call planning overhead).

    A two-operand einsum that is a plain tensor product (every shared letter summed, every other
    letter kept) becomes one matrix product planned from the shapes (`matmul_plan`); other cases
    (batch letters, letters summed within one operand, repeated letters) go to np.einsum."""
    lhs, out = subs.split("->")
    ins = lhs.split(",")
    if not subs.isascii():
        return None                                  # NumPy knows 52 letters; opt_einsum respells
    if len(ins) == 1:
        return partial(np.einsum, subs)
    a, b = ins
    if len(set(a)) != len(a) or len(set(b)) != len(b):
        return partial(np.einsum, subs)
    if a == b == out:
        return np.multiply                           # a Hadamard product
    shared = [c for c in a if c in b]
    if any(c in out for c in shared) or any(c not in out and c not in b for c in a) \
            or any(c not in out and c not in a for c in b):
        return partial(np.einsum, subs)              # batch or summed-out axes
    if shapes is None:
        shapes = [None, None]
    return matmul_plan(a, b, out, *shapes)


def _operand_layout(sub: str, free: list, contracted: list):
    """How a C-ordered operand with letters `sub` becomes a matrix: ('rows', perm) when it reads
    as (free, contracted), ('cols', perm) as (contracted, free) read transposed; perm is None
    when no copy is needed (its letters already lie in that order)."""
    as_rows = [sub.index(c) for c in free + contracted]
    as_cols = [sub.index(c) for c in contracted + free]
    if as_rows == sorted(as_rows):
        return "rows", None
    if as_cols == sorted(as_cols):
        return "cols", None
    return "rows", as_rows


def matmul_plan(a: str, b: str, out: str, shape_a: tuple | None, shape_b: tuple | None):
    """einsum(a,b->out) for a plain tensor product as one 2-D matrix product.

    The shared letters are ordered as they lie in one operand (whichever lets more operands be
    reshaped without a copy); each operand is read as a matrix by a reshape, transposed as a view
    when its contracted letters come first, so BLAS gets transposition flags instead of copies.
    The result is reshaped to (free letters of a, free letters of b) and, if `out` orders them
    otherwise, returned as a transposed view, as np.tensordot does.

    An operand stored in Fortran order (as a loaded .npy file or a transposed result can be) is
    read through its transpose, a C-ordered view with its letters reversed, under a plan made
    for that spelling on first use: a reshape would copy the whole tensor on every call."""
    if shape_a is None or shape_b is None:
        return _c_order_matmul(a, b, out, shape_a, shape_b)
    plans: dict[tuple[bool, bool], Any] = {}

    def plan_for(fortran_a: bool, fortran_b: bool):
        key = (fortran_a, fortran_b)
        if key not in plans:
            plans[key] = _c_order_matmul(a[::-1] if fortran_a else a, b[::-1] if fortran_b else b, out,
                                         shape_a[::-1] if fortran_a else shape_a,
                                         shape_b[::-1] if fortran_b else shape_b)
        return plans[key]

    c_order = plan_for(False, False)

    def run(x, y):
        x, y = np.asarray(x), np.asarray(y)
        flags_x, flags_y = x.flags, y.flags
        if flags_x.c_contiguous and flags_y.c_contiguous:
            return c_order(x, y)
        fortran_x = not flags_x.c_contiguous and flags_x.f_contiguous
        fortran_y = not flags_y.c_contiguous and flags_y.f_contiguous
        return plan_for(fortran_x, fortran_y)(x.T if fortran_x else x, y.T if fortran_y else y)

    return run


def _c_order_matmul(a: str, b: str, out: str, shape_a: tuple | None, shape_b: tuple | None):
    """matmul_plan's product for C-ordered operands (others are copied by the reshapes)."""
    free_a = [c for c in a if c not in b]
    free_b = [c for c in b if c not in a]
    choices = []
    for contracted in ([c for c in a if c in b], [c for c in b if c in a]):
        lay_a = _operand_layout(a, free_a, contracted)
        lay_b = _operand_layout(b, free_b, contracted)
        choices.append(((lay_a[1] is not None) + (lay_b[1] is not None), contracted, lay_a, lay_b))
    _, contracted, (kind_a, perm_a), (kind_b, perm_b) = min(choices, key=lambda c: c[0])
    produced = free_a + free_b
    perm_out = tuple(produced.index(c) for c in out)
    transpose_out = perm_out != tuple(range(len(out)))
    if shape_a is None or shape_b is None:
        axes = ([a.index(c) for c in contracted], [b.index(c) for c in contracted])

        def by_tensordot(x, y):
            r = np.tensordot(x, y, axes=axes)
            return r.transpose(perm_out) if transpose_out else r

        return by_tensordot
    size = {**dict(zip(a, shape_a)), **dict(zip(b, shape_b))}
    k = math.prod(size[c] for c in contracted)
    m = math.prod(size[c] for c in free_a)
    n = math.prod(size[c] for c in free_b)
    result_shape = tuple(size[c] for c in produced)
    # x as an (m, k) matrix and y as a (k, n) one
    x_shape = (m, k) if kind_a == "rows" else (k, m)
    y_shape = (n, k) if kind_b == "rows" else (k, n)
    x_t, y_t = kind_a == "cols", kind_b == "rows"
    if perm_a is not None:
        perm_a = tuple(perm_a)
    if perm_b is not None:
        perm_b = tuple(perm_b)
        y_shape = (n, k)                   # _operand_layout's copy puts free letters first

    def run(x, y):
        if perm_a is not None:
            x = x.transpose(perm_a)
        xm = x.reshape(x_shape)
        if x_t:
            xm = xm.T
        if perm_b is not None:
            y = y.transpose(perm_b)
        ym = y.reshape(y_shape)
        if y_t:
            ym = ym.T
        r = (xm @ ym).reshape(result_shape)
        return r.transpose(perm_out) if transpose_out else r

    return run


def _numpy_matrix_inverse(node: TensorInverse, matrix: np.ndarray) -> np.ndarray:
    """The NumPy backend's inverse of a square matrix, without tensorinv's reshaping."""
    try:
        inv = np.linalg.inv(matrix)
    except np.linalg.LinAlgError as exc:
        raise singular_error(node, str(exc)) from None
    if not np.isfinite(inv).all():
        raise singular_error(node, "the inverse has non-finite entries")
    return inv


def gather_sparse(coo, index: tuple) -> np.ndarray:
    """coo[index] for integer index arrays (zero where nothing is stored), by sorted search."""
    keys = np.ravel_multi_index(tuple(coo.coords), coo.shape)
    order = np.argsort(keys)
    keys = keys[order]
    query = np.ravel_multi_index(index, coo.shape)
    pos = np.clip(np.searchsorted(keys, query), 0, max(len(keys) - 1, 0))
    found = (keys[pos] == query) if len(keys) else np.zeros(len(query), bool)
    return np.where(found, coo.data[order][pos] if len(keys) else 0.0, 0.0)


class Executor:
    """Evaluates `nodes` for many feeds: contraction expressions are planned at construction.

    backend: "numpy" | "torch" | "jax" | "dask". path: "cheapest" (the fewer-flops of opt_einsum's
    greedy and exact orders for small einsums) or an opt_einsum strategy ("greedy", "optimal", ...) for einsums with more than two operands; memory_limit caps intermediate sizes
    (elements). For "dask", `client` (a dask.distributed Client) computes the results; `chunks`
    sets how fed NumPy arrays are split. With reuse=True an intermediate is kept between runs and
    reused while every Variable it depends on is fed the very same array object again.
    keep_feeds=True: a Variable left out of a run's feeds keeps the value it was last fed (say, the
    big tensor of an alternating sweep, fed once). dtype: float64, float32 or float16. check_finite=True refuses feeds holding NaN or inf.
    Complex feeds are refused; a singular tensorinv raises InputError on every backend.
    serial_below_flops: on the NumPy backend, a run whose estimated cost (the cost model's flops)
    is below this uses one BLAS thread (waking BLAS worker threads costs more than it saves on
    small products, and far more on a busy machine); 0 leaves BLAS's thread count alone.

    >>> import numpy as np
    >>> from sparsad import tensor as T
    >>> x = T.Variable("x", (2,))
    >>> run = T.Executor([T.einsum("i,i->", x, x)])   # planned once
    >>> float(run.run({x: np.array([1., 2.])})[0]), float(run.run({"x": np.array([3., 4.])})[0])
    (5.0, 25.0)
    """

    def __init__(self, nodes: Node | Sequence[Node], backend: str = "numpy", *, path: str = "cheapest",
                 memory_limit: int | None = None, dtype=np.float64, client: Any = None,
                 chunks: Any = "auto", reuse: bool = False, check_finite: bool = False,
                 keep_feeds: bool = False, serial_below_flops: float = SERIAL_BELOW_FLOPS):
        self.serial_below_flops = serial_below_flops
        self.nodes = [nodes] if isinstance(nodes, Node) else list(nodes)
        self.reuse = reuse
        self._last_values: dict[int, Any] = {}       # reuse=True: values computed from the current feeds
        self._fed_last: dict[int, Any] = {}          # reuse=True: the object each Variable was fed last
        self.backend = get_backend(backend)
        self.dtype = check_dtype(dtype)
        self.check_finite = check_finite
        self.keep_feeds = keep_feeds
        self._kept: dict[int, tuple] = {}
        self._structure_checked: dict[int, Any] = {}
        self.client = client
        self.chunks = chunks
        self.order = topological(self.nodes)
        self.variables = {n.uid: n for n in self.order if isinstance(n, Variable)}
        self._by_name: dict[str, Variable] = {}
        self._ambiguous_names: dict[str, int] = {}
        for v in self.variables.values():
            if v.name in self._by_name:
                self._ambiguous_names[v.name] = self._ambiguous_names.get(v.name, 1) + 1
            self._by_name.setdefault(v.name, v)
        self._sparse = any(v.sparse for v in self.variables.values())
        if self._sparse:
            check_sparse_backend(backend)
        self._constants = {n.uid: self._constant(n) for n in self.order if isinstance(n, (Constant, Identity))}
        self._plans = {}
        for node in self.order:
            view = einsum_view(node)
            if isinstance(node, Einsum) and len(node.inputs) > 0:
                subs = canonical_subscripts(view[0], view[1])
                shapes = [op.shape for op in node.inputs]
                expr = None
                if self.backend.name == "numpy" and len(node.inputs) <= 2:
                    expr = numpy_small_einsum(subs, shapes)
                if expr is None:
                    steps = choose_path(subs, shapes, path, memory_limit)[0]
                    planned = oe.contract_expression(subs, *shapes, optimize=steps)
                    expr = partial(planned, backend=self.backend.name)
                self._plans[node.uid] = (subs, expr)
        self._needed: dict[tuple, Any] = {}
        self._run_plans: dict[tuple, tuple] = {}
        self._planned = {n.uid for n in self.order}
        self._plain_numpy = self.backend.name == "numpy"
        # Variables whose plain float NumPy feeds need no conversion or check (uid -> shape)
        self._plain_feeds = {} if not self._plain_numpy or check_finite else {
            v.uid: v.shape for v in self.variables.values() if not (v.sparse or v.symmetry or v.orthonormal)}
        self._jitted: dict[tuple, Any] = {}
        # Einsums read only through SampleAt are never evaluated densely (sampled einsums).
        from sparsad.tensor.contract_path import sampled_einsums

        by_uid = {n.uid: n for n in self.order}
        self._lazy = {uid for uid in sampled_einsums(self.nodes)
                      if isinstance(by_uid[uid], Einsum)} - {n.uid for n in self.nodes}
        # Which nodes depend on each variable, for reuse of intermediates between runs
        # (the dimension-tree intermediates of an alternating sweep).
        deps: dict[int, frozenset] = {}
        self._dependents: dict[int, list[int]] = {uid: [] for uid in self.variables}
        for node in self.order:
            if isinstance(node, Variable):
                deps[node.uid] = frozenset([node.uid])
            else:
                deps[node.uid] = frozenset().union(*[deps[c.uid] for c in node.inputs])
                for var_uid in sorted(deps[node.uid]):
                    self._dependents[var_uid].append(node.uid)

    def _constant(self, node: Node):
        if isinstance(node, Identity):
            return self.backend.eye(node.n, self.dtype)
        return self.backend.asarray(np.asarray(node.value, dtype=self.dtype), self.dtype)

    def _feed(self, var: Variable, value):
        if (type(value) is np.ndarray and self._plain_numpy and value.dtype == self.dtype
                and value.shape == var.shape and not var.sparse and not var.symmetry
                and not var.orthonormal and not self.check_finite):
            return value          # the common case, already what the NumPy backend computes with
        check_feed_dtype(var, value)
        shape = tuple(getattr(value, "shape", np.shape(value)))
        if shape != var.shape:
            raise ShapeError(f"feed for {var.name!r}: shape {shape} does not match the declared {var.shape}")
        if self.check_finite:
            check_feed_finite(var, value)
        if var.symmetry or var.orthonormal:
            # checked once per fed object (an eigensolver feeds the same environment many times)
            if self._structure_checked.get(var.uid) is not value:
                check_feed_structure(var, value, self.dtype)
                self._structure_checked[var.uid] = value
        if var.sparse:
            if not is_sparse(value):
                raise FormatError(f"feed for {var.name!r}: Variable is declared sparse={var.sparse!r} "
                                  "but a dense array was given; pass scipy.sparse or pydata sparse")
            return to_pydata(value).astype(self.dtype)
        if is_sparse(value):
            return densify(value, f"feed for dense Variable {var.name!r}")
        if self.backend.name == "dask":
            import dask.array as da

            if isinstance(value, da.Array):
                return value.astype(self.dtype)
            return da.from_array(np.asarray(value, dtype=self.dtype), chunks=self.chunks)
        return self.backend.asarray(value, self.dtype)

    def _schedule(self, outs: Sequence[Node]) -> tuple[list[Node], dict[int, list[int]]]:
        """Nodes to evaluate, and after each step the values no later step needs (freed early,
        so peak memory is the live set, not the whole graph)."""
        key = tuple(o.uid for o in outs)
        if key not in self._needed:
            order = topological(outs)
            last_use: dict[int, int] = {}
            for step, node in enumerate(order):
                for child in node.inputs:
                    last_use[child.uid] = step
                    if child.uid in self._lazy:      # its operands are read at this step
                        for grand in child.inputs:
                            last_use[grand.uid] = step
            keep = set(key)
            free: dict[int, list[int]] = {}
            for uid, step in last_use.items():
                if uid not in keep:
                    free.setdefault(step, []).append(uid)
            self._needed[key] = (order, free)
        return self._needed[key]

    def run(self, feed_dict: Mapping[Node | str, Any], out: Sequence[Node] | None = None,
            to_numpy: bool = False) -> list:
        """Values of `out` (default: all planned nodes) for the given feeds (keyed by Variable or name)."""
        outs = self.nodes if out is None else list(out)
        key = tuple(o.uid for o in outs)
        plan = self._run_plans.get(key)
        if plan is None:
            plan = self._plan_run(outs, key)
        schedule, free, fed, steps, small = plan
        by_name, variables, plain, dtype = self._by_name, self.variables, self._plain_feeds, self.dtype
        values: dict[int, Any] = {}
        raw: dict[int, Any] = {}
        for name, value in feed_dict.items():
            if isinstance(name, Variable):
                uid = name.uid
                if uid not in variables:
                    continue  # a shared feed dict may hold variables other graphs need
                var = name
            elif isinstance(name, str):
                var = by_name.get(name)
                if name in self._ambiguous_names:
                    raise InputError(f"Executor.run: feed {name!r} is ambiguous: {self._ambiguous_names[name]} "
                                     "Variables of this graph share that name; key the feed by the "
                                     "Variable objects instead")
                if var is None:
                    raise InputError(f"Executor.run: feed {name!r} names no Variable of this graph "
                                     f"(variables: {sorted(by_name)})")
                uid = var.uid
            else:
                raise InputError(f"Executor.run: feed keys must be Variables or names, got {type(name).__name__}")
            shape = plain.get(uid)
            if shape is not None and type(value) is np.ndarray and value.dtype == dtype and value.shape == shape:
                values[uid] = value    # the common case, already what the NumPy backend computes with
            else:
                values[uid] = self._feed(var, value)
            raw[uid] = value
        if self.keep_feeds:
            # values kept across runs: a Variable not fed now keeps the value it was fed last
            for uid, (value, converted) in self._kept.items():
                if uid not in values:
                    values[uid], raw[uid] = converted, value
            self._kept.update({uid: (raw[uid], values[uid]) for uid in raw})
        if not fed.issubset(values.keys()):
            missing = [n.name for n in schedule if n.uid in fed and n.uid not in values]
            raise InputError(f"Executor.run: no value fed for Variable(s) {missing}")
        if self.reuse:
            self._stamp_feeds(raw)
        if self.backend.name == "jax" and not self.reuse:
            return self._run_jitted(outs, schedule, values, to_numpy)
        if steps is not None:
            if small:
                with one_blas_thread():
                    return self._finish(steps(values, self._last_values), to_numpy)
            return self._finish(steps(values, self._last_values), to_numpy)
        last = self._last_values
        for step, node in enumerate(schedule):
            for uid in free.get(step - 1, ()):
                values.pop(uid, None)
            if node.uid in values or node.uid in self._lazy:
                continue
            if isinstance(node, SampleAt):
                values[node.uid] = self._sample(node, values)
                continue
            if self.reuse and not isinstance(node, Variable):
                # Reuse a value computed from the very same fed arrays (compared by identity).
                cached = last.get(node.uid)
                if cached is None:
                    cached = last[node.uid] = self._eval(node, [values[c.uid] for c in node.inputs])
                values[node.uid] = cached
            else:
                values[node.uid] = self._eval(node, [values[c.uid] for c in node.inputs])
        return self._finish([values[o.uid] for o in outs], to_numpy)

    def _plan_run(self, outs: list, key: tuple) -> tuple:
        """What a run of these outputs needs, worked out on the first such run: the schedule, the
        values to free after each step, the Variables it reads, and for dense graphs the
        compiled steps and whether to run them on one BLAS thread."""
        for o in outs:
            if o.uid not in self._planned:
                raise InputError(f"Executor.run: output {o.label} was not among the planned nodes")
        schedule, free = self._schedule(outs)
        fed = frozenset(n.uid for n in schedule if isinstance(n, Variable))
        steps, small = self._steps(outs, schedule, free) if not self._sparse else (None, False)
        self._run_plans[key] = plan = (schedule, free, fed, steps, small)
        return plan

    def _stamp_feeds(self, raw: dict) -> None:
        """reuse=True: a Variable fed an object other than the one it was fed last drops every
        cached value that depends on it, so what stays cached was computed from the objects fed
        now. The last fed object is held, so a new array can never be mistaken for it."""
        fed_last, last, dependents = self._fed_last, self._last_values, self._dependents
        for uid, value in raw.items():
            if fed_last.get(uid) is not value:
                fed_last[uid] = value
                for node_uid in dependents[uid]:
                    last.pop(node_uid, None)

    def _step_list(self, schedule, free) -> list[tuple]:
        """For each node of a dense schedule to evaluate: (uid, evaluator, input uids, uids to
        free after it), so running it takes no type dispatch."""
        steps = []
        # freeing values early bounds peak memory; when everything fits in a few MiB it only
        # costs time
        total = sum(math.prod(n.shape) for n in schedule) * self.dtype.itemsize
        small = total < SMALL_GRAPH_BYTES
        for step, node in enumerate(schedule):
            frees = () if small else tuple(free.get(step, ()))
            if isinstance(node, Variable):
                if frees:
                    steps.append((node.uid, None, (), frees))
                continue
            steps.append((node.uid, self._evaluator(node), tuple(c.uid for c in node.inputs), frees))
        return steps

    def _steps(self, outs, schedule, free) -> tuple[Any, bool]:
        """The schedule of a dense graph compiled once per set of outputs into one function
        run(values, last) -> output values (`straightline.compile_steps`), and whether the run is
        small work to do on one BLAS thread (`serial_below_flops`)."""
        key = ("steps",) + tuple(o.uid for o in outs)
        if key not in self._needed:
            compiled = compile_steps(self._step_list(schedule, free), [o.uid for o in outs], self.reuse)
            self._needed[key] = (compiled, self._plain_numpy and self._is_small(schedule))
        return self._needed[key]

    def _is_small(self, schedule) -> bool:
        """Whether evaluating `schedule` is small work with a product BLAS would thread."""
        from sparsad.tensor.cost import node_cost

        costs = [node_cost(node) for node in schedule if node.inputs]
        return sum(costs) < self.serial_below_flops and max(costs, default=0) >= BLAS_THREADS_FROM_FLOPS

    def _evaluator(self, node: Node):
        if node.uid in self._constants:
            value = self._constants[node.uid]
            return lambda *args: value
        if isinstance(node, Einsum):
            return self._plans[node.uid][1]
        if (isinstance(node, TensorInverse) and self._plain_numpy and node.ndim == 2
                and self.dtype in (np.float64, np.float32)):
            return partial(_numpy_matrix_inverse, node)
        return lambda *args: self._eval(node, list(args))

    def _finish(self, results: list, to_numpy: bool) -> list:
        if self.backend.name == "dask":
            import dask

            if self.client is not None:
                results = self.client.gather(self.client.compute(results))
            else:
                try:
                    results = list(dask.compute(*results))
                except SingularInverse as exc:
                    raise InputError(f"tensorinv: a matrix to invert is singular ({exc}); regularise it "
                                     "(add a multiple of the identity) or check the feeds") from None
            results = [np.asarray(r) for r in results]
        elif to_numpy:
            results = [self.backend.to_numpy(r) if not is_sparse(r) else r for r in results]
        return results

    def _run_jitted(self, outs, schedule, values, to_numpy):
        """JAX: the whole schedule is traced once per set of outputs and compiled by XLA."""
        import jax

        key = tuple(o.uid for o in outs)
        fed = [n for n in schedule if isinstance(n, Variable)]
        if key not in self._jitted:
            inverses = [n for n in schedule if isinstance(n, TensorInverse)]

            def program(*arrays):
                env = dict(zip((v.uid for v in fed), arrays))
                for node in schedule:
                    if node.uid not in env:
                        env[node.uid] = self._eval(node, [env[c.uid] for c in node.inputs], traced=True)
                # JAX inverts singular matrices to inf/nan silently: report which ones did
                return [env[o.uid] for o in outs], [self.backend.all_finite(env[n.uid]) for n in inverses]

            self._jitted[key] = (jax.jit(program), inverses)
        program, inverses = self._jitted[key]
        results, finite = program(*[values[v.uid] for v in fed])
        for node, ok in zip(inverses, finite):
            if not bool(ok):
                raise singular_error(node, "the inverse has non-finite entries")
        return [np.asarray(r) for r in results] if to_numpy else list(results)

    def _sample(self, node: SampleAt, values: dict):
        """x at the stored coordinates of the pattern, as a pydata COO with that pattern."""
        import sparse

        x, pattern = node.inputs
        pat = to_pydata(values[pattern.uid])
        coords = pat.coords
        if x.uid in self._lazy:
            data = sampled_einsum(x.in_subs, x.out_sub, [values[c.uid] for c in x.inputs], coords)
        elif is_sparse(values[x.uid]):
            data = gather_sparse(to_pydata(values[x.uid]), tuple(coords))
        else:
            data = np.asarray(values[x.uid])[tuple(coords)]
        return sparse.COO(coords, np.asarray(data, dtype=self.dtype), shape=node.shape)

    def _eval(self, node: Node, args: list, traced: bool = False):
        if node.uid in self._constants:
            return self._constants[node.uid]
        b = self.backend
        if isinstance(node, Einsum):
            subs, expr = self._plans[node.uid]
            if self._sparse and any(is_sparse(a) for a in args):
                return sparse_einsum(subs, *args)
            return expr(*args)
        if isinstance(node, (Add, Sub)):
            a, b = args
            if self._sparse and is_sparse(a) != is_sparse(b):      # sparse + dense is dense: say so
                a, b = densify(a, f"{type(node).__name__} with a dense operand"), \
                    densify(b, f"{type(node).__name__} with a dense operand")
            return a + b if isinstance(node, Add) else a - b
        if isinstance(node, Scale):
            return float(node.coef) * args[0]
        if isinstance(node, Elementwise):
            if is_sparse(args[0]):
                return b.funcs[node.fn](densify(args[0], f"elementwise {node.fn}"))
            return b.funcs[node.fn](args[0])
        if isinstance(node, Power):
            return b.power(densify(args[0], "power"), node.exponent)
        if isinstance(node, Sum):
            return b.sum(args[0], node.axes) if node.axes else args[0]
        if isinstance(node, Transpose):
            return b.transpose(args[0], node.perm)
        if isinstance(node, TensorInverse):
            try:
                inv = b.tensorinv(densify(args[0], "tensorinv"), node.ind)
            except SingularInverse as exc:
                raise singular_error(node, str(exc)) from None
            if not traced and not b.all_finite(inv):
                raise singular_error(node, "the inverse has non-finite entries")
            return inv
        raise InputError(f"Executor: cannot evaluate {type(node).__name__} node {node.label}")


def evaluate(nodes: Node | Sequence[Node], feed_dict: Mapping, backend: str = "numpy", **options) -> list:
    """One-shot convenience: Executor(nodes, backend).run(feed_dict).

    >>> import numpy as np
    >>> from sparsad import tensor as T
    >>> x = T.Variable("x", (2,))
    >>> [float(v) for v in T.evaluate([x.sum(), T.einsum("i,i->", x, x)], {x: np.array([1., 2.])})]
    [3.0, 5.0]
    """
    return Executor(nodes, backend, **options).run(feed_dict)
