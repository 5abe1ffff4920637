"""Code generation: an ``AdjointProgram`` becomes Python source for torch or jax.numpy.

Stable forms (§6) are printed for the special functions: ``Softplus`` as ``logaddexp(u, 0)``,
``Sigmoid`` as the library sigmoid, ``log(1 + u)`` as ``log1p(u)``, ``exp(u) - 1`` as
``expm1(u)``.  A ``Piecewise`` whose condition involves only recorded predicates and trip counts
is printed as a Python conditional for torch (the decision is a Python bool, so only the taken
arm runs) and as ``jnp.where`` for JAX (so one compiled adjoint serves every decision);
elementwise conditions become ``torch.where`` / ``jnp.where``.
"""
from __future__ import annotations

import math
from typing import Callable

import sympy as sp

from sparsad.coarsen.adjoint import AdjointProgram, _ViewRef
from sparsad.coarsen.symbolic import (GeomSum, GeomSumD, LoopFwd, LoopRev, Pick, Relayout, Scatter, Sigmoid,
                                     Softplus, VSum, geom_sum, geom_sum_d)

_FUNCS = {sp.exp: "exp", sp.log: "log", sp.sin: "sin", sp.cos: "cos", sp.tan: "tan", sp.tanh: "tanh",
          sp.sinh: "sinh", sp.cosh: "cosh", sp.asin: "asin", sp.acos: "acos", sp.atan: "atan",
          sp.Abs: "abs", sp.sign: "sign", sp.erf: "erf", Sigmoid: "sigmoid", Softplus: "softplus"}


def identifier(sym) -> str:
    text = "".join(ch if ch.isalnum() else "_" for ch in str(sym))
    return "v_" + text


