"""`compile_program`: any sparsad program as a differentiable PyTorch op.

The forward pass runs the compiled program on NumPy/SciPy views of the inputs; the backward pass
runs the program's vjp program and the forward-mode rule its jvp program, each itself wrapped as
such an op, so gradients of gradients, `torch.func` transforms and forward-over-reverse work as
far as sparsad can differentiate the derivative programs.

A program with top-level lets worth materialising (`sparsad.opt.stages`) runs as a chain of
such ops, one per stage, so autograd keeps the intermediates and no derivative program computes
them again; a stage that is exactly a product of two dense matrices is `torch.matmul`. (Under
torch.compile each stage is a custom op, intermediates dense; on fake tensors outside it, the
program is one custom op.)

Inputs: dense tensors, 0-d tensors (scalars), `SparseMatrix` and torch sparse COO/CSR tensors
(gradients to their stored values: the masked convention), plus constant Python numbers, NumPy
arrays and scipy.sparse matrices. Outputs: a tensor, a 0-d tensor, or a `SparseMatrix`.

>>> import torch, sparsad.torch as st
>>> dot = st.compile_program("sum(<i, a> in V1) a * V2(i)")
>>> v1 = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
>>> out = dot(V1=v1, V2=torch.tensor([3.0, 4.0], dtype=torch.float64))
>>> out.backward(); v1.grad
tensor([3., 4.], dtype=torch.float64)
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import numpy as np
import scipy.sparse as sp
import torch

from sparsad.errors import DTypeError, FormatError, InputError, ProgramTypeError, ShapeError, UnsupportedError
from sparsad.bridge import (canonical_csr as _canonical, stored_csr as _stored_csr,
                            stored_dense as _stored_dense, values_on as _values_on)
from sparsad.ad.joint import fit_dense
from sparsad.formats import StoredTensor
from sparsad.ops.pattern import CSRPattern
from sparsad.torch.matrix import SparseMatrix

OUT_FORMATS = ("natural", "dense")
#: errors about the caller's inputs: raised as they are, never retried in the interpreter
_CALLER_ERRORS = (InputError, ShapeError, DTypeError, FormatError, MemoryError)


@dataclass(frozen=True)
class _Layout:
    """How one output is returned: "dense" (a tensor of `shape`, None when unknown), "pattern"
    (the values of a SparseMatrix on a fixed `pattern`), or "natural" (decided by the result)."""

    kind: str
    shape: tuple | None = None
    pattern: CSRPattern | None = None


@dataclass
class _Call:
    """One call of a TorchProgram: what each flat tensor is, the constants, and (after forward)
    the output's layout."""

    owner: "TorchProgram"
    names: tuple[str, ...]  # input name of each differentiable tensor
    kinds: tuple[str, ...]  # "dense", "scalar" or "sparse" per tensor
    patterns: tuple[CSRPattern | None, ...]
    constants: dict[str, Any]
    dtype: torch.dtype
    layout: _Layout
    out_pattern: CSRPattern | None = None
    types: dict = field(default_factory=dict)
    shapes: tuple = ()  # of the tensors
    _key: tuple | None = None

    def key(self) -> tuple:
        """`signature()` and the tensors' shapes: what the input types and derivative programs
        depend on (made once per call)."""
        if self._key is None:
            self._key = (self.signature(), self.shapes)
        return self._key

    def signature(self) -> tuple:
        """What the input types depend on (names, kinds, shapes; constants' kinds and shapes):
        a cheap key for the derivative programs (hashing the types costs more)."""
        tensors = tuple((n, k, p.shape if p is not None else None) for n, k, p in zip(self.names, self.kinds, self.patterns))
        constants = tuple((n, type(v).__name__, getattr(v, "shape", None), getattr(getattr(v, "dtype", None), "kind", None))
                          for n, v in sorted(self.constants.items()))
        return tensors, constants

    def numpy_inputs(self, tensors: Iterable[torch.Tensor]) -> dict[str, Any]:
        inputs = dict(self.constants)
        for name, kind, pattern, tensor in zip(self.names, self.kinds, self.patterns, tensors):
            inputs[name] = _to_numpy(kind, pattern, tensor)
        return inputs


def _to_numpy(kind: str, pattern: CSRPattern | None, tensor: torch.Tensor) -> Any:
    """A tensor as the kernel reads it: a float, or a StoredTensor sharing the tensor's memory
    (no copy unless strided, e.g. vmap slices with stride 0; no second validation: a dense
    array has no indices, and a SparseMatrix's pattern was checked when it was made)."""
    tensor = tensor.detach()
    if kind == "scalar":  # (not through ascontiguousarray, which makes a 0-d array 1-d)
        return float(tensor.item())
    if tensor.device.type != "cpu":
        tensor = tensor.cpu()
    array = np.ascontiguousarray(tensor.numpy())
    if kind == "sparse":
        return _stored_csr(pattern, array)
    return _stored_dense(array)


