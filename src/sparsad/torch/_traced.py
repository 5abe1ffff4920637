"""The bridge's kernels as `torch.library` custom ops: what `torch.compile(fullgraph=True)`,
`torch.export` and fake or meta tensors see.

Eager calls on real tensors keep the autograd Functions of `_autograd`, `products` and `program`
(forward mode, torch.func's vmap and any derivative order). While dynamo traces, the ops call
the custom ops below instead: their fake kernels give output shapes without data, and their
autograd formulas are the same compiled adjoints. Outside tracing, a meta or fake operand
reaches the same custom ops from inside the Functions, so it gets shapes, not a foreign error.

Pattern-level objects (a CSRPattern, the term lists of a product, a compile_program call) enter
the graph as `Static`: an opaque value type of torch.library, a graph constant that dynamo
guards by identity, so a new pattern recompiles instead of reusing a stale graph. Dynamo reaches
a pattern through the input's attribute (`static_of`, which guards it) and derives new ones
(transpose, union, products) through `Static`'s methods, which it runs at trace time.

>>> import torch, sparsad.torch as st
>>> A = st.SparseMatrix.from_dense(torch.tensor([[4.0, 1.0], [0.0, 3.0]], dtype=torch.float64))
>>> layer = torch.compile(lambda X: st.spmm(A, X).sum(), fullgraph=True, backend="aot_eager")
>>> float(layer(torch.ones(2, 3, dtype=torch.float64)))
24.0
"""
from __future__ import annotations

import itertools
import uuid
import weakref
from typing import Any, Callable

import numpy as np
import torch
from torch._library.opaque_object import MemberType, register_opaque_type
from torch._subclasses.fake_tensor import FakeTensor

from sparsad.errors import UnsupportedError

_BY_KEY: dict[int, "Static"] = {}  # every Static that entered a graph (FX code refers to it by key)
_KEYS = itertools.count()
#: in the pickled and printed form of every Static: keys are per process, so no compiled-graph
#: cache entry of another process (another pattern under the same key) can ever match ours
_SESSION = uuid.uuid4().hex
_LIVE: "weakref.WeakValueDictionary[int, Static]" = weakref.WeakValueDictionary()  # id(obj) -> its Static


def by_key(key: int, session: str = _SESSION) -> "Static":
    """The Static of a graph's generated code (see `Static.__fx_repr__`)."""
    if session != _SESSION:
        raise UnsupportedError("a compiled graph of another process refers to a sparsad pattern of that "
                               "process; recompile it in this one")
    return _BY_KEY[key]