class Printer:
    def __init__(self, backend: str, params: set):
        self.backend = backend
        self.params = params

    def __call__(self, e) -> str:
        return self.p(e)

    def p(self, e) -> str:
        if isinstance(e, sp.Symbol):
            return identifier(e)
        if isinstance(e, sp.Integer):
            return f"{int(e)}.0" if abs(int(e)) < 2 ** 53 else repr(float(e))
        if isinstance(e, sp.Rational):
            return repr(float(e))
        if isinstance(e, sp.Float):
            return repr(float(e))
        if e is sp.pi:
            return repr(math.pi)
        if e is sp.E:
            return repr(math.e)
        if e is sp.true:
            return "True"
        if e is sp.false:
            return "False"
        if isinstance(e, sp.Add):
            return self.add(e)
        if isinstance(e, sp.Mul):
            return self.mul(e)
        if isinstance(e, sp.Pow):
            return self.pow(e)
        if isinstance(e, VSum):
            return f"_sum({self.p(e.args[0])}, {int(e.args[1])})"
        if isinstance(e, Scatter):
            return f"_scatter_{int(e.args[1])}({self.p(e.args[0])})"
        if isinstance(e, Relayout):
            return f"_layout_{int(e.args[1])}({self.p(e.args[0])})"
        if isinstance(e, (GeomSum, GeomSumD)):
            return f"{self.geom_name(e)}({self.p(e.args[0])}, {self.p(e.args[1])})"
        if isinstance(e, (LoopFwd, LoopRev)):
            kind = "fwd" if isinstance(e, LoopFwd) else "rev"
            return f"_loop_{kind}_{int(e.args[0])}({', '.join(self.p(a) for a in e.args[1:])})"
        if isinstance(e, Pick):
            return f"{self.p(e.args[0])}[{int(e.args[1])}]"
        if isinstance(e, sp.log):
            arg = e.args[0]
            if isinstance(arg, sp.Add) and len(arg.args) == 2 and sp.Integer(1) in arg.args:
                rest = arg - 1
                return f"{self.fn('log1p', e)}({self.p(rest)})"
            return f"{self.fn('log', e)}({self.p(arg)})"
        if isinstance(e, sp.Heaviside):
            return f"_step({self.p(e.args[0])})"
        if isinstance(e, (sp.Max, sp.Min)):
            big = isinstance(e, sp.Max)
            numbers = [a for a in e.args if a.is_number]
            others = [a for a in e.args if not a.is_number]
            text = self.p(others[0])
            for a in others[1:]:
                text = f"{'_max' if big else '_min'}({text}, {self.p(a)})"
            if numbers:
                bound = self.p(numbers[0])
                text = f"_clamp({text}, {bound}, None)" if big else f"_clamp({text}, None, {bound})"
            return text
        if isinstance(e, sp.atan2):
            return f"atan2({self.p(e.args[0])}, {self.p(e.args[1])})"
        if isinstance(e, sp.Piecewise):
            return self.piecewise(e)
        if isinstance(e, (sp.Or, sp.And)):  # of comparisons and condition flags: bools or bool tensors
            joiner = " | " if isinstance(e, sp.Or) else " & "
            return f"({joiner.join(self.p(a) for a in e.args)})"
        if isinstance(e, sp.core.relational.Relational):
            op = {"Gt": ">", "Ge": ">=", "Lt": "<", "Le": "<=", "Eq": "==", "Ne": "!="}[type(e).__name__[:2]
                                                                                         if type(e).__name__ in ("Eq", "Ne") else
                                                                                         {"StrictGreaterThan": "Gt",
                                                                                          "GreaterThan": "Ge",
                                                                                          "StrictLessThan": "Lt",
                                                                                          "LessThan": "Le"}[type(e).__name__]]
            return f"({self.p(e.lhs)} {op} {self.p(e.rhs)})"
        for cls, name in _FUNCS.items():
            if isinstance(e, cls):
                return f"{self.fn(name, e)}({', '.join(self.p(a) for a in e.args)})"
        raise NotImplementedError(f"no {self.backend} code for {type(e).__name__}: {e}")

    def geom_name(self, e) -> str:
        return "_geom" if isinstance(e, GeomSum) else "_geomd"

    def fn(self, name: str, e) -> str:
        """Python-number arithmetic (``math``) when ``e`` holds only parameters and constants."""
        if e.free_symbols <= self.params:
            return "_m_" + name
        return name

    def add(self, e):
        terms = list(e.args)
        # exp(u) - 1 -> expm1(u)
        if len(terms) == 2 and sp.Integer(-1) in terms:
            other = terms[0] if terms[1] == -1 else terms[1]
            if isinstance(other, sp.exp):
                return f"{self.fn('expm1', other)}({self.p(other.args[0])})"
        out = ""
        for i, term in enumerate(terms):
            coeff, rest = term.as_coeff_Mul()
            if i and coeff.is_negative:
                out += f" - {self.p(-term)}"
            else:
                out += (" + " if i else "") + self.p(term)
        return f"({out})"

    def mul(self, e):
        coeff, rest = e.as_coeff_Mul()
        if coeff == -1:
            return f"(-{self.p(rest)})"
        num, den = [], []
        for factor in sp.Mul.make_args(e):
            base, expo = factor.as_base_exp()
            if expo.is_number and expo.is_negative and not isinstance(factor, sp.Number):
                den.append(base ** (-expo))
            else:
                num.append(factor)
        text = " * ".join(self.p(f) for f in num) if num else "1.0"
        if den:
            text = f"{text} / ({' * '.join(self.p(f) for f in den)})"
        return f"({text})"

    def pow(self, e):
        base, expo = e.args
        if expo == sp.Rational(1, 2):
            return f"{self.fn('sqrt', e)}({self.p(base)})"
        if expo == -sp.Rational(1, 2):
            return f"(1.0 / {self.fn('sqrt', e)}({self.p(base)}))"
        if expo == -1:
            return f"(1.0 / {self.p(base)})"
        if expo == 2:
            b = self.p(base)
            return f"({b} * {b})"
        if expo.is_Integer and expo < 0:
            return f"(1.0 / {self.p(base)} ** {int(-expo)})"
        if expo.is_Integer:
            return f"({self.p(base)} ** {int(expo)})"
        if base is sp.E:
            return f"{self.fn('exp', e)}({self.p(expo)})"
        return f"({self.p(base)} ** {self.p(expo)})"

    def piecewise(self, e):
        pieces = list(e.args)
        text = self.p(pieces[-1][0]) if pieces[-1][1] in (True, sp.true) else "_nan()"
        for value, cond in reversed(pieces[:-1] if pieces[-1][1] in (True, sp.true) else pieces):
            static = cond.free_symbols <= self.params
            if static and self.backend == "torch":
                text = f"({self.p(value)} if {self.p(cond)} else {text})"
            else:
                text = f"_where({self.p(cond)}, {self.p(value)}, {text})"
        return text