class _ProgramFunction(torch.autograd.Function):
    @staticmethod
    def forward(call: _Call, *tensors: torch.Tensor) -> torch.Tensor:
        return call.owner._run_forward(call, tensors)  # (never traced: dynamo calls _call_traced)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.call = inputs[0]
        ctx.out_pattern = inputs[0].out_pattern
        ctx.out_shape = tuple(output.shape)
        ctx.save_for_backward(*inputs[1:])
        ctx.save_for_forward(*inputs[1:])

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        call, tensors = ctx.call, ctx.saved_tensors
        needed = [k for k in range(len(tensors)) if ctx.needs_input_grad[k + 1] and call.names[k] in call.owner.wrt]
        grads = call.owner._vjps(call, ctx.out_pattern, needed, tensors, grad)
        return (None, *(grads.get(k) for k in range(len(tensors))))

    @staticmethod
    def jvp(ctx, _call, *tangents):
        call, tensors = ctx.call, ctx.saved_tensors
        given = []
        for k, tangent in enumerate(tangents):
            if tangent is not None:
                if call.names[k] not in call.owner.wrt:
                    if _surely_nonzero(tangent):  # torch.func hands zero tangents to every input
                        raise InputError(f"a tangent was given for input {call.names[k]!r}, which is not in "
                                         f"wrt={list(call.owner.wrt)}; add it to wrt")
                    continue
                given.append(k)
        total = None
        # one joint jvp program per group of dense inputs of one type (its result is the
        # program's own output, so inputs of any shape may share it)
        for group in _joint_groups(call, given, same_shape=False):
            part = call.owner._joint_jvp(call, ctx.out_pattern, ctx.out_shape, group, tensors, tangents) \
                if len(group) > 1 else None
            parts = [part] if part is not None else \
                [call.owner._jvp(call, ctx.out_pattern, ctx.out_shape, k, tensors, tangents[k]) for k in group]
            for part in parts:
                total = part if total is None else total + part
        return total if total is not None else torch.zeros(ctx.out_shape, dtype=call.dtype)

    @staticmethod
    def vmap(info, in_dims, call: _Call, *tensors):
        from sparsad.torch._autograd import batch_first

        if all(d is None for d in in_dims[1:]):
            return _ProgramFunction.apply(call, *tensors), None
        columns = [batch_first(t, d, info.batch_size) for t, d in zip(tensors, in_dims[1:])]
        results, first = [], None
        for b in range(info.batch_size):
            results.append(_ProgramFunction.apply(call, *(c[b] for c in columns)))
            if first is None:
                first = call.out_pattern
            elif first is not None and not _same_pattern(first, call.out_pattern):
                raise UnsupportedError("vmap over a program whose sparse output pattern depends on the batch; "
                                       "call compile_program(..., out_format='dense')")
        return torch.stack(results), 0


#: the autograd node's own apply, under torch's Function.apply
_NODE_APPLY = super(torch.autograd.Function, _ProgramFunction).apply


def _apply(call: _Call, tensors) -> torch.Tensor:
    """`_ProgramFunction.apply(call, *tensors)`. torch's apply binds default arguments through
    inspect.signature on every call of a Function with setup_context (tens of microseconds;
    forward has none to bind); outside torch.func transforms and torch.compile tracing this does
    what it does then: unwrap tensors a finished transform left wrapped, and apply the node."""
    if torch._C._are_functorch_transforms_active() or torch.compiler.is_compiling():
        return _ProgramFunction.apply(call, *tensors)
    return _NODE_APPLY(call, *_unwrap_dead_wrappers(tuple(tensors)))


def _unwrap_dead_wrappers(args: tuple) -> tuple:
    """Tensors left wrapped by a finished torch.func transform, unwrapped (as torch's apply does)."""
    from torch._functorch.utils import unwrap_dead_wrappers

    return unwrap_dead_wrappers(args)


def _surely_nonzero(tensor: torch.Tensor) -> bool:
    """True when `tensor` can be read and has a nonzero entry (under vmap it cannot be read)."""
    try:
        return bool(tensor.detach().any())
    except RuntimeError:
        return False


def _joint_groups(call: _Call, needed: list[int], same_shape: bool) -> list[list[int]]:
    """`needed` split into groups that one joint vjp program serves: dense tensors of one type
    (extents aside; of one shape too when `same_shape`) together, every other tensor alone; in
    order of first appearance. (The vjp of a joint program whose blocks differ in shape does
    not type-check: its cotangent's axes are the widest, not each input's; so tensors of
    different shapes share a joint program only when it will not be differentiated.)"""
    groups: list[list[int]] = []
    for k in needed:
        if call.kinds[k] == "dense" and call.names[k] in call.types:
            kind = call.types[call.names[k]]
            for group in groups:
                first = group[0]
                if call.kinds[first] == "dense" and call.types.get(call.names[first]) == kind and \
                        (not same_shape or call.shapes[first] == call.shapes[k]):
                    group.append(k)
                    break
            else:
                groups.append([k])
        else:
            groups.append([k])
    return groups


def _block(stacked: torch.Tensor, t: int, shape: tuple) -> torch.Tensor:
    """Entry t of a joint vjp program's result as an array of `shape`: its leading block, zeros
    where the result does not reach (an adjoint with no entries there)."""
    if t >= stacked.shape[0]:
        return torch.zeros(shape, dtype=stacked.dtype)
    block = stacked[t][tuple(slice(0, e) for e in shape)]
    if tuple(block.shape) != tuple(shape):
        padding = []
        for want, have in zip(reversed(shape), reversed(block.shape)):
            padding += [0, want - have]
        block = torch.nn.functional.pad(block, padding)
    return block


