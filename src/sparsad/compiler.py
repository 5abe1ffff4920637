"""`sparsad.compile`: a program plus the storage formats of its inputs becomes a Numba kernel.

    text/tree -> (derivative) -> opt.pipeline (sparsity, storage, fuse, eqsat, normalize, dps, cse)
              -> codegen (loop IR -> Python -> numba.njit) -> kernel(physical arrays)

Kernels are cached per (program, formats, dtypes). A program that code generation cannot
handle runs the optimized physical program in the interpreter, and a program the optimizer fails
on runs as written in the interpreter; both with a `FallbackWarning` naming the program and why.
"""
from __future__ import annotations

import threading
import warnings
from typing import Any, Mapping

import numpy as np

from sparsad.errors import (FallbackWarning, InputError, InternalError, OptionError, ProgramTypeError, SparsadError,
                            UnsupportedError, check_option, did_you_mean)
from sparsad.fastcall import MISS, RepeatCall
from sparsad.formats import StoredTensor, as_format
from sparsad.formats.format import csf
from sparsad.formats.levels import Singleton
from sparsad.formats.natural import natural_result
from sparsad.lang.fold import fold_exponents
from sparsad.lang.interpret import evaluate
from sparsad.lang.keyranges import check_lookups, key_checks
from sparsad.lang.printer import to_text
from sparsad.lang.program import OUT_FORMATS, Program, bind_inputs, keep_float32, program as make_program, \
    to_natural
from sparsad.lang.syntax import Expr
from sparsad.lang.typecheck import infer, value_type
from sparsad.lang.types import Dict, extents
from sparsad.opt.interchange import compute_derived, derivation_spec, derived_types
from sparsad.opt.pipeline import OPTIONAL_PASSES, optimize
from sparsad.opt.storage import physical_inputs

STAGES = ("source", "sparsity", "storage", "fuse", "aggregate", "eqsat", "normalize", "fuse-normalized", "dps",
          "cse", "hoist", "stored_rows", "positions", "interchange", "optimized", "physical", "code")


def _default_format(value: Any) -> str | None:
    """The storage format an input keeps when the caller names none."""
    if type(value) is np.ndarray:  # the common case first (this runs on every call)
        return "dense" if value.ndim >= 1 else None
    import scipy.sparse as sp

    if isinstance(value, StoredTensor):
        return None
    if sp.issparse(value):
        return {"csr": "csr", "csc": "csc", "coo": "coo"}.get(value.format, "csr")
    if isinstance(value, np.ndarray) and value.ndim >= 1:
        return "dense"
    if hasattr(value, "shape") and hasattr(value, "dtype") and getattr(value, "ndim", 0) >= 1:
        return None  # torch / pydata: as_format picks the natural one
    return None


