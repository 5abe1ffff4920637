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


def simple_scatter(key, shape) -> tuple | None:
    """``("at", position)`` or ``("slice", start, step)`` when a view ``base[key]`` of a 1-d ``base``
    can be scattered back by the generic helpers (one compiled function for every such view), else None."""
    if len(shape) != 1:
        return None
    n = shape[0]
    if isinstance(key, tuple) and len(key) == 1:
        key = key[0]
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool) and -n <= key < n:
        return ("at", int(key) % n)
    if isinstance(key, slice):
        start, _stop, step = key.indices(n)
        return ("slice", start, step)
    return None


# Generic scatters and accumulations: compiled once per argument types, whatever the view (a helper
# per view costs a Numba compilation each; assigning a slice compiles NumPy's fancy-indexing path,
# seconds on first use).  Accumulating helpers update a fresh array in place and return it, so a sum
# of scatters prints as one nested call.
_SCATTER_SOURCE = """
def _sc_at(v, pos, n):
    out = np.zeros(n)
    out[pos] = v
    return out

def _acc_at(acc, v, pos):
    acc[pos] += v
    return acc

def _sc_sl(v, start, step, n):
    out = np.zeros(n)
    for q in range(v.shape[0]):
        out[start + q * step] = v[q]
    return out

def _acc_sl(acc, v, start, step):
    for q in range(v.shape[0]):
        acc[start + q * step] += v[q]
    return acc

def _sc_sls(v, start, step, count, n):
    out = np.zeros(n)
    for q in range(count):
        out[start + q * step] = v
    return out

def _acc_sls(acc, v, start, step, count):
    for q in range(count):
        acc[start + q * step] += v
    return acc

def _total(a):
    flat = np.ascontiguousarray(a).ravel()
    acc = 0.0
    for i in range(flat.size):
        acc += flat[i]
    return acc

def _where(c, a, b):
    cf = np.ascontiguousarray(c).ravel()
    af = np.ascontiguousarray(a).ravel()
    bf = np.ascontiguousarray(b).ravel()
    out = np.empty(cf.size)
    for i in range(cf.size):
        out[i] = af[i] if cf[i] else bf[i]
    return out.reshape(c.shape)

def _store(hist, t, v):
    flat = np.ascontiguousarray(v).ravel()
    for q in range(flat.size):
        hist[t, q] = flat[q]
"""
GENERIC_HELPERS = ("_sc_at", "_acc_at", "_sc_sl", "_acc_sl", "_sc_sls", "_acc_sls", "_total", "_where", "_store")
ACC_CHAIN = 40  # nested accumulations per chain (Python's parser limits nesting)