def _types_as_zero(program: Any, expr: Any, kind: str, name: str, types: dict, seed: str) -> bool:
    """Whether the derivative program `expr` has the type of `{}`: zero whatever its inputs (no
    kernel to compile; compiling one warns that it runs in the interpreter)."""
    from sparsad.lang.typecheck import infer
    from sparsad.lang.types import Zero

    try:
        seed_type = types[name] if kind == "jvp" else infer(program.expr, types)
        return isinstance(infer(expr, {**types, seed: seed_type}), Zero)
    except Exception:  # noqa: BLE001 - not provably zero: the program runs
        return False


def _same_pattern(a: CSRPattern | None, b: CSRPattern | None) -> bool:
    if a is None or b is None:
        return a is b
    return a.shape == b.shape and np.array_equal(a.indptr, b.indptr) and np.array_equal(a.indices, b.indices)


class TorchProgram:
    """A sparsad program callable on torch tensors, differentiable in every tensor input (see the
    module docstring). Build with `compile_program`.

    >>> import torch, sparsad.torch as st
    >>> norm2 = st.compile_program("sum(<i, a> in v) a * a")
    >>> type(norm2).__name__
    'TorchProgram'
    >>> v = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    >>> norm2(v=v).backward(); v.grad
    tensor([2., 4.], dtype=torch.float64)
    """

    def __init__(self, prog: Any, wrt: str | Iterable[str] | None = None, out_format: str = "natural",
                 _output: str = "auto", _split: bool = True):
        import sparsad

        if out_format not in OUT_FORMATS:
            raise InputError(f"out_format={out_format!r} is not one of {OUT_FORMATS}")
        if out_format == "dense":
            _output = "dense"  # the kernel writes the dense result itself (no sparse assembly)
        self.program = sparsad.program(prog)
        names = self.program.inputs
        if wrt is None:
            self.wrt = tuple(names)
        else:
            self.wrt = (wrt,) if isinstance(wrt, str) else tuple(wrt)
            unknown = [w for w in self.wrt if w not in names]
            if unknown:
                raise InputError(f"wrt names {unknown}, which the program does not read; its inputs are {names}")
        self.layout = _Layout(out_format)
        self._compiled = sparsad.compile(self.program, output=_output)  # "dense": a derivative's dense layout
        self._derived: dict[tuple, "TorchProgram"] = {}
        self._types: dict[tuple, dict] = {}  # call key -> input types (shared: never mutated)
        self._interpret = False
        from sparsad.bridge import fresh_name

        self._seed = fresh_name("sparsad_seed", names)  # the cotangent/tangent input of derivatives
        # the program as a chain of programs cut at top-level lets worth keeping (sparsad.opt.stages):
        # each stage an op of its own, so the backward pass reuses the forward's intermediates
        self._stages = _StageChain.of(self) if _split else None

    def __repr__(self) -> str:
        return f"TorchProgram({self.program!r}, wrt={list(self.wrt)}, layout={self.layout.kind!r})"

    # -- calling -----------------------------------------------------------------------------
    def __call__(self, *args: Any, **inputs: Any) -> Any:
        """Run on torch tensors given by keyword or by position in `program.inputs` order."""
        if args:
            from sparsad.lang.program import bind_inputs

            inputs = bind_inputs(self.program.inputs, args, inputs)
        return self._call(inputs, self.layout)

    def _call(self, inputs: Mapping[str, Any], layout: _Layout) -> Any:
        from sparsad.torch import _traced

        if _traced.tracing():  # dynamo: a custom op (its fake kernel gives the shape)
            if self._stages is not None:
                staged = self._stages.traced(inputs, layout)
                if staged is not _UNSPLIT:
                    return staged
            return self._call_traced(inputs, layout)
        if self._stages is not None:
            staged = self._stages(inputs, layout)
            if staged is not _UNSPLIT:
                return staged
        self.program._check_inputs(inputs)
        names, kinds, patterns, tensors, constants = [], [], [], [], {}
        for name in sorted(inputs):
            value = inputs[name]
            if isinstance(value, torch.Tensor) and value.layout != torch.strided:
                value = SparseMatrix.from_torch(value)  # gradients flow back to the tensor's values
            if isinstance(value, SparseMatrix):
                kind, pattern, tensor = "sparse", value.pattern, value.values
            elif isinstance(value, torch.Tensor):
                if not value.is_floating_point():
                    constants[name] = value.detach().cpu().numpy()
                    continue
                kind, pattern, tensor = ("scalar" if value.ndim == 0 else "dense"), None, value
            elif isinstance(value, (bool, int, float, np.generic, np.ndarray, StoredTensor)) or sp.issparse(value):
                constants[name] = value
                continue
            else:
                raise InputError(f"input {name!r} is a {type(value).__name__}; pass a torch tensor, a "
                                 "SparseMatrix, a torch sparse tensor, a number, a NumPy array or a scipy.sparse matrix")
            if name not in self.wrt and tensor.requires_grad and torch.is_grad_enabled():
                raise InputError(f"input {name!r} requires grad but is not in wrt={list(self.wrt)}; add it "
                                 f"to wrt or pass {name}.detach()")
            # every tensor enters the Function (torch.func unwraps them there); those outside wrt
            # get no gradient
            names.append(name), kinds.append(kind), patterns.append(pattern), tensors.append(tensor)
        dtypes = {t.dtype for t in tensors}
        if dtypes - {torch.float32, torch.float64}:
            raise DTypeError(f"tensor inputs must be float32 or float64, got {sorted(map(str, dtypes))}")
        dtype = torch.float64 if (torch.float64 in dtypes or not dtypes) else torch.float32
        call = _Call(self, tuple(names), tuple(kinds), tuple(patterns), constants, dtype, layout,
                     shapes=tuple(tuple(t.shape) for t in tensors))
        if not tensors:  # nothing to differentiate: run directly
            return self._wrap(call, self._run_forward(call, ()))
        if _traced.is_fake(*tensors):  # meta or fake tensors: shapes from the custom op
            return self._call_traced(inputs, layout)
        return self._wrap(call, _apply(call, tensors))

    # -- under torch.compile (and on meta or fake tensors) ----------------------------------
    def _call_traced(self, inputs: Mapping[str, Any], layout: _Layout) -> torch.Tensor:
        """The call as the custom op `sparsad::program` on the flat tensors (a SparseMatrix
        enters as its values; its pattern, the program and the constants as one graph constant)."""
        from sparsad.torch import _traced

        names, kinds, patterns, tensors, constants = [], [], [], [], []
        for name in sorted(inputs):
            value = inputs[name]
            if isinstance(value, SparseMatrix):
                names.append(name), kinds.append("sparse"), patterns.append(_traced.as_static(value.pattern))
                tensors.append(value.values)
            elif isinstance(value, torch.Tensor) and value.layout == torch.strided and value.is_floating_point():
                names.append(name), kinds.append("scalar" if value.ndim == 0 else "dense"), patterns.append(None)
                tensors.append(value)
            elif isinstance(value, (bool, int, float)):
                constants.append((name, _traced.concrete(value)))  # (specialised: a new value recompiles)
            else:
                raise UnsupportedError(
                    f"input {name!r} is a {type(value).__name__}: under torch.compile (or on meta/fake tensors) "
                    "compile_program takes float tensors, SparseMatrix inputs and Python numbers; pass it as a "
                    "float tensor or a SparseMatrix")
            if names and names[-1] == name and name not in self.wrt and tensors[-1].requires_grad \
                    and torch.is_grad_enabled():
                raise InputError(f"input {name!r} requires grad but is not in wrt={list(self.wrt)}; add it "
                                 f"to wrt or pass {name}.detach()")
        if any(t.dtype not in (torch.float32, torch.float64) for t in tensors):
            raise DTypeError(f"tensor inputs must be float32 or float64, got {sorted({str(t.dtype) for t in tensors})}")
        dtype = torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32
        if not tensors:
            raise UnsupportedError("under torch.compile (or on meta/fake tensors) compile_program needs at least "
                                   "one tensor input")
        spec = _traced.static_of(self).traced_spec(tuple(names), tuple(kinds), tuple(patterns), tuple(constants),
                                                   dtype, layout.kind)
        return _traced.program(spec, tensors)

    def _traced_spec(self, names: tuple, kinds: tuple, patterns: tuple, constants: tuple, dtype: torch.dtype,
                     layout_kind: str) -> "_TracedSpec":
        """The call's static part (run at trace time), one per distinct set of arguments."""
        key = (names, kinds, patterns, constants, dtype, layout_kind)
        cache = self.__dict__.setdefault("_traced_specs", {})
        if key not in cache:
            self.program._check_inputs({n: None for n in names + tuple(n for n, _ in constants)})
            cache[key] = _TracedSpec(self, names, kinds, tuple(None if p is None else p.obj for p in patterns),
                                     dict(constants), dtype, _Layout(layout_kind))
        from sparsad.torch._traced import Static

        return Static.of(cache[key])

    def _wrap(self, call: _Call, values: torch.Tensor) -> Any:
        if call.out_pattern is not None and call.layout.kind == "natural":
            return SparseMatrix._wrap(call.out_pattern, values)
        return values

    def _prepare_types(self, call: _Call, tensors) -> dict[str, Any]:
        """Set `call.types` (without running the program) and return the NumPy inputs."""
        inputs = call.numpy_inputs(tensors)
        self._set_types(call, inputs)
        return inputs

    def _set_types(self, call: _Call, inputs: dict[str, Any]) -> None:
        from sparsad.lang.typecheck import value_type

        if not call.types:
            # the types follow from the call's key (kinds, shapes; constants' kinds and shapes)
            # unless a constant is a StoredTensor or a dict (its format or keys matter too)
            key = None if any(isinstance(v, (StoredTensor, dict)) for v in call.constants.values()) else call.key()
            types = self._types.get(key) if key is not None else None
            if types is None:
                types = {n: value_type(v) for n, v in inputs.items()}
                if key is not None:
                    self._types[key] = types
            call.types = types

    def _run_forward(self, call: _Call, tensors) -> torch.Tensor:
        inputs = self._prepare_types(call, tensors)
        result = self._run_numpy(inputs)
        layout = call.layout
        call.out_pattern = None
        if layout.kind == "pattern":
            call.out_pattern = layout.pattern
            array = _values_on(result, layout.pattern)
        elif layout.kind == "dense" or not sp.issparse(result):
            if not (sp.issparse(result) or isinstance(result, (np.ndarray, int, float, np.generic))):
                raise UnsupportedError(f"the program returns a {type(result).__name__}; compile_program supports "
                                       "results that are numbers, arrays or sparse matrices")
            array = fit_dense(result, layout.shape)
        else:
            if result.ndim != 2:
                raise UnsupportedError("sparse results of order other than 2 are not supported; use out_format='dense'")
            csr = _canonical(result)
            call.out_pattern = CSRPattern(csr.indptr, csr.indices, csr.shape, check=False)
            array = csr.data
        array = np.asarray(array)
        if not (array.flags.c_contiguous and array.flags.owndata):  # never alias an input's buffer
            array = np.array(array, order="C")
        return torch.from_numpy(array).to(call.dtype)

    def _run_numpy(self, inputs: dict[str, Any]) -> Any:
        """The compiled kernel; if compiling fails inside sparsad (not on the caller's input), the
        reference interpreter, with a warning, for this and later calls."""
        if self._interpret:
            return self.program(**inputs)
        try:
            return self._compiled(**inputs)
        except _CALLER_ERRORS:
            raise
        except Exception as error:  # noqa: BLE001 - an internal compiler failure: fall back, loudly
            warnings.warn(f"sparsad.torch.compile_program: compiling {self.program!r} failed "
                          f"({type(error).__name__}: {error}); running it in the interpreter", stacklevel=2)
            self._interpret = True
            return self.program(**inputs)

    # -- derivatives ---------------------------------------------------------------------------
    def _derived_program(self, kind: str, name: str, call: _Call,
                         dense: bool = False) -> tuple["TorchProgram | None", str]:
        """The vjp/jvp program w.r.t. `name` for the call's types; `dense`: its result is read
        as a dense array (kernels then write one directly, no sparse assembly)."""
        import sparsad
        from sparsad.bridge import derivative_expr

        seed = self._seed
        key = (kind, name, dense, call.key())  # the same key, the same types
        if key not in self._derived:
            # a derivative that is identically zero (the empty dictionary) is no program to run
            expr = derivative_expr(self.program, kind, name, call.types, seed)
            if expr is not None and _types_as_zero(self.program, expr, kind, name, call.types, seed):
                expr = None  # e.g. a jvp of a vjp program in an input it reads only linearly
            self._derived[key] = None if expr is None else \
                TorchProgram(sparsad.Program(expr), _output="dense" if dense else "auto", _split=False)
        return self._derived[key], seed

    def _rebuild(self, call: _Call, tensors) -> dict[str, Any]:
        inputs = dict(call.constants)
        for name, kind, pattern, tensor in zip(call.names, call.kinds, call.patterns, tensors):
            inputs[name] = SparseMatrix._wrap(pattern, tensor) if kind == "sparse" else tensor
        return inputs

    def _as_input(self, pattern: CSRPattern | None, tensor: torch.Tensor) -> Any:
        return tensor if pattern is None else SparseMatrix._wrap(pattern, tensor)

    def _vjps(self, call: _Call, out_pattern, needed: list[int], tensors, grad: torch.Tensor) -> dict:
        """The cotangent of each tensor in `needed` (by position): dense inputs of one type from
        one joint vjp program (the primal recomputed once for all of them), others one by one."""
        grads: dict[int, torch.Tensor] = {}
        # (grad mode is on in a backward pass only when its result is differentiated again)
        for group in _joint_groups(call, needed, same_shape=torch.is_grad_enabled()):
            joint = self._joint_vjp(call, out_pattern, group, tensors, grad) if len(group) > 1 else None
            if joint is not None:
                grads.update(joint)
                continue
            for k in group:
                grads[k] = self._vjp(call, out_pattern, k, tensors, grad)
        return grads

    def _joint_vjp(self, call: _Call, out_pattern, group: list[int], tensors, grad: torch.Tensor) -> dict | None:
        """The cotangents of the tensors in `group` from one joint vjp program (see
        sparsad.ad.joint), or None when there is none (then each gets its own vjp program)."""
        import sparsad
        from sparsad.ad.joint import joint_vjp_expr

        names = tuple(call.names[k] for k in group)
        key = ("joint-vjp", names, call.key())
        if key not in self._derived:
            try:
                expr = joint_vjp_expr(self.program.expr, names, call.types, self._seed)
            except (UnsupportedError, ProgramTypeError, ShapeError):  # the vjp programs one by one say why
                # (ShapeError: blocks of different extents whose axes the program relates to
                # other inputs' axes, e.g. W (features x out) and C (nodes x out) of one layer)
                expr = None
            self._derived[key] = None if expr is None else \
                TorchProgram(sparsad.Program(expr), _output="dense", _split=False)
        derived = self._derived[key]
        if derived is None:
            return None
        reads = derived.program._input_names()
        inputs = {n: v for n, v in self._rebuild(call, tensors).items() if n in reads}
        if self._seed in reads:
            inputs[self._seed] = self._as_input(out_pattern, grad)
        if reads - set(inputs):
            return None
        # the kernel's dense result spans the keys it can write (entry t: input t's adjoint)
        result = derived._call(inputs, _Layout("dense"))
        shapes = [call.shapes[k] for k in group]
        if result.ndim != 1 + len(shapes[0]):
            return None
        return {k: _block(result, t, shape).to(tensors[k].dtype) for t, (k, shape) in enumerate(zip(group, shapes))}

    def _joint_jvp(self, call: _Call, out_pattern, out_shape, group: list[int], tensors, tangents) -> Any:
        """The output's tangent for the tangents of the tensors in `group`, from one joint jvp
        program (sparsad.ad.joint), or None when there is none."""
        import sparsad
        from sparsad.ad.joint import joint_jvp_expr
        from sparsad.bridge import fresh_name

        names = tuple(call.names[k] for k in group)
        taken = list(self.program.inputs) + [self._seed]
        seeds = tuple(fresh_name(f"{self._seed}{t}", taken) for t in range(len(group)))
        dense = out_pattern is None and len(out_shape) > 0
        key = ("joint-jvp", names, dense, call.key())
        if key not in self._derived:
            try:
                expr = joint_jvp_expr(self.program.expr, dict(zip(names, seeds)), call.types)
            except (UnsupportedError, ProgramTypeError, ShapeError):  # the jvp programs one by one say why
                expr = None
            self._derived[key] = None if expr is None else \
                TorchProgram(sparsad.Program(expr), _output="dense" if dense else "auto", _split=False)
        derived = self._derived[key]
        if derived is None:
            return None
        reads = derived.program._input_names()
        inputs = {n: v for n, v in self._rebuild(call, tensors).items() if n in reads}
        inputs.update({seed: tangents[k] for seed, k in zip(seeds, group) if seed in reads})
        if not reads or reads - set(inputs):
            return None
        layout = _Layout("pattern", pattern=out_pattern) if out_pattern is not None else _Layout("dense", out_shape)
        return derived._call(inputs, layout).to(call.dtype)

    def _vjp(self, call: _Call, out_pattern, k: int, tensors, grad: torch.Tensor) -> torch.Tensor:
        name, kind, pattern = call.names[k], call.kinds[k], call.patterns[k]
        layout = _Layout("pattern", pattern=pattern) if kind == "sparse" else _Layout("dense", tuple(tensors[k].shape))
        derived, seed = self._derived_program("vjp", name, call, dense=kind == "dense")
        if derived is None:
            return torch.zeros_like(tensors[k])
        reads = derived.program._input_names()
        inputs = {n: v for n, v in self._rebuild(call, tensors).items() if n in reads}
        if seed in reads:
            inputs[seed] = self._as_input(out_pattern, grad)
        if not reads or reads - set(inputs):
            return torch.zeros_like(tensors[k])  # the derivative program is a constant zero
        return derived._call(inputs, layout).to(tensors[k].dtype)

    def _jvp(self, call: _Call, out_pattern, out_shape, k: int, tensors, tangent: torch.Tensor) -> torch.Tensor:
        name = call.names[k]
        layout = _Layout("pattern", pattern=out_pattern) if out_pattern is not None else _Layout("dense", out_shape)
        derived, seed = self._derived_program("jvp", name, call, dense=out_pattern is None and len(out_shape) > 0)
        if derived is None:
            return torch.zeros(out_shape, dtype=call.dtype)
        reads = derived.program._input_names()
        inputs = {n: v for n, v in self._rebuild(call, tensors).items() if n in reads}
        if seed in reads:
            inputs[seed] = self._as_input(call.patterns[k], tangent)
        if not reads or reads - set(inputs):
            return torch.zeros(out_shape, dtype=call.dtype)
        return derived._call(inputs, layout).to(call.dtype)


