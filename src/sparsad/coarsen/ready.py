"""Ready-made gradient calls of ``coarsen.grad``: one small Python function per call signature.

Once a signature's jitted adjoint (and, for recorded control flow, its Numba primal) is compiled
and verified, everything that depends only on the signature is decided once: which arguments are
tensors and which of them are 0-d, the primal's defaults, which results are wanted and how each
becomes a tensor.  That is written out as the source of one function (no loops over arguments,
no per-argument helper calls) and compiled with ``exec``; a call then costs little more than the
jitted code itself.  Per call it

* refuses anything unusual (an argument that is not a CPU tensor where the signature has one):
  it returns ``MISS`` and the general path runs;
* converts 0-d tensors with ``.item()`` and other tensors to NumPy views, kept per tensor object
  (``TensorViews``: ``Tensor.numpy()`` costs more than the rest of a small call), reused only
  while the tensor has the same memory and strides;
* for recorded control flow, runs the Numba primal into a reused event array and looks the event
  log up: the elevation, the verified jitted adjoint and its parameter values are functions of
  the log alone (elevations are only ever appended, so the first one matching a record stays the
  first); they are worked out the first time a log is seen (``lookup``) and kept, up to
  ``READY_LOG_CACHE`` logs, then the table starts afresh;
* wraps each wanted gradient: a float as a 0-d tensor, an array of the argument's shape as a tensor
  sharing its memory (the array is the jitted code's fresh result), anything else through
  ``torch_splice.fit_gradient``.

>>> import torch, sparsad.coarsen as coarsen
>>> from sparsad.coarsen import tiers
>>> def f(x, w):
...     return (w * torch.sin(x)).sum()
>>> x, w = torch.zeros(3, dtype=torch.float64), torch.tensor(2.0, dtype=torch.float64)
>>> g = coarsen.grad(f, (0, 1))
>>> for _ in range(3):
...     _ = g(x, w); _ = tiers.wait()
>>> [t.tolist() for t in g(x, w)]
[[2.0, 2.0, 2.0], 0.0]
"""
from __future__ import annotations

import weakref
from typing import Callable

import numpy as np

READY_LOG_CACHE = 256  # distinct event logs (trip counts, decisions) a recorded ready call remembers
VIEW_CACHE = 64        # tensors whose NumPy views a ready call keeps (dropped when the tensor dies)

MISS = object()  # a ready-made call could not serve these arguments: take the general path


class TensorViews:
    """NumPy views of CPU tensors, one per live tensor object, valid while its memory and strides are.

    ``get(a)`` is the miss path; generated code inlines the hit test
    (``e = lookup(id(a)); e is not None and e[0]() is a and e[1] == a.data_ptr() and e[2] == a.stride()``).
    The view keeps the tensor's storage, never the tensor, alive; the entry goes when the tensor does.
    """

    def __init__(self):
        self.entries: dict = {}
        self.lookup = self.entries.get

    def get(self, a):
        """``a``'s NumPy view (kept for later calls), or ``MISS`` when it has none (a sparse layout, a
        negative or conjugate bit): the general path handles such tensors."""
        try:
            view = (a.detach() if a.requires_grad else a).numpy()
        except (TypeError, RuntimeError):
            return MISS
        entries = self.entries
        if len(entries) >= VIEW_CACHE:
            entries.clear()
        key = id(a)

        def forget(ref, key=key, entries=entries):
            entry = entries.get(key)
            if entry is not None and entry[0] is ref:
                entries.pop(key, None)

        entries[key] = (weakref.ref(a, forget), a.data_ptr(), a.stride(), view)
        return view


def _finisher():
    """finish(g, like, scalar): a gradient the jitted adjoint returned, as a tensor fitted to
    ``like`` (the argument it belongs to; ``scalar`` when that is 0-d)."""
    import torch

    from sparsad.coarsen.torch_splice import fit_gradient

    from_numpy, array, ndarray, contiguous = torch.from_numpy, np.array, np.ndarray, np.ascontiguousarray

    def finish(g, like, scalar):
        if scalar and type(g) is float and like.dtype == torch.float64:
            return from_numpy(array(g))   # a Python float: a 0-d float64 array
        if type(g) is ndarray:
            return fit_gradient(from_numpy(contiguous(g)), like)
        return fit_gradient(float(g), like)

    return finish