class CompiledProgram(Program):
    """A program that runs as a compiled kernel on its inputs' own storage formats (made by
    `sparsad.compile`); called like any program, and `.show(stage)` prints each stage.

    >>> import numpy as np, scipy.sparse as sp
    >>> row_sums = CompiledProgram("sum(<i, r> in A) { i -> sum(<j, a> in r) a }")
    >>> row_sums(sp.csr_matrix(np.array([[1.0, 2.0], [0.0, 3.0]])))
    array([3., 3.])
    >>> "def " in row_sums.show("code")
    True
    """

    def __init__(self, expr_source: "Program | str | Expr", formats: Mapping[str, str] | None = None,
                 output: str = "auto", build=None, passes=OPTIONAL_PASSES, label: str | None = None,
                 extra_inputs: tuple[str, ...] = (), dense_like: str | None = None):
        base = make_program(expr_source)
        # a derivative on the pattern of input `dense_like`: a dense ndarray when that input is dense
        self.dense_like = dense_like
        self.extra_inputs = tuple(extra_inputs)  # a derivative's tangent or cotangent
        self.label = label or f"program `{_short(base.text())}`"  # names the program in warnings
        self.base = base
        self.expr = base.expr
        self.source = base.source
        self.declared = dict(base.declared)
        self.formats = dict(formats or {})
        self.output = output
        unknown = sorted(set(passes) - OPTIONAL_PASSES)
        if unknown:  # the user's option: an error now, not an "optimizer failed" fallback later
            raise OptionError(f"passes={unknown} names no optional pass; choose from {sorted(OPTIONAL_PASSES)}"
                              f"{did_you_mean(unknown[0], OPTIONAL_PASSES)}")
        self.passes = frozenset(passes)
        self._build = build  # types -> logical expr (derivatives build per input types)
        # a program's own value follows the interpreter's rule (a full matrix is dense); a
        # derivative's type is fixed by types and formats (`ad.api.Derivative._natural_format`)
        self._full_as_dense = build is None
        self._plans: dict[tuple, dict] = {}
        from sparsad.codegen.reuse import ConversionCache

        self._conversions = ConversionCache()  # unchanged inputs are converted once
        self._signatures: dict[tuple, dict] = {}  # cheap per-call signature -> its plan
        self._bound_inputs: dict[str, tuple] = {}  # see _bound
        self._reordered_arrays: dict[str, tuple] = {}  # see _reordered
        self._formats: list = []
        self._last: dict | None = None
        # the plan of this thread's last call (`ran_plan`): `_last` may be another thread's meanwhile
        self._this_thread = threading.local()
        self._repeat = None  # fastcall.RepeatCall: the last compiled call, for calls like it

    @property
    def inputs(self) -> list[str]:
        return sorted(set(self.base.inputs) | set(self.extra_inputs)) if self.extra_inputs else self.base.inputs

    def store(self, inputs: Mapping[str, Any]) -> tuple[dict[str, StoredTensor], dict[str, Any]]:
        """Split inputs into stored tensors (in their formats) and scalars."""
        stored, scalars = {}, {}
        for name, value in inputs.items():
            kind = type(value)
            if kind is float or kind is int:  # the common cases first (this runs on every call)
                scalars[name] = value
            elif isinstance(value, (bool, int, float, np.generic)):
                scalars[name] = value.item() if isinstance(value, np.generic) else value
            elif isinstance(value, dict):
                raise UnsupportedError(f"input {name!r} is a nested dict; compiled programs take arrays, "
                                       "scipy.sparse matrices or formats (use interpret=True for dicts)")
            else:
                stored[name] = self._store_one(name, value)
        return stored, scalars

    def _store_one(self, name: str, value: Any) -> StoredTensor:
        """One array input in its storage format (an unchanged one converted once: codegen.reuse)."""
        if type(value) is StoredTensor or isinstance(value, StoredTensor):
            if name not in self.formats and not _needs_levels(value):
                return value
        # keyed by the format asked for: the default one follows from the object's type
        asked = self.formats.get(name)
        return self._conversions.stored(name, value, asked, lambda v=value, f=asked, n=name:
                                        _iterable(as_format(v, f or _default_format(v), name=n), n))

    def _bound(self, name: str, tensor: StoredTensor) -> tuple:
        """(tensor, its part of the call signature, its physical arrays), remembered for the last
        tensor of each name: an unchanged input costs a lookup (the arrays are the tensor's own:
        changes in place are seen by the kernel and its guard)."""
        memo = self._bound_inputs.get(name)
        if memo is None or memo[0] is not tensor:
            memo = self._bound_inputs[name] = (tensor, (name, id(tensor.format), tensor.shape, tensor.values.dtype),
                                               tensor.physical_arrays(name))
        return memo

    @staticmethod
    def _same_pattern(a: StoredTensor, b: StoredTensor) -> bool:
        """`_same_pattern`, for fastcall (which cannot import this module at its top)."""
        return _same_pattern(a, b)

    def _reordered(self, name: str, value: Any, tensor: StoredTensor) -> dict[str, Any]:
        """The physical arrays of input `name` in row order (`_row_order`): converted once per
        unchanged input (the conversion cache fingerprints the user's object: index arrays
        always, values since the copy does not share them)."""
        value = value if _source_object(value) else tensor
        stored = self._conversions.stored(name + "\0rows", value, "rows", lambda: _row_order(tensor, name))
        memo = self._reordered_arrays.get(name)
        if memo is None or memo[0] is not stored:
            memo = self._reordered_arrays[name] = (stored, stored.physical_arrays(name))
        return memo[1]

    def plan(self, inputs: Mapping[str, Any]) -> dict:
        """The plan (optimized program, kernel, stages) for these inputs' formats and types."""
        return self._planned(inputs)[0]

    def _planned(self, inputs: Mapping[str, Any]) -> tuple[dict, dict, dict]:
        """(plan, what this call runs it on, the stored inputs as `_bound` bound them by name): the
        kernel's arrays, or the inputs themselves when the optimizer failed. The arrays and bound
        forms are returned, not stored in the plan that every call (and thread) shares, so that no
        call can run on (or record) another's arrays."""
        stored, scalars = self.store(inputs)
        # the plan depends on the inputs' formats, shapes, dtypes and scalar types only: a cheap
        # signature of those finds it without re-deriving the logical types (per-call overhead)
        # (formats by identity: hashing a format's levels costs more; `_formats` keeps them alive)
        bound = [self._bound(n, s) for n, s in stored.items()]
        shared = _shared_patterns(stored)
        signature = (tuple(b[1] for b in bound), tuple((n, type(v)) for n, v in scalars.items()), shared)
        plan = self._signatures.get(signature)
        if plan is None:  # the plan of these types and formats (hashing them costs per call: once)
            self._formats.extend(s.format for s in stored.values())
            logical_types = {n: t.logical_type() for n, t in stored.items()}
            logical_types.update({n: value_type(v) for n, v in scalars.items()})
            key = (tuple(sorted((n, t, tuple(extents(t))) for n, t in logical_types.items())),
                   tuple(sorted((n, s.format.describe(), str(s.values.dtype)) for n, s in stored.items())), shared)
            if key not in self._plans:
                dense = self.dense_like in stored and stored[self.dense_like].format.is_dense
                self._plans[key] = self._make_plan(logical_types, stored, dense, shared)
            plan = self._signatures[signature] = self._plans[key]
        self._check_keys(plan, inputs)
        if plan["physical"] is None:  # the optimizer failed: the logical program runs on the inputs
            self._last = self._this_thread.plan = plan
            return plan, dict(inputs), {}
        arrays = dict(scalars)
        reorder = plan["reorder"]
        for b in bound:
            if not reorder or b[1][0] not in reorder:
                arrays.update(b[2])
        for name in reorder:  # read in row order: the input's row-order copy, made once
            arrays.update(self._reordered(name, inputs[name], stored[name]))
        for name in plan["unread"]:  # index arrays of an input read by position (shared pattern)
            arrays.pop(name, None)
        if plan["derived"]:
            derived = compute_derived(plan["derived"], arrays)
            arrays.update({name: array for name, array in derived.items() if name in plan["derived_read"]})
        self._last = self._this_thread.plan = plan
        return plan, arrays, {b[1][0]: b for b in bound}

    def ran_plan(self) -> dict | None:
        """The plan of the calling thread's last call (what made the result it just got)."""
        return getattr(self._this_thread, "plan", None)

    def _check_keys(self, plan: dict, inputs: Mapping[str, Any]) -> None:
        """The interpreter's ShapeError when a lookup of the program (for a derivative: of the
        primal, where the derivative is defined) reads outside an input's axis; compiled code
        would read a zero there. Free unless a key's interval may leave its axis."""
        if not plan["key_checks"]:
            return
        doubt = check_lookups(self.base.expr, plan["key_checks"], inputs)
        if doubt and not plan.get("warned_keys"):
            plan["warned_keys"] = True
            warnings.warn(f"sparsad.compile: {self.label}: {doubt[0].message()}; each call checks the "
                          "program's lookups in the interpreter before the kernel runs", FallbackWarning,
                          stacklevel=4)

    def _make_plan(self, logical_types: dict, stored: dict, dense: bool = False, shared: tuple = ()) -> dict:
        """Optimize and generate code for one signature of the inputs (types, formats, dtypes).
        `dense`: the result is dense (a derivative w.r.t. a dense input) and becomes an ndarray."""
        logical = (self._build(logical_types, dense) if dense else self._build(logical_types)) \
            if self._build else self.expr
        logical = fold_exponents(logical)  # `pow(s, 1.0 / 3.0)`: passes must not name the exponent
        result_type = infer(logical, logical_types)  # the user's type errors surface here
        # an extent the types leave to a value (a range to `k`) is None: the kernel sizes that mode
        # by its keys written, per call, as the interpreter does; the others are the type's
        shape = tuple(extents(result_type)) if isinstance(result_type, Dict) else None
        dense = dense and isinstance(result_type, Dict) and len(extents(result_type)) == stored[self.dense_like].ndim
        if dense:  # a derivative on the pattern of a dense input has that input's shape
            shape = tuple(stored[self.dense_like].shape)
        output = "dense" if dense and self.output == "auto" else self.output
        if output == "auto" and _on_entries_of(self.dense_like, stored, result_type):
            output = "entries"  # a derivative on the pattern of an n-d sparse input: its values array
        base_types = {n: t for n, t in logical_types.items() if n in self.base._input_names()}
        plan = dict(logical=logical, physical=None, stages={}, kernel=None, result_type=result_type,
                    key_checks=key_checks(self.base.expr, base_types),
                    shape=shape if shape is None or None not in shape else None, reason=None, derived=(), reorder=(), unread=(), shared=shared, natural="dense" if output == "dense" else "natural")
        try:
            # interchange makes rows of a sparse result come out in order; a dense result is
            # written in place at any key, and the transposed pattern would cost O(nnz) per call
            passes = self.passes - {"interchange"} if output == "dense" else self.passes
            physical, stages = optimize(logical, logical_types, stored, passes, where=f" on {self.label}")
            # an input the program reads in an order its storage does not give (a CSC read by
            # rows, a COO by nested levels) keeps its definition, a transposition built per call
            # in hash maps: such inputs are reordered once per unchanged input (`_reordered`)
            reorder = tuple(name for name in sorted(stored) if _read_out_of_order(physical, name, stored[name]))
            if reorder:
                stored = {**stored, **{name: _row_order(stored[name], name) for name in reorder}}
                physical, stages = optimize(logical, logical_types, stored, passes, where=f" on {self.label}")
                plan["reorder"] = reorder
            if shared:  # inputs with one pattern: the second is read at the first's positions
                physical, plan["unread"] = _read_shared_by_position(physical, stored, shared)
                stages = {**stages, "positional": physical}
            _, array_types = physical_inputs(stored)
            physical_types = {**{n: t for n, t in logical_types.items() if n not in stored}, **array_types}
            derived = derivation_spec(physical, physical_types)  # arrays `interchange` reads
            read = derived_types(physical, physical_types)  # of a transposed pattern, only what is read
            physical_types.update(read)
        except Exception as error:  # noqa: BLE001 - an optimizer fault must not become the user's error
            plan["reason"] = f"the optimizer failed: {type(error).__name__}: {error}"
            self._fall_back(plan["reason"], "the program as written")
            return plan
        plan.update(physical=physical, stages=stages, derived=derived, derived_read=frozenset(read))
        try:
            from sparsad.codegen import compile_physical

            plan["kernel"] = compile_physical(physical, physical_types, output=output, shape=shape)
            if output == "entries" and not _follows_entries(plan["kernel"], self.dense_like, stored):
                plan["kernel"] = compile_physical(physical, physical_types, output="auto", shape=shape)
        except Exception as error:  # noqa: BLE001
            # the logical program type-checked above: an internal or type error of the physical
            # program is our fault, not the user's; their input and memory errors go to them
            if isinstance(error, SparsadError) and not isinstance(error, (UnsupportedError, InternalError,
                                                                          ProgramTypeError)):
                raise
            plan["reason"] = str(error) if isinstance(error, UnsupportedError) else \
                f"code generation failed: {type(error).__name__}: {error}"
            self._fall_back(plan["reason"], "the optimized program")
        return plan

    def _fall_back(self, reason: str, what: str, stacklevel: int = 5) -> None:
        warnings.warn(f"sparsad.compile: {self.label} runs {what} in the interpreter, not as a compiled "
                      f"kernel ({_short(reason, 300)})", FallbackWarning, stacklevel=stacklevel)

    def __call__(self, *args: Any, out_format: str = "natural", **inputs: Any) -> Any:
        """Run the kernel on inputs given by position (in `inputs` order) or by keyword."""
        if args:
            inputs = bind_inputs(self.inputs, args, inputs)
        return self.call(inputs, out_format)

    def call(self, inputs: dict[str, Any], out_format: str = "natural") -> Any:
        """`__call__` on a dict of inputs by name. A call like the last compiled one (same names
        in the same order, same kinds, shapes and dtypes) skips the plan lookup (`fastcall`)."""
        if out_format == "natural" and self._repeat is not None:
            result = self.repeat(inputs)
            if result is not MISS:
                return result
        check_option(out_format, OUT_FORMATS, "out_format")
        self._check_inputs(inputs)
        plan, arrays, bound = self._planned(inputs)
        if plan["kernel"] is not None:
            try:
                result = plan["kernel"].run(arrays)
            except UnsupportedError as error:  # Numba could not compile the kernel: an internal
                plan["kernel"] = None  # limit, not the user's error; this plan runs interpreted
                plan["reason"] = str(error)
                self._repeat = None
                self._fall_back(plan["reason"], "the optimized program", stacklevel=4)
            else:
                if out_format == "natural":
                    self._repeat = RepeatCall.record(self, inputs, plan, bound)
                    if self._full_as_dense:
                        result = full_as_dense(result)
                return natural_result(_convert(result, plan, out_format), inputs, out_format)
        if plan["physical"] is None:
            value = evaluate(plan["logical"], arrays)
        else:
            value = evaluate(plan["physical"], arrays)
        asked = out_format
        if out_format == "natural":
            out_format = plan["natural"]
        if out_format == "dense" and plan["natural"] == "dense" and plan["shape"] is not None:
            # a derivative w.r.t. a dense input has that input's shape, as the kernel's would
            # (not the hull of the keys the interpreter happened to write)
            from sparsad.formats import from_logical

            return natural_result(keep_float32(from_logical(value, plan["shape"], "dense"), inputs), inputs, asked)
        return value if out_format == "value" else \
            natural_result(keep_float32(to_natural(value, plan["result_type"], out_format), inputs), inputs, asked)

    def repeat(self, inputs: Mapping[str, Any]) -> Any:
        """`call(inputs)` when the inputs match the last compiled call (`fastcall.RepeatCall`): the
        result in the natural format; else MISS (nothing was run, and the full path must be taken)."""
        repeat = self._repeat
        if repeat is None:
            return MISS
        found = repeat.arrays(self, inputs)
        if found is MISS:
            return MISS
        arrays, prepared, proofs = found
        plan = repeat.plan
        kernel = plan["kernel"]
        if kernel is None:
            self._repeat = None
            return MISS
        if plan["key_checks"]:
            self._check_keys(plan, inputs)
        if plan["derived"]:
            derived = compute_derived(plan["derived"], arrays)
            arrays.update({name: array for name, array in derived.items() if name in plan["derived_read"]})
        self._last = self._this_thread.plan = plan
        try:
            if prepared:  # as `prepare` returned them on the first repeat (fastcall.RepeatCall.settle)
                # the guard's answer, reused when nothing it reads can have changed (RepeatCall.passed)
                result = kernel.run_prepared(arrays, dtype=repeat.dtype, passed=repeat.passed(kernel, arrays, proofs))
            else:
                prepared = kernel.prepare(arrays)
                if repeat.dtype is None:
                    repeat.settle(self, kernel, arrays, prepared)
                result = kernel.run_prepared(prepared, dtype=repeat.dtype)
        except UnsupportedError:  # the full path reports it (and runs the plan interpreted)
            self._repeat = None
            return MISS
        if self._full_as_dense:
            result = full_as_dense(result)
        if repeat.kind is None and not (repeat.dense and hasattr(result, "tocsr")):
            return result  # what natural_result returns for these kinds of inputs
        return natural_result(result, inputs, "natural")

    def show(self, stage: str = "code") -> str:
        """A stage of the last compilation: any pass name, "optimized"/"physical", or "code"."""
        if stage == "source":
            return self.base.text()
        if self._last is None:
            raise InputError("call the compiled program once (the plan depends on the inputs' "
                             "formats), then show its stages")
        if stage == "code":
            kernel = self._last["kernel"]
            return kernel.source if kernel is not None else f"# interpreted: {self._last['reason']}"
        if stage in ("optimized", "physical"):
            return to_text(self._last["physical"] if self._last["physical"] is not None else self._last["logical"])
        if stage == "derivative":
            return to_text(self._last["logical"])
        if stage in self._last["stages"]:
            return to_text(self._last["stages"][stage])
        raise OptionError(f"unknown stage {stage!r}; use one of {STAGES}{did_you_mean(stage, STAGES)}")

    def __repr__(self) -> str:
        return f"CompiledProgram({self.base!r}, formats={self.formats}, output={self.output!r})"