def generate_source(program: AdjointProgram, name: str, backend: str) -> str:
    """Python source of ``def name(inputs..., params..., seeds...) -> tuple of gradients``."""
    printer = Printer(backend, set(program.params))
    args = [identifier(s) for s in program.inputs + program.params + program.seeds]
    lines = []
    if program.loops:
        if backend != "torch":
            raise NotImplementedError("loops compiled as loops (no closed form) are generated for torch and Numba "
                                      "only; JAX uses its own autodiff for this function")
        from sparsad.coarsen import revloop
        for body in program.loops.values():
            text, _views = revloop.helper_source(body, revloop.printer_for, "torch")
            lines.extend(text.splitlines() + [""])
    lines.append(f"def {name}({', '.join(args)}):")
    for sym, length in program.iotas.items():
        if any(sym in getattr(v, "free_symbols", ()) for _, v in program.statements) or \
                any(r is not None and sym in r.free_symbols for r in program.results):
            lines.append(f"    {identifier(sym)} = _iota({length})")
    for sym, value in program.statements:
        if isinstance(value, _ViewRef):
            lines.append(f"    {identifier(sym)} = {identifier(value.base)}[{_key_text(value.key)}]")
        else:
            lines.append(f"    {identifier(sym)} = {printer(value)}")
    results = [("None" if r is None else printer(r)) for r in program.results]
    lines.append(f"    return ({', '.join(results)}{',' if len(results) == 1 else ''})")
    return "\n".join(lines) + "\n"


def _key_text(key) -> str:
    def one(k):
        if isinstance(k, slice):
            parts = ["" if v is None else str(v) for v in (k.start, k.stop, k.step)]
            return ":".join(parts[:2]) + (f":{parts[2]}" if k.step is not None else "")
        return repr(k)
    if isinstance(key, tuple):
        return ", ".join(one(k) for k in key) if key else "()"
    return one(key)


def _scalar_math() -> dict:
    """``_m_<name>``: the same functions on Python numbers (parameters and constants)."""
    def sigmoid(u):
        return 1.0 / (1.0 + math.exp(-u)) if u >= 0 else math.exp(u) / (1.0 + math.exp(u))

    def softplus(u):
        return max(u, 0.0) + math.log1p(math.exp(-abs(u)))

    table = {name: getattr(math, name) for name in ("exp", "log", "sin", "cos", "tan", "tanh", "sinh", "cosh",
                                                     "asin", "acos", "atan", "sqrt", "log1p", "expm1", "erf")}
    table.update(abs=abs, sign=lambda u: float((u > 0) - (u < 0)), sigmoid=sigmoid, softplus=softplus)
    return {"_m_" + k: v for k, v in table.items()}


def torch_namespace(program: AdjointProgram, like) -> dict:
    import torch

    dtype, device = like.dtype, like.device

    def _where(c, a, b):
        if isinstance(c, bool):
            return a if c else b
        if not isinstance(a, torch.Tensor) and not isinstance(b, torch.Tensor):
            a = torch.tensor(a, dtype=dtype, device=device)
        return torch.where(c, a, b)

    def _sum(x, n):
        if isinstance(x, torch.Tensor) and x.dim() > 0:
            return x.sum()
        return x * n

    def _clamp(x, lo, hi):
        if not isinstance(x, torch.Tensor):
            x = torch.tensor(x, dtype=dtype, device=device)
        return torch.clamp(x, min=lo, max=hi)

    def _geom(a, n):
        if not isinstance(a, torch.Tensor):
            return geom_sum(float(a), float(n))
        d = a - 1.0
        at_one = d == 0
        safe = torch.where(at_one, torch.ones_like(d), d)
        positive = a > 0
        stable = torch.expm1(n * torch.log1p(torch.where(positive, d, torch.zeros_like(d)))) / safe
        direct = (a ** n - 1.0) / safe
        return torch.where(at_one, torch.full_like(d, float(n)), torch.where(positive, stable, direct))

    def _geomd(a, n):
        if not isinstance(a, torch.Tensor):
            return geom_sum_d(float(a), float(n))
        d = a - 1.0
        small = (n * d).abs() < 1e-3
        series, binom, power = torch.zeros_like(d), n * (n - 1.0) / 2.0, torch.ones_like(d)
        for k in range(2, 7):
            series = series + binom * (k - 1) * power
            binom *= (n - k) / (k + 1.0)
            power = power * d
        safe = torch.where(small, torch.ones_like(d), d)
        return torch.where(small, series, (n * a ** (n - 1.0) - _geom(a, n)) / safe)

    zero = torch.zeros((), dtype=dtype, device=device)
    ns = {
        "_geom": _geom, "_geomd": _geomd,
        "exp": torch.exp, "log": torch.log, "sin": torch.sin, "cos": torch.cos, "tan": torch.tan,
        "tanh": torch.tanh, "sinh": torch.sinh, "cosh": torch.cosh, "asin": torch.asin, "acos": torch.acos,
        "atan": torch.atan, "abs": torch.abs, "sign": torch.sign, "erf": torch.erf, "sigmoid": torch.sigmoid,
        "sqrt": torch.sqrt, "softplus": lambda u: torch.logaddexp(u, zero), "log1p": torch.log1p,
        "expm1": torch.expm1, "atan2": torch.atan2, "_step": lambda u: (u > 0).to(dtype),
        "_max": torch.maximum, "_min": torch.minimum, "_clamp": _clamp,
        "_where": _where, "_sum": _sum, "_nan": lambda: float("nan"),
        "_iota": lambda n: torch.arange(n, dtype=dtype, device=device),
    }
    ns.update(_scalar_math())
    for index, (key, shape) in program.views.items():
        ns[f"_scatter_{index}"] = _make_scatter_torch(key, shape, dtype, device)
    for body in (program.loops or {}).values():
        for helper, (key, shape) in body.views().items():
            ns[helper] = _make_scatter_torch(key, shape, dtype, device)
    from sparsad.coarsen.layouts import torch_helper
    for index, layout in (program.layouts or {}).items():
        ns[f"_layout_{index}"] = torch_helper(layout, dtype, device)

    def _as_tensor(v):
        return v if isinstance(v, torch.Tensor) else torch.tensor(float(v), dtype=dtype, device=device)

    def _add_at(acc, position, value):
        acc = acc.clone()
        acc[position] += value
        return acc

    ns.update(_as_tensor=_as_tensor, _add_at=_add_at,
              _zeros=lambda shape: torch.zeros(shape, dtype=dtype, device=device),
              _fit=lambda v, shape: _as_tensor(v) + torch.zeros(shape, dtype=dtype, device=device),
              _total=lambda v: v.sum())
    return ns