class Static:
    """A pattern-level object (`obj`) as a graph constant: equal only to a Static of the same
    object. `shape` and `nnz` are the object's (patterns), or None. Its methods derive new
    patterns; dynamo runs them at trace time (`members` below)."""

    __slots__ = ("obj", "shape", "nnz", "key", "__weakref__")

    def __init__(self, obj: Any):
        self.obj = obj
        self.shape = getattr(obj, "shape", None)
        self.nnz = getattr(obj, "nnz", None)
        self.key = next(_KEYS)

    @staticmethod
    def of(obj: Any) -> "Static":
        """The Static of `obj`: the same one while it lives (it holds `obj`, so while an entry
        lives, no other object can have that id; nothing is stored on `obj`, which stays
        picklable)."""
        if isinstance(obj, Static):
            return obj
        static = _LIVE.get(id(obj))
        if static is None or static.obj is not obj:
            static = _LIVE[id(obj)] = Static(obj)
        return static

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Static) and other.obj is self.obj

    def __hash__(self) -> int:
        return hash(id(self.obj))

    def __repr__(self) -> str:
        return f"Static({self.obj!r})"

    def __fx_repr__(self):
        _BY_KEY[self.key] = self
        return f"sparsad_static({self.key}, {_SESSION!r})", {"sparsad_static": by_key}

    def __reduce__(self):  # (inductor's cache key pickles graph constants)
        _BY_KEY[self.key] = self
        return by_key, (self.key, _SESSION)

    # -- pattern work, run at trace time ------------------------------------------------------
    def terms(self) -> "Static":
        """The term lists of A @ X for this pattern."""
        from sparsad.ops.contract import spmm_terms

        return Static.of(spmm_terms(self.obj))

    def roles_into(self, out: int) -> tuple[int, int]:
        """(Terms) the roles feeding role `out`."""
        return self.obj.roles_into(out)

    def transposed(self) -> "Static":
        return Static.of(self.obj.transpose[0])

    def union(self, other: "Static") -> tuple["Static", "Static"]:
        """(union pattern, the positions of self's and other's entries in it)."""
        from sparsad.torch.linalg import _add_maps

        pattern, map_a, map_b = self.obj.union(other.obj)
        return Static.of(pattern), Static(_add_maps(pattern, self.obj, other.obj, map_a, map_b, torch.device("cpu")))

    def product(self, other: "Static") -> tuple["Static", "Static"]:
        """(the SpGEMM symbolic phase of self @ other, the product's pattern)."""
        product = self.obj.product(other.obj)
        return Static.of(product), Static.of(product.pattern)

    def identity(self, n: int) -> "Static":
        """(self.obj a _Patterns) the n x n identity pattern."""
        from sparsad.torch.linalg import _make_identity_pattern

        n = int(n)
        if n not in self.obj.made:
            self.obj.made[n] = _make_identity_pattern(n)
        return Static.of(self.obj.made[n])

    def lu_handle(self) -> "Static":
        """(self.obj a CSRPattern) a SuperLU factor handle of a matrix on this pattern."""
        from sparsad.torch.solve import _lu_handle_of

        return Static(_lu_handle_of(self.obj))

    def pattern(self) -> "Static":
        """(self.obj a factor handle or a KrylovConfig) its matrix's pattern."""
        return Static.of(self.obj.pattern)

    def select(self, upper: bool, k: int) -> tuple["Static", "Static"]:
        """(self.obj a CSRPattern) (the pattern of the entries on and above (upper) or on and
        below the k-th diagonal, a holder of their positions under "positions")."""
        from sparsad.torch.structure import _selected

        offsets = self.obj.indices - self.obj.rows
        sub, positions = _selected(self.obj, offsets >= k if upper else offsets <= k)
        return Static.of(sub), Static({"positions": positions})

    def diagonal(self, n_rows: int, n_cols: int, k: int) -> "Static":
        """(self.obj a _Patterns) the pattern of the k-th diagonal of an (n_rows, n_cols) matrix."""
        from sparsad.torch.structure import _diagonal_pattern

        key = ("diagonal", int(n_rows), int(n_cols), int(k))
        if key not in self.obj.made:
            self.obj.made[key] = _diagonal_pattern(*key[1:])[0]
        return Static.of(self.obj.made[key])

    def krylov_config(self, method: str, rtol: float, atol: float, maxiter: Any, M: Any, restart: Any) -> "Static":
        """(self.obj a CSRPattern) the options of a Krylov solve with a matrix on this pattern."""
        return Static(KrylovConfig(method, self.obj, rtol, atol, maxiter, M, restart))

    def traced_spec(self, *args: Any) -> "Static":
        """The static part of a compile_program call (self.obj a TorchProgram)."""
        return self.obj._traced_spec(*args)

    def stage_plan(self, signature: tuple) -> "Static":
        """(self.obj a compile_program's stage chain) its plan for inputs of these kinds and
        shapes: [(stage program, result name, layout, matmul operands)], [] for one program."""
        return Static.of(self.obj._traced_plan(signature))


#: what dynamo may read of a Static: each is run on the real object at trace time
_TRACE_TIME_MEMBERS = ("obj", "shape", "nnz", "key", "terms", "roles_into", "transposed", "union", "product",
                       "identity", "diagonal", "select", "lu_handle", "pattern", "krylov_config", "traced_spec",
                       "stage_plan")
register_opaque_type(Static, typ="value", members={name: MemberType.USE_REAL for name in _TRACE_TIME_MEMBERS})


@torch._dynamo.assume_constant_result
def static_of(obj: Any) -> Static:
    """`obj` (reached from a traced function's input, which dynamo then guards by identity) as a
    graph constant."""
    return Static.of(obj)


def as_static(obj: Any) -> Static:
    return obj if isinstance(obj, Static) else static_of(obj)


class _Patterns:
    """Patterns made from sizes alone (the receiver of `Static.identity` and `Static.diagonal`)."""

    def __init__(self):
        self.made: dict[Any, Any] = {}


#: a graph constant whose methods make patterns from sizes at trace time
PATTERNS = Static(_Patterns())


