"""One derivative program for several inputs at once: the framework bridges' backward and forward
rules for a call whose gradient is wanted w.r.t. several inputs (Q, K and V of an attention layer).

Separate vjp programs, one per input, each recompute the whole primal (every edge's score and
every row's normaliser, in attention); the joint vjp program computes it once per block and
returns every input's adjoint from the same loops. It is built with the ordinary reverse mode:
the inputs `x_0 .. x_{m-1}` (all of one type) are read as entries `P(t)` of one stacked input P,
the adjoint of P is derived, and `P(t)` is read back as `x_t`. The result is the dictionary
`{0 -> adjoint of x_0} + ... + {m-1 -> adjoint of x_{m-1}}`; as a dense array it has shape
(m, widest extent of each axis), and input t's adjoint is the leading block of entry t.

The joint jvp program is the program's tangent with the tangents of several inputs (one seed
input each) at once, in one pass instead of one per input.

>>> import numpy as np, sparsad
>>> from sparsad.ad.joint import joint_vjp_expr
>>> from sparsad.lang.typecheck import value_type
>>> prog = sparsad.program("sum(<i, a> in u) { i -> a * v(i) }")
>>> types = {n: value_type(np.ones(3)) for n in ("u", "v")}
>>> both = sparsad.Program(joint_vjp_expr(prog.expr, ("u", "v"), types, "g"))
>>> both(u=np.array([1.0, 2, 3]), v=np.array([4.0, 5, 6]), g=np.ones(3), out_format="dense").tolist()
[[4.0, 5.0, 6.0], [1.0, 2.0, 3.0]]
"""
from __future__ import annotations

from typing import Mapping, Sequence

from sparsad.lang.syntax import Const, EmptyDict, Expr, Let, Lookup, Var, free_vars
from sparsad.lang.types import Dict, Int, Type


def joinable(types: Sequence[Type]) -> bool:
    """Whether inputs of these types can share one stacked input: equal types (extents aside)."""
    return len(types) >= 2 and all(t == types[0] for t in types[1:])


def widest(types: Sequence[Type]) -> Type:
    """The common type of `types` (equal but for extents) with the largest extent of each axis
    (None when an axis's extent is unknown in any of them)."""
    first = types[0]
    if not isinstance(first, Dict):
        return first
    extents = [t.key.extent for t in types]
    extent = None if any(e is None for e in extents) else max(extents)
    return Dict(Int(dense=first.key.dense, extent=extent), widest([t.value for t in types]))


def _fresh(base: str, taken: set[str]) -> str:
    while base in taken:
        base += "_"
    return base


def _read_back(expr: Expr, stacked: str, wrts: Sequence[str]) -> Expr:
    """`stacked(t)` (t a constant) read as the input wrts[t]."""
    from sparsad.lang.rebuild import map_children

    if isinstance(expr, Lookup) and expr.dict == Var(stacked) and isinstance(expr.key, Const) \
            and type(expr.key.value) is int and 0 <= expr.key.value < len(wrts):
        return Var(wrts[expr.key.value])
    return map_children(expr, lambda child: _read_back(child, stacked, wrts))


def joint_vjp_expr(expr: Expr, wrts: Sequence[str], types: Mapping[str, Type], seed: str) -> Expr | None:
    """The vjp program of `expr` w.r.t. every input in `wrts` (cotangent input `seed`), as one
    expression whose value is {t -> adjoint of wrts[t]}. The inputs must be dense (their adjoint
    is not masked to a pattern) and `joinable`. None when the adjoints are identically zero or the
    joint program cannot be built (the caller then builds one vjp program per input)."""
    from sparsad.ad.reverse import reverse
    from sparsad.lang.names import all_names
    from sparsad.lang.rebuild import substitute
    from sparsad.lang.typecheck import infer
    from sparsad.opt.dce import eliminate_dead_lets
    from sparsad.opt.inline import inline_atoms

    wrts = tuple(wrts)
    if not joinable([types[w] for w in wrts]):
        return None
    stacked = _fresh("sparsad_stacked", all_names(expr) | set(types) | {seed})
    body = expr
    for t, name in enumerate(wrts):
        body = substitute(body, name, Lookup(Var(stacked), Const(t)))
    stacked_types = {n: t for n, t in types.items() if n not in wrts}
    stacked_types[stacked] = Dict(Int(dense=True, extent=len(wrts)), widest([types[w] for w in wrts]))
    stacked_types[seed] = infer(expr, types)
    adjoint = reverse(body, stacked, Var(seed), stacked_types)
    adjoint = eliminate_dead_lets(inline_atoms(_read_back(adjoint, stacked, wrts)))
    if stacked in free_vars(adjoint):  # read otherwise than entry by entry: not joint after all
        return None
    return None if isinstance(adjoint, EmptyDict) else adjoint


def joint_jvp_expr(expr: Expr, seeds: Mapping[str, str], types: Mapping[str, Type]) -> Expr:
    """The jvp program of `expr` with a tangent for each input in `seeds` (the input named
    seeds[x] is x's tangent), the other inputs' tangents zero: one pass for all of them."""
    from sparsad.ad.forward import forward, tangent_name

    body = forward(expr)
    for name in sorted(seeds, reverse=True):
        if seeds[name] != tangent_name(name):
            body = Let(tangent_name(name), Var(seeds[name]), body)
    for name in sorted((n for n in types if n not in seeds), reverse=True):
        body = Let(tangent_name(name), EmptyDict(), body)
    return body


def fit_dense(result, shape: tuple | None):
    """A dense result as an array of `shape` (the shape the types or the caller's layout give).
    A program whose result extents the types do not fix (a joint program's, or a derivative
    program's of one) writes an array spanning the keys it can write: a smaller array is the
    leading block of the result, zero elsewhere; a larger one must be zero outside `shape`."""
    import numpy as np

    from sparsad.bridge import dense_result
    from sparsad.errors import UnsupportedError

    array = dense_result(result, None)
    if shape is None or array.shape == tuple(shape) or array.ndim != len(shape):
        return dense_result(result, shape)  # the same shape, or dense_result's own checks
    inside = tuple(slice(0, min(have, want)) for have, want in zip(array.shape, shape))
    fitted = np.zeros(tuple(shape), dtype=array.dtype if array.dtype.kind == "f" else np.float64)
    fitted[inside] = array[inside]
    outside = array.copy()
    outside[inside] = 0
    if np.any(outside):
        raise UnsupportedError(f"the program returned shape {array.shape} with entries outside the expected "
                               f"shape {tuple(shape)}")
    return fitted