def _make_scatter_torch(key, shape, dtype, device):
    import torch

    def scatter(v):
        out = torch.zeros(shape, dtype=dtype, device=device)
        out[key] = v
        return out
    return scatter


def jax_namespace(program: AdjointProgram, dtype) -> dict:
    import jax
    import jax.numpy as jnp

    def _scatter(key, shape):
        return lambda v: jnp.zeros(shape, dtype=dtype).at[key].set(v)

    def _geom(a, n):
        a = jnp.asarray(a, dtype=dtype)
        d = a - 1.0
        at_one = d == 0
        safe = jnp.where(at_one, 1.0, d)
        positive = a > 0
        stable = jnp.expm1(n * jnp.log1p(jnp.where(positive, d, 0.0))) / safe
        direct = (a ** n - 1.0) / safe
        return jnp.where(at_one, n * jnp.ones_like(d), jnp.where(positive, stable, direct))

    def _geomd(a, n):
        a = jnp.asarray(a, dtype=dtype)
        d = a - 1.0
        small = jnp.abs(n * d) < 1e-3
        series, binom, power = jnp.zeros_like(d), n * (n - 1.0) / 2.0, jnp.ones_like(d)
        for k in range(2, 7):
            series = series + binom * (k - 1) * power
            binom = binom * (n - k) / (k + 1.0)
            power = power * d
        safe = jnp.where(small, 1.0, d)
        return jnp.where(small, series, (n * a ** (n - 1.0) - _geom(a, n)) / safe)

    ns = {
        "_geom": _geom, "_geomd": _geomd,
        "exp": jnp.exp, "log": jnp.log, "sin": jnp.sin, "cos": jnp.cos, "tan": jnp.tan, "tanh": jnp.tanh,
        "sinh": jnp.sinh, "cosh": jnp.cosh, "asin": jnp.arcsin, "acos": jnp.arccos, "atan": jnp.arctan,
        "abs": jnp.abs, "sign": jnp.sign, "erf": jax.scipy.special.erf, "sigmoid": jax.nn.sigmoid,
        "sqrt": jnp.sqrt, "softplus": lambda u: jnp.logaddexp(u, 0.0), "log1p": jnp.log1p, "expm1": jnp.expm1,
        "atan2": jnp.arctan2, "_step": lambda u: (jnp.asarray(u) > 0).astype(dtype),
        "_max": jnp.maximum, "_min": jnp.minimum, "_clamp": lambda x, lo, hi: jnp.clip(x, lo, hi),
        "_where": jnp.where, "_sum": lambda x, n: jnp.sum(x) if jnp.ndim(x) else x * n, "_nan": lambda: jnp.nan,
        "_iota": lambda n: jnp.arange(n, dtype=dtype),
    }
    for index, (key, shape) in program.views.items():
        ns[f"_scatter_{index}"] = _scatter(key, shape)
    from sparsad.coarsen.layouts import jax_helper
    for index, layout in (program.layouts or {}).items():
        ns[f"_layout_{index}"] = jax_helper(layout, dtype)
    ns.update({"_m_" + k: v for k, v in ns.items() if not k.startswith("_")})  # params are traced under jit
    return ns


def compile_source(source: str, name: str, namespace: dict) -> Callable:
    code = compile(source, f"<sparsad.coarsen:{name}>", "exec")
    exec(code, namespace)
    return namespace[name]
