"""sparsad: differentiable programming over sparse and dense tensors.

>>> import numpy as np, sparsad
>>> dot = sparsad.program("sum(<i, a> in V1) a * V2(i)")
>>> dot(V1=np.array([1.0, 2.0]), V2=np.array([3.0, 4.0]))
11.0
"""
from typing import TYPE_CHECKING

from sparsad import errors
from sparsad.errors import (
    DensifyWarning,
    DerivativeRuleError,
    DTypeError,
    FallbackWarning,
    FormatError,
    InputError,
    InternalError,
    MemoryLimitError,
    MissingDependencyError,
    OptimizationWarning,
    OptionError,
    ProgramError,
    ProgramTypeError,
    ShapeError,
    SparsadError,
    UnsupportedError,
)
from sparsad._version import __version__

# Everything else loads on first use (PEP 562), so `import sparsad` costs only the error types:
# the language, the compiler and the derivatives (and NumPy) load when first named, the pillars
# with heavy or optional dependencies (`sparsad.torch`, `sparsad.coarsen`, ...) likewise.
_LAZY_NAMES = {
    "Program": "sparsad.lang.program", "program": "sparsad.lang.program",
    "Derivative": "sparsad.ad.api", "grad": "sparsad.ad.api", "value_and_grad": "sparsad.ad.api",
    "jacobian": "sparsad.ad.api", "jvp": "sparsad.ad.api", "vjp": "sparsad.ad.api",
    "compile": "sparsad.compiler", "CompiledProgram": "sparsad.compiler",
    "StoredTensor": "sparsad.formats", "as_format": "sparsad.formats", "from_arrays": "sparsad.formats",
    "from_logical": "sparsad.formats",
}
if TYPE_CHECKING:  # what the lazy names are, for type checkers and the API reference (griffe)
    from sparsad import formats
    from sparsad.ad.api import Derivative, grad, jacobian, jvp, value_and_grad, vjp
    from sparsad.compiler import CompiledProgram, compile
    from sparsad.formats import StoredTensor, as_format, from_arrays, from_logical
    from sparsad.lang.program import Program, program

_LAZY_SUBMODULES = ("formats", "torch", "jax", "tensor", "coarsen", "ops", "cli", "demo")


def __getattr__(name: str):
    import importlib

    if name in _LAZY_NAMES:
        value = getattr(importlib.import_module(_LAZY_NAMES[name]), name)
        globals()[name] = value  # later lookups skip this hook
        return value
    if name in _LAZY_SUBMODULES:
        return importlib.import_module(f"sparsad.{name}")
    raise AttributeError(f"module 'sparsad' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY_NAMES) | set(_LAZY_SUBMODULES))


__all__ = [
    "Program", "program", "errors", "Derivative", "grad", "value_and_grad", "jacobian", "jvp", "vjp",
    "compile", "CompiledProgram", "formats", "StoredTensor", "as_format", "from_arrays", "from_logical",
    "SparsadError", "ProgramError", "ProgramTypeError", "InputError", "FormatError", "ShapeError",
    "DTypeError", "DerivativeRuleError", "UnsupportedError", "DensifyWarning", "FallbackWarning",
    "OptimizationWarning", "InternalError", "MemoryLimitError", "OptionError", "MissingDependencyError",
    "__version__",
]
