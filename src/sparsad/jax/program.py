"""`compile_program` for JAX: any sparsad program as a JAX function with both derivative rules.

The primal runs the compiled kernel through `jax.pure_callback`; its `custom_jvp` rule is a
`linear_call` whose forward is the program's jvp program and whose transpose is its vjp program,
so forward mode (jvp, jacfwd) and reverse mode (grad, vjp, jacrev) both run compiled derivative
code, under jit and vmap (batched calls run one after another on the host). Results are dense
arrays (a sparse result is densified); second derivatives are not available through the callback.

>>> import jax, jax.numpy as jnp
>>> from sparsad.jax import compile_program
>>> dot = compile_program("sum(<i, a> in V1) a * V2(i)")
>>> float(jax.grad(lambda v: dot(V1=v, V2=jnp.array([3.0, 4.0])))(jnp.array([1.0, 2.0]))[1])
4.0
"""
from __future__ import annotations

from typing import Any, Iterable

import numpy as np
import scipy.sparse as sp

from sparsad.bridge import dense_result, derivative_expr, fresh_name, values_on
from sparsad.errors import InputError, UnsupportedError
from sparsad.jax.matrix import SparseMatrix


class _Spec:
    """What the leaves of one call are (static): names, kinds, patterns, constants, shapes."""

    def __init__(self, owner, names, kinds, patterns, constants, shapes, dtypes):
        self.owner, self.names, self.kinds, self.patterns = owner, names, kinds, patterns
        self.constants, self.shapes, self.dtypes = constants, shapes, dtypes

    def numpy_inputs(self, arrays) -> dict[str, Any]:
        inputs = dict(self.constants)
        for name, kind, pattern, array in zip(self.names, self.kinds, self.patterns, arrays):
            array = np.ascontiguousarray(array)
            inputs[name] = float(array) if kind == "scalar" else pattern.to_scipy(array) if kind == "sparse" else array
        return inputs