_UNSPLIT = object()  # a _StageChain's answer when the call runs as one program


class _StageChain:
    """A TorchProgram's program as a chain of stage programs (`sparsad.opt.stages`), each a
    TorchProgram of its own: torch's autograd keeps each stage's inputs (the intermediates) for
    its backward, so no derivative program recomputes an earlier stage. Which lets are cut
    depends on the inputs' types (an intermediate the bridge cannot pass along stays inside):
    one plan per input signature."""

    def __init__(self, owner: TorchProgram, candidates: int):
        self.owner = owner
        self.candidates = candidates
        self._plans: dict[tuple, Any] = {}
        self._programs: dict[Any, TorchProgram] = {}  # stage expression -> its program (shared by plans)

    @staticmethod
    def of(owner: TorchProgram) -> "_StageChain | None":
        """A chain when the program has a let worth cutting for some inputs, else None."""
        from sparsad.opt.stages import split_stages

        stages = split_stages(owner.program.expr)
        return _StageChain(owner, len(stages) - 1) if len(stages) > 1 else None

    def __call__(self, inputs: Mapping[str, Any], layout: _Layout) -> Any:
        from sparsad.torch import _traced

        key = _signature_of(inputs)
        plan = self._plans.get(key) if key is not None else None
        if plan is None:
            if any(isinstance(v, torch.Tensor) and _traced.is_fake(v) for v in inputs.values()) \
                    or any(isinstance(v, SparseMatrix) and _traced.is_fake(v.values) for v in inputs.values()):
                return _UNSPLIT  # meta/fake tensors: the one program's custom op gives the shape
            plan = self._plan(inputs)
            if key is not None:
                self._plans[key] = plan
        if not plan:
            return _UNSPLIT
        self.owner.program._check_inputs(inputs)
        if torch.is_grad_enabled():
            for name, value in inputs.items():
                tensor = value.values if isinstance(value, SparseMatrix) else value
                if name not in self.owner.wrt and isinstance(tensor, torch.Tensor) and tensor.requires_grad:
                    raise InputError(f"input {name!r} requires grad but is not in wrt={list(self.owner.wrt)}; add "
                                     f"it to wrt or pass {name}.detach()")
        return _run_stages(plan, inputs, layout, matmul_last=layout.kind != "pattern")

    def traced(self, inputs: Mapping[str, Any], layout: _Layout) -> Any:
        """The chain while dynamo traces: the plan is made at trace time (a graph constant, from
        the inputs' kinds and shapes), each stage a custom op; intermediates are dense tensors
        (a sparse result's pattern depends on data, which fake tensors do not have)."""
        from sparsad.torch import _traced

        signature = []
        for name in sorted(inputs):
            value = inputs[name]
            if isinstance(value, SparseMatrix):
                signature.append((name, "sparse", tuple(value.shape)))
            elif isinstance(value, torch.Tensor) and value.layout == torch.strided and value.is_floating_point():
                signature.append((name, "dense", tuple(int(d) for d in value.shape)))
            elif isinstance(value, (bool, int, float)):
                signature.append((name, type(value).__name__, value))
            else:
                return _UNSPLIT
        signature = tuple(signature)
        _traced.static_of(self).stage_plan(signature)  # made at trace time; read below from self,
        plan = self._plans[("traced", signature)]  # where dynamo finds the stage programs
        if not plan:
            return _UNSPLIT
        return _run_stages(plan, inputs, layout, matmul_last=True)

    def _traced_plan(self, signature: tuple) -> list:
        """`_plan` for traced inputs described by `signature` (run at trace time)."""
        from sparsad.lang.typecheck import value_type
        from sparsad.lang.types import tensor

        key = ("traced", signature)
        if key not in self._plans:
            types = {}
            for name, kind, shape in signature:  # (for a number, `shape` is its value)
                types[name] = tensor(len(shape), tuple(int(e) for e in shape)) if kind in ("sparse", "dense") \
                    else value_type(shape)
            self._plans[key] = self._plan_types(types, traced=True)
        return self._plans[key]

    def _plan(self, inputs: Mapping[str, Any]) -> list:
        """[(stage program, result name, layout)] for inputs like these; [] when no let is cut."""
        from sparsad.lang.typecheck import value_type

        types = {}
        for name, value in inputs.items():
            if isinstance(value, torch.Tensor) and value.layout == torch.strided and not value.is_floating_point():
                value = value.detach().cpu().numpy()
            types[name] = value_type(value)
        return self._plan_types(types, traced=False)

    def _plan_types(self, types: dict, traced: bool) -> list:
        from sparsad.lang.typecheck import infer
        from sparsad.lang.types import extents, tensor_order
        from sparsad.opt.stages import dense_size, matrix_product, split_stages

        try:
            result = infer(self.owner.program.expr, types)
        except Exception:  # noqa: BLE001 - the one program reports the user's error
            return []
        # intermediates held densely may be as large as the program's own arrays, no larger
        budget = max([dense_size(t) or 0 for t in types.values()] + [dense_size(result) or 0, 1])
        layouts: dict[str, _Layout] = {}

        def keep(name: str, value) -> bool:
            try:
                t = infer(value, types)
            except Exception:  # noqa: BLE001 - not typeable on its own: stays inside
                return False
            order = tensor_order(t)
            if order is None:
                return False
            if order == 0:
                layouts[name] = _Layout("natural")
            elif order == 2 and not traced:
                layouts[name] = _Layout("natural")  # a SparseMatrix when sparse, a tensor when dense
            else:
                size = dense_size(t)
                if size is None or size > budget:
                    return False
                layouts[name] = _Layout("dense", tuple(extents(t)))
            types[name] = t
            return True

        stages = split_stages(self.owner.program.expr, keep)
        if len(stages) == 1:
            return []
        plan = []
        for stage in stages:
            program = self._programs.get(stage.expr)
            if program is None:
                wrt = tuple(n for n in stage.inputs if n in self.owner.wrt or n in layouts)
                out_format = "natural" if stage.name is not None else self.owner.layout.kind
                program = self._programs[stage.expr] = TorchProgram(
                    stage.expr, wrt, out_format=out_format,
                    _output="dense" if out_format == "dense" else "auto", _split=False)
            plan.append((program, stage.name, layouts.get(stage.name), matrix_product(stage.expr)))
        return plan


