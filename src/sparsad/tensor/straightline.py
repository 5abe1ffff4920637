"""A dense graph's schedule as one generated Python function (the executor's run path).

Looking values up in a dict and building argument lists costs a fraction of a microsecond per
node, which is as much as the kernels themselves on the small einsums of an ALS sweep over a small
tensor. So the executor writes each schedule out once as straight-line code over local variables:

    def run(values, last):
        v3 = values[3]
        v7 = f0(v3, v3)
        v9 = f1(v7)
        del v7
        return [v9]

With `reuse`, each computed value goes through `last` (uid -> value computed from the objects fed
now; the executor drops the entries a new feed invalidates):

        v7 = last.get(7)
        if v7 is None:
            v7 = last[7] = f0(v3, v3)
"""
from __future__ import annotations

from typing import Any, Callable, Sequence


def compile_steps(steps: Sequence[tuple], outputs: Sequence[int], reuse: bool) -> Callable[[dict, dict], list]:
    """steps: (uid, evaluator, input uids, uids to free after it), in schedule order (steps
    without an evaluator only free). Returns run(values, last) -> the values of `outputs`, where
    `values` holds the fed Variables by uid.

    >>> import operator
    >>> run = compile_steps([(2, operator.add, (0, 1), ()), (3, operator.neg, (2,), (2,))], [3], reuse=False)
    >>> run({0: 1.0, 1: 2.0}, {})
    [-3.0]
    """
    namespace: dict[str, Any] = {}
    produced = {uid for uid, fn, _, _ in steps if fn is not None}
    loaded: list[int] = []
    body: list[str] = []
    for uid, fn, args, frees in steps:
        for a in args:
            if a not in produced and a not in loaded:
                loaded.append(a)
        if fn is not None:
            name = f"f{len(namespace)}"
            namespace[name] = fn
            call = f"{name}({', '.join(f'v{a}' for a in args)})"
            if reuse:
                body += [f"    v{uid} = last.get({uid})", f"    if v{uid} is None:",
                         f"        v{uid} = last[{uid}] = {call}"]
            else:
                body.append(f"    v{uid} = {call}")
        if frees:
            body.append(f"    del {', '.join(f'v{f}' for f in frees)}")
    for uid in outputs:
        if uid not in produced and uid not in loaded:
            loaded.append(uid)
    lines = ["def run(values, last):"] + [f"    v{u} = values[{u}]" for u in loaded] + body
    lines.append(f"    return [{', '.join(f'v{u}' for u in outputs)}]")
    exec(compile("\n".join(lines), "<sparsad.tensor schedule>", "exec"), namespace)  # noqa: S102
    return namespace["run"]
