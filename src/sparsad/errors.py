"""The exceptions and warnings every part of sparsad raises.

Each error subclasses ValueError or TypeError so that generic handlers keep working,
and each message names the offending argument and says how to fix it.
"""
from __future__ import annotations


class SparsadError(Exception):
    """Base class of every error raised by sparsad."""


class ProgramError(SparsadError, ValueError):
    """A malformed program: a syntax error or an ill-formed tree, with its position.

    >>> str(ProgramError("expected ')'", line=2, column=7))
    "line 2, column 7: expected ')'"
    """

    def __init__(self, message: str, line: int | None = None, column: int | None = None,
                 source: str | None = None):
        self.message = message
        self.line = line
        self.column = column
        self.source = source
        super().__init__(self._render())

    def _render(self) -> str:
        if self.line is None:
            return self.message
        text = f"line {self.line}, column {self.column}: {self.message}"
        if self.source is not None:
            lines = self.source.splitlines()
            if 0 < self.line <= len(lines):
                caret = " " * max(self.column - 1, 0) + "^"
                text += f"\n  {lines[self.line - 1]}\n  {caret}"
        return text


class ProgramTypeError(SparsadError, TypeError):
    """A well-formed program whose types do not fit (e.g. summing over a real)."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None):
        self.message, self.line, self.column = message, line, column
        where = f"line {line}, column {column}: " if line is not None else ""
        super().__init__(where + message)


class InputError(SparsadError, ValueError):
    """A program was called with missing, extra or unusable inputs."""


class FormatError(SparsadError, ValueError):
    """Arrays that do not make a valid storage format (shape, order, range, dtype)."""


class ShapeError(SparsadError, ValueError):
    """Operands whose shapes do not fit together."""


class DTypeError(SparsadError, TypeError):
    """Operands of an unsupported or mismatched dtype."""


class DerivativeRuleError(SparsadError, ValueError):
    """A function has no derivative rule; never silently zero."""


class UnsupportedError(SparsadError, NotImplementedError):
    """A construct or combination that sparsad does not (yet) support."""


class OptionError(SparsadError, ValueError):
    """A keyword option (mode=, out_format=, stage=, ...) outside its allowed values."""


class MemoryLimitError(SparsadError, MemoryError):
    """An output or intermediate would exceed the memory limit (sparsad.memory); nothing was allocated."""
class FallbackWarning(UserWarning):
    """A compiled program or derivative runs in the reference interpreter instead of a kernel;
    the message names the program and the reason. (`interpret=True` asks for it and warns nothing.)"""


class OptimizationWarning(UserWarning):
    """An optional optimization pass failed inside and was skipped (the stage before it is kept);
    the message names the pass. The result is still right, perhaps slower."""


class InternalError(SparsadError, RuntimeError):
    """A stage of the compiler produced an ill-formed program: a bug of sparsad, not of the user."""


class DensifyWarning(UserWarning):
    """A sparse operand is about to be materialised densely; the message gives the size."""


def dense_size_message(shape: tuple[int, ...], itemsize: int = 8) -> str:
    """Human-readable size a dense array of `shape` would take, for DensifyWarning texts."""
    count = 1
    for extent in shape:
        count *= int(extent)
    size = count * itemsize
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.1f} {unit}" if unit != "B" else f"{size} B"
        size /= 1024
    return f"{size} B"


def did_you_mean(word: str, choices) -> str:
    """"; did you mean 'exp'?" for the closest of `choices` to a misspelt `word`, else ""."""
    import difflib

    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def check_option(value, allowed, argument: str) -> None:
    """OptionError naming `argument`, the allowed values and the nearest one, unless value is allowed."""
    if value in allowed:
        return
    raise OptionError(f"{argument}={value!r} is not one of {tuple(allowed)}"
                      f"{did_you_mean(value, allowed) if isinstance(value, str) else ''}")


class MissingDependencyError(SparsadError, ImportError):
    """An optional dependency (torch, jax, dask, ...) is needed and not installed; the message names the extra.

    >>> str(MissingDependencyError("torch", "torch"))
    "sparsad.torch needs PyTorch ('torch'), which is not installed: pip install 'sparsad[torch]'"
    """

    _LABELS = {"torch": "PyTorch", "jax": "JAX", "dask": "Dask", "sparse": "pydata/sparse"}

    def __init__(self, module: str, extra: str):
        self.module, self.extra = module, extra
        label = self._LABELS.get(module, module)
        super().__init__(f"sparsad.{extra} needs {label} ({module!r}), which is not installed: "
                         f"pip install 'sparsad[{extra}]'")
        self.name = module


def require(module: str, extra: str):
    """Import an optional dependency or raise MissingDependencyError naming the extra to install.

    >>> require("numpy", "core").__name__
    'numpy'
    """
    import importlib

    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        if error.name != module and not (error.name or "").startswith(module + "."):
            raise
        raise MissingDependencyError(module, extra) from None