def _run_stages(plan: list, inputs: Mapping[str, Any], layout: _Layout, matmul_last: bool) -> Any:
    """Each stage on the inputs and the earlier stages' results; the last stage's result. A stage
    that is exactly a dense product runs as torch.matmul (the last one only if `matmul_last`)."""
    env = dict(inputs)
    value = None
    for program, name, stage_layout, product in plan:
        value = _matmul(env, product) if product is not None and (name is not None or matmul_last) else None
        if value is None:
            value = program._call({n: env[n] for n in program.program.inputs},
                                  stage_layout if name is not None else layout)
        if name is None:
            break
        env[name] = value
    return value


def _matmul(env: Mapping[str, Any], product: tuple[str, str]) -> torch.Tensor | None:
    """L @ R by torch.matmul when the stage is exactly that product of two dense float matrices
    of one dtype (a GEMM, without the bridge's conversions; torch's derivative of a product is
    exact and serves every torch.func transform), else None (the stage program runs)."""
    left, right = env[product[0]], env[product[1]]
    for value in (left, right):
        if not (isinstance(value, torch.Tensor) and value.layout == torch.strided and value.ndim == 2
                and value.dtype in (torch.float32, torch.float64)):
            return None
    return torch.matmul(left, right) if left.dtype == right.dtype else None