class NumbaPrinter(Printer):
    def __init__(self, params: set, shapes: dict, views: dict | None = None, scatter_prefix: str = "_scatter_",
                 vsum_prefix: str = "_vsum_"):
        super().__init__("numba", params)
        self.vsum_prefix = vsum_prefix              # (starts with "_vsum_": how the module jits them)
        self.shapes = shapes
        self.views = views or {}                    # scatter index -> (key, base shape)
        self.scatter_prefix = scatter_prefix
        self.helpers: list[tuple[str, str]] = []   # (name, source) of fused sums
        self.fused: dict = {}                       # (element, arguments, length) -> name of its fused sum
        self.indexed: set = set()                   # while printing an element: the array symbols

    def scatter(self, e) -> str:
        index = int(e.args[1])
        key, shape = self.views[index]
        how = simple_scatter(key, shape)
        value = self.p(e.args[0])
        if how is None:
            return f"{self.scatter_prefix}{index}({value})"
        if how[0] == "at":
            return f"_sc_at({value}, {how[1]}, {shape[0]})"
        if self.scalar(e.args[0]):
            count = len(range(*key.indices(shape[0]))) if isinstance(key, slice) else len(range(*key[0].indices(shape[0])))
            return f"_sc_sls({value}, {how[1]}, {how[2]}, {count}, {shape[0]})"
        return f"_sc_sl({value}, {how[1]}, {how[2]}, {shape[0]})"

    def add(self, e):
        """A sum with several scatters into one 1-d shape: one array, accumulated in place."""
        groups: dict = {}
        blocks: dict = {}   # shape -> scatters of views of n-d bases into it (a helper per view)
        rest = []
        for term in e.args:
            if isinstance(term, Scatter) and int(term.args[1]) in self.views:
                key, shape = self.views[int(term.args[1])]
                how = simple_scatter(key, shape)
                if how is not None:
                    groups.setdefault(shape[0], []).append((term, key, how))
                    continue
                if self.scatter_prefix == "_scatter_":  # (`_acc_k` exists for the program's own views)
                    blocks.setdefault(tuple(shape), []).append(term)
                    continue
            rest.append(term)
        if not any(len(g) > 1 for g in groups.values()) and not any(len(b) > 1 for b in blocks.values()):
            return super().add(e)
        parts = []
        for shape, terms in blocks.items():
            if len(terms) == 1:
                rest.append(terms[0])
                continue
            for lo in range(0, len(terms), ACC_CHAIN):
                text = f"np.zeros({shape!r})"
                for term in terms[lo:lo + ACC_CHAIN]:
                    text = f"_acc_{int(term.args[1])}({text}, {self.p(term.args[0])})"
                parts.append(text)
        for n, terms in groups.items():
            if len(terms) == 1:
                rest.append(terms[0][0])
                continue
            for lo in range(0, len(terms), ACC_CHAIN):
                text = f"np.zeros({n})"
                for term, key, how in terms[lo:lo + ACC_CHAIN]:
                    value = self.p(term.args[0])
                    if how[0] == "at":
                        text = f"_acc_at({text}, {value}, {how[1]})"
                    elif self.scalar(term.args[0]):
                        k = key if isinstance(key, slice) else key[0]
                        text = f"_acc_sls({text}, {value}, {how[1]}, {how[2]}, {len(range(*k.indices(n)))})"
                    else:
                        text = f"_acc_sl({text}, {value}, {how[1]}, {how[2]})"
                parts.append(text)
        if rest:
            parts.append(self.p(sp.Add(*rest)) if len(rest) > 1 else self.p(rest[0]))
        return "(" + " + ".join(parts) + ")"

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
        name = f"{self.vsum_prefix}{len(self.helpers) // 2}"
        args = ", ".join(identifier(sym) for sym in arrays + scalars)
        self.indexed = set(arrays)
        try:
            element = self.p(body)
        finally:
            self.indexed = set()
        known = self.fused.get((element, args, length))
        if known is not None:  # the same sum printed again (a loop's forward statements run twice)
            return f"{known}({args})"
        self.fused[(element, args, length)] = name
        self.helpers.append((f"{name}_at", f"def {name}_at({args}, i):\n    return {element}\n"))
        checks = "".join(f"    if {identifier(sym)}.shape[0] != {length}:\n        raise ValueError('shape')\n"
                         for sym in arrays)
        self.helpers.append((name, f"def {name}({args}):\n{checks}    acc = 0.0\n    for i in range({length}):\n"
                                   f"        acc += {name}_at({args}, i)\n    return acc\n"))
        return f"{name}({args})"

    def scalar(self, e) -> bool:
        return shape_of(e, self.shapes) == ()

    def fn(self, name: str, e) -> str:
        if name == "erf" and not self.indexed and not self.scalar(e):
            return "_erf_v"  # (math.erf takes floats only: arrays go element by element)
        return _NP[name]

    def p(self, e) -> str:
        if self.indexed and isinstance(e, sp.Symbol) and e in self.indexed:
            return f"{identifier(e)}[i]"
        if isinstance(e, VSum):
            body = e.args[0]
            if self.scalar(body):
                return f"({self.p(body)} * {int(e.args[1])}.0)"
            fused = None if self.indexed else self.fused_sum(body, int(e.args[1]))
            return fused if fused is not None else f"_total({self.p(body)})"
        if isinstance(e, Scatter):
            return self.scatter(e)
        if isinstance(e, (GeomSum, GeomSumD)):
            name = self.geom_name(e) + ("" if self.scalar(e.args[0]) else "_v")
            return f"{name}({self.p(e.args[0])}, {self.p(e.args[1])})"
        if isinstance(e, sp.Heaviside):
            arg = e.args[0]
            if self.scalar(arg):
                return f"(1.0 if {self.p(arg)} > 0.0 else 0.0)"
            return f"_where({self.p(arg)} > 0.0, np.ones({shape_of(arg, self.shapes)!r}), np.zeros({shape_of(arg, self.shapes)!r}))"
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
                text = f"_where({self.p(cond)}, {arm(value)}, {text})"
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
    printer = NumbaPrinter(set(program.params), program.shapes, program.views)
    lines = _SCATTER_SOURCE.splitlines() + ["def _sigmoid(u):", "    return 1.0 / (1.0 + np.exp(-u))", "",
             "def _softplus(u):", "    return np.maximum(u, 0.0) + np.log1p(np.exp(-np.abs(u)))", "",
             "def _erf(u):", "    return math.erf(u)", "",
             "def _erf_v(a):", "    flat = np.ascontiguousarray(a).ravel()", "    out = np.empty(flat.size)",
             "    for i in range(flat.size):", "        out[i] = math.erf(flat[i])", "    return out.reshape(a.shape)",
             ""] + _GEOM_SOURCE.splitlines()
    for index, (key, shape) in program.views.items():
        if simple_scatter(key, shape) is None:
            lines += [f"def _scatter_{index}(v):", f"    out = np.zeros({tuple(shape)!r})",
                      f"    out[{_key_text(key)}] = v", "    return out", "",
                      f"def _acc_{index}(acc, v):", f"    acc[{_key_text(key)}] += v", "    return acc", ""]
    from sparsad.coarsen.layouts import numba_source
    for index, layout in (program.layouts or {}).items():
        lines += numba_source(f"_layout_{index}", layout).splitlines() + [""]
    for ident, body in (program.loops or {}).items():
        from sparsad.coarsen import revloop
        text, views = revloop.helper_source(body, revloop.printer_for, "numba")
        for helper, (key, shape) in views.items():
            if simple_scatter(key, shape) is not None:
                continue
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