def _on_entries_of(name: str | None, stored: Mapping[str, StoredTensor], result_type) -> bool:
    """Whether a derivative on the pattern of input `name` may be written into that input's
    values array (`codegen.outputs`, output "entries"): an order-3+ input stored in CSF (an n-d
    COO is iterated as its CSF), whose entries are unique, and a result of the input's order."""
    tensor = stored.get(name) if name is not None else None
    if tensor is None or tensor.ndim < 3 or tensor.format != csf(tensor.ndim):
        return False
    return isinstance(result_type, Dict) and len(extents(result_type)) == tensor.ndim


def _follows_entries(kernel, name: str, stored: Mapping[str, StoredTensor]) -> bool:
    """Whether an "entries" kernel writes on the levels of input `name` itself (its count,
    coordinate and position arrays, level by level), not on other arrays of that shape."""
    plan = kernel.plan
    if plan.kind != "entries":
        return True  # "auto" decided: nothing to check
    external = kernel._external  # kernel parameter -> the physical input's name
    entries = plan.entries
    tensor = stored[name]
    if isinstance(entries.count, int):
        if entries.count != int(tensor["len"]):
            return False
    elif external.get(entries.count) != f"{name}_len":
        return False
    arrays = [(None, entries.root_crd), *entries.levels]
    wanted = [(None, f"{name}_idx0"), *((f"{name}_pos{d}", f"{name}_idx{d}") for d in range(1, tensor.ndim))]
    if len(arrays) != len(wanted):
        return False
    return all((pos is None or external.get(pos) == want_pos) and external.get(crd) == want_crd
               for (pos, crd), (want_pos, want_crd) in zip(arrays, wanted))


