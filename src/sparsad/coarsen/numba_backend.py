"""CPU code generation through Numba: the whole adjoint becomes one compiled function.

Scalars travel unboxed (plain floats, §3's boxing overhead gone) and vectors as NumPy arrays
sharing memory with the torch tensors, so a call costs a few hundred nanoseconds plus the
arithmetic.  The torch splice uses this backend for CPU tensors and keeps the torch-code backend
as the fallback (GPU tensors, or if Numba cannot type a generated function).
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import sympy as sp

from sparsad.coarsen.adjoint import AdjointProgram, _ViewRef
from sparsad.coarsen.codegen import Printer, _key_text, identifier
from sparsad.coarsen.symbolic import GeomSum, GeomSumD, Scatter, VSum, shape_of

_NP = {"exp": "np.exp", "log": "np.log", "sin": "np.sin", "cos": "np.cos", "tan": "np.tan", "tanh": "np.tanh",
       "sinh": "np.sinh", "cosh": "np.cosh", "asin": "np.arcsin", "acos": "np.arccos", "atan": "np.arctan",
       "abs": "np.abs", "sign": "np.sign", "sqrt": "np.sqrt", "log1p": "np.log1p", "expm1": "np.expm1",
       "sigmoid": "_sigmoid", "softplus": "_softplus", "erf": "_erf"}


_FUSIBLE = (sp.Symbol, sp.Number, sp.Add, sp.Mul, sp.Pow, sp.NumberSymbol) + tuple(
    cls for cls in (sp.exp, sp.log, sp.sin, sp.cos, sp.tan, sp.tanh, sp.sinh, sp.cosh, sp.asin, sp.acos, sp.atan,
                    sp.Abs, sp.sign))


class NumbaPrinter(Printer):
    def __init__(self, params: set, shapes: dict):
        super().__init__("numba", params)
        self.shapes = shapes
        self.helpers: list[tuple[str, str]] = []   # (name, source) of fused sums
        self.indexed: set = set()                   # while printing an element: the array symbols

    def fused_sum(self, body, length: int) -> str | None:
        """``Σ body`` as one loop over the elements (no temporaries), or None when not eligible.

        Eligible: arithmetic and elementwise functions over scalars and 1-d symbols of the sum's
        length.  The element is a strict IEEE function; only the loop adding the elements may
        reassociate (fastmath 'reassoc'), so it is vectorised like NumPy's pairwise sum.
        """
        if any(not isinstance(node, _FUSIBLE) for node in sp.preorder_traversal(body)):
            return None
        arrays, scalars = [], []
        for sym in sorted(body.free_symbols, key=str):
            shape = shape_of(sym, self.shapes)
            if shape == ():
                scalars.append(sym)
            elif shape == (length,):
                arrays.append(sym)
            else:
                return None
        if not arrays:
            return None
        name = f"_vsum_{len(self.helpers) // 2}"
        args = ", ".join(identifier(sym) for sym in arrays + scalars)
        self.indexed = set(arrays)
        try:
            element = self.p(body)
        finally:
            self.indexed = set()
        self.helpers.append((f"{name}_at", f"def {name}_at({args}, i):\n    return {element}\n"))
        checks = "".join(f"    if {identifier(sym)}.shape[0] != {length}:\n        raise ValueError('shape')\n"
                         for sym in arrays)
        self.helpers.append((name, f"def {name}({args}):\n{checks}    acc = 0.0\n    for i in range({length}):\n"
                                   f"        acc += {name}_at({args}, i)\n    return acc\n"))
        return f"{name}({args})"

    def scalar(self, e) -> bool:
        return shape_of(e, self.shapes) == ()

    def fn(self, name: str, e) -> str:
        return _NP[name]

    def p(self, e) -> str:
        if self.indexed and isinstance(e, sp.Symbol) and e in self.indexed:
            return f"{identifier(e)}[i]"
        if isinstance(e, VSum):
            body = e.args[0]
            if self.scalar(body):
                return f"({self.p(body)} * {int(e.args[1])}.0)"
            fused = None if self.indexed else self.fused_sum(body, int(e.args[1]))
            return fused if fused is not None else f"np.sum({self.p(body)})"
        if isinstance(e, Scatter):
            return f"_scatter_{int(e.args[1])}({self.p(e.args[0])})"
        if isinstance(e, (GeomSum, GeomSumD)):
            name = self.geom_name(e) + ("" if self.scalar(e.args[0]) else "_v")
            return f"{name}({self.p(e.args[0])}, {self.p(e.args[1])})"
        if isinstance(e, sp.Heaviside):
            arg = e.args[0]
            if self.scalar(arg):
                return f"(1.0 if {self.p(arg)} > 0.0 else 0.0)"
            return f"np.where({self.p(arg)} > 0.0, 1.0, 0.0)"
        if isinstance(e, (sp.Max, sp.Min)):
            name = "np.maximum" if isinstance(e, sp.Max) else "np.minimum"
            if self.scalar(e):
                name = "max" if isinstance(e, sp.Max) else "min"
            args = [self.p(a) for a in e.args]
            text = args[0]
            for a in args[1:]:
                text = f"{name}({text}, {a})"
            return text
        if isinstance(e, sp.atan2):
            return f"np.arctan2({self.p(e.args[0])}, {self.p(e.args[1])})"
        return super().p(e)

    def piecewise(self, e):
        shape = shape_of(e, self.shapes)
        pieces = list(e.args)
        default = pieces[-1] if pieces[-1][1] in (True, sp.true) else None
        arms = pieces[:-1] if default is not None else pieces

        def arm(value):
            text = self.p(value)
            if shape != () and self.scalar(value):
                return f"np.full({shape!r}, {text})"
            return text

        text = arm(default[0]) if default is not None else "np.nan"
        for value, cond in reversed(arms):
            if self.scalar(cond):
                text = f"({arm(value)} if {self.p(cond)} else {text})"
            else:
                text = f"np.where({self.p(cond)}, {arm(value)}, {text})"
        return text


# (a^n - 1)/(a - 1) and its derivative in a, stable near a = 1 (see symbolic.GeomSum, geom_sum_d)
_GEOM_SOURCE = """
def _geom(a, n):
    d = a - 1.0
    if d == 0.0:
        return n * 1.0
    if a > 0.0:
        return np.expm1(n * np.log1p(d)) / d
    return (a ** n - 1.0) / d