class JaxProgram:
    """A sparsad program callable on JAX arrays (see the module docstring).

    >>> import jax.numpy as jnp, sparsad.jax as sj
    >>> dot = sj.JaxProgram("sum(<i, a> in u) a * v(i)")
    >>> dot.program.inputs
    ['u', 'v']
    >>> float(dot(jnp.array([1.0, 2.0]), v=jnp.array([3.0, 4.0])))
    11.0
    """

    def __init__(self, prog: Any, wrt: str | Iterable[str] | None = None):
        import sparsad

        self.program = sparsad.program(prog)
        names = self.program.inputs
        self.wrt = tuple(names) if wrt is None else ((wrt,) if isinstance(wrt, str) else tuple(wrt))
        unknown = [w for w in self.wrt if w not in names]
        if unknown:
            raise InputError(f"wrt names {unknown}, which the program does not read; its inputs are {names}")
        self._compiled = sparsad.compile(self.program)
        self._derived: dict[tuple, Any] = {}
        self._apply = self._make_apply()
        _ensure_linear_call_batching()

    def __repr__(self) -> str:
        return f"sparsad.jax.JaxProgram({self.program!r}, wrt={list(self.wrt)})"

    def __call__(self, *args: Any, **inputs: Any) -> Any:
        """Run on JAX arrays given by keyword or by position in `program.inputs` order."""
        import jax.numpy as jnp

        if args:
            from sparsad.lang.program import bind_inputs

            inputs = bind_inputs(self.program.inputs, args, inputs)
        self.program._check_inputs(inputs)
        names, kinds, patterns, leaves, constants, shapes, dtypes = [], [], [], [], {}, [], []
        for name in sorted(inputs):
            value = inputs[name]
            if type(value).__name__ in ("BCOO", "BCSR"):
                from sparsad.jax.matrix import as_sparse

                value = as_sparse(value, name)
            if isinstance(value, SparseMatrix):
                kind, pattern, leaf = "sparse", value.pattern, value.values
            elif isinstance(value, (float, int, bool, np.ndarray, np.generic)) or sp.issparse(value) \
                    or name not in self.wrt:
                if hasattr(value, "dtype") and not isinstance(value, np.ndarray) and not sp.issparse(value):
                    value = np.asarray(value)  # a concrete jax array outside wrt
                constants[name] = value
                continue
            elif hasattr(value, "shape") and hasattr(value, "dtype"):
                kind, pattern, leaf = ("scalar" if value.ndim == 0 else "dense"), None, value
            else:
                raise InputError(f"input {name!r} is a {type(value).__name__}; pass a JAX array, a "
                                 "sparsad.jax.SparseMatrix, a BCOO/BCSR, a number, a NumPy array or a scipy matrix")
            if name not in self.wrt:
                constants[name] = np.asarray(leaf) if kind != "sparse" else pattern.to_scipy(np.asarray(leaf))
                continue
            if not jnp.issubdtype(leaf.dtype, jnp.floating):
                raise InputError(f"input {name!r} must be floating point to be differentiated, got {leaf.dtype}")
            names.append(name), kinds.append(kind), patterns.append(pattern), leaves.append(leaf)
            shapes.append(tuple(leaf.shape)), dtypes.append(leaf.dtype)
        spec = _Spec(self, tuple(names), tuple(kinds), tuple(patterns), constants, tuple(shapes), tuple(dtypes))
        spec.types, spec.out_shape = self._types_and_shape(spec)
        spec.dtype = jnp.result_type(*dtypes) if dtypes else jnp.float64
        return self._apply(spec, *leaves)

    # -- static shapes: from the types, never from traced values ---------------------------------
    def _types_and_shape(self, spec: _Spec):
        from sparsad.lang.typecheck import infer, value_type
        from sparsad.lang.types import Dict, extents

        zeros = []
        for kind, pattern, shape in zip(spec.kinds, spec.patterns, spec.shapes):
            zeros.append(np.ones(pattern.nnz) if kind == "sparse" else np.ones(shape))
        inputs = spec.numpy_inputs(zeros)
        types = {n: value_type(v) for n, v in inputs.items()}
        result = infer(self.program.expr, types)
        if not isinstance(result, Dict):
            return types, ()
        shape = tuple(extents(result))
        if any(e is None for e in shape):
            raise UnsupportedError("the program's result shape is not known from its inputs' shapes; "
                                   "sparsad.jax needs static result shapes")
        return types, shape

    # -- host side ------------------------------------------------------------------------------
    def _run(self, program, inputs):
        return program(**inputs)

    def _derived_program(self, kind: str, name: str, spec: _Spec):
        import sparsad

        seed = fresh_name("sparsad_seed", self.program.inputs)
        key = (kind, name, tuple(sorted(spec.types.items())))
        if key not in self._derived:
            expr = derivative_expr(self.program, kind, name, spec.types, seed)
            self._derived[key] = None if expr is None else sparsad.compile(sparsad.Program(expr))
        return self._derived[key], seed

    def _host_primal(self, spec: _Spec, arrays) -> np.ndarray:
        result = self._compiled(**spec.numpy_inputs(arrays))
        return dense_result(result, spec.out_shape).astype(spec.dtype)

    def _host_jvp(self, spec: _Spec, arrays, tangents: dict[int, Any]) -> np.ndarray:
        """Sum of the jvp programs of the leaves that have a tangent (`tangents`: leaf -> tangent)."""
        total = np.zeros(spec.out_shape, dtype=spec.dtype)
        inputs = spec.numpy_inputs(arrays)
        for k, tangent in tangents.items():
            name, kind, pattern = spec.names[k], spec.kinds[k], spec.patterns[k]
            program, seed = self._derived_program("jvp", name, spec)
            if program is None:
                continue
            tangent = np.asarray(tangent)
            seeded = {n: v for n, v in inputs.items() if n in program.inputs}
            if seed in program.inputs:
                seeded[seed] = float(tangent) if kind == "scalar" else \
                    pattern.to_scipy(tangent) if kind == "sparse" else tangent
            total += dense_result(program(**seeded), spec.out_shape)
        return total

    def _host_vjp(self, spec: _Spec, arrays, cotangent, leaves: tuple[int, ...]) -> tuple:
        """The vjp programs of the given leaves, each as an array shaped like its leaf."""
        inputs = spec.numpy_inputs(arrays)
        grads = []
        for k in leaves:
            name, kind, pattern, shape, dtype = (spec.names[k], spec.kinds[k], spec.patterns[k], spec.shapes[k],
                                                 spec.dtypes[k])
            program, seed = self._derived_program("vjp", name, spec)
            if program is None:
                grads.append(np.zeros(shape, dtype=dtype))
                continue
            seeded = {n: v for n, v in inputs.items() if n in program.inputs}
            if seed in program.inputs:
                seeded[seed] = float(cotangent) if spec.out_shape == () else np.asarray(cotangent)
            result = program(**seeded)
            grads.append((values_on(result, pattern) if kind == "sparse" else dense_result(result, shape))
                         .astype(dtype))
        return tuple(grads)

    # -- the JAX function -----------------------------------------------------------------------
    def _make_apply(self):
        import functools

        import jax
        from jax.custom_derivatives import linear_call

        def out_struct(spec):
            return jax.ShapeDtypeStruct(spec.out_shape, spec.dtype)

        def leaf_structs(spec):
            return tuple(jax.ShapeDtypeStruct(s, d) for s, d in zip(spec.shapes, spec.dtypes))

        def callback(fn, structs, *args):
            return jax.pure_callback(fn, structs, *args, vmap_method="sequential")

        @functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
        def apply(spec, *leaves):
            return callback(lambda *a: spec.owner._host_primal(spec, a), out_struct(spec), *leaves)

        def apply_jvp(spec, primals, tangents):
            out = apply(spec, *primals)
            n = len(primals)
            # only the leaves with a tangent are linear inputs (linear_call transposes exactly those)
            active = tuple(k for k, t in enumerate(tangents) if type(t).__name__ != "SymbolicZero")
            if not active:
                return out, jax.numpy.zeros(spec.out_shape, spec.dtype)

            def forward(residuals, linear):
                return callback(lambda *a: spec.owner._host_jvp(spec, a[:n], dict(zip(active, a[n:]))),
                                out_struct(spec), *residuals, *linear)

            def transpose(residuals, cotangent):
                structs = tuple(leaf_structs(spec)[k] for k in active)
                return callback(lambda *a: spec.owner._host_vjp(spec, a[:n], a[n], active), structs,
                                *residuals, cotangent)

            return out, linear_call(forward, transpose, tuple(primals), tuple(tangents[k] for k in active))

        apply.defjvp(apply_jvp, symbolic_zeros=True)
        return apply


