"""``explain``: what coarsening does to a function — SSA structure, closed forms, segments, code."""
from __future__ import annotations

from typing import Callable

import sympy as sp

from sparsad.coarsen import ssa
from sparsad.coarsen.frontend import CoarsenUnsupported


def explain(fn: Callable, *example_args, print_it: bool = True, max_segment: int | None = None) -> str:
    """Describe how ``fn`` is coarsened on ``example_args``; print it (unless told not to) and return it.

    >>> import torch, sparsad.coarsen as coarsen
    >>> def softplus_sum(x):
    ...     return torch.log(1 + torch.exp(x)).sum()
    >>> text = coarsen.explain(softplus_sum, torch.zeros(3, dtype=torch.float64), print_it=False)
    >>> print(text.splitlines()[0])
    coarsening of softplus_sum (SOI size limit L = 30)
    >>> "s1 = sum(Softplus(x))" in text
    True
    """
    import types

    from sparsad.coarsen.api import Coarsened, _backend
    from sparsad.coarsen.plan import build_plan

    if isinstance(fn, types.MethodType):  # obj.method: its function, with the instance first
        fn, example_args = fn.__func__, (fn.__self__,) + tuple(example_args)

    coarse = fn if isinstance(fn, Coarsened) else Coarsened(fn)
    limit = max_segment or coarse.max_segment
    name = getattr(coarse.fn, "__name__", "f")
    lines = [f"coarsening of {name} (SOI size limit L = {limit})"]
    try:
        plan = build_plan(coarse.fn, example_args, limit, coarse.closed_forms)
    except Exception as why:  # the route is plain autograd: say why, with the line
        text = f"{lines[0]}\n  not coarsened, plain autograd is used: {_reason(coarse.fn, why)}"
        if print_it:
            print(text)
        return text
    graph = plan.graph
    lines.append("SSA graph:")
    lines.append(f"  inputs: {', '.join(f'{n.name}{list(n.shape)}' for n in graph.inputs)}")
    seen = set()
    for loop in graph.loops:
        if (loop.site, loop.scope) in seen:
            continue  # the front end may trace a body more than once
        seen.add((loop.site, loop.scope))
        lines.append(f"  {ssa.describe(loop)}" + (f", break at line {loop.break_site[0]}" if loop.break_site else ""))
    for site in graph.branch_sites:
        lines.append(f"  if at line {site[0]}: φ on the recorded decision")
    lines.extend(f"  {note}" for note in graph.notes)
    if plan.needs_record:
        from sparsad.coarsen import numba_primal
        from sparsad.coarsen.plan import FAST_PRIMAL_AFTER

        reason = numba_primal.eligible(example_args) if coarse.numba else "numba=False"
        if reason is None:
            from sparsad.coarsen import tiers

            when = ("compiled with Numba in a child process started at the first call of a signature, used "
                    "once it is ready" if tiers.background() else
                    f"compiled with Numba at call {FAST_PRIMAL_AFTER} of a signature")
            lines.append(f"recording primal: {when} (checked once against the eager primal), eager before that")
        else:
            lines.append(f"recording primal: eager ({reason})")
    backend = _backend(example_args)
    if backend == "torch":
        import torch
        with torch.no_grad():
            _, record = plan.run(*[a.detach() if isinstance(a, torch.Tensor) else a for a in example_args])
    else:
        _, record = plan.run(*example_args)
    try:
        elev = plan.elevation(record)
    except Exception as why:
        lines.append(f"not coarsened, plain autograd is used: {_reason(coarse.fn, why)}")
        text = "\n".join(lines)
        if print_it:
            print(text)
        return text
    lines.append("closed forms and loop handling:")
    lines.extend("  " + n for n in elev.notes) if elev.notes else lines.append("  (no traced loops)")
    if elev.params:
        lines.append("run-time parameters: " + ", ".join(f"{p.sym} = {p.kind} at line {p.site[0]}" for p in elev.params))
    lines.append(f"segments of interest ({len(elev.segments)}):")
    for seg in elev.segments:
        if seg.kind == "view":
            lines.append(f"  {seg.sym} = {seg.base}[{seg.key!r}]")
        elif seg.kind == "reduce":
            lines.append(f"  {seg.sym} = sum({sp.sstr(seg.expr)})")
        else:
            lines.append(f"  {seg.sym} = {sp.sstr(seg.expr)}")
    for j, out in enumerate(elev.outputs):
        lines.append(f"  output {j} = {sp.sstr(out)}")
    tensors = [example_args[n.index] for n in graph.inputs]
    wrt = tuple(i for i, t in enumerate(tensors) if "float" in str(t.dtype))
    if wrt:
        try:
            compiled = plan.adjoint(elev, wrt, backend, tensors[wrt[0]])
            where = ("compiled with Numba for CPU tensors (same statements, scalars unboxed)"
                     if backend == "torch" and coarse.numba else backend)
            lines.append(f"generated adjoint ({where}):")
            lines.extend("  " + line for line in compiled.source.rstrip().splitlines())
        except Exception as why:
            lines.append(f"no adjoint, plain autograd is used: {_reason(coarse.fn, why)}")
    text = "\n".join(lines)
    if print_it:
        print(text)
    return text


def _reason(fn: Callable, why: Exception) -> str:
    """``file:line: message`` (the line the message names, else the function's first line)."""
    import re

    text = str(why).splitlines()[0] if str(why) else type(why).__name__
    if not isinstance(why, (CoarsenUnsupported, NotImplementedError)):
        text = f"internal error {type(why).__name__}: {text}"
    code = getattr(fn, "__code__", None)
    match = re.match(r"line (\d+): ", text)
    line = int(match.group(1)) if match else (code.co_firstlineno if code is not None else 0)
    return f"{code.co_filename if code is not None else '?'}:{line}: {text[match.end():] if match else text}"