def _geomd(a, n):
    d = a - 1.0
    if abs(n * d) < 1e-3:
        total = 0.0
        binom = n * (n - 1.0) / 2.0
        power = 1.0
        for k in range(2, 7):
            total += binom * (k - 1) * power
            binom *= (n - k) / (k + 1.0)
            power *= d
        return total
    return (n * a ** (n - 1.0) - _geom(a, n)) / d

def _geom_v(a, n):
    flat = np.ascontiguousarray(a).ravel()
    out = np.empty(flat.size)
    for i in range(flat.size):
        out[i] = _geom(flat[i], n)
    return out.reshape(a.shape)

def _geomd_v(a, n):
    flat = np.ascontiguousarray(a).ravel()
    out = np.empty(flat.size)
    for i in range(flat.size):
        out[i] = _geomd(flat[i], n)
    return out.reshape(a.shape)
"""


def generate_numba_source(program: AdjointProgram, name: str, wanted: list[int]) -> str:
    """Source of the adjoint (returning only the ``wanted`` gradients) plus its helpers."""
    printer = NumbaPrinter(set(program.params), program.shapes)
    lines = ["def _sigmoid(u):", "    return 1.0 / (1.0 + np.exp(-u))", "",
             "def _softplus(u):", "    return np.maximum(u, 0.0) + np.log1p(np.exp(-np.abs(u)))", "",
             "def _erf(u):", "    return math.erf(u)", ""] + _GEOM_SOURCE.splitlines()
    for index, (key, shape) in program.views.items():
        lines += [f"def _scatter_{index}(v):", f"    out = np.zeros({tuple(shape)!r})",
                  f"    out[{_key_text(key)}] = v", "    return out", ""]
    for ident, body in (program.loops or {}).items():
        from sparsad.coarsen import revloop
        text, views = revloop.helper_source(body, revloop.printer_for, "numba")
        for helper, (key, shape) in views.items():
            lines += [f"def {helper}(v):", f"    out = np.zeros({tuple(shape)!r})", f"    out[{_key_text(key)}] = v",
                      "    return out", ""]
        lines += text.splitlines() + [""]
    args = [identifier(s) for s in program.inputs + program.params + program.seeds]
    lines.append(f"def {name}({', '.join(args)}):")
    for sym, length in program.iotas.items():
        lines.append(f"    {identifier(sym)} = np.arange({length}) * 1.0")
    for sym, value in program.statements:
        if isinstance(value, _ViewRef):
            lines.append(f"    {identifier(sym)} = {identifier(value.base)}[{_key_text(value.key)}]")
        else:
            lines.append(f"    {identifier(sym)} = {printer(value)}")
    results = [printer(program.results[i]) for i in wanted]
    lines.append(f"    return ({', '.join(results)}{',' if len(results) == 1 else ''})")
    helpers = [text for _, text in printer.helpers]
    return "\n".join(helpers + lines) + "\n"


def compile_numba(program: AdjointProgram, name: str, wanted: list[int]) -> tuple[str, Callable]:
    """(source, jitted function); compilation itself happens on the first call."""
    import math

    import numba

    source = generate_numba_source(program, name, wanted)
    namespace: dict = {"np": np, "math": math}
    exec(compile(source, f"<sparsad.coarsen.numba:{name}>", "exec"), namespace)
    options = dict(nogil=True, error_model="numpy", fastmath=False)
    for key in list(namespace):
        if key.startswith("_scatter_") or key in ("_sigmoid", "_softplus", "_erf") or key.startswith("_geom") \
                or key.startswith("_loop_"):
            namespace[key] = numba.njit(**options)(namespace[key])
        elif key.startswith("_vsum_"):  # fused sums: strict elements, a reassociable accumulation
            strict = key.endswith("_at")
            namespace[key] = numba.njit(**dict(options, fastmath=False if strict else {"reassoc"}))(namespace[key])
    return source, numba.njit(**options)(namespace[name])


def to_numba_args(tensors, params, seeds) -> list:
    """Torch tensors as NumPy (0-d ones as floats), decisions as 0/1 floats."""
    out = []
    for t in tensors:
        a = t.detach().numpy()
        out.append(float(a) if a.ndim == 0 else a)
    for v in params:
        out.append(float(v) if isinstance(v, bool) else v)
    for s in seeds:
        a = s.detach().numpy() if hasattr(s, "detach") else np.asarray(s)
        out.append(float(a) if a.ndim == 0 else a)
    return out