def _ensure_linear_call_batching() -> None:
    """JAX ships no vmap rule for `linear_call` (which carries our jvp/vjp pair); add one that maps
    the call over the batch with `lax.map` (the callbacks run per batch element anyway). Registered
    only where JAX has none, so a future JAX rule wins."""
    import jax
    from jax._src.custom_derivatives import linear_call_p
    from jax._src.interpreters import batching

    try:
        known = linear_call_p in batching.primitive_batchers
    except TypeError:  # JAX >= 0.10: a write-only proxy in front of fancy_primitive_batchers
        known = False
    if known or linear_call_p in getattr(batching, "fancy_primitive_batchers", {}):
        return

    unmapped = getattr(batching, "not_mapped", None)  # None in every JAX; the name is gone from 0.10

    def rule(args, dims, **params):
        size = next(a.shape[d] for a, d in zip(args, dims) if d is not unmapped)
        moved = [jax.numpy.broadcast_to(a, (size, *a.shape)) if d is unmapped else
                 jax.numpy.moveaxis(a, d, 0) for a, d in zip(args, dims)]
        outs = jax.lax.map(lambda sliced: linear_call_p.bind(*sliced, **params), moved)
        return outs, [0] * len(outs)

    batching.primitive_batchers[linear_call_p] = rule


def compile_program(prog: Any, wrt: str | Iterable[str] | None = None) -> JaxProgram:
    """Any sparsad program as a JAX function of JAX arrays, SparseMatrix and BCOO/BCSR inputs,
    differentiable (forward and reverse mode) in the inputs named by `wrt` (default: all).

    >>> import jax, jax.numpy as jnp, sparsad.jax as sj
    >>> norm2 = sj.compile_program("sum(<i, a> in v) a * a")
    >>> jax.grad(lambda v: norm2(v))(jnp.array([1.0, 2.0])).tolist()
    [2.0, 4.0]
    """
    return JaxProgram(prog, wrt)
