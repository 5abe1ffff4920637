"""Programs as JAX operations: a sparsad program (the typed source language, the level the
interpreter runs) becomes a pure JAX function of its inputs' arrays, so that XLA runs it
instead of a host callback.

The lowering evaluates the program once, symbolically, over *frames*: the iterations of the
enclosing sums, as the axes of arrays. A value in a frame is an array whose leading axes are the
frame's (size 1 where the value does not vary along one) followed by its dictionary levels, which
are dense. A sum over a dense dictionary pushes an axis (its keys are the positions); a sum over a
CSR input pushes an axis over its non-empty rows, and a sum over such a row replaces that axis by
one over the stored entries (a static parent index per entry). Sums reduce those axes again:
`jnp.sum`, `jax.ops.segment_sum` over row ids, or a scatter-add where the body is a singleton
`{k -> v}` keyed by something other than the axis' own keys. Keys drawn from patterns and axes
are static NumPy arrays; the sparse operand's index arrays become XLA constants of static shape.

The subset: sums over dense arrays, CSR inputs and their rows, static ranges; singletons, lookups
in dense arrays and in CSR rows at keys known statically (or at the entries being iterated);
dense arithmetic, comparisons, `if`, the built-in functions; `let`. Anything else, and any value
whose key set the dense representation cannot state exactly (a dictionary iterated after a
conditional may have dropped keys), raises `Unsupported`: `lower_program` then returns None and
the caller keeps the host call. The result never differs from the interpreter's.

Only primal values are lowered: derivatives stay sparsad's own derivative programs (lowered the
same way by the caller), so the masked convention and the derivative rules at kinks are sparsad's.

>>> import numpy as np, jax, jax.numpy as jnp
>>> from sparsad.lang.parse import parse
>>> from sparsad.ops.pattern import CSRPattern
>>> pattern = CSRPattern(np.array([0, 2, 2, 3]), np.array([0, 2, 1]), (3, 3))
>>> spmv = lower_program(parse("sum(<i, r> in A) { i -> sum(<j, a> in r) a * x(j) }"),
...                      {"A": SparseInput(pattern), "x": DenseInput((3,))}, ("dense", (3,)))
>>> with jax.enable_x64(True):
...     spmv({"A": jnp.array([1.0, 2.0, 3.0]), "x": jnp.array([1.0, 10.0, 100.0])}).tolist()
[201.0, 0.0, 30.0]

Modules (one job each): `values` (inputs, frames and the symbolic values), `arrays` (array
helpers and number arithmetic), `expressions` (expressions: let, arithmetic, `if`, singletons),
`lookups` (lookups in dense arrays, CSR inputs and their rows), `sums` (sums: the frames they
push, the reductions and scatters that end them), `result` (the result in its layout),
`lowering` (the entry point, `lower_program`), `choice` (lowered or host call: the CPU cost rule).
"""
from sparsad.jax.lower.lowering import lower_program
from sparsad.jax.lower.values import DENSE_LIMIT, ConstantInput, DenseInput, SparseInput, Unsupported

__all__ = ["lower_program", "SparseInput", "DenseInput", "ConstantInput", "Unsupported", "DENSE_LIMIT"]
