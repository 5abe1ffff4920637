"""The differentiation API: grad, jacobian, jvp, vjp, and the `gradient` macro of ∇SD Fig. 7.

Each returns a `Derivative`, a Program that is called like any program and shown with
`.show("derivative")`. The derivative program is built for the input types (inferred at call
time, declared, or guessed from the program) and cached per type signature.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

from sparsad.ad.forward import forward, tangent_name, tensorized
from sparsad.ad.guess import guess_types
from sparsad.ad.reverse import reverse
from sparsad.errors import InputError, OptionError, ProgramTypeError, UnsupportedError, check_option
from sparsad.lang import values as V
from sparsad.lang.build import lookups, over_levels, singletons
from sparsad.lang.interpret import evaluate
from sparsad.lang.keyranges import check_lookups, key_checks
from sparsad.lang.printer import to_text
from sparsad.formats.natural import natural_result
from sparsad.lang.program import Program, program as make_program, to_natural
from sparsad.lang.syntax import Const, EmptyDict, Expr, Let, LetTuple, Sum, Var
from sparsad.lang.typecheck import infer, value_type
from sparsad.lang.types import Dict, Real, Type, Zero, extents, tensor_order, type_to_text
from sparsad.opt.dce import eliminate_dead_lets
from sparsad.opt.inline import inline_atoms

MODES = ("auto", "reverse", "tensorized", "forward")


# -- Fig. 7: zero, onehot and the gradient macro ------------------------------------------------

def zero(_type: Type) -> Expr:
    """zero[D]: `{}` is the zero of every type."""
    return EmptyDict()


def onehot(order: int, x: Expr) -> Expr:
    """onehot[tensor n] x: {i1 -> ... {in -> {i1 -> ... {in -> 1}}}} over the entries of x."""
    if order == 0:
        return Const(1.0)
    keys = [f"i{k + 1}" for k in range(order)]
    values = [f"v{k + 2}" for k in range(order - 1)] + ["_"]
    return over_levels(x, keys, values, lambda ks, _: singletons(ks, Const(1.0)), interleave=True)


def gradient(expr: Expr, wrt: str, types: Mapping[str, Type]) -> Expr:
    """`gradient e x` (Fig. 7): let <v1', ...> = <ingrad v1 x, ...> in D_τ[e], with τ the type of x."""
    tau = types[wrt]
    names = sorted(set(types) & _free(expr))
    tangents = [onehot(_order(tau), Var(wrt)) if n == wrt else zero(types[n]) for n in names]
    body = tensorized(expr, tau, types)
    for name, value in reversed(list(zip(names, tangents))):
        body = Let(tangent_name(name), value, body)
    return body


def mask_to_pattern(adjoint: Expr, x: str, order: int) -> Expr:
    """The adjoint read on x's own entries only: the masked gradient convention."""
    if order == 0:
        return adjoint
    keys = [f"m{k + 1}" for k in range(order)]
    values = [f"mv{k + 1}" for k in range(order - 1)] + ["_"]
    whole = f"{x}_adjoint"  # computed once, then read on the pattern
    return Let(whole, adjoint, over_levels(Var(x), keys, values, lambda ks, _: lookups(Var(whole), ks),
                                           interleave=True))


def only_iterated(expr: Expr, name: str, order: int) -> bool:
    """True when every use of `name` (and, level by level, of the values read from it) is as
    the source of a sum: the adjoint then lives on name's pattern without masking."""
    from sparsad.lang.syntax import Var, walk

    if order == 0:
        return True
    uses = [n for n in walk(expr) if isinstance(n, Var) and n.name == name]
    sums = [n for n in walk(expr) if isinstance(n, Sum) and n.source == Var(name)]
    if len(uses) != len(sums) or _rebinds(expr, name):
        return False
    return all(s.val == "_" or only_iterated(s.body, s.val, order - 1) for s in sums)


