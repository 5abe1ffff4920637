"""Lowered XLA operations or the host call: which path a program's call takes under jit.

On the CPU, XLA's runtime takes one block of temporary memory per call of a compiled computation
from malloc. glibc's malloc serves a block larger than 32 MiB (its largest mmap threshold) with
freshly mapped pages and unmaps them when it is freed, so every call page-faults all of that
memory again: measured here at about 0.4 ms of kernel time per MiB, the whole difference
between a 24 MiB and a 36 MiB temporary (bench notes in docs/jax.md). PubMed sparse attention's
joint vjp program needs 66 MiB lowered (five arrays of one value row per stored entry) and
spent 28 of its 45 ms in page faults, where the compiled kernel behind the host call streams
over the entries without such intermediates. Smaller computations reuse their block and run at
XLA's speed.

Second, XLA's CPU scatter-add (the segment sums that end a lowered sum over stored entries)
reads its updates from an array of one value row per entry, materialised in full before the
scatter: past the core's cache it streams that array through memory twice (written, then read
by the scatter), where the compiled kernel adds each entry's row into the result as it makes it.
Measured (bench/frameworks.py, GCN on Planetoid's sparse features, forward + backward): X W with
X sparse, 49,216 and 105,165 entries of 16 values (6.3 and 13.5 MB of updates), took 0.65 and
2.3 ms lowered against 0.39 and 0.72 ms as host calls, while A_hat H on Cora and CiteSeer
(1.7 and 1.6 MB) ran at the same speed either way (0.18 against 0.22 ms), and PubMed's A_hat H
(13.9 MB) within noise of it.

The rule (`prefer_lowered`), deterministic for a program and its inputs' shapes: on the CPU, a
call is lowered when no scatter-add of the lowered computation adds more than
`CPU_SCATTER_LIMIT` bytes of updates and XLA's temporary memory for the computation alone is at
most `CPU_TEMP_LIMIT`, else it stays a host call. The temporary memory is XLA's own buffer
assignment (`memory_analysis` of the function compiled alone); that compile is skipped when the
sum of every intermediate of the function's jaxpr is already within the limit (it bounds the
temporary memory from above). Other platforms (GPU, TPU: pooled allocators) always lower.

>>> import numpy as np, jax
>>> prefer_lowered(lambda x: x * 2.0, [jax.ShapeDtypeStruct((4,), np.float32)], "cpu")
True
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Sequence

import numpy as np

#: the most temporary memory (bytes) a lowered computation may need on the CPU: glibc's largest
#: mmap threshold, above which each call maps (and page-faults) its temporary block afresh
CPU_TEMP_LIMIT = 32 << 20

#: the most bytes of updates one scatter-add of a lowered computation may add on the CPU: twice
#: the 2 MiB L2 cache of a core of the machine measured (the data sets the cut between 1.7 MB,
#: as fast lowered, and 6.3 MB, 1.7x slower lowered; see the module docstring)
CPU_SCATTER_LIMIT = 4 << 20


def largest_scatter_bytes(jaxpr: Any) -> int:
    """The bytes of updates of the largest scatter-add of a jaxpr, sub-jaxprs included."""
    largest = 0
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "scatter-add" and len(eqn.invars) >= 3:
            aval = eqn.invars[2].aval
            if hasattr(aval, "shape") and hasattr(aval, "dtype"):
                largest = max(largest, int(np.prod(aval.shape, dtype=np.int64)) * np.dtype(aval.dtype).itemsize)
        for param in eqn.params.values():
            for sub in param if isinstance(param, (list, tuple)) else (param,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    largest = max(largest, largest_scatter_bytes(inner))
    return largest


def intermediate_bytes(jaxpr: Any) -> int:
    """The bytes of every value a jaxpr's equations produce, sub-jaxprs included: an upper
    bound of the temporary memory XLA needs for it (fusion and buffer reuse only lower it)."""
    total = 0
    for eqn in jaxpr.eqns:
        for var in eqn.outvars:
            aval = var.aval
            if hasattr(aval, "shape") and hasattr(aval, "dtype"):
                total += int(np.prod(aval.shape, dtype=np.int64)) * np.dtype(aval.dtype).itemsize
        for param in eqn.params.values():
            for sub in param if isinstance(param, (list, tuple)) else (param,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    total += intermediate_bytes(inner)
    return total


def temp_bytes(function: Callable, abstract: Sequence[Any]) -> int:
    """XLA's temporary memory (bytes) for one call of `function` compiled alone for the CPU."""
    import jax

    compiled = jax.jit(function).lower(*abstract).compile()
    analysis = compiled.memory_analysis()
    if analysis is None:
        raise RuntimeError("XLA gave no memory analysis")
    return int(analysis.temp_size_in_bytes)


def prefer_lowered(function: Callable, abstract: Sequence[Any], platform: str) -> bool:
    """Whether a call of `function` (the lowered program, on arrays like `abstract`) should run
    as XLA operations on `platform` rather than as a host call (see the module docstring)."""
    import jax

    if platform != "cpu":
        return True
    try:
        jaxpr = jax.make_jaxpr(function)(*abstract).jaxpr
        if largest_scatter_bytes(jaxpr) > CPU_SCATTER_LIMIT:
            return False
        if intermediate_bytes(jaxpr) <= CPU_TEMP_LIMIT:
            return True
        if jax.default_backend() != "cpu":  # a CPU computation under another default backend: no estimate
            return True
        return temp_bytes(function, abstract) <= CPU_TEMP_LIMIT
    except Exception as error:  # noqa: BLE001 - no estimate: lowered, as without the rule
        logging.getLogger(__name__).debug("no temporary memory estimate (%s); lowered", error)
        return True