def _needs_levels(tensor: StoredTensor) -> bool:
    """True for an n-d COO (order >= 3): code generation iterates it through its CSF form."""
    return tensor.ndim >= 3 and any(isinstance(level, Singleton) for level in tensor.format.levels)


def _iterable(tensor: StoredTensor, name: str) -> StoredTensor:
    """The tensor in a format whose levels loops can walk one mode at a time: an n-d COO becomes
    CSF (O(nnz), once per unchanged input); every other format is kept."""
    return as_format(tensor, "csf", name=name) if _needs_levels(tensor) else tensor


def _out_of_order_format(tensor: StoredTensor) -> bool:
    """A sparse format whose levels do not hold the logical modes in order, one entry per key
    path (CSC, column-major, COO with its repeated row level and singleton column level)."""
    fmt = tensor.format
    return not fmt.is_dense and (fmt.mode_order != tuple(range(len(fmt.levels))) or any(
        isinstance(level, Singleton) or not level.unique for level in fmt.levels))


def _read_out_of_order(physical: Expr, name: str, tensor: StoredTensor) -> bool:
    """Whether the optimized program still builds input `name` from its definition (no loop
    was fused onto its storage): for an out-of-order format that is a transposition or
    grouping into nested hash maps on every call."""
    if not _out_of_order_format(tensor):
        return False
    from sparsad.lang.names import alpha_equal
    from sparsad.lang.syntax import walk

    definition = tensor.physical_definition(name)
    return any(type(e) is type(definition) and alpha_equal(e, definition) for e in walk(physical))


