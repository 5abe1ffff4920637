"""`compile_program` for JAX: any sparsad program as a JAX function, differentiable to any order.

Each call binds one JAX primitive (`sparsad_program`). Under jit it lowers to XLA operations
(`sparsad.jax.lower`: gathers, segment sums and scatters over the static pattern) when the
program is in the lowered subset and, on the CPU, its XLA computation needs little enough
temporary memory (`sparsad.jax.lower.choice`: above 32 MiB each call page-faults it afresh,
and the host call is faster); else to a host call of the compiled kernel (as it does eagerly,
and with `compile_program(..., lower=False)`; `lower=True` lowers whenever it can). Its rules are sparsad's own derivative
programs, each itself a JaxProgram: the JVP rule applies the program's jvp program to the
tangents, and where JAX transposes such a (linear) call, the transpose rule applies that
program's vjp program w.r.t. its tangent input. So forward mode (jvp, jacfwd), reverse mode
(grad, vjp, jacrev) and their compositions (grad of grad, jacfwd of jacrev, hessian) all run
compiled derivative code, as far as sparsad can differentiate each derivative program; vmap
makes one call of the batched program (a sum over the batch, `sparsad.jax.batching`), or,
where that does not apply (a mapped sparse input), maps the primitive with `lax.map`.

A program with top-level lets worth materialising (`sparsad.opt.stages`) is a chain of such
calls, one per stage (an intermediate no larger than the program's own arrays): JAX keeps each
stage's result for the backward pass, so no derivative program computes it again; a stage that
is exactly a product of two dense matrices is `jnp.matmul`.

Results are dense arrays of the shape the types give; a derivative w.r.t. a sparse input is
the values on its pattern (masked convention).

Why derivatives are not JAX's own autodiff of the lowered forward: the derivative programs are
programs too, lowered the same way, so the lowered path computes exactly what the host path
computes (sparsad's rules at kinks such as relu'(0) and |x|'(0), the masked convention), and an
`if` whose untaken branch is singular (`if x > 0 then log(x)`) gives no NaN gradient, which
differentiating a lowered `jnp.where` would (0 * inf). JAX never differentiates lowered code.

>>> import jax, jax.numpy as jnp
>>> from sparsad.jax import compile_program
>>> dot = compile_program("sum(<i, a> in V1) a * V2(i)")
>>> float(jax.grad(lambda v: dot(V1=v, V2=jnp.array([3.0, 4.0])))(jnp.array([1.0, 2.0]))[1])
4.0
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Iterable

import numpy as np
import scipy.sparse as sp

from sparsad.ad.joint import fit_dense
from sparsad.bridge import derivative_expr, fresh_name, stored_csr, stored_dense, values_on
from sparsad.errors import InputError, UnsupportedError
from sparsad.jax.matrix import SparseMatrix


class _Spec:
    """What the leaves of one call are (static): names, kinds, patterns, constants, shapes, and
    the output's layout: a dense array of `out_shape`, or (`out_pattern` set) the values on a
    CSR pattern. Hashed by identity: one per traced call."""

    def __init__(self, owner, names, kinds, patterns, constants, shapes, dtypes):
        self.owner, self.names, self.kinds, self.patterns = owner, names, kinds, patterns
        self.constants, self.shapes, self.dtypes = constants, shapes, dtypes
        self.types: dict = {}
        self.out_shape: tuple = ()
        self.out_pattern = None
        self.dtype = np.float64
        # set when this call is the jvp program of `origin[0]` (a parent call's spec) w.r.t. its
        # leaf origin[1], applied to a tangent: its transpose is then the parent's vjp program
        self.origin: tuple | None = None

    def numpy_inputs(self, arrays) -> dict[str, Any]:
        inputs = dict(self.constants)
        for name, kind, pattern, array in zip(self.names, self.kinds, self.patterns, arrays):
            array = np.ascontiguousarray(array)  # arrays shared, not copied or validated again
            inputs[name] = array.item() if kind == "scalar" else stored_csr(pattern, array) if kind == "sparse" \
                else stored_dense(array)
        return inputs


class JaxProgram:
    """A sparsad program callable on JAX arrays (see the module docstring).

    >>> import jax.numpy as jnp, sparsad.jax as sj
    >>> dot = sj.JaxProgram("sum(<i, a> in u) a * v(i)")
    >>> dot.program.inputs
    ['u', 'v']
    >>> float(dot(u=jnp.array([1.0, 2.0]), v=jnp.array([3.0, 4.0])))
    11.0
    """

    def __init__(self, prog: Any, wrt: str | Iterable[str] | None = None, lower: bool | str = "auto",
                 _split: bool = True):
        import sparsad

        if lower not in (True, False, "auto"):
            raise InputError(f"lower={lower!r}; pass \"auto\" (XLA operations where the CPU cost rule prefers "
                             "them), True (XLA operations wherever the program allows) or False (host calls)")

        self.program = sparsad.program(prog)
        names = self.program.inputs
        self.wrt = tuple(names) if wrt is None else ((wrt,) if isinstance(wrt, str) else tuple(wrt))
        unknown = [w for w in self.wrt if w not in names]
        if unknown:
            raise InputError(f"wrt names {unknown}, which the program does not read; its inputs are {names}")
        self._compiled = sparsad.compile(self.program)
        self._compiled_dense = None  # the same program writing a dense result (made when needed)
        self._derived: dict[tuple, Any] = {}
        self._batched: dict[tuple, Any] = {}  # (mapped names, types) -> (batched JaxProgram, stacked names) | None
        self._shapes: dict[tuple, tuple] = {}  # call signature -> (types, result shape)
        self._seed = fresh_name("sparsad_seed", names)  # the tangent/cotangent input of derivatives
        # under jit, run as XLA operations (sparsad.jax.lower) where the program allows it and
        # ("auto") where sparsad.jax.lower.choice prefers them to the host call
        self.lower = lower
        self._choices: dict[tuple, bool] = {}  # call signature -> lowered (True) or host call
        # the program as a chain of programs cut at top-level lets worth keeping (sparsad.opt.stages):
        # each stage a primitive of its own, whose intermediates JAX keeps for the backward pass
        self._stages = _StageChain.of(self) if _split else None
        _primitive()

    def __repr__(self) -> str:
        return f"sparsad.jax.JaxProgram({self.program!r}, wrt={list(self.wrt)})"

    def __call__(self, *args: Any, **inputs: Any) -> Any:
        """Run on JAX arrays given by keyword or by position in `program.inputs` order."""
        if args:
            from sparsad.lang.program import bind_inputs

            inputs = bind_inputs(self.program.inputs, args, inputs)
        if self._stages is not None:
            staged = self._stages(inputs)
            if staged is not _UNSPLIT:
                return staged
        return self._call(inputs, None)

    def _call(self, inputs: dict[str, Any], layout: tuple | None, origin: tuple | None = None) -> Any:
        """Bind the primitive; `layout` ("dense", shape) or ("pattern", CSRPattern) fixes the
        output (derivatives take their input's layout), None takes the shape the types give.
        `origin`: see `_Spec.origin`."""
        import jax.numpy as jnp

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
                    or (name not in self.wrt and not _traced(value)):
                if hasattr(value, "dtype") and not isinstance(value, np.ndarray) and not sp.issparse(value):
                    value = np.asarray(value)  # a concrete jax array outside wrt
                constants[name] = value
                continue
            elif hasattr(value, "shape") and hasattr(value, "dtype"):
                kind, pattern, leaf = ("scalar" if value.ndim == 0 else "dense"), None, value
            else:
                raise InputError(f"input {name!r} is a {type(value).__name__}; pass a JAX array, a "
                                 "sparsad.jax.SparseMatrix, a BCOO/BCSR, a number, a NumPy array or a scipy matrix")
            if name not in self.wrt and not _traced(leaf):
                constants[name] = np.asarray(leaf) if kind != "sparse" else pattern.to_scipy(np.asarray(leaf))
                continue
            # (an input outside wrt traced by jit/vmap/grad enters the primitive as a leaf too:
            # its values are known only there; the JVP rule refuses a tangent for it)
            if not jnp.issubdtype(leaf.dtype, jnp.floating):
                if name not in self.wrt:
                    raise InputError(f"input {name!r} is a traced {leaf.dtype} array (an argument of jit, vmap or "
                                     "grad); integer inputs fix shapes and must be static: pass a Python or NumPy "
                                     "value (e.g. jax.jit(..., static_argnums=...))")
                raise InputError(f"input {name!r} must be floating point to be differentiated, got {leaf.dtype}")
            names.append(name), kinds.append(kind), patterns.append(pattern), leaves.append(leaf)
            shapes.append(tuple(leaf.shape)), dtypes.append(leaf.dtype)
        spec = _Spec(self, tuple(names), tuple(kinds), tuple(patterns), constants, tuple(shapes), tuple(dtypes))
        spec.origin = origin
        signature = self._signature(spec, layout is None)
        if signature not in self._shapes:  # types and shapes: once per signature, not per call
            self._shapes[signature] = self._types_and_shape(spec, layout is None)
        spec.types, spec.out_shape = self._shapes[signature]
        if layout is not None and layout[0] == "pattern":
            spec.out_pattern, spec.out_shape = layout[1], (layout[1].nnz,)
        elif layout is not None:
            spec.out_shape = tuple(layout[1])
        spec.dtype = jnp.result_type(*dtypes) if dtypes else jnp.float64
        return _primitive().bind(*leaves, spec=spec)

    # -- static shapes: from the types, never from traced values ---------------------------------
    @staticmethod
    def _signature(spec: _Spec, need_shape: bool) -> tuple:
        """What the input types depend on: names, kinds, shapes (of patterns too), and the
        constants' kinds, shapes and dtypes (a cheap key: hashing the types costs more)."""
        constants = tuple((n, type(v).__name__, getattr(v, "shape", None), str(getattr(v, "dtype", "")))
                          for n, v in sorted(spec.constants.items()))
        patterns = tuple(p.shape if p is not None else None for p in spec.patterns)  # (as the torch bridge)
        return (spec.names, spec.kinds, patterns, spec.shapes, constants, need_shape)

    def _types_and_shape(self, spec: _Spec, need_shape: bool = True):
        from sparsad.lang.typecheck import infer, value_type
        from sparsad.lang.types import Dict, extents

        ones = [np.ones(pattern.nnz) if kind == "sparse" else np.ones(shape)
                for kind, pattern, shape in zip(spec.kinds, spec.patterns, spec.shapes)]
        types = {n: value_type(v) for n, v in spec.numpy_inputs(ones).items()}
        if not need_shape:
            return types, ()
        result = infer(self.program.expr, types)
        if not isinstance(result, Dict):
            return types, ()
        shape = tuple(extents(result))
        if any(e is None for e in shape):
            raise UnsupportedError("the program's result shape is not known from its inputs' shapes; "
                                   "sparsad.jax needs static result shapes")
        return types, shape

    # -- host side ------------------------------------------------------------------------------
    def _kernel(self, spec: _Spec):
        """The compiled program for this call: one writing a dense array when the result is one
        (no sparse assembly then conversion), else the natural one."""
        if spec.out_pattern is not None or not spec.out_shape:
            return self._compiled
        if self._compiled_dense is None:
            import sparsad

            self._compiled_dense = sparsad.compile(self.program, output="dense")
        return self._compiled_dense

    def _host_primal(self, spec: _Spec, arrays) -> np.ndarray:
        result = self._kernel(spec)(**spec.numpy_inputs(arrays))
        array = values_on(result, spec.out_pattern) if spec.out_pattern is not None else \
            fit_dense(result, spec.out_shape)
        return np.asarray(array, dtype=spec.dtype)

    def _lowered(self, spec: _Spec, platform: str = "cpu"):
        """This call as a JAX function of its leaves (sparsad.jax.lower), or None: outside the
        lowered subset, lowering switched off, or (lower="auto") the host call preferred on
        `platform` by sparsad.jax.lower.choice. Made once per call (trace); the choice is made
        once per call signature."""
        if not self.lower:
            return None
        if not hasattr(spec, "lowered"):
            from sparsad.jax.lower import ConstantInput, DenseInput, SparseInput, lower_program

            self._check_lookups(spec)

            inputs: dict[str, Any] = {n: ConstantInput(v) for n, v in spec.constants.items()}
            for name, kind, pattern, shape, dtype in zip(spec.names, spec.kinds, spec.patterns, spec.shapes,
                                                         spec.dtypes):
                inputs[name] = SparseInput(pattern, dtype) if kind == "sparse" else DenseInput(shape, dtype)
            layout = ("pattern", spec.out_pattern) if spec.out_pattern is not None else ("dense", spec.out_shape)
            function = lower_program(self.program.expr, inputs, layout, spec.dtype)
            names = spec.names
            spec.lowered = None if function is None else (lambda *leaves: function(dict(zip(names, leaves))))
            if spec.lowered is not None and self.lower == "auto" and not self._choose_lowered(spec, platform):
                spec.lowered = None
        return spec.lowered

    def _choose_lowered(self, spec: _Spec, platform: str) -> bool:
        """sparsad.jax.lower.choice's rule for this call's lowered function, once per signature:
        the leaves' names, kinds, shapes and dtypes, the patterns' and constants' shapes and
        sizes, and the result's layout."""
        from sparsad.jax.lower.choice import prefer_lowered

        def size(value):
            return (type(value).__name__, getattr(value, "shape", None), getattr(value, "nnz", None),
                    str(getattr(value, "dtype", "")))

        key = (platform, spec.names, spec.kinds, tuple(size(p) for p in spec.patterns), spec.shapes,
               tuple(str(d) for d in spec.dtypes), tuple((n, size(v)) for n, v in sorted(spec.constants.items())),
               size(spec.out_pattern), spec.out_shape, str(spec.dtype))
        if key not in self._choices:
            import jax

            abstract = [jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in zip(spec.shapes, spec.dtypes)]
            self._choices[key] = prefer_lowered(spec.lowered, abstract, platform)
        return self._choices[key]

    def _check_lookups(self, spec: _Spec) -> None:
        """The interpreter's ShapeError, before lowering, for a lookup outside an input's axis (the
        host call raises it; lowered code would read zero there). Keys and conditions depend on
        shapes, patterns and int inputs only, never on real values: ones in place of the traced
        values decide it. Costs an interpreted run only for programs with doubtful keys."""
        from sparsad.errors import ShapeError
        from sparsad.lang.keyranges import check_lookups, key_checks

        try:
            checks = key_checks(self.program.expr, spec.types)
            if checks:
                ones = [np.ones(pattern.nnz) if kind == "sparse" else np.ones(shape)
                        for kind, pattern, shape in zip(spec.kinds, spec.patterns, spec.shapes)]
                check_lookups(self.program.expr, checks, spec.numpy_inputs(ones))
        except ShapeError:
            raise
        except Exception as error:  # noqa: BLE001 - the check must not break a call the host path serves
            logging.getLogger(__name__).debug("lookup check skipped (%s): %s", error, self.program.expr)

    # -- derivative rules: sparsad's derivative programs, themselves JaxPrograms ------------------
    def _derived_program(self, kind: str, name: str, spec: _Spec) -> "JaxProgram | None":
        import sparsad

        key = (kind, name, tuple(sorted(spec.types.items())))
        if key not in self._derived:
            # an identically zero derivative (the empty dictionary) is no program to run
            expr = derivative_expr(self.program, kind, name, spec.types, self._seed)
            if expr is not None and self._types_as_zero(expr, kind, name, spec):
                expr = None  # e.g. a jvp of a vjp program in an input it reads only linearly
            self._derived[key] = None if expr is None else JaxProgram(sparsad.Program(expr), lower=self.lower, _split=False)
        return self._derived[key]

    def _types_as_zero(self, expr, kind: str, name: str, spec: _Spec) -> bool:
        """Whether the derivative program `expr` has the type of `{}` (the zero dictionary):
        its value is zero whatever the inputs, and there is no kernel to compile for it."""
        from sparsad.lang.typecheck import infer
        from sparsad.lang.types import Zero

        try:
            seed_type = spec.types[name] if kind == "jvp" else infer(self.program.expr, spec.types)
            return isinstance(infer(expr, {**spec.types, self._seed: seed_type}), Zero)
        except Exception:  # noqa: BLE001 - not provably zero: the program runs
            return False

    def _apply_derived(self, kind: str, k: int, spec: _Spec, leaves, seed) -> Any:
        """The jvp program w.r.t. leaf k applied to tangent `seed`, or the vjp program w.r.t.
        leaf k applied to the output cotangent `seed`: a JAX value, differentiable again."""
        import jax.numpy as jnp

        origin = None
        if kind == "jvp":
            layout = ("pattern", spec.out_pattern) if spec.out_pattern is not None else ("dense", spec.out_shape)
            seed_value = SparseMatrix(spec.patterns[k], seed) if spec.kinds[k] == "sparse" else seed
            origin = (spec, k)
        else:
            layout = ("pattern", spec.patterns[k]) if spec.kinds[k] == "sparse" else ("dense", spec.shapes[k])
            seed_value = SparseMatrix(spec.out_pattern, seed) if spec.out_pattern is not None else seed
        zero_shape = (layout[1].nnz,) if layout[0] == "pattern" else layout[1]
        dtype = spec.dtype if kind == "jvp" else spec.dtypes[k]
        derived = self._derived_program(kind, spec.names[k], spec)
        if derived is None:
            return jnp.zeros(zero_shape, dtype)
        reads = derived.program._input_names()
        inputs = {n: v for n, v in spec.constants.items() if n in reads}
        for name, leaf_kind, pattern, leaf in zip(spec.names, spec.kinds, spec.patterns, leaves):
            if name in reads:
                inputs[name] = SparseMatrix(pattern, leaf) if leaf_kind == "sparse" else leaf
        if self._seed in reads:
            inputs[self._seed] = seed_value
        if not reads or reads - set(inputs):
            return jnp.zeros(zero_shape, dtype)  # the derivative program is a constant zero
        return derived._call(inputs, layout, origin).astype(dtype)

    # -- joint derivative programs: several same-shaped dense leaves in one pass (sparsad.ad.joint)
    def _joint_groups(self, spec: _Spec, ks: list[int]) -> list[list[int]]:
        """`ks` split into groups one joint program serves: dense leaves of one type and shape
        together (of one shape: the derivatives of a joint vjp program, which grad of grad
        takes, need each block's axes to be the input's), every other leaf alone."""
        groups: list[list[int]] = []
        for k in ks:
            for group in groups:
                first = group[0]
                if spec.kinds[k] == spec.kinds[first] == "dense" and spec.shapes[k] == spec.shapes[first] and \
                        spec.types.get(spec.names[k]) == spec.types.get(spec.names[first]):
                    group.append(k)
                    break
            else:
                groups.append([k])
        return groups

    def _joint_program(self, kind: str, ks: tuple[int, ...], spec: _Spec):
        """(the joint jvp or vjp program of leaves `ks`, the names of its seed inputs), or
        (None, ()) when there is none (then each leaf has its own derivative program)."""
        import sparsad
        from sparsad.ad.joint import joint_jvp_expr, joint_vjp_expr
        from sparsad.errors import ProgramTypeError

        names = tuple(spec.names[k] for k in ks)
        taken = list(self.program.inputs) + [self._seed]
        seeds = tuple(fresh_name(f"{self._seed}{t}", taken) for t in range(len(ks))) if kind == "jvp" \
            else (self._seed,)
        key = ("joint-" + kind, names, tuple(sorted(spec.types.items())))
        if key not in self._derived:
            try:
                expr = joint_jvp_expr(self.program.expr, dict(zip(names, seeds)), spec.types) if kind == "jvp" \
                    else joint_vjp_expr(self.program.expr, names, spec.types, self._seed)
            except (UnsupportedError, ProgramTypeError):  # the programs one by one say why
                expr = None
            self._derived[key] = None if expr is None else JaxProgram(sparsad.Program(expr), lower=self.lower, _split=False)
        return self._derived[key], seeds

    def _leaf_inputs(self, derived: "JaxProgram", spec: _Spec, leaves) -> dict[str, Any]:
        reads = derived.program._input_names()
        inputs = {n: v for n, v in spec.constants.items() if n in reads}
        for name, leaf_kind, pattern, leaf in zip(spec.names, spec.kinds, spec.patterns, leaves):
            if name in reads:
                inputs[name] = SparseMatrix(pattern, leaf) if leaf_kind == "sparse" else leaf
        return inputs

    def _apply_joint_jvp(self, ks: tuple[int, ...], spec: _Spec, leaves, tangents) -> Any:
        """The tangent of the output for the tangents of leaves `ks`, by one joint jvp program
        (its transpose is the joint vjp program); None when there is no joint program."""
        derived, seeds = self._joint_program("jvp", ks, spec)
        if derived is None:
            return None
        inputs = self._leaf_inputs(derived, spec, leaves)
        reads = derived.program._input_names()
        inputs.update({seed: tangent for seed, tangent in zip(seeds, tangents) if seed in reads})
        if reads - set(inputs):
            return None
        layout = ("pattern", spec.out_pattern) if spec.out_pattern is not None else ("dense", spec.out_shape)
        return derived._call(inputs, layout, (spec, tuple(ks))).astype(spec.dtype)

    def _apply_joint_vjp(self, ks: tuple[int, ...], spec: _Spec, leaves, cotangent) -> list | None:
        """The cotangents of leaves `ks` (same shape) from one joint vjp program, or None."""
        derived, _ = self._joint_program("vjp", ks, spec)
        if derived is None:
            return None
        inputs = self._leaf_inputs(derived, spec, leaves)
        reads = derived.program._input_names()
        if self._seed in reads:
            inputs[self._seed] = SparseMatrix(spec.out_pattern, cotangent) if spec.out_pattern is not None \
                else cotangent
        if reads - set(inputs):
            return None
        shape = spec.shapes[ks[0]]
        stacked = derived._call(inputs, ("dense", (len(ks), *shape)))
        return [stacked[t].astype(spec.dtypes[k]) for t, k in enumerate(ks)]


_UNSPLIT = object()  # a _StageChain's answer when the call runs as one program


class _StageChain:
    """A JaxProgram's program as a chain of stage programs (`sparsad.opt.stages`), each a
    JaxProgram binding its own primitive: JAX keeps each stage's result as a residual of the
    next, so no derivative program recomputes an earlier stage. Intermediates are dense arrays
    here (as every JaxProgram result): a let is cut only when its dense array is no larger than
    the program's own arrays (inputs and result). One plan per input signature."""

    def __init__(self, owner: "JaxProgram"):
        self.owner = owner
        self._plans: dict[tuple, list] = {}
        self._programs: dict[Any, JaxProgram] = {}  # stage expression -> its program (shared by plans)

    @staticmethod
    def of(owner: "JaxProgram") -> "_StageChain | None":
        from sparsad.opt.stages import split_stages

        return _StageChain(owner) if len(split_stages(owner.program.expr)) > 1 else None

    def __call__(self, inputs: dict[str, Any]) -> Any:
        key = _signature_of(inputs)
        plan = self._plans.get(key) if key is not None else None
        if plan is None:
            plan = self._plan(inputs)
            if key is not None:
                self._plans[key] = plan
        if not plan:
            return _UNSPLIT
        self.owner.program._check_inputs(inputs)
        env = dict(inputs)
        for program, name, product in plan:
            value = _matmul(env, product) if product is not None else None
            if value is None:
                value = program._call({n: env[n] for n in program.program.inputs}, None)
            if name is None:
                return value
            env[name] = value

    def _plan(self, inputs: dict[str, Any]) -> list:
        """[(stage program, result name)] for inputs like these; [] when no let is cut."""
        from sparsad.lang.typecheck import infer
        from sparsad.lang.types import tensor_order
        from sparsad.opt.stages import dense_size, matrix_product, split_stages

        try:
            types = {name: _type_of(value) for name, value in inputs.items()}
            result = infer(self.owner.program.expr, types)
        except Exception:  # noqa: BLE001 - the one program reports the user's error
            return []
        budget = max([dense_size(t) or 0 for t in types.values()] + [dense_size(result) or 0, 1])
        cut: set[str] = set()

        def keep(name: str, value) -> bool:
            try:
                t = infer(value, types)
            except Exception:  # noqa: BLE001 - not typeable on its own: stays inside
                return False
            size = dense_size(t) if tensor_order(t) is not None else None
            if size is None or size > budget:
                return False
            types[name] = t
            cut.add(name)
            return True

        stages = split_stages(self.owner.program.expr, keep)
        if len(stages) == 1:
            return []
        plan = []
        for stage in stages:
            program = self._programs.get(stage.expr)
            if program is None:
                wrt = [n for n in stage.inputs if n in self.owner.wrt or n in cut]
                program = self._programs[stage.expr] = JaxProgram(stage.expr, wrt, self.owner.lower, _split=False)
            plan.append((program, stage.name, matrix_product(stage.expr)))
        return plan


def _matmul(env: dict, product: tuple[str, str]) -> Any:
    """L @ R by XLA's dot when the stage is exactly that product of two dense matrices (a GEMM;
    lowered as gathers and sums it is several times slower, and JAX's derivative of a product
    is exact), else None (the stage program runs)."""
    import jax.numpy as jnp

    left, right = env[product[0]], env[product[1]]
    for value in (left, right):
        if sp.issparse(value) or type(value).__name__ in ("SparseMatrix", "BCOO", "BCSR") \
                or getattr(value, "ndim", None) != 2 or not jnp.issubdtype(value.dtype, jnp.floating):
            return None
    return jnp.matmul(left, right)


def _type_of(value: Any):
    """The language type of an input from its shape and dtype alone (a traced array has no values)."""
    from sparsad.lang.typecheck import value_type
    from sparsad.lang.types import BOOL, INT, REAL, Dict, Int

    if sp.issparse(value) or isinstance(value, (bool, int, float, dict)) or not hasattr(value, "dtype"):
        return value_type(value)
    kind = np.dtype(value.dtype).kind
    result = BOOL if kind == "b" else INT if kind in "iu" else REAL
    for extent in reversed(tuple(value.shape)):
        result = Dict(Int(extent=int(extent)), result)
    return result


def _signature_of(inputs: dict[str, Any]) -> tuple | None:
    """What a stage plan depends on (the inputs' kinds, shapes and dtypes), or None (plan afresh)."""
    key = []
    for name in sorted(inputs):
        value = inputs[name]
        if isinstance(value, (bool, int, float)):
            key.append((name, type(value).__name__))
        elif hasattr(value, "shape") and hasattr(value, "dtype"):
            key.append((name, type(value).__name__, tuple(value.shape), str(value.dtype)))
        else:
            return None
    return tuple(key)


def _transpose_by_parent_vjp(cotangent, args, spec: _Spec) -> list | None:
    """The transpose of a jvp program call (parent program P, leaf k, tangent t) in t: P's own vjp
    program w.r.t. k applied to the cotangent, the first-order derivative program (not the vjp of
    the jvp program, a derivative of a derivative). None when this call is no such call, or P's
    vjp program reads a leaf this call was not given (then the generic rule transposes it)."""
    import jax.numpy as jnp
    from jax.interpreters import ad

    if spec.origin is None:
        return None
    parent, k = spec.origin
    owner = parent.owner
    seed = owner._seed
    undefined = [i for i, a in enumerate(args) if ad.is_undefined_primal(a)]
    if isinstance(k, tuple):
        return _transpose_joint_jvp(cotangent, args, spec, undefined)
    if seed not in spec.names or undefined != [spec.names.index(seed)]:
        return None
    vjp = owner._derived_program("vjp", parent.names[k], parent)
    reads = vjp.program._input_names() if vjp is not None else set()
    given = dict(zip(spec.names, args))
    if any(n in parent.names and n not in given for n in reads):
        return None
    # leaves the vjp program does not read are never looked at: zeros stand in for them
    leaves = [given[n] if n in given else jnp.zeros(shape, dtype)
              for n, shape, dtype in zip(parent.names, parent.shapes, parent.dtypes)]
    gradient = owner._apply_derived("vjp", k, parent, leaves, cotangent)
    return [gradient if i == undefined[0] else None for i in range(len(args))]


def _transpose_joint_jvp(cotangent, args, spec: _Spec, undefined: list[int]) -> list | None:
    """The transpose of a joint jvp program call (parent P, leaves ks, one tangent input each)
    in its tangents: P's joint vjp program (each leaf's own vjp program if there is none). None
    when the undefined arguments are not exactly the tangents, or a leaf P reads is missing."""
    import jax.numpy as jnp

    parent, ks = spec.origin
    owner = parent.owner
    _, seeds = owner._joint_program("jvp", ks, parent)
    positions = [spec.names.index(s) if s in spec.names else None for s in seeds]
    if None in positions or sorted(positions) != undefined:
        return None
    given = dict(zip(spec.names, args))
    joint, _ = owner._joint_program("vjp", ks, parent)
    programs = [joint] if joint is not None else [owner._derived_program("vjp", parent.names[k], parent) for k in ks]
    reads = set().union(*(p.program._input_names() for p in programs if p is not None))
    if any(n in parent.names and n not in given for n in reads):
        return None  # a leaf this call was not given: the generic rule transposes it
    leaves = [given[n] if n in given else jnp.zeros(shape, dtype)
              for n, shape, dtype in zip(parent.names, parent.shapes, parent.dtypes)]
    gradients = owner._apply_joint_vjp(ks, parent, leaves, cotangent)
    if gradients is None:
        gradients = [owner._apply_derived("vjp", k, parent, leaves, cotangent) for k in ks]
    out = [None] * len(args)
    for position, gradient in zip(positions, gradients):
        out[position] = gradient
    return out


# -- the primitive ---------------------------------------------------------------------------------
_X64_THREADS = threading.local()


def _host_call(spec: _Spec, arrays) -> np.ndarray:
    """The compiled kernel, called from compiled JAX code. XLA may call it on a thread of its own,
    where a `with jax.enable_x64(True)` block of the caller is not in force: JAX would cast the
    float64 result to float32 there and reject it. A 64-bit call was traced in 64-bit mode, so
    such a thread is put in 64-bit mode (kept: the thread runs only XLA's work)."""
    import jax

    if np.dtype(spec.dtype).itemsize == 8 and not jax.config.jax_enable_x64 and \
            not getattr(_X64_THREADS, "on", False):
        jax.enable_x64(True).__enter__()
        _X64_THREADS.on = True
    return spec.owner._host_primal(spec, arrays)


def _traced(value: Any) -> bool:
    """Whether `value` (an array or a SparseMatrix) is a JAX tracer (under jit, vmap, grad...)."""
    import jax

    return isinstance(value.values if isinstance(value, SparseMatrix) else value, jax.core.Tracer)


def _refuse_tangents_outside_wrt(spec: _Spec, given: list[int], tangents) -> list[int]:
    """`given` without the leaves outside the program's wrt whose tangents are known zeros; our
    own error for any other tangent of such a leaf (never a silently dropped derivative)."""
    kept = []
    for k in given:
        if spec.names[k] in spec.owner.wrt:
            kept.append(k)
        elif _traced(tangents[k]) or np.any(np.asarray(tangents[k])):
            raise InputError(f"input {spec.names[k]!r} is differentiated but not in wrt={list(spec.owner.wrt)}; "
                             "add it to wrt")
    return kept


_PRIMITIVE: list = []


def _primitive():
    """The `sparsad_program` primitive (made once): impl, abstract eval, lowering, and its JVP,
    transpose and batching rules."""
    if _PRIMITIVE:
        return _PRIMITIVE[0]
    import jax
    import jax.numpy as jnp
    from jax.extend.core import Primitive
    from jax.interpreters import ad, batching, mlir

    program_p = Primitive("sparsad_program")

    def impl(*leaves, spec):
        return jnp.asarray(spec.owner._host_primal(spec, [np.asarray(leaf) for leaf in leaves]))

    def through_pure_callback(*leaves, spec):
        return jax.pure_callback(lambda *arrays: _host_call(spec, arrays),
                                 jax.ShapeDtypeStruct(spec.out_shape, spec.dtype), *leaves, vmap_method="sequential")

    def lowered(ctx, *operands, spec):
        platforms = tuple(getattr(ctx.module_context, "platforms", None) or ("cpu",))
        # one rule for every platform the module is lowered for: the CPU's when it is among them
        function = spec.owner._lowered(spec, "cpu" if "cpu" in platforms else platforms[0])
        if function is not None:  # XLA operations, no host call
            return mlir.lower_fun(function, multiple_results=False)(ctx, *operands)
        # the host call straight on XLA's buffers: pure_callback would first device_put them,
        # which, on a thread where the caller's enable_x64 block is not in force, casts float64
        # inputs to float32 (and costs a copy per call)
        try:
            from jax._src.callback import emit_python_callback
        except ImportError:  # another JAX: the public route
            return mlir.lower_fun(through_pure_callback, multiple_results=False)(ctx, *operands, spec=spec)
        results, _, _ = emit_python_callback(ctx, lambda *arrays: (_host_call(spec, arrays),), None,
                                             list(operands), ctx.avals_in, ctx.avals_out, has_side_effect=False)
        return results

    def abstract(*avals, spec):
        return jax.core.ShapedArray(spec.out_shape, spec.dtype)

    def jvp_rule(primals, tangents, *, spec):
        out = program_p.bind(*primals, spec=spec)
        total = None
        given = [k for k, tangent in enumerate(tangents) if type(tangent) is not ad.Zero]
        given = _refuse_tangents_outside_wrt(spec, given, tangents)
        for group in spec.owner._joint_groups(spec, given):
            part = spec.owner._apply_joint_jvp(tuple(group), spec, primals, [tangents[k] for k in group]) \
                if len(group) > 1 else None
            parts = [part] if part is not None else \
                [spec.owner._apply_derived("jvp", k, spec, primals, tangents[k]) for k in group]
            for part in parts:
                total = part if total is None else total + part
        return out, (total if total is not None else jnp.zeros(spec.out_shape, spec.dtype))

    def transpose_rule(cotangent, *args, spec):
        # bound in a linear position (a jvp program applied to a tangent): linear in exactly the
        # undefined arguments, so its vjp w.r.t. them does not depend on their values (zeros here)
        if type(cotangent) is ad.Zero:
            return [None] * len(args)
        direct = _transpose_by_parent_vjp(cotangent, args, spec)
        if direct is not None:
            return direct
        known = [jnp.zeros(a.aval.shape, a.aval.dtype) if ad.is_undefined_primal(a) else a for a in args]
        return [spec.owner._apply_derived("vjp", k, spec, known, cotangent) if ad.is_undefined_primal(a) else None
                for k, a in enumerate(args)]

    def batch_rule(args, dims, *, spec):
        from sparsad.jax.batching import batched_call

        out = batched_call(spec, args, dims)  # one call of the batched program
        if out is not None:
            return out, 0
        # else one call per element
        mapped = [k for k, d in enumerate(dims) if d is not batching.not_mapped]
        size = args[mapped[0]].shape[dims[mapped[0]]]
        columns = [jnp.moveaxis(args[k], dims[k], 0) for k in mapped]

        def one(sliced):
            full = list(args)
            for k, value in zip(mapped, sliced):
                full[k] = value
            return program_p.bind(*full, spec=spec)

        del size
        return jax.lax.map(one, columns), 0

    program_p.def_impl(impl)
    program_p.def_abstract_eval(abstract)
    mlir.register_lowering(program_p, lowered, cacheable=False)
    ad.primitive_jvps[program_p] = jvp_rule
    ad.primitive_transposes[program_p] = transpose_rule
    batching.primitive_batchers[program_p] = batch_rule
    _PRIMITIVE.append(program_p)
    return program_p


def compile_program(prog: Any, wrt: str | Iterable[str] | None = None, lower: bool | str = "auto") -> JaxProgram:
    """Any sparsad program as a JAX function of JAX arrays, SparseMatrix and BCOO/BCSR inputs,
    differentiable (forward and reverse mode, to any order sparsad can differentiate) in the
    inputs named by `wrt` (default: all).

    `lower`: under jit, "auto" runs each call (the program and each derivative program) as XLA
    operations where it is in the lowered subset and, on the CPU, needs at most 32 MiB of
    temporary memory (else the host call is faster: `sparsad.jax.lower.choice`); True lowers
    wherever the subset allows; False always calls the compiled kernels on the host.

    >>> import jax, jax.numpy as jnp, sparsad.jax as sj
    >>> norm2 = sj.compile_program("sum(<i, a> in v) a * a")
    >>> jax.grad(lambda v: norm2(v=v))(jnp.array([1.0, 2.0])).tolist()
    [2.0, 4.0]
    """
    return JaxProgram(prog, wrt, lower)
