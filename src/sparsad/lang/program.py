"""`Program`: a parsed, type-checked tensor program that can be called on inputs.

>>> import numpy as np
>>> dot = Program.from_text("sum(<i, a> in V1) a * V2(i)")
>>> dot(V1=np.array([1.0, 2.0]), V2=np.array([3.0, 4.0]))
11.0
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from sparsad.errors import (InputError, OptionError, ProgramError, ProgramTypeError, check_option,
                            did_you_mean)
from sparsad.lang.functions import FUNCTIONS
from sparsad.lang import values as V
from sparsad.lang.interpret import evaluate
from sparsad.lang.parse import check_depth, parse
from sparsad.lang.printer import to_text
from sparsad.lang.syntax import Expr, Lookup, Var, free_vars, walk
from sparsad.lang.typecheck import infer, value_type
from sparsad.lang.types import (DENSE_AUTO_LIMIT, Bool, Dict, Int, Real, Type, Zero, extents, parse_type,
                                tensor_order)

OUT_FORMATS = ("natural", "dense", "csr", "csc", "coo", "dict", "value")


def bind_inputs(names: Sequence[str], args: tuple, inputs: dict[str, Any], what: str = "the program") -> dict[str, Any]:
    """Positional arguments bound to `names` (a program's `inputs`, sorted) in order, merged with the
    keyword inputs: the one calling convention of programs, compiled programs and derivatives.

    >>> bind_inputs(["A", "x"], (1.0,), {"x": 2.0})
    {'A': 1.0, 'x': 2.0}
    """
    if not args:
        return inputs
    for position, value in enumerate(args):
        if isinstance(value, str):  # options used to come first: prog("dense", ...) is now an error
            raise InputError(f"positional argument {position} of {what} is the string {value!r}; inputs are "
                             f"arrays or numbers, in the order {list(names)}, and options are keyword-only "
                             f"(for example out_format={value!r})")
    if len(args) > len(names):
        raise InputError(f"{what} takes {len(names)} input(s) {list(names)}, in that order, but "
                         f"{len(args)} were given by position")
    bound = dict(zip(names, args))
    twice = [name for name in inputs if name in bound]
    if twice:
        raise InputError(f"input {twice[0]!r} was given both by position and by keyword; {what} reads "
                         f"{list(names)}, in that order")
    bound.update(inputs)
    return bound


class Program:
    """A program of the language; `prog(*inputs, **inputs)` runs it with the reference interpreter.

    Inputs go by keyword or by position in `prog.inputs` order (sorted names); options such as
    `out_format` are keyword-only.

    >>> import numpy as np
    >>> scale = Program.from_text("sum(<i, a> in V) { i -> s * a }")
    >>> scale.inputs
    ['V', 's']
    >>> scale(np.array([1.0, 2.0]), 3.0)
    array([3., 6.])
    >>> scale(V=np.array([1.0, 2.0]), s=3.0, out_format="dict")
    {0: 3.0, 1: 6.0}
    """

    def __init__(self, expr: Expr, types: Mapping[str, Type | str] | None = None,
                 source: str | None = None):
        if not isinstance(expr, Expr):
            raise ProgramTypeError(f"Program takes a syntax tree, got {type(expr).__name__}")
        check_depth(expr)  # every later pass recurses over the tree
        self.expr = expr
        self.source = source
        self.declared = {name: parse_type(t) if isinstance(t, str) else t
                         for name, t in (types or {}).items()}
        unknown = set(self.declared) - set(self.inputs)
        if unknown:
            raise InputError(f"types were declared for {sorted(unknown)}, which the program does "
                             f"not use; its inputs are {self.inputs}")
        if set(self.declared) == set(self.inputs):
            self.type = infer(self.expr, self.declared)  # fully declared: check now

    @classmethod
    def from_text(cls, text: str, types: Mapping[str, Type | str] | None = None) -> "Program":
        return cls(parse(text), types, source=text)

    @property
    def inputs(self) -> list[str]:
        """The names the program reads, sorted (computed once per expression: every call binds
        its arguments to them)."""
        known = self.__dict__.get("_inputs_of")
        if known is None or known[0] is not self.expr:
            known = self._inputs_of = (self.expr, tuple(sorted(free_vars(self.expr))))
        return list(known[1])

    def text(self) -> str:
        return to_text(self.expr)

    def __str__(self) -> str:
        return self.text()

    def __repr__(self) -> str:
        one_line = " ".join(self.text().split())
        if len(one_line) > 70:
            one_line = one_line[:67] + "..."
        return f"Program({one_line!r}, inputs={self.inputs})"

    def show(self, stage: str = "source") -> str:
        """The program at a stage of the pipeline, as text ("source" here; later stages add more)."""
        if stage != "source":
            raise OptionError(f"unknown stage {stage!r}; this program has only 'source' (compile it "
                              f"with sparsad.compile to see the later stages)")
        return self.text()

    def infer_type(self, **input_types: Type | str) -> Type:
        types = dict(self.declared)
        types.update({k: parse_type(t) if isinstance(t, str) else t for k, t in input_types.items()})
        return infer(self.expr, types)

    def _input_names(self) -> frozenset[str]:
        """`inputs` as a set, computed once: a program's names never change (checked on every call)."""
        names = self.__dict__.get("_input_name_set")
        if names is None:
            names = self._input_name_set = frozenset(self.inputs)
        return names

    def _check_inputs(self, inputs: Mapping[str, Any]) -> None:
        names = self._input_names()
        if len(inputs) == len(names) and all(n in names for n in inputs):
            return
        missing = [n for n in self.inputs if n not in inputs]
        extra = [n for n in inputs if n not in self.inputs]
        misspelt = unknown_function(self.expr, missing)
        if misspelt is not None:
            raise misspelt
        if missing:
            hint = did_you_mean(missing[0], extra) if extra else ""
            raise InputError(f"missing input(s) {missing}; the program reads {self.inputs}{hint}")
        if extra:
            raise InputError(f"unexpected input(s) {extra}; the program reads {self.inputs}")

    def run(self, *args: Any, **inputs: Any) -> Any:
        """The raw interpreter value (numbers and nested dicts).

        >>> Program.from_text("sum(<i, a> in V) { i -> a * a }").run({0: 2.0, 3: 1.0})
        {0: 4.0, 3: 1.0}
        """
        inputs = bind_inputs(self.inputs, args, inputs)
        self._check_inputs(inputs)
        return evaluate(self.expr, inputs, check_shapes=True)

    def __call__(self, *args: Any, out_format: str = "natural", **inputs: Any) -> Any:
        """Run on inputs (by position in `inputs` order, or by keyword); return a float, a numpy
        array, a scipy.sparse matrix or a nested dict (`out_format`: one of OUT_FORMATS)."""
        check_option(out_format, OUT_FORMATS, "out_format")
        inputs = bind_inputs(self.inputs, args, inputs)
        self._check_inputs(inputs)
        types = {name: value_type(value) for name, value in inputs.items()}
        types.update(self.declared)
        result_type = infer(self.expr, types)
        value = evaluate(self.expr, inputs, check_shapes=True)
        if out_format == "value":
            return value
        from sparsad.formats.natural import natural_result  # results in the kind of the inputs

        return natural_result(keep_float32(to_natural(value, result_type, out_format), inputs), inputs, out_format)


def keep_float32(result: Any, inputs: Mapping[str, Any]) -> Any:
    """An array result (ndarray, scipy matrix, StoredTensor, or a tuple of them) in float32 when
    every real array input is float32, as compiled kernels give it: interpreted and compiled
    calls of a program or derivative return one dtype."""
    if isinstance(result, tuple):
        return tuple(keep_float32(part, inputs) for part in result)
    dtype = getattr(result, "dtype", None)
    if dtype is None or getattr(dtype, "kind", "") != "f" or dtype == np.float32:
        return result
    reals = [getattr(v, "dtype", None) for v in inputs.values() if not isinstance(v, (int, float))]
    reals = [d for d in reals if d is not None and getattr(d, "kind", "") == "f"]
    if not reals or any(d != np.float32 for d in reals):
        return result
    from sparsad.formats import StoredTensor
    from sparsad.formats.pattern import with_values

    if isinstance(result, StoredTensor):
        return with_values(result, result.values.astype(np.float32))
    astype = getattr(result, "astype", None)
    return astype(np.float32) if astype is not None else result


def unknown_function(expr: Expr, names) -> ProgramError | None:
    """A missing input applied like a function whose name is close to a built-in one (`expp(a)`)
    is a misspelt function: the error says so, at the call, with the nearest name."""
    for node in walk(expr):
        if isinstance(node, Lookup) and isinstance(node.dict, Var) and node.dict.name in names:
            hint = did_you_mean(node.dict.name, FUNCTIONS)
            if hint:
                span = node.dict.span
                return ProgramError(f"unknown function {node.dict.name!r}{hint}",
                                    span.line if span else None, span.column if span else None)
    return None


def to_natural(value: Any, result_type: Type, out_format: str = "natural") -> Any:
    """Convert an interpreter value of the given type to a float, array, sparse matrix or dict."""
    if isinstance(result_type, Real):
        return float(V.as_number(value))
    if isinstance(result_type, Int):
        return int(V.as_number(value))
    if isinstance(result_type, Bool):
        return bool(value) if not isinstance(value, dict) else False
    if isinstance(result_type, Zero):
        return 0.0 if not isinstance(value, dict) or not value else value
    order = tensor_order(_leaves_as_real(result_type))
    if out_format == "dict" or order is None or order == 0:
        return value
    shape = _shape(value, result_type, order)
    if out_format == "natural" and order >= 3:
        # as compiled code (codegen.outputs, output="auto"): from the type's extents, not the values
        known = [e for e in extents(_leaves_as_real(result_type))[:order] if e is not None]
        if len(known) < order:
            return value
        # a big one as a COO StoredTensor (sparse, as the compiled kernel assembles it)
        out_format = "dense" if float(np.prod(known, dtype=np.float64)) <= DENSE_AUTO_LIMIT else "coo"
    if out_format == "natural":
        stored = _count_leaves(value)
        full = 1
        for extent in shape:
            full *= extent
        out_format = "dense" if order == 1 or stored == full else "csr"
    from sparsad.formats import from_logical

    return from_logical(value, shape, out_format)


def _leaves_as_real(t: Type) -> Type:
    if isinstance(t, Dict):
        return Dict(t.key, _leaves_as_real(t.value))
    return Real() if isinstance(t, (Int, Real)) else t


def _shape(value: Any, result_type: Type, order: int) -> tuple[int, ...]:
    """Extents from the type where known, else one past the largest key seen."""
    seen = [0] * order

    def visit(v, depth):
        if depth == order or not isinstance(v, dict):
            return
        for key, item in v.items():
            seen[depth] = max(seen[depth], key + 1)
            visit(item, depth + 1)

    visit(value, 0)
    shape, t = [], result_type
    for depth in range(order):
        extent = t.key.extent if isinstance(t, Dict) else None
        shape.append(max(extent, seen[depth]) if extent is not None else seen[depth])
        t = t.value if isinstance(t, Dict) else t
    return tuple(shape)


def _count_leaves(value: Any) -> int:
    if isinstance(value, dict):
        return sum(_count_leaves(v) for v in value.values())
    return 1


def program(source: "str | Expr | Program", types: Mapping[str, Type | str] | None = None) -> Program:
    """Make a Program from text, a builder expression, or an existing Program.

    >>> program("s * V").inputs
    ['V', 's']
    """
    if isinstance(source, Program):
        return source if types is None else Program(source.expr, types, source.source)
    if isinstance(source, str):
        return Program.from_text(source, types)
    if isinstance(source, Expr):
        return Program(source, types)
    raise ProgramTypeError(f"program() takes text, an expression or a Program, got {type(source).__name__}")