def _signature_of(inputs: Mapping[str, Any]) -> tuple | None:
    """What a stage plan depends on (the inputs' kinds and shapes), or None when that is more
    (a dict or StoredTensor constant: plan afresh)."""
    key = []
    for name in sorted(inputs):
        value = inputs[name]
        if isinstance(value, SparseMatrix):
            key.append((name, "sparse", value.shape))
        elif isinstance(value, torch.Tensor):
            key.append((name, value.layout, value.is_floating_point(), tuple(value.shape)))
        elif isinstance(value, (bool, int, float)):
            key.append((name, type(value).__name__))
        elif isinstance(value, np.ndarray) or sp.issparse(value):
            key.append((name, type(value).__name__, value.shape, value.dtype.kind))
        else:
            return None
    return tuple(key)


class _TracedSpec:
    """What a traced call of `owner` fixes: the tensors' names and kinds, the sparse inputs'
    patterns, the constants, the dtype and the output layout (shapes come with the tensors)."""

    def __init__(self, owner: TorchProgram, names: tuple, kinds: tuple, patterns: tuple, constants: dict,
                 dtype: torch.dtype, layout: _Layout):
        self.owner, self.names, self.kinds, self.patterns = owner, names, kinds, patterns
        self.constants, self.dtype, self.layout = constants, dtype, layout
        self._shapes: dict[tuple, tuple] = {}

    def __repr__(self) -> str:
        return f"_TracedSpec({self.owner!r}, {list(self.names)})"

    def call(self, tensors) -> _Call:
        return _Call(self.owner, self.names, self.kinds, self.patterns, dict(self.constants), self.dtype,
                     self.layout, shapes=tuple(tuple(t.shape) for t in tensors))

    def out_shape(self, tensors) -> tuple:
        """The output's shape for tensors of these shapes (fake ones: each size is specialised,
        so a new size retraces): from one run of the program on ones, once per shapes."""
        shapes = tuple(tuple(int(d) for d in t.shape) for t in tensors)
        if shapes not in self._shapes:
            for kind, pattern, shape in zip(self.kinds, self.patterns, shapes):
                if kind == "sparse" and shape != (pattern.nnz,):
                    raise ShapeError(f"a sparse input's values have shape {shape}; its pattern has "
                                     f"{pattern.nnz} entries")
            from torch._subclasses.fake_tensor import unset_fake_temporarily

            call = _Call(self.owner, self.names, self.kinds, self.patterns, dict(self.constants), torch.float64,
                         self.layout, shapes=shapes)
            with unset_fake_temporarily(), np.errstate(all="ignore"):  # real tensors, outside the fake mode
                result = self.owner._run_forward(call, [torch.ones(shape, dtype=torch.float64) for shape in shapes])
            if call.out_pattern is not None:
                raise UnsupportedError(
                    f"{self.owner!r} returns a sparse result, whose pattern depends on the data; under "
                    "torch.compile (or on meta/fake tensors) build it with compile_program(..., out_format='dense')")
            self._shapes[shapes] = tuple(result.shape)
        return self._shapes[shapes]


def compile_program(prog: Any, wrt: str | Iterable[str] | None = None,
                    out_format: str = "natural") -> TorchProgram:
    """Any sparsad program (text, expression or Program) as a differentiable PyTorch op.

    `wrt`: the inputs gradients flow to (default: every tensor input); a tensor input outside
    `wrt` that requires grad is an error rather than a silent detach. `out_format="dense"` returns
    a dense tensor even where the program's result is sparse.

    >>> import torch, scipy.sparse as sp, sparsad.torch as st
    >>> spmv = st.compile_program("sum(<i, r> in A) { i -> sum(<j, a> in r) a * x(j) }", out_format="dense")
    >>> A = st.SparseMatrix.from_scipy(sp.eye(2, format="csr") * 2.0, requires_grad=True)
    >>> spmv(A=A, x=torch.ones(2, dtype=torch.float64))
    tensor([2., 2.], dtype=torch.float64, grad_fn=<_ProgramFunctionBackward>)
    """
    return TorchProgram(prog, wrt, out_format)