def _conversions(positions: tuple, scalars: dict) -> list[str]:
    """Source lines binding ``v{i}`` to what the jitted code takes for tensor argument ``i``
    (returning ``MISS`` for an argument that is not a CPU tensor)."""
    lines = [f"    a{i} = args[{i}]" for i in positions]
    checks = " and ".join(f"isinstance(a{i}, Tensor) and a{i}.is_cpu" for i in positions)
    if checks:
        lines += [f"    if not ({checks}):", "        return MISS"]
    for i in positions:
        if scalars[i]:
            lines.append(f"    v{i} = a{i}.item()")
        else:
            lines += _view_lines(i, "    ")
    return lines


def _view_lines(i: int, indent: str) -> list[str]:
    """Source lines binding ``v{i}`` to the kept view of tensor ``a{i}`` (made now where none is kept
    for its storage and strides; ``MISS`` where it cannot be viewed)."""
    return [f"{indent}e = lookup(id(a{i}))",
            f"{indent}if e is not None and e[0]() is a{i} and e[1] == a{i}.data_ptr() and e[2] == a{i}.stride():",
            f"{indent}    v{i} = e[3]",
            f"{indent}else:",
            f"{indent}    v{i} = view(a{i})",
            f"{indent}    if v{i} is MISS:",
            f"{indent}        return MISS"]


def _results(picks: tuple, like: dict, single: bool, namespace: dict) -> list[str]:
    """Source lines returning the wanted gradients from ``g`` (the jitted adjoint's results)."""
    outs = _result_expressions(picks, like, namespace)
    if single:
        return [f"    return {outs[0]}"]
    return [f"    return ({', '.join(outs)},)"]


def _result_expressions(picks: tuple, like: dict, namespace: dict) -> list[str]:
    import torch

    outs = []
    for j, n, scalar in picks:
        a, float64 = like[n], like[n].dtype == torch.float64
        if scalar and float64:
            outs.append(f"(from_numpy(array(g[{j}])) if type(g[{j}]) is float else finish(g[{j}], a{n}, True))")
        elif not scalar and float64:
            namespace[f"shape{n}"] = tuple(a.shape)
            outs.append(f"(from_numpy(contiguous(g[{j}])) if type(g[{j}]) is ndarray and g[{j}].shape == shape{n} "
                        f"and g[{j}].dtype == f64 else finish(g[{j}], a{n}, False))")
        else:
            outs.append(f"finish(g[{j}], a{n}, {scalar})")
    return outs


def _namespace() -> dict:
    import torch

    return {"Tensor": torch.Tensor, "MISS": MISS, "from_numpy": torch.from_numpy, "array": np.array,
            "contiguous": np.ascontiguousarray, "ndarray": np.ndarray, "f64": np.dtype(np.float64),
            "finish": _finisher()}


def _compile(lines: list[str], namespace: dict, name: str) -> Callable:
    source = "\n".join(lines) + "\n"
    exec(compile(source, f"<sparsad.coarsen.ready:{name}>", "exec"), namespace)
    call = namespace["call"]
    call.source = source
    return call


def straight_call(direct: Callable, tensor_positions: tuple, picks: tuple, single: bool, args: tuple) -> Callable:
    """Gradient call of code without recorded control flow: NumPy values straight into the jitted
    adjoint ``direct``.  ``picks``: (position in the adjoint's results, argument index, 0-d?) per
    wanted gradient; ``args`` is the call the signature was taken from."""
    scalars = {i: args[i].dim() == 0 for i in tensor_positions}
    views = TensorViews()
    namespace = dict(_namespace(), direct=direct, lookup=views.lookup, view=views.get)
    lines = ["def call(args):"] + _conversions(tuple(tensor_positions), scalars)
    lines.append(f"    g = direct({''.join(f'v{i}, ' for i in tensor_positions)}1.0)")
    lines += _results(picks, {n: args[n] for _, n, _ in picks}, single, namespace)
    call = _compile(lines, namespace, "straight")
    batches: dict = {}

    def many(position: int):
        """``calls(args, values)``: ``[call(args with args[position] = v) for v in values]`` with the other
        arguments converted once (``MISS`` when any value is not a CPU tensor like ``args[position]``);
        None where ``position`` is not a tensor of more than 0 dimensions."""
        if position not in batches:
            batches[position] = _straight_batch(direct, tuple(tensor_positions), picks, single, args, position,
                                                views) if position in scalars and not scalars[position] else None
        return batches[position]

    call.many = many
    return call