def _rebinds(expr: Expr, name: str) -> bool:
    from sparsad.lang.syntax import walk

    for node in walk(expr):
        if isinstance(node, Sum) and name in (node.key, node.val):
            return True
        if isinstance(node, Let) and node.name == name:
            return True
        if isinstance(node, LetTuple) and name in node.names:
            return True
    return False


def _free(expr: Expr) -> set[str]:
    from sparsad.lang.syntax import free_vars

    return set(free_vars(expr))


def _order(t: Type) -> int:
    order = tensor_order(t)
    if order is None:
        order = 0
        while isinstance(t, Dict):
            order, t = order + 1, t.value
    return order


# -- Derivative programs --------------------------------------------------------------------------

class Derivative(Program):
    """A derivative of a program: call it on the primal's inputs (plus a tangent or cotangent)."""

    def __init__(self, primal: Program, wrt: tuple[str, ...], kind: str, mode: str,
                 seed_name: str | None = None, interpret: bool = True):
        if mode not in MODES:
            check_option(mode, MODES, "mode")
        unknown = [w for w in wrt if w not in primal.inputs]
        if unknown:
            raise InputError(f"wrt={unknown} names no input of the program; its inputs are {primal.inputs}")
        if not wrt:
            raise InputError("wrt is empty; name at least one input to differentiate with respect to")
        self.primal = primal
        self.wrt = wrt
        self.kind = kind
        self.mode = mode
        self.seed_name = seed_name
        self.declared = dict(primal.declared)
        self.source = None
        self.interpret = interpret
        from sparsad.opt.pipeline import OPTIONAL_PASSES

        self.formats: dict[str, str] = {}
        self.output = "auto"
        self.passes = OPTIONAL_PASSES
        self._cache: dict[tuple, dict[str, Expr]] = {}
        self._compiled: dict[str, Any] = {}

    # Program interface
    @property
    def inputs(self) -> list[str]:
        extra = [self.seed_name] if self.seed_name else []
        return sorted(set(self.primal.inputs) | set(extra))

    @property
    def expr(self) -> Expr:
        if len(self.wrt) != 1:
            raise ValueError(f"this derivative has one program per input {list(self.wrt)}; use .exprs()")
        return self.exprs()[self.wrt[0]]

    def exprs(self, types: Mapping[str, Type] | None = None) -> dict[str, Expr]:
        """The derivative program per wrt name, for the given (else declared or guessed) input types."""
        if types is None:
            types = guess_types(self.primal.expr, self.declared)
        key = tuple(sorted((n, t) for n, t in types.items() if n in self.primal.inputs))
        if key not in self._cache:
            self._cache[key] = {w: self._build(w, dict(key)) for w in self.wrt}
        return self._cache[key]

    def text(self) -> str:
        parts = self.exprs()
        if len(parts) == 1:
            return to_text(next(iter(parts.values())))
        return "\n\n".join(f"# d/d{name}\n{to_text(e)}" for name, e in parts.items())

    def show(self, stage: str = "derivative") -> str:
        """"source", "derivative", or (compiled, after a call) any stage of `sparsad.compile`."""
        if stage == "source":
            return self.primal.text()
        if stage == "derivative":
            return self.text()
        if self._compiled:
            return "\n\n".join(c.show(stage) for c in self._compiled.values())
        raise OptionError(f"unknown stage {stage!r}; use 'source' or 'derivative' "
                         "(compiled derivatives show more stages after their first call)")

    def _compiled_for(self, wrt: str):
        from sparsad.compiler import CompiledProgram

        if wrt not in self._compiled:
            from sparsad.compiler import _short

            label = f"{self.kind} w.r.t. {wrt} of `{_short(self.primal.text())}`"
            self._compiled[wrt] = CompiledProgram(self.primal, formats=self.formats, output=self.output,
                                                  passes=self.passes, label=label,
                                                  extra_inputs=(self.seed_name,) if self.seed_name else (),
                                                  dense_like=wrt if self.kind in ("grad", "vjp", "jacobian") else None,
                                                  build=lambda types, dense=False, w=wrt: self._build(w, types, dense))
        return self._compiled[wrt]

    def compiled(self, formats=None, output: str = "auto", passes=None) -> "Derivative":
        """The same derivative compiled with named input formats, output kind or passes."""
        from sparsad.opt.pipeline import OPTIONAL_PASSES

        twin = Derivative(self.primal, self.wrt, self.kind, self.mode, self.seed_name, interpret=False)
        twin.formats, twin.output = dict(formats or {}), output
        twin.passes = frozenset(OPTIONAL_PASSES if passes is None else passes)
        return twin

    def __repr__(self) -> str:
        return f"Derivative({self.kind}, wrt={list(self.wrt)}, mode={self.resolved_mode()!r}, of {self.primal!r})"

    # building
    def output_type(self, types: Mapping[str, Type]) -> Type:
        return infer(self.primal.expr, types)

    def resolved_mode(self, types: Mapping[str, Type] | None = None) -> str:
        if self.kind in ("jvp", "vjp"):
            return {"jvp": "forward", "vjp": "reverse"}[self.kind]
        if self.mode != "auto":
            return self.mode
        try:
            out = self.output_type(types or guess_types(self.primal.expr, self.declared))
        except Exception:
            return "tensorized" if self.kind == "jacobian" else "reverse"
        # the Jacobian of a scalar program is its gradient: one reverse pass, not one per entry
        return "reverse" if isinstance(out, (Real, Zero)) else "tensorized"

    def _build(self, wrt: str, types: dict[str, Type], dense_wrt: bool = False) -> Expr:
        """The derivative program w.r.t. `wrt`. `dense_wrt`: wrt is stored dense, so its pattern is
        every entry and the adjoint needs no masking (it then accumulates straight into the result)."""
        expr = self.primal.expr
        mode = self.resolved_mode(types)
        if self.kind == "jvp" or mode == "forward":
            body = _bind_tangent(forward(expr), wrt, self.seed_name)
            for name in sorted(n for n in types if n != wrt):
                body = Let(tangent_name(name), zero(types[name]), body)
            return body
        if self.kind == "vjp" or mode == "reverse":
            out = self.output_type(types)
            if self.kind != "vjp" and not isinstance(out, (Real, Zero)):
                raise UnsupportedError(f"reverse mode needs a scalar output, this program returns "
                                       f"{type_to_text(out)}; use jacobian(...) or vjp(...)")
            seed: Expr = Var(self.seed_name) if self.kind == "vjp" else Const(1.0)
            all_types = dict(types)
            if self.kind == "vjp":
                all_types[self.seed_name] = out
            try:
                adjoint = reverse(expr, wrt, seed, all_types)
            except (ProgramTypeError, UnsupportedError):
                if not (self.kind == "jacobian" and self.mode == "auto"):
                    raise
                return gradient(expr, wrt, types)  # what reverse mode cannot take, forward mode may
            if dense_wrt or only_iterated(expr, wrt, _order(types[wrt])):
                return eliminate_dead_lets(inline_atoms(adjoint))  # already on wrt's pattern
            return eliminate_dead_lets(inline_atoms(mask_to_pattern(adjoint, wrt, _order(types[wrt]))))
        if mode == "tensorized":
            return gradient(expr, wrt, types)
        check_option(mode, MODES, "mode")

    # running
    def __call__(self, out_format: str = "natural", **inputs: Any) -> Any:
        self._check_inputs(inputs)
        primal_names = self.primal._input_names()
        primal_inputs = {k: v for k, v in inputs.items() if k in primal_names}
        results = {}
        # every kind compiles but grad/jacobian in mode="forward" (one interpreted pass per direction)
        by_directions = self.kind in ("grad", "jacobian") and self.mode == "forward"
        if not self.interpret and not by_directions:
            call_inputs = dict(primal_inputs)
            if self.seed_name:
                call_inputs[self.seed_name] = inputs[self.seed_name]
            try:
                results = {w: natural_result(self._shaped_zero(self._compiled_for(w)(out_format=out_format,
                                                                                     **call_inputs),
                                                               w, inputs, out_format), inputs, out_format)
                           for w in self.wrt}
                return results[self.wrt[0]] if len(self.wrt) == 1 else results
            except ProgramTypeError as error:
                # the user's own type errors first; otherwise the derivative program we built does
                # not type-check for the compiler (an internal fault): the interpreter runs it
                infer(self.primal.expr, {**{n: value_type(v) for n, v in primal_inputs.items()}, **self.declared})
                self._warn_fallback(f"the derivative program does not type-check for compilation ({error})")
        elif not self.interpret:
            self._warn_fallback("mode='forward' makes one pass per entry of the input; use the default "
                                "mode to compile")
        types = {name: value_type(value) for name, value in primal_inputs.items()}
        types.update(self.declared)
        # the derivative is defined where the program is: a lookup outside an input's shape is
        # the ShapeError `program(...)(...)` raises (the derivative program may not read that key)
        check_lookups(self.primal.expr, key_checks(self.primal.expr, types), primal_inputs)
        for wrt, expr in self.exprs(types).items():
            if self.kind != "jvp" and self.resolved_mode(types) == "forward":
                value, result_type = self._forward_by_directions(expr, wrt, inputs, types)
            else:
                env_types = dict(types)
                if self.seed_name:
                    env_types[self.seed_name] = value_type(inputs[self.seed_name])
                if self.kind == "jvp":
                    env_types[tangent_name(wrt) if self.seed_name is None else self.seed_name] = types[wrt]
                value = evaluate(expr, inputs, check_shapes=True)
                result_type = _result_type(expr, env_types, self.output_type(types), types[wrt], self.kind)
            # per input: the natural format of one wrt is not another's
            form = self._natural_format(wrt, inputs, result_type) if out_format == "natural" else out_format
            results[wrt] = value if form == "value" else natural_result(
                self._shaped_zero(to_natural(value, result_type, form), wrt, inputs, form), inputs, out_format)
        return results[self.wrt[0]] if len(self.wrt) == 1 else results

    def _warn_fallback(self, why: str) -> None:
        import warnings

        from sparsad.compiler import _short
        from sparsad.errors import FallbackWarning

        warnings.warn(f"sparsad: {self.kind} of `{_short(self.primal.text())}` runs in the interpreter, not "
                      f"as a compiled kernel: {_short(why, 300)}", FallbackWarning, stacklevel=3)

    def _shaped_zero(self, result: Any, wrt: str, inputs: Mapping[str, Any], out_format: str) -> Any:
        """A gradient or vjp that is identically zero comes back as the zero of wrt's type: zeros
        of its shape (dense) or on its pattern (sparse), the type a non-zero one has, not 0.0."""
        if out_format == "value":
            return result
        if self.kind in ("jvp", "jacobian"):
            if self.kind == "jacobian" and getattr(result, "shape", None) == getattr(inputs.get(wrt), "shape", 0):
                return result  # a scalar program's Jacobian, already shaped like wrt (no pass over it)
            return self._zero_output(result, wrt, inputs, out_format) if _is_zero(result) else result
        value = inputs.get(wrt)
        shape = getattr(value, "shape", None)  # the cheap test first: this runs on every call
        if shape is None or len(shape) == 0 or getattr(result, "shape", None) == shape or not _is_zero(result):
            return result
        import numpy as np

        from sparsad.formats import StoredTensor

        dense = isinstance(value, np.ndarray) or (isinstance(value, StoredTensor) and value.format.is_dense)
        if dense and out_format in ("natural", "dense"):
            dtype = np.float32 if getattr(value, "dtype", None) == np.float32 else np.float64
            return np.zeros(tuple(shape), dtype)
        zeros = _zero_leaves(V.from_input(value, wrt, shapes=False))
        wrt_type = value_type(value)
        if out_format == "natural":
            out_format = "csr" if len(shape) == 2 else "natural"
        return to_natural(zeros, wrt_type, out_format)

    def _zero_output(self, result: Any, wrt: str, inputs: Mapping[str, Any], out_format: str) -> Any:
        """A zero jvp (the output's type) or Jacobian (output ⊗ wrt) with the shape its types give."""
        names = self.primal._input_names()
        types = {name: value_type(value) for name, value in inputs.items() if name in names}
        types.update(self.declared)
        out = self.output_type(types)
        full = out if self.kind == "jvp" else _tensor_product_type(out, types[wrt])
        shape = extents(full)
        order = tensor_order(_real_leaves(full))
        if not order or len(shape) != order or any(e is None for e in shape) or \
                getattr(result, "shape", None) == tuple(shape):
            return result
        if out_format == "natural":
            out_format = "csr" if order == 2 else "natural"
        return to_natural({}, full, out_format)

    def _natural_format(self, wrt: str, inputs: Mapping[str, Any], result_type: Type) -> str:
        """The output type the compiled derivative gives, decided by types and formats, never by
        values: a gradient or vjp w.r.t. a dense input is an ndarray; other matrices are CSR."""
        import numpy as np

        from sparsad.formats import StoredTensor

        value = inputs.get(wrt)
        dense = isinstance(value, np.ndarray) or (isinstance(value, StoredTensor) and value.format.is_dense)
        if self.kind in ("grad", "vjp") and dense:
            return "dense"
        if self.kind == "jacobian" and dense and tensor_order(result_type) == len(getattr(value, "shape", ())):
            return "dense"  # the Jacobian of a scalar program: shaped like wrt, as its gradient
        if self.kind in ("grad", "vjp", "jvp") and tensor_order(result_type) == 2:
            return "csr"
        return "natural"

    def _forward_by_directions(self, expr, wrt, inputs, types):
        """Scalar forward mode, one pass per entry of wrt (n passes: for testing and small inputs)."""
        x = V.from_input(inputs[wrt], wrt)
        order = _order(types[wrt])
        result: Any = V.ZERO
        env = {k: V.from_input(v, k) for k, v in inputs.items()}
        for path in _entry_paths(x, order):
            direction: Any = 1.0
            for key in reversed(path):
                direction = {key: direction}
            env[tangent_name(wrt)] = direction
            column = evaluate(expr, env, check_shapes=True)
            result = V.add(result, _attach(column, path))
        out = self.output_type(types)
        return result, _tensor_product_type(out, types[wrt])