def _shared_patterns(stored: Mapping[str, StoredTensor]) -> tuple[tuple[str, str], ...]:
    """(second, first) for each sparse input whose pattern (format, shape and every index
    array) equals an earlier input's, e.g. a tangent of a matrix: checked on every call, since
    the plan reads the second input at the first's positions. O(nnz) comparisons, often none
    (same arrays)."""
    pairs: list[tuple[str, str]] = []
    names = sorted(n for n, t in stored.items() if not t.format.is_dense and t.nnz > 0)
    for k, second in enumerate(names):
        for first in names[:k]:
            if _same_pattern(stored[first], stored[second]):
                pairs.append((second, first))
                break
    return tuple(pairs)


def _same_pattern(a: StoredTensor, b: StoredTensor) -> bool:
    from sparsad.codegen.reuse import same_contents

    if a.format is not b.format and a.format != b.format or a.shape != b.shape:
        return False
    values = a.values
    for field, x in a.fields.items():
        y = b[field]
        if x is values or x is y:
            continue
        if isinstance(x, np.ndarray):
            if not (isinstance(y, np.ndarray) and x.shape == y.shape and same_contents(x, y)):
                return False
        elif x != y:
            return False
    return True


def _read_shared_by_position(physical: Expr, stored: Mapping[str, StoredTensor],
                             shared: tuple[tuple[str, str], ...]) -> tuple[Expr, tuple[str, ...]]:
    """The physical program with each second input's index arrays renamed to the first's (equal
    on this call), then lookups of the second at the first's keys read by position
    (`opt.positional`); also the renamed arrays, which the kernel no longer takes."""
    from sparsad.lang.rebuild import substitute
    from sparsad.lang.syntax import Var, free_vars
    from sparsad.opt.positional import read_by_position

    unread = []
    for second, first in shared:
        if stored[second].format != stored[first].format:  # one of them was reordered: layouts differ
            continue
        ours, theirs = stored[second].physical_arrays(second), stored[first].physical_arrays(first)
        values = stored[second].values
        for (name, array), (other, _) in zip(ours.items(), theirs.items()):
            if array is not values and name in free_vars(physical):
                physical = substitute(physical, name, Var(other))
                unread.append(name)
    return read_by_position(physical), tuple(unread)