def _is_helper(key: str) -> bool:
    return (key.startswith("_scatter_") or key in ("_sigmoid", "_softplus", "_erf", "_erf_v") or key.startswith("_geom")
            or key in GENERIC_HELPERS or key.startswith(("_loop_", "_layout_", "_acc_")))


def compile_numba(program: AdjointProgram, name: str, wanted: list[int]) -> tuple[str, Callable]:
    """(source, jitted function), compiled in memory; compilation itself happens on the first call."""
    import math

    import numba

    source = generate_numba_source(program, name, wanted)
    namespace: dict = {"np": np, "math": math}
    exec(compile(source, f"<sparsad.coarsen.numba:{name}>", "exec"), namespace)
    options = dict(nogil=True, error_model="numpy", fastmath=False)
    for key in list(namespace):
        if _is_helper(key):
            namespace[key] = numba.njit(**options)(namespace[key])
        elif key.startswith("_vsum_"):  # fused sums: strict elements, a reassociable accumulation
            strict = key.endswith("_at")
            namespace[key] = numba.njit(**dict(options, fastmath=False if strict else {"reassoc"}))(namespace[key])
    return source, numba.njit(**options)(namespace[name])


# The generated adjoint as a module file: Numba caches its compilation beside it (``cache=True``), so
# it can be compiled in another process (``tiers``) and loaded here, and a later process starts
# without compiling.  Only NumPy, math and Numba are imported by it.
_MODULE_FOOTER = '''

def _jit_all():
    options = dict(cache=True, nogil=True, error_model="numpy", fastmath=False)
    space = globals()
    for key in list(space):
        if not callable(space[key]) or key.startswith("_jit_"):
            continue
        if key.startswith("_vsum_") and not key.endswith("_at"):
            space[key] = numba.njit(**dict(options, fastmath={"reassoc"}))(space[key])
        elif key.startswith("_") or key == NAME:
            space[key] = numba.njit(**options)(space[key])


_jit_all()
'''


