"""sparsad: differentiable programming over sparse and dense tensors.

>>> import numpy as np, sparsad
>>> dot = sparsad.program("sum(<i, a> in V1) a * V2(i)")
>>> dot(V1=np.array([1.0, 2.0]), V2=np.array([3.0, 4.0]))
11.0
"""
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
from sparsad.lang.program import Program, program
from sparsad.ad.api import Derivative, grad, jacobian, jvp, vjp
from sparsad import formats
from sparsad.compiler import CompiledProgram, compile
from sparsad.formats import StoredTensor, as_format, from_arrays, from_logical
from sparsad._version import __version__

# Pillars with heavy or optional dependencies load on first use: `sparsad.torch`, `sparsad.coarsen`, ...
_LAZY_SUBMODULES = ("torch", "jax", "tensor", "coarsen", "ops", "cli", "demo")


def __getattr__(name: str):
    if name in _LAZY_SUBMODULES:
        import importlib

        return importlib.import_module(f"sparsad.{name}")
    raise AttributeError(f"module 'sparsad' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY_SUBMODULES))


__all__ = [
    "Program", "program", "errors", "Derivative", "grad", "jacobian", "jvp", "vjp",
    "compile", "CompiledProgram", "formats", "StoredTensor", "as_format", "from_arrays", "from_logical",
    "SparsadError", "ProgramError", "ProgramTypeError", "InputError", "FormatError", "ShapeError",
    "DTypeError", "DerivativeRuleError", "UnsupportedError", "DensifyWarning", "FallbackWarning",
    "OptimizationWarning", "InternalError", "MemoryLimitError", "OptionError", "MissingDependencyError",
    "__version__",
]