def identity_pattern(n: int) -> Static:
    return PATTERNS.identity(concrete(n))


def is_fake(*tensors: Any) -> bool:
    """Whether an operand has no data to hand to a kernel (meta or fake tensors)."""
    return any(isinstance(t, torch.Tensor) and (t.is_meta or isinstance(t, FakeTensor)) for t in tensors)


def tracing() -> bool:
    """While dynamo traces (torch.compile, torch.export): the custom-op path."""
    return torch.compiler.is_compiling()


def concrete(value: Any) -> Any:
    """A Python number (or None) as the constant a Static member needs while dynamo traces: a number
    argument that changed between calls is symbolic there (automatic dynamic shapes), and dynamo
    refuses a symbolic argument of a member with an internal error. The value is specialised
    instead (guarded: a new value recompiles)."""
    if tracing() and isinstance(value, (bool, int, float, torch.SymBool, torch.SymInt, torch.SymFloat)):
        from torch.fx.experimental.symbolic_shapes import guard_scalar

        return guard_scalar(value)
    return value


@torch._dynamo.assume_constant_result
def _unsupported_transform() -> str | None:
    """The transform the custom ops cannot serve, if one is active (checked on the real state, at
    trace time under dynamo): forward mode (a dual level, torch.func.jvp) or torch.func.grad."""
    import torch.autograd.forward_ad as forward_ad
    from torch._C._functorch import TransformType
    from torch._functorch.pyfunctorch import retrieve_all_functorch_interpreters

    if getattr(forward_ad, "_current_level", -1) >= 0:
        return "forward-mode derivatives (dual tensors)"
    for interpreter in retrieve_all_functorch_interpreters():
        if interpreter.key() == TransformType.Jvp:
            return "forward-mode derivatives (torch.func.jvp, jacfwd, hessian)"
        if interpreter.key() == TransformType.Grad:
            return "torch.func.grad / vjp / jacrev"
    return None


def refuse_transforms(op: str) -> None:
    """Custom ops have no forward-mode rule (torch then returns zero tangents silently: a wrong
    derivative) and torch.func.grad cannot run their autograd formula: refuse both. Eager calls
    on real tensors support them; so does a compiled function's plain backward()."""
    transform = _unsupported_transform()
    if transform is not None:
        raise UnsupportedError(
            f"{transform} through sparsad's {op} are not supported inside torch.compile or on meta/fake "
            "tensors; apply the transform outside the compiled region (the eager ops support it), or use "
            "loss.backward() / torch.autograd.grad on the compiled function")


def refuse_dual_level(op: str) -> None:
    """The same refusal at run time, in each op's kernel: dynamo reuses a graph compiled on plain
    tensors for dual tensors (no recompile, so the trace-time check never runs) and the op's
    output would carry no tangent (a silent zero). Inside a dual level the custom ops refuse."""
    import torch.autograd.forward_ad as forward_ad

    if getattr(forward_ad, "_current_level", -1) >= 0:
        raise UnsupportedError(
            f"forward-mode derivatives (dual tensors) through sparsad's {op} are not supported inside "
            "torch.compile; call the function uncompiled under forward mode (the eager ops support it)")


# -- index arrays of patterns (gathers and scatters then run as torch ops in the graph) ----------
def _index_array(obj: Any, key: str) -> np.ndarray:
    if isinstance(obj, dict):  # positions held by name, e.g. an add's maps "a", "b" (NumPy: no tensor op
        return obj[key].astype(np.int64)  # under fake modes)
    from sparsad.torch.linalg import _pattern_arrays

    return _pattern_arrays(obj, key)


@torch.library.custom_op("sparsad::index", mutates_args=())
def _index_op(holder: Static, key: str, device: torch.device) -> torch.Tensor:
    return torch.tensor(_index_array(holder.obj, key), dtype=torch.int64, device=device)


@_index_op.register_fake
def _(holder, key, device):
    return torch.empty(_index_array(holder.obj, key).shape[0], dtype=torch.int64, device=device)


def index(holder: Static, key: str, device: torch.device) -> torch.Tensor:
    """An int64 index tensor of a pattern ("rows", "cols", "perm", "diag_rows", "diag_pos") or
    of a holder of named positions (an add's maps "a", "b"; a selection's "positions")."""
    return _index_op(holder, key, device)


