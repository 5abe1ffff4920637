"""vmap of a compiled program: the batched call is one program over the stacked inputs.

A call of program P mapped over its dense inputs x, y (and not over the others) is the program

    sum(<b, x> in X) { b -> let y = Y(b) in P }

over the stacked inputs X, Y (fresh names): the batch is one more sum. The lowering turns it
into one more array axis (what vmap does to XLA code), the host path into one kernel call for
the whole batch (where `lax.map` made one call per element), and its derivatives are sparsad's
derivative programs of that program, so forward and reverse mode compose with vmap as with any
call. Where this does not apply (a mapped sparse input, a result on a pattern, a batched
program sparsad cannot type) `batched_call` returns None and the caller maps the call with
`lax.map`.

>>> import jax, jax.numpy as jnp, sparsad.jax as sj
>>> dot = sj.compile_program("sum(<i, a> in u) a * v(i)")
>>> jax.vmap(lambda u: dot(u=u, v=jnp.array([1.0, 2.0])))(jnp.array([[1.0, 1.0], [3.0, 0.0]])).tolist()
[3.0, 3.0]
"""
from __future__ import annotations

from typing import Any

from sparsad.bridge import fresh_name
from sparsad.errors import SparsadError
from sparsad.lang.syntax import Let, Lookup, Singleton, Sum, Var


def batched_expr(expr, mapped: list[str], taken: list[str]) -> tuple[Any, dict[str, str]]:
    """(the batched program of `expr` mapped over the inputs `mapped`, name -> stacked name)."""
    stacked = {}
    for name in mapped:
        stacked[name] = fresh_name(f"{name}_batch", taken + list(stacked.values()))
    batch = fresh_name("b", taken + list(stacked.values()))
    body = expr
    for name in reversed(mapped[1:]):
        body = Let(name, Lookup(Var(stacked[name]), Var(batch)), body)
    return Sum(batch, mapped[0], Var(stacked[mapped[0]]), Singleton(Var(batch), body)), stacked


def batched_call(spec, args, dims) -> Any:
    """The batched result (batch axis 0) of a `sparsad_program` call `spec` on `args` mapped
    along `dims` (batching.not_mapped for the others), by one call of the batched program; None
    where that does not apply (then the caller uses lax.map)."""
    import jax.numpy as jnp
    from jax.interpreters import batching

    import sparsad
    from sparsad.jax.matrix import SparseMatrix
    from sparsad.jax.program import JaxProgram

    owner = spec.owner
    mapped = [k for k, d in enumerate(dims) if d is not batching.not_mapped]
    if spec.out_pattern is not None or any(spec.kinds[k] == "sparse" for k in mapped):
        return None
    size = args[mapped[0]].shape[dims[mapped[0]]]
    names = [spec.names[k] for k in mapped]
    key = (tuple(names), tuple(sorted(spec.types.items())))
    if key not in owner._batched:
        try:
            expr, stacked = batched_expr(owner.program.expr, names, list(owner.program.inputs))
            wrt = [stacked.get(w, w) for w in owner.wrt]
            program = sparsad.Program(expr)
            owner._batched[key] = (JaxProgram(program, [w for w in wrt if w in program.inputs], owner.lower),
                                   stacked)
        except SparsadError:
            owner._batched[key] = None
    if owner._batched[key] is None:
        return None
    program, stacked = owner._batched[key]
    reads = program.program._input_names()
    inputs = {n: v for n, v in spec.constants.items() if n in reads}
    for k, (name, kind, pattern, arg) in enumerate(zip(spec.names, spec.kinds, spec.patterns, args)):
        if name in stacked:
            inputs[stacked[name]] = jnp.moveaxis(arg, dims[k], 0)
        elif name in reads:
            inputs[name] = SparseMatrix(pattern, arg) if kind == "sparse" else arg
    try:
        return program._call(inputs, ("dense", (size, *spec.out_shape))).astype(spec.dtype)
    except SparsadError:  # the batched program cannot be typed or compiled: one call per element
        owner._batched[key] = None
        return None
