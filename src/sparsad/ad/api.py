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
from sparsad.errors import (InputError, OptionError, ProgramTypeError, ShapeError, SparsadError, UnsupportedError,
                            check_option, did_you_mean)
from sparsad.lang import values as V
from sparsad.lang.build import lookups, over_levels, singletons
from sparsad.lang.interpret import evaluate
from sparsad.lang.keyranges import check_lookups, key_checks
from sparsad.lang.printer import to_text
from sparsad.fastcall import MISS as _REPEAT_MISS
from sparsad.formats.natural import natural_result
from sparsad.formats.pattern import on_pattern
from sparsad.formats.tensor import StoredTensor
from sparsad.lang.names import all_names
from sparsad.lang.program import OUT_FORMATS, Program, bind_inputs, keep_float32, program as make_program, \
    to_natural
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

SEED_KEYWORDS = {"jvp": "tangent", "vjp": "cotangent"}  # the call keyword of each kind's seed
_MISSING = object()


class Derivative(Program):
    """A derivative of a program, called like the program: inputs by position (in `inputs` order)
    or by keyword, options keyword-only. A jvp also takes `tangent=`, a vjp `cotangent=`.

    What a call returns: grad, jacobian and vjp the derivative (one array for one `wrt`, a dict by
    name for a list of names, a tuple for a sequence of `argnums`); jvp `(primal, tangent)` (only
    the tangent when built with `with_primal=False`); value_and_grad `(value, gradient)`.

    >>> import numpy as np, sparsad
    >>> d = sparsad.grad("sum(<i, a> in V) a * a", wrt="V", interpret=True)
    >>> d.inputs
    ['V']
    >>> d(np.array([1.0, 2.0]))
    array([2., 4.])
    """

    def __init__(self, primal: Program, wrt: tuple[str, ...], kind: str, mode: str,
                 seed_name: str | None = None, interpret: bool = True, returns: str | None = None,
                 with_value: bool = False):
        if mode not in MODES:
            check_option(mode, MODES, "mode")
        unknown = [w for w in wrt if w not in primal.inputs]
        if unknown:
            raise InputError(f"wrt={unknown} names no input of the program; its inputs are {primal.inputs}")
        if not wrt:
            raise InputError("wrt is empty; name at least one input to differentiate with respect to")
        if seed_name is not None and kind == "jvp" and len(wrt) != 1:
            raise OptionError("a named tangent input serves one wrt input; pass tangent={name: direction} instead")
        self.primal = primal
        self.wrt = tuple(wrt)
        self.kind = kind
        self.mode = mode
        # the seed's input name inside the derivative programs: one per wrt (jvp) or shared (vjp);
        # `seed_name` (the bridges', or a deprecated user-chosen one) is also accepted as a keyword
        self.seed_name = seed_name
        self.seed_names = _seed_names(primal, self.wrt, kind, seed_name)
        self.returns = returns or ("single" if len(self.wrt) == 1 else "dict")
        self.with_value = with_value
        self.declared = dict(primal.declared)
        self.source = None
        self.interpret = interpret
        from sparsad.opt.pipeline import OPTIONAL_PASSES

        self.formats: dict[str, str] = {}
        self.output = "auto"
        self.passes = OPTIONAL_PASSES
        self._cache: dict[tuple, dict[str, Expr]] = {}
        self._compiled: dict[str, Any] = {}
        self._compiled_primal = None
        # per wrt: (the compiled plan of the last call, the result's type and shape under it)
        self._layouts: dict[str, tuple] = {}

    # Program interface
    @property
    def inputs(self) -> list[str]:
        """The primal's inputs, in the order positional arguments bind to them (the tangent or
        cotangent is passed by keyword)."""
        return self.primal.inputs

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
        compiled = self._compiled.get(wrt)
        if compiled is not None:  # (this runs on every call: no import statement before it)
            return compiled
        if wrt not in self._compiled:
            from sparsad.compiler import CompiledProgram, _short

            label = f"{self.kind} w.r.t. {wrt} of `{_short(self.primal.text())}`"
            self._compiled[wrt] = CompiledProgram(self.primal, formats=self.formats, output=self.output,
                                                  passes=self.passes, label=label,
                                                  extra_inputs=(self.seed_names[wrt],) if self.seed_names else (),
                                                  dense_like=wrt if self.kind in ("grad", "vjp", "jacobian") else None,
                                                  build=lambda types, dense=False, w=wrt: self._build(w, types, dense))
        return self._compiled[wrt]

    def compiled(self, formats=None, output: str = "auto", passes=None) -> "Derivative":
        """The same derivative compiled with named input formats, output kind or passes."""
        from sparsad.opt.pipeline import OPTIONAL_PASSES

        twin = Derivative(self.primal, self.wrt, self.kind, self.mode, self.seed_name, interpret=False,
                          returns=self.returns, with_value=self.with_value)
        twin.formats, twin.output = dict(formats or {}), output
        twin.passes = frozenset(OPTIONAL_PASSES if passes is None else passes)
        return twin

    def __repr__(self) -> str:
        kind = "value_and_grad" if self.with_value and self.kind == "grad" else self.kind
        return f"Derivative({kind}, wrt={list(self.wrt)}, mode={self.resolved_mode()!r}, of {self.primal!r})"

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
        if self.kind == "grad":
            out = self.output_type(types)
            if not isinstance(out, (Real, Zero)):
                raise ShapeError(f"grad needs a program with a scalar output; this one's output has type "
                                 f"{type_to_text(out)}. Use sparsad.jacobian(...) for its full derivative, or "
                                 "sparsad.vjp(...) for a vector-Jacobian product")
        mode = self.resolved_mode(types)
        if self.kind == "jvp" or mode == "forward":
            body = _bind_tangent(forward(expr), wrt, self.seed_names.get(wrt))
            for name in sorted(n for n in types if n != wrt):
                body = Let(tangent_name(name), zero(types[name]), body)
            return body
        if self.kind == "vjp" or mode == "reverse":
            out = self.output_type(types)
            if self.kind != "vjp" and not isinstance(out, (Real, Zero)):
                raise UnsupportedError(f"reverse mode needs a scalar output, this program returns "
                                       f"{type_to_text(out)}; use jacobian(...) or vjp(...)")
            seed: Expr = Var(self.seed_names[wrt]) if self.kind == "vjp" else Const(1.0)
            all_types = dict(types)
            if self.kind == "vjp":
                all_types[self.seed_names[wrt]] = out
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
    def __call__(self, *args: Any, out_format: str = "natural", **inputs: Any) -> Any:
        """Run on the primal's inputs (by position in `inputs` order, or by keyword), plus
        `tangent=` (jvp) or `cotangent=` (vjp); see the class docstring for what comes back."""
        if out_format == "natural":
            bound: dict | None = inputs
            if args:  # bound as the full path binds them (its errors are its own: raised there)
                try:
                    bound = bind_inputs(self.primal.inputs, args, dict(inputs), f"this {self.kind}")
                except SparsadError:
                    bound = None
            result = self._repeat_call(bound) if bound is not None else _MISSING
            if result is not _MISSING:
                return result
        check_option(out_format, OUT_FORMATS, "out_format")
        seeds = self._take_seeds(inputs)
        inputs = bind_inputs(self.primal.inputs, args, inputs, f"this {self.kind}")
        self._check_inputs(inputs)
        results = self._derivatives({**inputs, **seeds}, out_format)
        if self.kind == "jvp":
            total = None
            for w in self.wrt:
                if w in results:
                    total = _add_results(total, results[w])
            if not self.with_value:
                return total
            primal = self._primal_value(inputs, out_format)
            return primal, _zero_tangent_shaped_like(primal, total)
        if self.returns == "single":
            derivative = results[self.wrt[0]]
        elif self.returns == "tuple":
            derivative = tuple(results[w] for w in self.wrt)
        else:
            derivative = results
        if self.with_value:
            return self._primal_value(inputs, "natural"), derivative
        return derivative

    def _repeat_call(self, inputs: dict[str, Any]) -> Any:
        """A call like the last compiled one (inputs bound by name), of one wrt input: the compiled program's
        repeated call (`CompiledProgram.repeat`) on the inputs and the seed under its internal name,
        then what `__call__` does to its result; _MISSING when it does not apply (nothing was run,
        `inputs` is as given). The inputs' names are checked by the repeat: the same names, in the
        same order, as the last call, which passed every check of the full path."""
        if self.interpret:
            return _MISSING
        repeatable = self.__dict__.get("_repeatable")
        if repeatable is None:  # one wrt, no user-named seed, compiled: fixed when the derivative is made
            single = len(self.wrt) == 1 and self.seed_name is None and \
                not (self.mode == "forward" and self.kind in ("grad", "jacobian"))
            seed_name = self.seed_names[self.wrt[0]] if single and self.seed_names else None
            repeatable = self._repeatable = (self.wrt[0], SEED_KEYWORDS.get(self.kind), seed_name) if single else ()
        if not repeatable:
            return _MISSING
        wrt, keyword, seed_name = repeatable
        compiled = self._compiled.get(wrt)
        if compiled is None or compiled._repeat is None:
            return _MISSING
        if keyword is not None:
            seed = inputs.get(keyword, _MISSING)
            # a dict of directions by name is unpacked by the full path; a name already taken
            # by the caller is theirs (an unexpected input the full path reports)
            if seed is _MISSING or type(seed) is dict or (seed_name != keyword and seed_name in inputs):
                return _MISSING
            del inputs[keyword]
            inputs[seed_name] = seed  # last, as on the full path
        try:
            result = compiled.repeat(inputs)
        except ProgramTypeError:  # the full path reports it or falls back
            result = _REPEAT_MISS
        if result is _REPEAT_MISS:
            if keyword is not None:
                inputs[keyword] = inputs.pop(seed_name)
            return _MISSING
        if self.kind != "jvp":  # as the full path: on an order-3+ sparse input's entries
            result = self._on_pattern(result, wrt, inputs)
        shaped = self._shaped_zero(result, wrt, inputs, "natural", compiled.ran_plan())
        if shaped is not result:
            shaped = natural_result(shaped, inputs, "natural")
        if self.kind == "jvp":
            if not self.with_value:
                return shaped
            primal = {name: value for name, value in inputs.items() if name != seed_name}
            value = self._primal_value(primal, "natural")
            return value, _zero_tangent_shaped_like(value, shaped)
        derivative = shaped if self.returns == "single" else (shaped,) if self.returns == "tuple" else {wrt: shaped}
        if self.with_value:
            return self._primal_value(inputs, "natural"), derivative
        return derivative

    def _take_seeds(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """Pop the tangent/cotangent keyword (or the seed's own name) from `inputs`; return the
        seed values under their internal input names."""
        keyword = SEED_KEYWORDS.get(self.kind)
        if keyword is None:
            return {}
        value = inputs.pop(keyword, _MISSING)
        if self.seed_name is not None and self.seed_name in inputs and self.seed_name not in self.primal.inputs:
            if value is not _MISSING:
                raise InputError(f"the {keyword} was given twice: as {keyword}= and as {self.seed_name}=")
            value = inputs.pop(self.seed_name)
        if value is _MISSING:
            several = " (a dict {input name: direction} for several wrt inputs)" if len(self.wrt) > 1 else ""
            raise InputError(f"this {self.kind} needs the {keyword}: call it with {keyword}=...{several}, "
                             f"besides the program's inputs {self.primal.inputs}")
        if self.kind == "vjp":
            return {self.seed_names[self.wrt[0]]: value}
        return {self.seed_names[w]: v for w, v in self._tangent_per_input(value).items()}

    def _tangent_per_input(self, value: Any) -> dict[str, Any]:
        """`tangent=` as {wrt name: direction}: one array for one wrt; a dict by name (or position)
        or a sequence in wrt order for several. An input left out of a dict has a zero tangent."""
        if isinstance(value, dict) and value and all(isinstance(k, str) for k in value):
            unknown = [k for k in value if k not in self.wrt]
            if unknown:
                raise InputError(f"tangent names {unknown}, which this jvp does not differentiate; its wrt "
                                 f"inputs are {list(self.wrt)}")
            return dict(value)
        if len(self.wrt) == 1:
            return {self.wrt[0]: value}
        if isinstance(value, (list, tuple)) and len(value) == len(self.wrt):
            return dict(zip(self.wrt, value))
        raise InputError(f"this jvp differentiates {list(self.wrt)}; pass tangent= as a dict {{name: direction}} "
                         f"or a sequence of {len(self.wrt)} directions in that order")

    def _primal_value(self, inputs: Mapping[str, Any], out_format: str) -> Any:
        """The program's own value on `inputs` (compiled like the derivative unless it is interpreted)."""
        if self.interpret:
            return self.primal(out_format=out_format, **inputs)
        if self._compiled_primal is None:
            from sparsad.compiler import CompiledProgram

            self._compiled_primal = CompiledProgram(self.primal, formats=self.formats, output=self.output,
                                                    passes=self.passes)
        return self._compiled_primal(out_format=out_format, **inputs)

    def _derivatives(self, inputs: dict[str, Any], out_format: str) -> dict[str, Any]:
        """The derivative w.r.t. each wrt input (for a jvp, each one with a tangent), by name."""
        primal_names = self.primal._input_names()
        primal_inputs = {k: v for k, v in inputs.items() if k in primal_names}
        active = [w for w in self.wrt if not self.seed_names or self.seed_names[w] in inputs]
        results = {}
        # every kind compiles but grad/jacobian in mode="forward" (one interpreted pass per direction)
        by_directions = self.kind in ("grad", "jacobian") and self.mode == "forward"
        if not self.interpret and not by_directions:
            try:
                for w in active:
                    call_inputs = dict(primal_inputs)
                    if self.seed_names:
                        call_inputs[self.seed_names[w]] = inputs[self.seed_names[w]]
                    compiled = self._compiled_for(w)
                    raw = compiled.call(call_inputs, out_format)
                    if out_format == "natural" and self.kind != "jvp":
                        raw = self._on_pattern(raw, w, inputs)
                    shaped = self._shaped_zero(raw, w, inputs, out_format, compiled.ran_plan())
                    # the compiled call returned `raw` in the kind of these same inputs already
                    same = shaped is raw and len(call_inputs) == len(inputs)
                    results[w] = shaped if same else natural_result(shaped, inputs, out_format)
                return results
            except ProgramTypeError as error:
                # the user's own type errors first; otherwise the derivative program we built does
                # not type-check for the compiler (an internal fault): the interpreter runs it
                infer(self.primal.expr, {**{n: value_type(v) for n, v in primal_inputs.items()}, **self.declared})
                self._warn_fallback(f"the derivative program does not type-check for compilation ({error})")
        types = {name: value_type(value) for name, value in primal_inputs.items()}
        types.update(self.declared)
        # the derivative is defined where the program is: a lookup outside an input's shape is
        # the ShapeError `program(...)(...)` raises (the derivative program may not read that key)
        check_lookups(self.primal.expr, key_checks(self.primal.expr, types), primal_inputs)
        exprs = self.exprs(types)  # the user's errors (a grad of a non-scalar program) before any warning
        if by_directions and not self.interpret:
            self._warn_fallback("mode='forward' makes one pass per entry of the input; use the default "
                                "mode to compile")
        for wrt, expr in exprs.items():
            if wrt not in active:
                continue
            if self.kind != "jvp" and self.resolved_mode(types) == "forward":
                value, result_type = self._forward_by_directions(expr, wrt, inputs, types)
            else:
                env_types = dict(types)
                if self.seed_names:
                    env_types[self.seed_names[wrt]] = value_type(inputs[self.seed_names[wrt]])
                if self.kind == "jvp":
                    env_types[self.seed_names[wrt]] = types[wrt]
                value = evaluate(expr, inputs, check_shapes=True)
                result_type = _result_type(expr, env_types, self.output_type(types), types[wrt], self.kind)
            # per input: the natural format of one wrt is not another's
            fmt = self._natural_format(wrt, inputs, result_type) if out_format == "natural" else out_format
            if fmt == "pattern":  # on the entries of an order-3+ sparse input, in its format
                results[wrt] = natural_result(keep_float32(on_pattern(inputs[wrt], value), inputs), inputs,
                                              out_format)
                continue
            results[wrt] = value if fmt == "value" else natural_result(keep_float32(
                self._shaped_zero(to_natural(value, result_type, fmt), wrt, inputs, fmt), inputs), inputs, out_format)
        return results

    def _warn_fallback(self, why: str) -> None:
        import warnings

        from sparsad.compiler import _short
        from sparsad.errors import FallbackWarning

        warnings.warn(f"sparsad: {self.kind} of `{_short(self.primal.text())}` runs in the interpreter, not "
                      f"as a compiled kernel: {_short(why, 300)}", FallbackWarning, stacklevel=4)

    def _shaped_zero(self, result: Any, wrt: str, inputs: Mapping[str, Any], out_format: str,
                     plan: dict | None = None) -> Any:
        """A gradient or vjp that is identically zero comes back as the zero of wrt's type: zeros
        of its shape (dense) or on its pattern (sparse), the type a non-zero one has, not 0.0.
        `plan`: the compiled plan that made `result` (it fixes the input types, so the result's
        type and shape are worked out once per plan, not per call)."""
        if out_format == "value":
            return result
        if self.kind in ("jvp", "jacobian"):
            if self.kind == "jacobian" and getattr(result, "shape", None) == getattr(inputs.get(wrt), "shape", 0):
                return result  # a scalar program's Jacobian, already shaped like wrt (no pass over it)
            # only a zero result of another shape than its type's is replaced: a result without a
            # full shape to take, or with that shape already, needs no pass over its values
            layout = self._output_layout(wrt, inputs, plan, quiet=True)
            if layout is not None and (layout[1] is None or getattr(result, "shape", None) == layout[1]):
                return result
            if not _is_zero(result):
                return result
            full, shape = layout or self._output_layout(wrt, inputs, None)  # (its type errors, if any)
            if shape is None or getattr(result, "shape", None) == shape:
                return result
            if out_format == "natural":
                out_format = "csr" if len(shape) == 2 else "natural"
            return to_natural({}, full, out_format)
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

    def _output_layout(self, wrt: str, inputs: Mapping[str, Any], plan: dict | None,
                       quiet: bool = False) -> tuple[Type, tuple | None] | None:
        """(type, shape) of a jvp (the output's type) or Jacobian (output ⊗ wrt); the shape is None
        unless every extent is known and the type is a tensor of that order (a zero result is then
        reshaped to it). Remembered for the last compiled plan of each wrt: the plan fixes every
        input's type, hence these. `quiet`: None instead of an error when the types do not infer."""
        remembered = self._layouts.get(wrt)
        if remembered is not None and plan is not None and remembered[0] is plan:
            return remembered[1]
        names = self.primal._input_names()
        types = {name: value_type(value) for name, value in inputs.items() if name in names}
        types.update(self.declared)
        try:
            out = self.output_type(types)
            full = out if self.kind == "jvp" else _tensor_product_type(out, types[wrt])
            shape = extents(full)
            order = tensor_order(_real_leaves(full))
        except Exception:  # noqa: BLE001 - raised again where the shape is needed (a zero result)
            if not quiet:
                raise
            layout = None
        else:
            known = bool(order) and len(shape) == order and all(e is not None for e in shape)
            layout = (full, tuple(shape) if known else None)
        if plan is not None:
            self._layouts[wrt] = (plan, layout)
        return layout

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
        if _sparse_order_3(value) and (self.kind in ("grad", "vjp") or (
                self.kind == "jacobian" and tensor_order(result_type) == len(value.shape))):
            return "pattern"  # a StoredTensor on value's entries, in value's format (formats.pattern)
        if tensor_order(result_type) == 2:  # a compiled matrix result is never dense by itself
            return "csr"
        return "natural"

    def _on_pattern(self, result: Any, wrt: str, inputs: Mapping[str, Any]) -> Any:
        """A compiled gradient, vjp or scalar program's Jacobian w.r.t. an order-3+ sparse
        StoredTensor, on that input's entries in its format, as `_natural_format` says."""
        like = inputs.get(wrt)
        if not _sparse_order_3(like):
            return result
        if self.kind == "jacobian" and getattr(result, "shape", None) != like.shape:
            if not _is_zero(result) or getattr(result, "shape", None) is not None:
                return result  # a Jacobian of a non-scalar program: its own shape
            names = self.primal._input_names()
            types = {n: value_type(v) for n, v in inputs.items() if n in names}
            if not isinstance(self.output_type({**types, **self.declared}), (Real, Zero)):
                return result
        return on_pattern(like, result)

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


def _sparse_order_3(value: Any) -> bool:
    """A StoredTensor of order 3 or more in a sparse format (its derivatives live on its entries)."""
    return isinstance(value, StoredTensor) and value.ndim >= 3 and not value.format.is_dense


def _zero_tangent_shaped_like(primal: Any, tangent: Any) -> Any:
    """A jvp tangent in the kind of its primal. A zero one with another shape than its dense
    primal's (an output whose extent is a value, e.g. a range `(1:k)`, so its type gives no shape):
    zeros of the primal's shape and dtype. A matrix tangent of the primal's shape in the primal's
    kind: an ndarray beside a dense primal (a full matrix, which the program returns dense, while
    the derivative's matrix is CSR by its type), a scipy matrix of the primal's class beside a
    sparse one."""
    import numpy as np

    if isinstance(primal, np.ndarray):
        shape = getattr(tangent, "shape", None)
        if shape != primal.shape and _is_zero(tangent):
            return np.zeros(primal.shape, np.float32 if primal.dtype == np.float32 else np.float64)
        if shape == primal.shape and hasattr(tangent, "tocsr") and primal.ndim == 2:
            return tangent.toarray()
        return tangent
    if isinstance(tangent, np.ndarray) and tangent.ndim == 2 and hasattr(primal, "tocsr") \
            and getattr(primal, "shape", None) == tangent.shape:
        return type(primal)(tangent)
    return tangent


def _is_zero(result: Any) -> bool:
    """Whether a derivative's value is zero everywhere (a number, dict, array or sparse matrix)."""
    if isinstance(result, dict):
        return all(_is_zero(v) for v in result.values())
    if isinstance(result, (int, float)):
        return result == 0
    # scipy keeps its stored values in .data, a StoredTensor (order 3+ results) in .values
    data = getattr(result, "data", None) if hasattr(result, "tocoo") else getattr(result, "values", result)
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


def _seed_names(primal: Program, wrt: tuple[str, ...], kind: str, seed_name: str | None) -> dict[str, str]:
    """The input name each wrt's seed has inside the derivative programs: names no user writes
    (the user passes `tangent=`/`cotangent=`), fresh against every name of the program."""
    if kind not in SEED_KEYWORDS:
        return {}
    taken = set(all_names(primal.expr)) | set(primal.inputs)

    def fresh(base: str) -> str:
        while base in taken:
            base += "_"
        taken.add(base)
        return base

    if kind == "vjp":
        shared = seed_name or fresh("cotangent")
        return {w: shared for w in wrt}
    return {w: seed_name or fresh(f"{w}_tangent") for w in wrt}


def _add_results(total: Any, part: Any) -> Any:
    """The sum of two jvp terms (numbers, arrays, scipy.sparse matrices or nested dicts)."""
    if total is None:
        return part
    if isinstance(total, dict) or isinstance(part, dict):
        return V.add(total, part)
    import scipy.sparse as sp

    if sp.issparse(total) and sp.issparse(part):
        return (total + part).asformat(total.format)
    if sp.issparse(total) or sp.issparse(part):
        import numpy as np

        dense = [x.toarray() if sp.issparse(x) else np.asarray(x) for x in (total, part)]
        return dense[0] + dense[1]
    return total + part


def resolve_wrt(prog: Program, wrt: Any = None, argnums: Any = None,
                what: str = "the derivative") -> tuple[tuple[str, ...], str]:
    """`wrt=` or `argnums=` (input names or positions in `prog.inputs` order) as input names, and
    how results come back: "single" (one name or position), "dict" (a sequence of `wrt`, by name)
    or "tuple" (a sequence of `argnums`, in that order).

    >>> resolve_wrt(make_program("sum(<i, a> in A) a * x(i)"), argnums=(1, 0))
    (('x', 'A'), 'tuple')
    """
    if wrt is not None and argnums is not None:
        raise OptionError(f"{what}: give wrt= or argnums=, not both (both name the inputs to differentiate)")
    names = prog.inputs
    if wrt is None and argnums is None:
        raise InputError(f"{what}: name the input(s) to differentiate with respect to, by name or by position "
                         f"in {names}: wrt={names[0]!r} or argnums=0" if names else
                         f"{what}: the program reads no input, there is nothing to differentiate")
    argument, spec = ("wrt", wrt) if wrt is not None else ("argnums", argnums)
    single = isinstance(spec, (str, int))
    items = (spec,) if single else tuple(spec) if isinstance(spec, (list, tuple)) else None
    if items is None:
        raise OptionError(f"{what}: {argument}= takes an input name or position, or a list or tuple of them; "
                          f"got {type(spec).__name__}")
    if not items:
        raise InputError(f"{what}: {argument}= is empty; name at least one of {names}")
    resolved = []
    for item in items:
        if isinstance(item, bool) or not isinstance(item, (str, int)):
            raise OptionError(f"{what}: {argument}= holds {item!r}; use input names or positions in {names}")
        if isinstance(item, int):
            if not -len(names) <= item < len(names):
                raise InputError(f"{what}: {argument}={item} is out of range; the program reads {len(names)} "
                                 f"input(s) {names}, positions 0..{len(names) - 1}")
            item = names[item]
        elif item not in names:
            raise InputError(f"{what}: {argument}={item!r} names no input of the program; its inputs are "
                             f"{names}{did_you_mean(item, names)}")
        if item in resolved:
            raise InputError(f"{what}: {argument}= names input {item!r} twice")
        resolved.append(item)
    shape = "single" if single else ("tuple" if argument == "argnums" else "dict")
    return tuple(resolved), shape


def grad(prog: "Program | str", wrt: Any = None, *, argnums: Any = None, mode: str = "auto",
         interpret: bool = False) -> Derivative:
    """The gradient of a scalar program w.r.t. inputs named by `wrt` (names or positions in
    `prog.inputs` order) or `argnums`, masked to sparse inputs' patterns.

    Call it like the program. One name or position gives one array; a list of names a dict by
    name; a sequence of `argnums` a tuple. A program with a non-scalar output raises ShapeError
    (use `jacobian` or `vjp`). Compiled to a kernel for the inputs' formats on first call;
    `interpret=True` runs the derivative program in the reference interpreter instead.

    >>> import numpy as np
    >>> g = grad("sum(<i, a> in V1) a * V2(i)", wrt="V2")
    >>> g(V1=np.array([1.0, 2.0]), V2=np.array([3.0, 4.0]))
    array([1., 2.])
    >>> dV1, dV2 = grad("sum(<i, a> in V1) a * V2(i)", argnums=(0, 1))(np.array([1.0, 2.0]), np.array([3.0, 4.0]))
    >>> dV1
    array([3., 4.])
    """
    prog = make_program(prog)
    names, returns = resolve_wrt(prog, wrt, argnums, "grad")
    return Derivative(prog, names, "grad", mode, interpret=interpret, returns=returns)


def value_and_grad(prog: "Program | str", wrt: Any = None, *, argnums: Any = None, mode: str = "auto",
                   interpret: bool = False) -> Derivative:
    """Like `grad`, but a call returns `(value, gradient)`: the program's value and its gradient.

    >>> import numpy as np
    >>> f = value_and_grad("sum(<i, a> in V) a * a", wrt="V")
    >>> value, g = f(np.array([1.0, 2.0]))
    >>> value, g
    (5.0, array([2., 4.]))
    """
    prog = make_program(prog)
    names, returns = resolve_wrt(prog, wrt, argnums, "value_and_grad")
    return Derivative(prog, names, "grad", mode, interpret=interpret, returns=returns, with_value=True)


def jacobian(prog: "Program | str", wrt: Any = None, *, argnums: Any = None, mode: str = "auto",
             interpret: bool = False) -> Derivative:
    """The Jacobian, laid out as output indices then input indices (D ⊗ τ), by tensorized forward
    mode; `wrt`/`argnums` and the results as in `grad`.

    >>> import numpy as np
    >>> J = jacobian("sum(<i, a> in V) { i -> a * a }", wrt="V")
    >>> J(np.array([1.0, 2.0]), out_format="dense")
    array([[2., 0.],
           [0., 4.]])
    """
    prog = make_program(prog)
    names, returns = resolve_wrt(prog, wrt, argnums, "jacobian")
    return Derivative(prog, names, "jacobian", mode, interpret=interpret, returns=returns)


def jvp(prog: "Program | str", wrt: Any = None, tangent: str | None = None, *, argnums: Any = None,
        interpret: bool = False, with_primal: bool = True) -> Derivative:
    """Forward mode: call with the program's inputs and `tangent=` (the direction of the wrt input;
    for several wrt inputs a dict {name: direction}, inputs left out having zero tangent, or a
    sequence in wrt order). A call returns `(primal, tangent)`: the program's value and J·tangent
    (`with_primal=False`: only the tangent, and the program itself is not run).

    Compiled like `grad`; `interpret=True` runs the derivative program in the interpreter.
    (`tangent="name"` here, naming the tangent input, is deprecated: pass `tangent=` at the call.)

    >>> import numpy as np
    >>> f = jvp("sum(<i, a> in V1) a * V2(i) * V2(i)", wrt="V2")
    >>> f(V1=np.array([1.0, 2.0]), V2=np.array([3.0, 4.0]), tangent=np.array([1.0, 0.0]))
    (41.0, 6.0)
    """
    prog = make_program(prog)
    names, _ = resolve_wrt(prog, wrt, argnums, "jvp")
    if tangent is not None:
        _deprecated_seed("jvp", "tangent", tangent)
    return Derivative(prog, names, "jvp", "forward", tangent, interpret=interpret, with_value=with_primal)


def vjp(prog: "Program | str", wrt: Any = None, cotangent: str | None = None, *, argnums: Any = None,
        interpret: bool = False) -> Derivative:
    """Reverse mode from an output cotangent: call with the program's inputs and `cotangent=`
    (shaped like the output); returns cotangent·J per wrt input, as `grad` returns gradients.

    Compiled like `grad`; `interpret=True` runs the derivative program in the interpreter.
    (`cotangent="name"` here, naming the cotangent input, is deprecated: pass `cotangent=` at the call.)

    >>> import numpy as np
    >>> f = vjp("sum(<i, a> in V) { i -> a * a }", wrt="V")
    >>> f(V=np.array([1.0, 2.0]), cotangent=np.array([1.0, 10.0]))
    array([ 2., 40.])
    """
    prog = make_program(prog)
    names, returns = resolve_wrt(prog, wrt, argnums, "vjp")
    if cotangent is not None:
        _deprecated_seed("vjp", "cotangent", cotangent)
        if cotangent == "cotangent":
            cotangent = None
    return Derivative(prog, names, "vjp", "reverse", cotangent, interpret=interpret, returns=returns)


def _deprecated_seed(kind: str, keyword: str, name: Any) -> None:
    import warnings

    if not isinstance(name, str):
        raise OptionError(f"{kind}({keyword}=...) names nothing any more: pass the {keyword} when calling the "
                          f"derivative, f(..., {keyword}=value)")
    warnings.warn(f"sparsad.{kind}(..., {keyword}={name!r}) is deprecated: call the derivative with "
                  f"{keyword}=value instead of {name}=value", DeprecationWarning, stacklevel=3)