# -- the bilinear contraction of sparsad.ops.contract (SpMV, SpMM and their adjoints) -----------
@torch.library.custom_op("sparsad::contract", mutates_args=())
def _contract_op(terms: Static, out: int, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    refuse_dual_level("sparse products")
    from sparsad.torch._autograd import _evaluate

    return _evaluate(terms.obj, out, u, v)


@_contract_op.register_fake
def _(terms, out, u, v):
    return u.new_empty(_contract_shape(terms.obj, out, u, v))


def _contract_shape(terms, out: int, u: torch.Tensor, v: torch.Tensor) -> tuple:
    size = terms.sizes[out]
    if out == terms.scalar:
        return (size,)
    return (size, *v.shape[1:])  # (the scalar role comes first: v is the channel operand)


def _contract_setup(ctx, inputs, output):
    ctx.terms, ctx.out = inputs[0], inputs[1]
    ctx.save_for_backward(inputs[2], inputs[3])


def _contract_backward(ctx, grad):
    u, v = ctx.saved_tensors
    terms, out = ctx.terms, ctx.out
    u_role, v_role = terms.roles_into(out)
    gu = contract(terms, u_role, {v_role: v, out: grad}) if ctx.needs_input_grad[2] else None
    gv = contract(terms, v_role, {u_role: u, out: grad}) if ctx.needs_input_grad[3] else None
    return None, None, gu, gv


_contract_op.register_autograd(_contract_backward, setup_context=_contract_setup)


def contract(terms: Static, out: int, operands: dict[int, torch.Tensor]) -> torch.Tensor:
    """`_autograd.contract` as a custom op (differentiable to any order through itself)."""
    refuse_transforms("sparse products")
    u_role, v_role = terms.roles_into(out)
    return _contract_op(terms, out, operands[u_role], operands[v_role])


# -- the trilinear form of SpGEMM (values of A B and their masked adjoints) ---------------------
def _other_roles(role: int) -> tuple[int, int]:
    return tuple(r for r in range(3) if r != role)  # type: ignore[return-value]


def _role_size(product, role: int) -> int:
    return (product.a_nnz, product.b_nnz, product.pattern.nnz)[role]


@torch.library.custom_op("sparsad::gustavson", mutates_args=())
def _gustavson_op(product: Static, role: int, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    refuse_dual_level("spgemm")
    from sparsad.torch.products import _evaluate

    return _evaluate(product.obj, role, u, v)


@_gustavson_op.register_fake
def _(product, role, u, v):
    return u.new_empty((_role_size(product.obj, role),))


def _gustavson_setup(ctx, inputs, output):
    ctx.product, ctx.role = inputs[0], inputs[1]
    ctx.save_for_backward(inputs[2], inputs[3])


def _gustavson_backward(ctx, grad):
    u, v = ctx.saved_tensors
    ru, rv = _other_roles(ctx.role)
    operands = {ru: u, rv: v, ctx.role: grad}
    grads = [None, None]
    for slot, role in ((0, ru), (1, rv)):
        if ctx.needs_input_grad[2 + slot]:
            first, second = _other_roles(role)
            grads[slot] = _gustavson_op(ctx.product, role, operands[first], operands[second])
    return None, None, grads[0], grads[1]


_gustavson_op.register_autograd(_gustavson_backward, setup_context=_gustavson_setup)


def gustavson(product: Static, role: int, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Values of `role` of the SpGEMM form from the two other roles' values (in role order)."""
    refuse_transforms("spgemm")
    return _gustavson_op(product, role, u, v)


# -- compile_program ------------------------------------------------------------------------------
@torch.library.custom_op("sparsad::program", mutates_args=())
def _program_op(spec: Static, tensors: list[torch.Tensor]) -> torch.Tensor:
    refuse_dual_level("compile_program")
    call = spec.obj.call(tensors)
    return call.owner._run_forward(call, tensors)


@_program_op.register_fake
def _(spec, tensors):
    shape = spec.obj.out_shape(tensors)
    like = next((t for t in tensors if t.is_meta), tensors[0])  # (eager runs copy every input to the CPU)
    return like.new_empty(shape, dtype=spec.obj.dtype)


@torch.library.custom_op("sparsad::program_vjp", mutates_args=())
def _program_vjp_op(spec: Static, needed: list[int], grad: torch.Tensor,
                    tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    refuse_dual_level("compile_program")
    call = spec.obj.call(tensors)
    call.owner._prepare_types(call, tensors)
    grads = call.owner._vjps(call, None, list(needed), tensors, grad)
    out = [grads[k] if k in grads else torch.zeros_like(t) for k, t in enumerate(tensors)]
    return _unaliased(out, [grad, *tensors])


def _unaliased(outputs: list[torch.Tensor], inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    """`outputs` with a copy of any that shares memory with an input or an earlier output (a
    custom op's outputs may alias nothing)."""
    seen = {t.untyped_storage().data_ptr() for t in inputs if t.numel()}
    result = []
    for t in outputs:
        pointer = t.untyped_storage().data_ptr()
        if t.numel() and pointer in seen:
            t = t.clone()
            pointer = t.untyped_storage().data_ptr()
        seen.add(pointer)
        result.append(t)
    return result


@_program_vjp_op.register_fake
def _(spec, needed, grad, tensors):
    return [torch.empty_like(t) for t in tensors]


def _program_setup(ctx, inputs, output):
    ctx.spec = inputs[0]
    ctx.save_for_backward(*inputs[1])


def _program_backward(ctx, grad):
    tensors = list(ctx.saved_tensors)
    spec = ctx.spec.obj
    needed = [k for k, name in enumerate(spec.names) if name in spec.owner.wrt and ctx.needs_input_grad[1][k]] \
        if isinstance(ctx.needs_input_grad[1], (list, tuple)) else \
        [k for k, name in enumerate(spec.names) if name in spec.owner.wrt]
    if not needed:
        return None, None
    grads = _program_vjp_op(ctx.spec, needed, grad, tensors)
    return None, [grads[k] if k in needed else None for k in range(len(tensors))]


_program_op.register_autograd(_program_backward, setup_context=_program_setup)


def program(spec: Static, tensors: list[torch.Tensor]) -> torch.Tensor:
    """A compile_program call (`spec.obj`, a `program._TracedSpec`) on its flat tensors."""
    if not tensors:
        raise UnsupportedError("under torch.compile a compiled program needs at least one tensor input")
    refuse_transforms("compile_program")
    return _program_op(spec, list(tensors))


# -- solves: triangular (a Numba kernel) and general (SuperLU) ------------------------------------
def _masked_outer(pattern: Static, left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    """(left right^T) on the pattern's entries, by torch gathers in the graph."""
    rows, cols = index(pattern, "rows", left.device), index(pattern, "cols", left.device)
    product = left[rows] * right[cols]
    return product if product.ndim == 1 else product.sum(1)


@torch.library.custom_op("sparsad::trisolve", mutates_args=())
def _trisolve_op(pattern: Static, lower: bool, unit: bool, values: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    refuse_dual_level("triangular_solve")
    from sparsad.ops import solve as _solve
    from sparsad.torch.solve import _numpy, _tri_forward

    _solve.check_triangular(pattern.obj, _numpy(values), lower, unit)
    return _tri_forward(pattern.obj, lower, unit, values, b)


@_trisolve_op.register_fake
def _(pattern, lower, unit, values, b):
    return torch.empty_like(b)


def _trisolve_setup(ctx, inputs, output):
    ctx.pattern, ctx.lower, ctx.unit = inputs[0], inputs[1], inputs[2]
    ctx.save_for_backward(inputs[3], output)


def _trisolve_backward(ctx, g):
    values, x = ctx.saved_tensors
    tvalues = values[index(ctx.pattern, "perm", values.device)]
    gb = _trisolve_op(ctx.pattern.transposed(), not ctx.lower, ctx.unit, tvalues, g)
    gvalues = None
    if ctx.needs_input_grad[3]:
        gvalues = -_masked_outer(ctx.pattern, gb, x)
        if ctx.unit:  # the stored diagonal is not read
            rows, cols = index(ctx.pattern, "rows", values.device), index(ctx.pattern, "cols", values.device)
            gvalues = gvalues * (rows != cols).to(gvalues.dtype)
    return None, None, None, gvalues, gb


_trisolve_op.register_autograd(_trisolve_backward, setup_context=_trisolve_setup)


def trisolve(pattern: Static, lower: bool, unit: bool, values: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """x with L x = b (b of shape (n, k)), L triangular on `pattern`: the custom op."""
    refuse_transforms("triangular_solve")
    return _trisolve_op(pattern, lower, unit, values, b)


@torch.library.custom_op("sparsad::lu_solve", mutates_args=())
def _lu_solve_op(handle: Static, transposed: bool, values: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    refuse_dual_level("spsolve")
    from sparsad.torch.solve import _numpy

    return torch.from_numpy(handle.obj.current(values).solve(_numpy(b), transpose=transposed))


@_lu_solve_op.register_fake
def _(handle, transposed, values, b):
    return torch.empty_like(b)


def _solve_setup(ctx, inputs, output):
    """(static, transposed, values, b, ...) -> x: what a solve's backward needs (an adjoint solve
    with the same static handle or config, then A's value gradient from x)."""
    ctx.static, ctx.transposed = inputs[0], inputs[1]
    ctx.save_for_backward(inputs[2], output)


def _lu_solve_backward(ctx, g):
    values, x = ctx.saved_tensors
    gb = _lu_solve_op(ctx.static, not ctx.transposed, values, g)
    return None, None, _solve_values_grad(ctx, ctx.static.pattern, x, gb), gb


def _solve_values_grad(ctx, pattern: Callable[[], Any], x: torch.Tensor, gb: torch.Tensor):
    """A solve's gradient w.r.t. A's values from the adjoint solution gb: -(gb x^T) on A's
    pattern, or -(x gb^T) for the transposed solve (entry (i, j) of A^T is entry (j, i) of A);
    None when the values need no gradient (the pattern is then not even fetched)."""
    if not ctx.needs_input_grad[2]:
        return None
    return -(_masked_outer(pattern(), x, gb) if ctx.transposed else _masked_outer(pattern(), gb, x))


_lu_solve_op.register_autograd(_lu_solve_backward, setup_context=_solve_setup)


def lu_solve(handle: Static, transposed: bool, values: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """x with A x = b (or A^T x = b), A the matrix of the factor handle (`solve.FactorHandle`),
    factored again whenever its values change (a compiled graph's handle outlives one call)."""
    refuse_transforms("spsolve")
    return _lu_solve_op(handle, transposed, values, b)


# -- Krylov solves (cg, minres, gmres, bicgstab) of a SparseMatrix --------------------------------
class KrylovConfig:
    """A Krylov solve's options and A's pattern; each call makes its own `krylov._Spec` (the
    symmetry check and the preconditioner belong to the values of that call)."""

    def __init__(self, method: str, pattern: Any, rtol: float, atol: float, maxiter: int | None,
                 M: str | None, restart: int | None):
        self.method, self.pattern, self.rtol, self.atol = method, pattern, rtol, atol
        self.maxiter, self.M, self.restart = maxiter, M, restart

    def __repr__(self) -> str:
        return f"KrylovConfig({self.method}, {self.pattern!r})"


@torch.library.custom_op("sparsad::krylov", mutates_args=())
def _krylov_op(config: Static, transposed: bool, values: torch.Tensor, b: torch.Tensor,
               x0: torch.Tensor | None) -> torch.Tensor:
    refuse_dual_level("Krylov solves")
    from sparsad.torch.krylov import _run, _Spec
    from sparsad.torch.matrix import SparseMatrix

    c = config.obj
    spec = _Spec(c.method, SparseMatrix._wrap(c.pattern, values), c.rtol, c.atol, c.maxiter, c.M, transposed,
                 c.restart)
    return _unaliased([_run(spec, values, b, x0)], [values, b] + ([] if x0 is None else [x0]))[0]


@_krylov_op.register_fake
def _(config, transposed, values, b, x0):
    return torch.empty_like(b)


def _krylov_backward(ctx, g):
    values, x = ctx.saved_tensors
    gb = _krylov_op(ctx.static, not ctx.transposed, values, g, None)
    return None, None, _solve_values_grad(ctx, ctx.static.pattern, x, gb), gb, None


_krylov_op.register_autograd(_krylov_backward, setup_context=_solve_setup)


def krylov(config: Static, values: torch.Tensor, b: torch.Tensor, x0: torch.Tensor | None) -> torch.Tensor:
    """x = A^-1 b by the Krylov method of `config` (a KrylovConfig): the custom op."""
    refuse_transforms("Krylov solves")
    return _krylov_op(config, False, values, b, x0)