def _real_leaves(t: Type) -> Type:
    return Dict(t.key, _real_leaves(t.value)) if isinstance(t, Dict) else Real()


def _is_zero(result: Any) -> bool:
    """Whether a derivative's value is zero everywhere (a number, dict, array or sparse matrix)."""
    if isinstance(result, dict):
        return all(_is_zero(v) for v in result.values())
    if isinstance(result, (int, float)):
        return result == 0
    data = getattr(result, "data", None) if hasattr(result, "tocoo") else result
    try:
        import numpy as np

        return not np.any(np.asarray(data))
    except Exception:  # noqa: BLE001 - not a numeric value: keep it as it is
        return False


def _zero_leaves(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _zero_leaves(v) for k, v in value.items()}
    return 0.0


def _bind_tangent(body: Expr, wrt: str, seed_name: str | None) -> Expr:
    """Zero tangents for every input but wrt, whose tangent is the input `seed_name` (if named)."""
    if seed_name and seed_name != tangent_name(wrt):
        body = Let(tangent_name(wrt), Var(seed_name), body)
    return body


def _result_type(expr: Expr, env_types: dict, out: Type, wrt_type: Type, kind: str) -> Type:
    if kind == "jvp":
        return out
    if kind == "vjp":
        return wrt_type
    try:
        full = dict(env_types)
        return infer(expr, full)
    except Exception:
        return _tensor_product_type(out, wrt_type)