def _row_order(tensor: StoredTensor, name: str) -> StoredTensor:
    """The tensor stored in the logical order of its modes: CSR for a matrix, CSF above
    (O(nnz) for a CSC; a sort for a COO). Same entries, same logical value."""
    return as_format(tensor, "csr" if tensor.ndim == 2 else "csf", name=name)


def _source_object(value: Any) -> bool:
    """Whether the conversion cache can fingerprint `value` itself (scipy, numpy, StoredTensor)."""
    from sparsad.codegen.reuse import source_arrays

    return source_arrays(value) is not None


def _short(text: str, limit: int = 60) -> str:
    """One line of at most `limit` characters, for warnings."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[:limit - 1] + "…"


def full_as_dense(result: Any) -> Any:
    """A program's sparse matrix result with every entry stored, as an ndarray: the interpreter's
    natural rule (`lang.program.to_natural`: a full result is dense), so that compiled and
    interpreted calls return one type (an SpMM whose rows are all reached is an ndarray both ways).
    Derivatives keep their own rule (`ad.api.Derivative._natural_format`: by types, not values)."""
    nnz = getattr(result, "nnz", None)
    if nnz is None or getattr(result, "ndim", 0) != 2 or not hasattr(result, "toarray"):
        return result
    rows, columns = result.shape
    return result.toarray() if nnz == rows * columns else result


def _convert(result: Any, plan: dict, out_format: str) -> Any:
    import scipy.sparse as sp

    if out_format in ("natural", "value") or result is None:
        return result
    if isinstance(result, StoredTensor):  # an order-3+ result (a COO, or on an input's entries)
        if out_format == "dense":
            return result.to_numpy()  # sized by the memory guard
        return result.to_logical() if out_format == "dict" else as_format(result, out_format)
    if out_format == "dense":
        if sp.issparse(result):
            from sparsad.memory import check_allocation, dense_bytes

            check_allocation(dense_bytes(result.shape, result.dtype.itemsize),
                             f"out_format='dense' of a {result.shape[0]} x {result.shape[1]} result",
                             "ask for out_format='csr' (or 'coo', 'natural') instead", stacklevel=4)
            return result.toarray()
        return np.asarray(result)
    if out_format in ("csr", "csc", "coo"):
        matrix = result if sp.issparse(result) else sp.coo_matrix(np.asarray(result))
        return matrix.asformat(out_format)
    if out_format == "dict":
        from sparsad.lang.values import from_input

        return from_input(result)
    raise OptionError(f"unknown out_format {out_format!r}{did_you_mean(out_format, OUT_FORMATS)}")


def compile(program: "Program | str | Expr", formats: Mapping[str, str] | None = None,  # noqa: A001
            output: str = "auto", passes=OPTIONAL_PASSES) -> CompiledProgram:
    """Compile a program for its inputs' storage formats.

    >>> import numpy as np, scipy.sparse as sp
    >>> spmv = compile("sum(<i, r> in A) { i -> sum(<j, a> in r) a * x(j) }")
    >>> A = sp.identity(3, format="csr") * 2.0
    >>> spmv(A=A, x=np.ones(3))
    array([2., 2., 2.])
    """
    return CompiledProgram(program, formats, output, passes=passes)
