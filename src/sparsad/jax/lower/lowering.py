"""The entry point of the lowering: `lower_program` evaluates a program symbolically on its
inputs (the evaluator `_Lowering`: expressions, lookups and sums) and returns the JAX function,
or None outside the lowered subset (the caller keeps the host call).
"""
from __future__ import annotations

import logging
from typing import Any, Callable

import numpy as np

from sparsad.jax.lower.arrays import _jnp
from sparsad.jax.lower.expressions import _Expressions
from sparsad.jax.lower.lookups import _Lookups
from sparsad.jax.lower.result import _result
from sparsad.jax.lower.sums import _Sums
from sparsad.jax.lower.values import Arr, DenseInput, Frame, SparseIn, SparseInput, Unsupported
from sparsad.lang.syntax import Expr


class _Lowering(_Expressions, _Lookups, _Sums):
    """The evaluator: `eval` maps an expression, in an environment and a frame, to a value."""

    def __init__(self, root: Frame):
        self.root = root


# -- entry point -------------------------------------------------------------------------------------
def lower_program(expr: Expr, inputs: dict[str, Any], layout: tuple, dtype: Any = None
                  ) -> Callable[[dict], Any] | None:
    """A JAX function computing `expr`, or None when the program is outside the lowered subset.

    inputs: name -> SparseInput | DenseInput | ConstantInput. layout: ("dense", shape) for a
    dense result (shape () for a number) or ("pattern", CSRPattern) for the values of a result on
    that pattern. The function takes {name: array} for the traced inputs (a sparse input's
    values) and returns the result array (of `dtype`, default the inputs' result type). The
    program is tried once on abstract inputs: None is returned before any use."""
    import jax

    def run(arrays: dict) -> Any:
        root = Frame(None, "root")
        lowering = _Lowering(root)
        env = {}
        for name, spec in inputs.items():
            if isinstance(spec, SparseInput):
                env[name] = SparseIn(spec.pattern, arrays[name])
            elif isinstance(spec, DenseInput):
                array = arrays[name]
                # every key of a dense array is stored, but a level of extent 0 below is no entry
                full = np.full(spec.shape[0], 0 not in spec.shape[1:]) if len(spec.shape) else None
                env[name] = Arr(array, root, len(spec.shape), full, 0 not in spec.shape)
            else:
                env[name] = _constant(spec.value, root)
        value = lowering.eval(expr, env, root)
        out_dtype = dtype if dtype is not None else _result_dtype(arrays)
        return _result(lowering, value, layout, out_dtype)

    abstract = {}
    for name, spec in inputs.items():
        if isinstance(spec, SparseInput):
            abstract[name] = jax.ShapeDtypeStruct((spec.pattern.nnz,), spec.dtype)
        elif isinstance(spec, DenseInput):
            abstract[name] = jax.ShapeDtypeStruct(tuple(spec.shape), spec.dtype)
    try:
        # evaluated symbolically once: the returned function replays the jaxpr (tracing `run`
        # again costs as much as this first time)
        closed, out = jax.make_jaxpr(run, return_shape=True)(abstract)
        traced_in = (bool(jax.config.jax_enable_x64), [(tuple(v.aval.shape), v.aval.dtype) for v in closed.jaxpr.invars])
    except Unsupported as why:
        logging.getLogger(__name__).debug("not lowered (%s): %s", why, expr)
        return None
    except Exception as error:  # noqa: BLE001 - a gap in the lowering must not break the call: host path
        logging.getLogger(__name__).warning("sparsad.jax.lower failed (%s: %s); the program runs as a host "
                                            "call: %s", type(error).__name__, error, expr)
        return None
    expected = (layout[1].nnz,) if layout[0] == "pattern" else tuple(layout[1])
    if tuple(out.shape) != expected:
        logging.getLogger(__name__).debug("not lowered (result shape %s, expected %s): %s", out.shape, expected, expr)
        return None
    from jax.extend.core import jaxpr_as_fun

    replay = jaxpr_as_fun(closed)

    def lowered(arrays: dict) -> Any:
        leaves = jax.tree_util.tree_leaves({name: arrays[name] for name in abstract})  # as make_jaxpr flattened
        if (bool(jax.config.jax_enable_x64), [(tuple(np.shape(a)), jax.numpy.result_type(a)) for a in leaves]) \
                != traced_in:
            return run(arrays)  # other dtypes (or x64 mode) than traced: evaluated again
        return replay(*leaves)[0]

    return lowered


def _result_dtype(arrays: dict):
    jnp = _jnp()
    floats = [a.dtype for a in arrays.values() if jnp.issubdtype(a.dtype, jnp.floating)]
    return jnp.result_type(*floats) if floats else jnp.float64


def _constant(value: Any, root: Frame) -> Any:
    import scipy.sparse as sp

    if sp.issparse(value):
        from sparsad.bridge import canonical_csr
        from sparsad.ops.pattern import CSRPattern

        csr = canonical_csr(value)
        return SparseIn(CSRPattern(csr.indptr, csr.indices, csr.shape, check=False), np.asarray(csr.data))
    if isinstance(value, (bool, int, float, np.generic)):
        return Arr(np.asarray(value), root)
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "biuf":
            raise Unsupported(f"a constant of dtype {value.dtype}")
        full = np.full(value.shape[0], 0 not in value.shape[1:]) if value.ndim else None
        return Arr(value, root, value.ndim, full, 0 not in value.shape)
    raise Unsupported(f"a constant {type(value).__name__}")