def _tensor_product_type(a: Type, b: Type) -> Type:
    if isinstance(a, Dict):
        return Dict(a.key, _tensor_product_type(a.value, b))
    return b


def _entry_paths(value: Any, order: int, prefix: tuple = ()):
    if order == 0:
        yield prefix
        return
    for key, item in value.items():
        yield from _entry_paths(item, order - 1, prefix + (key,))


def _attach(value: Any, path: tuple) -> Any:
    """Put `path` below the output's own indices: the D ⊗ τ layout of a Jacobian."""
    if isinstance(value, dict) and value and not _is_leafless(value):
        return {k: _attach(v, path) for k, v in value.items()}
    leaf = V.as_number(value) if not isinstance(value, dict) or not value else value
    for key in reversed(path):
        leaf = {key: leaf}
    return leaf


def _is_leafless(value: dict) -> bool:
    return False


def _names(wrt: str | Iterable[str]) -> tuple[str, ...]:
    return (wrt,) if isinstance(wrt, str) else tuple(wrt)


def grad(prog: "Program | str", wrt: str | Iterable[str], mode: str = "auto",
         interpret: bool = False) -> Derivative:
    """The gradient of a scalar program w.r.t. one or more inputs (masked to sparse inputs' patterns).

    Compiled to a kernel for the inputs' formats on first call; `interpret=True` runs the
    derivative program in the reference interpreter instead.

    >>> import numpy as np
    >>> g = grad("sum(<i, a> in V1) a * V2(i)", wrt="V2")
    >>> g(V1=np.array([1.0, 2.0]), V2=np.array([3.0, 4.0]))
    array([1., 2.])
    """
    return Derivative(make_program(prog), _names(wrt), "grad", mode, interpret=interpret)


