"""Splicing the generated adjoint into JAX as a ``jax.custom_vjp``.

Outside ``jit`` (eager ``jax.grad``) the forward rule sees concrete arrays: it runs the
recording primal and picks the compiled adjoint for the record; the adjoint itself is
``jax.jit``-compiled once, with trip counts and decisions as arguments.  Under ``jit`` a
function without traced control flow still uses its symbolic adjoint; one whose record is
needed cannot be recorded from tracers, so the forward rule falls back to ``jax.vjp`` of the
original function (correct, just not coarsened).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from sparsad.coarsen.budget import Deferred
from sparsad.coarsen.frontend import CoarsenUnsupported
from sparsad.coarsen.plan import Compiled, Plan, param_values


def _jitted(compiled: Compiled):
    fn = getattr(compiled, "jitted", None)
    if fn is None:
        fn = jax.jit(compiled.fn)
        compiled.jitted = fn
    return fn


def run_adjoint(compiled: Compiled, tensors, params, seeds):
    """Gradients (one per tensor input, None where not requested) from the jitted adjoint."""
    grads = _jitted(compiled)(*tensors, *params, *[jnp.asarray(s, dtype=tensors[0].dtype) for s in seeds])
    return tuple(None if g is None else jnp.broadcast_to(jnp.asarray(g, dtype=t.dtype), t.shape)
                 for g, t in zip(grads, tensors))


def _is_concrete(x) -> bool:
    return not isinstance(x, jax.core.Tracer)


def apply(coarsened, plan: Plan, args: tuple):
    positions = [node.index for node in plan.graph.inputs]
    fn = plan.fn

    def full(tensors):
        call = list(args)
        for pos, t in zip(positions, tensors):
            call[pos] = t
        return tuple(call)

    @jax.custom_vjp
    def core(*tensors):
        return fn(*full(tensors))

    def fwd(*tensors):
        def fallback():
            out, vjp = jax.vjp(lambda *ts: fn(*full(ts)), *tensors)
            return out, (tensors, (), vjp)

        if plan.needs_record and not all(_is_concrete(t) for t in tensors):
            return fallback()
        try:
            if plan.needs_record:
                out, record = plan.run(*full(tensors))
            else:
                out, record = fn(*full(tensors)), None
            elev = plan.elevation(record)
            wrt = tuple(range(len(tensors)))
            compiled = plan.adjoint(elev, wrt, "jax", tensors[0])
            params = tuple(jnp.asarray(v) for v in param_values(elev, record))
            state["compiled"] = compiled
        except Deferred:  # the symbolic work goes on in the background: jax.vjp for this call
            return fallback()
        except Exception as why:  # unsupported, or the machinery failed: jax.vjp of the function
            coarsened.disable(args, why)
            return fallback()
        return out, (tensors, params, None)

    def bwd(residual, cotangent):
        tensors, params, vjp = residual
        if vjp is not None:
            return tuple(vjp(cotangent))
        seeds = cotangent if isinstance(cotangent, tuple) else (cotangent,)
        grads = run_adjoint(state["compiled"], tensors, params, seeds)
        return tuple(jnp.zeros_like(t) if g is None else g for g, t in zip(grads, tensors))

    state: dict = {}
    core.defvjp(fwd, bwd)
    return core(*[args[p] for p in positions])