def _straight_batch(direct: Callable, tensor_positions: tuple, picks: tuple, single: bool, args: tuple,
                    position: int, views: "TensorViews") -> Callable:
    scalars = {i: args[i].dim() == 0 for i in tensor_positions}
    namespace = dict(_namespace(), direct=direct, lookup=views.lookup, view=views.get)
    namespace["like_shape"], namespace["like_dtype"] = args[position].shape, args[position].dtype
    others = tuple(i for i in tensor_positions if i != position)
    lines = ["def call(args, values):"] + _conversions(others, scalars)
    p = position
    results = _result_expressions(picks, {n: args[n] for _, n, _ in picks}, namespace)
    lines += ["    out = []",
              f"    for a{p} in values:",
              f"        if not (type(a{p}) is Tensor and a{p}.is_cpu and a{p}.shape == like_shape "
              f"and a{p}.dtype == like_dtype):",
              "            return MISS",
              *_view_lines(p, "        "),
              f"        g = direct({''.join(f'v{i}, ' for i in tensor_positions)}1.0)",
              f"        out.append({results[0] if single else '(' + ', '.join(results) + ',)'})",
              "    return out"]
    return _compile(lines, namespace, "straight_batch")


def recorded_call(plan, primal, wrt: tuple, picks: tuple, single: bool, args: tuple) -> Callable:
    """Gradient call of code with recorded control flow whose primal runs under Numba (``primal``,
    a ``numba_primal.NumbaPrimal``): see the module docstring."""
    from sparsad.coarsen import numba_primal
    from sparsad.coarsen.budget import Deferred, call_deadline
    from sparsad.coarsen.plan import param_values
    from sparsad.coarsen.source import CoarsenUnsupported

    tensor_positions = tuple(node.index for node in plan.graph.inputs)
    like = args[tensor_positions[wrt[0]]]
    key_tail = (wrt, "torch", str(like.dtype), str(like.device))
    sites = primal.sites
    capacity = numba_primal.CAPACITY
    n_words = 2 + 3 * capacity
    logs: dict = {}     # event log (bytes) -> (jitted adjoint, parameter values)
    buffers: list = []  # spare event arrays (list.pop/append are atomic: safe across threads)

    def fresh_buffer() -> np.ndarray:
        ev = np.empty(n_words, dtype=np.int64)
        ev[1] = capacity
        return ev

    def lookup_log(log: bytes, n: int, ev: np.ndarray):
        """(jitted adjoint, parameter values) for an event log not seen before, or None."""
        record = numba_primal.replay(ev, n, sites)
        try:
            with call_deadline():
                elev = plan.elevation(record)
        except (CoarsenUnsupported, Deferred):  # (the general path says why, or waits for it)
            return None
        compiled = plan.compiled.get((id(elev),) + key_tail)
        if compiled is None or not compiled.verified or getattr(compiled.fn, "direct", None) is None:
            return None
        jitted = compiled.fn.direct()
        if jitted is None:
            return None
        params = tuple(float(v) if isinstance(v, bool) else v for v in param_values(elev, record))
        if len(logs) >= READY_LOG_CACHE:
            logs.clear()
        logs[log] = found = (jitted, params)
        return found

    full = primal.full_args(args)   # (the signature fixes how many defaults fill in)
    scalars = {i: args[i].dim() == 0 for i in tensor_positions}
    views = TensorViews()
    namespace = dict(_namespace(), primal=primal.jitted, counted=primal, lookup=views.lookup, view=views.get,
                     logs_get=logs.get, lookup_log=lookup_log, buffers=buffers, fresh=fresh_buffer,
                     capacity=capacity)
    values = []
    for i in range(len(full)):
        if i in scalars:
            values.append(f"v{i}")
        elif i < len(args):
            values.append(f"args[{i}]")
        else:
            namespace[f"default{i}"] = full[i]
            values.append(f"default{i}")
    lines = ["def call(args):"] + _conversions(tensor_positions, scalars)
    lines += ["    ev = buffers.pop() if buffers else fresh()",
              "    ev[0] = 0",
              f"    primal(ev, {', '.join(values)})",
              "    counted.calls += 1",
              "    n = ev.item(0)",
              "    if n > capacity:",
              "        return MISS",
              "    log = ev[2:2 + 3 * n].tobytes()",
              "    found = logs_get(log)",
              "    if found is None:",
              "        found = lookup_log(log, n, ev)",
              "        if found is None:",
              "            return MISS",
              "    buffers.append(ev)",
              f"    g = found[0]({''.join(f'v{i}, ' for i in tensor_positions)}*found[1], 1.0)"]
    lines += _results(picks, {n: args[n] for _, n, _ in picks}, single, namespace)
    return _compile(lines, namespace, "recorded")