def write_module(source: str) -> tuple[str, str]:
    """(path, module name) of ``source`` written in the kernel cache directory, named by its content
    (Numba's cache of it lands beside it).  Raises when there is no private cache directory."""
    import hashlib
    import os
    import sys
    import time

    from sparsad.codegen.numba_backend import kernel_cache_dir

    digest = hashlib.sha256((source + _numba_version() + sys.version).encode()).hexdigest()[:24]
    directory = kernel_cache_dir()
    path = directory / f"coarsen_{digest}.py"
    if not path.exists() or path.read_text() != source:
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(source)
        os.replace(temporary, path)
        prune_cache(directory)
    else:
        # recently used, for the pruning: the access time only (Numba's cache index is stamped with the
        # file's modification time; a new one would make every later process compile it again)
        os.utime(path, (time.time(), path.stat().st_mtime))
    return str(path), f"sparsad_coarsen_{digest}"


def _numba_version() -> str:
    """Numba's version without importing Numba (seconds on a first call; the child compiles)."""
    global _NUMBA_VERSION
    if _NUMBA_VERSION is None:
        from importlib import metadata
        try:
            _NUMBA_VERSION = metadata.version("numba")
        except metadata.PackageNotFoundError:
            import numba
            _NUMBA_VERSION = numba.__version__
    return _NUMBA_VERSION


_NUMBA_VERSION = None


def numba_module(program: AdjointProgram, name: str, wanted: list[int]) -> tuple[str, str, str]:
    """(source, path, module name) of the adjoint written as a module in the kernel cache directory.

    Raises ``OSError`` or the compiler's ``UnsupportedError`` when no private cache directory exists.
    """
    body = generate_numba_source(program, name, wanted)
    source = "import math\n\nimport numba\nimport numpy as np\n\nNAME = " + repr(name) + "\n\n" + body + _MODULE_FOOTER
    path, module_name = write_module(source)
    return source, path, module_name


MAX_CACHED_MODULES = 400  # generated coarsening modules (adjoints, primals) kept in the kernel cache


def prune_cache(directory, keep: int = MAX_CACHED_MODULES) -> int:
    """Delete the least recently used generated modules beyond ``keep`` in ``directory``, with
    Numba's cache files of each; returns how many modules went.  Modules are named by their
    content, so a deleted one is simply written and compiled again when next needed."""
    import os
    from pathlib import Path

    directory = Path(directory)
    modules = []
    for entry in os.scandir(directory):
        if entry.name.startswith("coarsen_") and entry.name.endswith(".py"):
            try:
                stat = entry.stat()  # (last use: the access time write_module sets, or the writing)
                modules.append((max(stat.st_atime, stat.st_mtime), entry.name))
            except OSError:
                continue
    if len(modules) <= keep:
        return 0
    modules.sort()
    stale = [name[:-3] for _, name in modules[:len(modules) - keep]]
    pycache = directory / "__pycache__"
    cached = sorted(os.listdir(pycache)) if pycache.is_dir() else []
    for stem in stale:
        for target in [directory / f"{stem}.py"] + [pycache / f for f in cached if f.startswith(stem + ".")]:
            try:
                os.remove(target)
            except OSError:
                pass
    return len(stale)


def load_module(path: str, module_name: str):
    """Import (once per process) the module ``numba_module`` wrote."""
    import importlib.util
    import sys

    module = sys.modules.get(module_name)
    if module is None:
        spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module  # (Numba's cache finds the module by this name)
        try:
            spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(module_name, None)
            raise
    return module


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
