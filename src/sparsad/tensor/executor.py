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


def numpy_small_einsum(subs: str):
    """A direct NumPy call for a one- or two-operand einsum (no per-call planning overhead):
    tensordot plus a transpose when the contraction is a plain tensor product, else np.einsum."""
    lhs, out = subs.split("->")
    ins = lhs.split(",")
    if not subs.isascii():
        return None                                  # NumPy knows 52 letters; opt_einsum respells
    if len(ins) == 1:
        return partial(np.einsum, subs)
    a, b = ins
    if len(set(a)) != len(a) or len(set(b)) != len(b):
        return partial(np.einsum, subs)
    shared = [c for c in a if c in b]
    if any(c in out for c in shared) or any(c not in out and c not in b for c in a) \
            or any(c not in out and c not in a for c in b):
        return partial(np.einsum, subs)              # batch or summed-out axes
    axes = ([a.index(c) for c in shared], [b.index(c) for c in shared])
    produced = [c for c in a if c not in shared] + [c for c in b if c not in shared]
    perm = [produced.index(c) for c in out]
    identity = perm == list(range(len(perm)))

    def run(x, y):
        r = np.tensordot(x, y, axes=axes)
        return r if identity else r.transpose(perm)

    return run


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
        self._last_values: dict[int, Any] = {}
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
                    expr = numpy_small_einsum(subs)
                if expr is None:
                    steps = choose_path(subs, shapes, path, memory_limit)[0]
                    planned = oe.contract_expression(subs, *shapes, optimize=steps)
                    expr = partial(planned, backend=self.backend.name)
                self._plans[node.uid] = (subs, expr)
        self._needed: dict[tuple, Any] = {}
        self._planned = {n.uid for n in self.order}
        self._plain_numpy = self.backend.name == "numpy"
        self._jitted: dict[tuple, Any] = {}
        # Einsums read only through SampleAt are never evaluated densely (sampled einsums).
        from sparsad.tensor.contract_path import sampled_einsums

        by_uid = {n.uid: n for n in self.order}
        self._lazy = {uid for uid in sampled_einsums(self.nodes)
                      if isinstance(by_uid[uid], Einsum)} - {n.uid for n in self.nodes}
        # Which variables each node depends on, for reuse of intermediates between runs
        # (the dimension-tree intermediates of an alternating sweep).
        self._deps: dict[int, frozenset] = {}
        for node in self.order:
            if isinstance(node, Variable):
                self._deps[node.uid] = frozenset([node.uid])
            else:
                self._deps[node.uid] = frozenset().union(*[self._deps[c.uid] for c in node.inputs])

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
        if out is not None:
            planned = self._planned
            for o in outs:
                if o.uid not in planned:
                    raise InputError(f"Executor.run: output {o.label} was not among the planned nodes")
        by_name = self._by_name
        values: dict[int, Any] = {}
        raw: dict[int, Any] = {}
        variables = self.variables
        for key, value in feed_dict.items():
            if isinstance(key, Variable):
                if key.uid not in variables:
                    continue  # a shared feed dict may hold variables other graphs need
                var = key
            elif isinstance(key, str):
                var = by_name.get(key)
                if key in self._ambiguous_names:
                    raise InputError(f"Executor.run: feed {key!r} is ambiguous: {self._ambiguous_names[key]} "
                                     "Variables of this graph share that name; key the feed by the "
                                     "Variable objects instead")
                if var is None:
                    raise InputError(f"Executor.run: feed {key!r} names no Variable of this graph "
                                     f"(variables: {sorted(by_name)})")
            else:
                raise InputError(f"Executor.run: feed keys must be Variables or names, got {type(key).__name__}")
            values[var.uid] = self._feed(var, value)
            raw[var.uid] = value
        if self.keep_feeds:
            # values kept across runs: a Variable not fed now keeps the value it was fed last
            for uid, (value, converted) in self._kept.items():
                if uid not in values:
                    values[uid], raw[uid] = converted, value
            self._kept.update({uid: (raw[uid], values[uid]) for uid in raw})
        schedule, free = self._schedule(outs)
        missing = [v.name for v in self._fed_in(outs, schedule) if v.uid not in values]
        if missing:
            raise InputError(f"Executor.run: no value fed for Variable(s) {missing}")
        if self.backend.name == "jax" and not self.reuse:
            return self._run_jitted(outs, schedule, values, to_numpy)
        if not self._sparse:
            steps = self._steps(outs, schedule, free)
            if self._plain_numpy and self._is_small(outs, schedule):
                with one_blas_thread():
                    self._run_steps(steps, values, raw)
            else:
                self._run_steps(steps, values, raw)
            return self._finish([values[o.uid] for o in outs], to_numpy)
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
                inputs = tuple(raw[u] for u in sorted(self._deps[node.uid]))
                cached = self._last_values.get(node.uid)
                if cached is not None and len(cached[0]) == len(inputs) and all(
                        a is b for a, b in zip(cached[0], inputs)):
                    values[node.uid] = cached[1]
                    continue
                values[node.uid] = self._eval(node, [values[c.uid] for c in node.inputs])
                self._last_values[node.uid] = (inputs, values[node.uid])
            else:
                values[node.uid] = self._eval(node, [values[c.uid] for c in node.inputs])
        return self._finish([values[o.uid] for o in outs], to_numpy)

    def _fed_in(self, outs, schedule) -> list[Variable]:
        key = ("vars",) + tuple(o.uid for o in outs)
        if key not in self._needed:
            self._needed[key] = [n for n in schedule if isinstance(n, Variable)]
        return self._needed[key]

    def _steps(self, outs, schedule, free) -> list[tuple]:
        """The schedule of a dense graph compiled once per set of outputs: for each node to
        evaluate, (uid, evaluator, input uids, the sorted variables it depends on, uids to free
        after it). The run loop then does no type dispatch."""
        key = ("steps",) + tuple(o.uid for o in outs)
        if key not in self._needed:
            steps = []
            # freeing values early bounds peak memory; when everything fits in a few MiB it only
            # costs time
            total = sum(math.prod(n.shape) for n in schedule) * self.dtype.itemsize
            small = total < SMALL_GRAPH_BYTES
            for step, node in enumerate(schedule):
                frees = () if small else tuple(free.get(step, ()))
                if isinstance(node, Variable):
                    steps.append((node.uid, None, (), (), frees))
                    continue
                steps.append((node.uid, self._evaluator(node), tuple(c.uid for c in node.inputs),
                              tuple(sorted(self._deps[node.uid])), frees))
            self._needed[key] = steps
        return self._needed[key]

    def _is_small(self, outs, schedule) -> bool:
        """Whether evaluating `schedule` is small work with a product BLAS would thread (once per outputs)."""
        key = ("small",) + tuple(o.uid for o in outs)
        if key not in self._needed:
            from sparsad.tensor.cost import node_cost

            costs = [node_cost(node) for node in schedule if node.inputs]
            self._needed[key] = sum(costs) < self.serial_below_flops and max(costs, default=0) >= BLAS_THREADS_FROM_FLOPS
        return self._needed[key]

    def _evaluator(self, node: Node):
        if node.uid in self._constants:
            value = self._constants[node.uid]
            return lambda *args: value
        if isinstance(node, Einsum):
            return self._plans[node.uid][1]
        return lambda *args: self._eval(node, list(args))

    def _run_steps(self, steps, values: dict, raw: dict) -> None:
        reuse, last = self.reuse, self._last_values
        for uid, fn, args, deps, frees in steps:
            if fn is not None and uid not in values:
                if reuse:
                    inputs = tuple(raw[u] for u in deps)
                    cached = last.get(uid)
                    if cached is not None and all(a is b for a, b in zip(cached[0], inputs)):
                        values[uid] = cached[1]
                    else:
                        values[uid] = fn(*[values[a] for a in args])
                        last[uid] = (inputs, values[uid])
                else:
                    values[uid] = fn(*[values[a] for a in args])
            for f in frees:
                values.pop(f, None)

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