def jacobian(prog: "Program | str", wrt: str | Iterable[str], mode: str = "auto",
             interpret: bool = False) -> Derivative:
    """The Jacobian, laid out as output indices then input indices (D ⊗ τ), by tensorized forward mode."""
    return Derivative(make_program(prog), _names(wrt), "jacobian", mode, interpret=interpret)


def jvp(prog: "Program | str", wrt: str, tangent: str | None = None, interpret: bool = False) -> Derivative:
    """Forward mode along one direction: call with the inputs plus the tangent (default name `wrt'`).

    Compiled like `grad`; `interpret=True` runs the derivative program in the interpreter.

    >>> import numpy as np
    >>> f = jvp("sum(<i, a> in V1) a * V2(i) * V2(i)", wrt="V2", tangent="dV2")
    >>> float(f(V1=np.array([1.0, 2.0]), V2=np.array([3.0, 4.0]), dV2=np.array([1.0, 0.0])))
    6.0
    """
    return Derivative(make_program(prog), (wrt,), "jvp", "forward", tangent or tangent_name(wrt),
                      interpret=interpret)


def vjp(prog: "Program | str", wrt: str, cotangent: str = "cotangent", interpret: bool = False) -> Derivative:
    """Reverse mode from an output cotangent: call with the inputs plus `cotangent`.

    Compiled like `grad`; `interpret=True` runs the derivative program in the interpreter.

    >>> import numpy as np
    >>> f = vjp("sum(<i, a> in V) { i -> a * a }", wrt="V")
    >>> f(V=np.array([1.0, 2.0]), cotangent=np.array([1.0, 10.0]))
    array([ 2., 40.])
    """
    return Derivative(make_program(prog), (wrt,), "vjp", "reverse", cotangent, interpret=interpret)
