"""The source of a function, verified to be the function's own, and recompiled in its real scope.

``inspect.getsource`` reads the file as it is *now*; a module edited after import would give
text that the function object does not run.  ``function_ast`` therefore compiles the text it
read and compares the bytecode with ``fn.__code__``; a mismatch is ``CoarsenUnsupported`` (the
caller falls back to autograd).  ``build_function`` compiles a rewritten ``def`` so that it reads
the function's live module globals and closure cells (never a copy taken at the first call).

>>> def f(x):
...     return x + 1
>>> fdef, first = function_ast(f)   # doctest: +SKIP
>>> fdef.name                        # doctest: +SKIP
'f'
"""
from __future__ import annotations

import __future__
import ast
import dis
import inspect
import textwrap
import types
from typing import Callable

from sparsad.errors import UnsupportedError

_FUTURE_FLAGS = 0
for _name in __future__.all_feature_names:
    _FUTURE_FLAGS |= getattr(__future__, _name).compiler_flag


class CoarsenUnsupported(UnsupportedError):
    """The function uses a construct coarsening cannot differentiate symbolically."""


class SourceUnavailable(CoarsenUnsupported):
    """The function's source cannot be read, or is not the code the function object runs."""


def _read(fn: Callable) -> tuple[ast.FunctionDef, int]:
    try:
        lines, first = inspect.getsourcelines(fn)
    except (OSError, TypeError) as exc:
        raise SourceUnavailable(f"the source of {getattr(fn, '__name__', fn)!r} is not available "
                                "(defined in an interactive session or by exec?)") from exc
    source = textwrap.dedent("".join(lines))
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise SourceUnavailable(f"the source of {getattr(fn, '__name__', fn)!r} does not parse on its own "
                                "(a lambda or a def inside an expression?)") from exc
    ast.increment_lineno(tree, first - 1)
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    if not defs:
        raise SourceUnavailable(f"{getattr(fn, '__name__', fn)!r} is not a plain `def` function")
    return defs[0], first


def _wrapped_module(fdef: ast.FunctionDef, cell_names) -> ast.Module:
    """``def __sparsad_scope__(): <cells> = None; <fdef>; return <fdef.name>``: free names become cells."""
    body: list[ast.stmt] = [ast.Assign(targets=[ast.Name(n, ast.Store())], value=ast.Constant(None))
                            for n in cell_names]
    body += [fdef, ast.Return(ast.Name(fdef.name, ast.Load()))]
    outer = ast.FunctionDef(name="__sparsad_scope__", args=ast.arguments(posonlyargs=[], args=[], vararg=None,
                                                                        kwonlyargs=[], kw_defaults=[], kwarg=None,
                                                                        defaults=[]),
                            body=body, decorator_list=[], returns=None)
    for node in ast.walk(outer):
        if "lineno" in node._attributes and getattr(node, "lineno", None) is None:
            node.lineno, node.col_offset = fdef.lineno, 0
            node.end_lineno, node.end_col_offset = fdef.lineno, 0
    return ast.fix_missing_locations(ast.Module(body=[outer], type_ignores=[]))


def _inner_code(fdef: ast.FunctionDef, fn: Callable, cell_names, filename: str) -> types.CodeType:
    module = _wrapped_module(fdef, cell_names)
    flags = fn.__code__.co_flags & _FUTURE_FLAGS
    code = compile(module, filename, "exec", flags=flags, dont_inherit=True)
    outer = next(c for c in code.co_consts if isinstance(c, types.CodeType))
    return next(c for c in outer.co_consts if isinstance(c, types.CodeType) and c.co_name == fdef.name)


def _instructions(code: types.CodeType) -> list:
    """Bytecode as (operation, argument) pairs, blind to how the module's imports shaped it.

    CPython 3.11 compiles ``mod.f(x)`` as LOAD_ATTR when ``mod`` is imported at module level and
    as LOAD_METHOD otherwise; the function's text alone cannot tell, so both count as the same
    attribute load, and jump targets are compared as instruction positions.
    """
    every = list(dis.get_instructions(code))
    instrs, position = [], {}
    for i in every:  # a jump to a dropped instruction lands on the next kept one
        position[i.offset] = len(instrs)
        if i.opname not in ("EXTENDED_ARG", "CACHE", "NOP"):
            instrs.append(i)
    out = []
    for i in instrs:
        name = "LOAD_ATTR" if i.opname == "LOAD_METHOD" else i.opname
        if i.opcode in dis.hasjrel or i.opcode in dis.hasjabs:
            arg = position.get(i.argval, i.argval)
        elif isinstance(i.argval, types.CodeType):
            arg = ("code", i.argval.co_name)
        elif isinstance(i.argval, float) and i.argval != i.argval:
            arg = "nan"
        else:
            arg = (type(i.argval).__name__, i.argval)
        out.append((name, arg))
    return out


def _same_code(a: types.CodeType, b: types.CodeType) -> bool:
    if (a.co_varnames != b.co_varnames or a.co_freevars != b.co_freevars or a.co_cellvars != b.co_cellvars
            or _instructions(a) != _instructions(b)):
        return False
    inner_a = [c for c in a.co_consts if isinstance(c, types.CodeType)]
    inner_b = [c for c in b.co_consts if isinstance(c, types.CodeType)]
    return len(inner_a) == len(inner_b) and all(_same_code(x, y) for x, y in zip(inner_a, inner_b))


def function_ast(fn: Callable) -> tuple[ast.FunctionDef, int]:
    """The ``FunctionDef`` of ``fn`` (line numbers of its file), checked against ``fn.__code__``."""
    fdef, first = _read(fn)
    code = getattr(fn, "__code__", None)
    if code is None:
        raise SourceUnavailable(f"{fn!r} has no Python code object")
    try:
        compiled = _inner_code(fdef, fn, code.co_freevars, code.co_filename)
    except (SyntaxError, ValueError, StopIteration) as exc:
        raise SourceUnavailable(f"{fn.__name__}: its source does not compile on its own ({exc})") from exc
    if not _same_code(compiled, code):
        raise SourceUnavailable(f"{fn.__name__}: the source in {code.co_filename} is not the code the function "
                                "runs (was the file edited after import? reload the module)")
    return fdef, first


def build_function(fn: Callable, fdef: ast.FunctionDef, extra_cells: dict | None = None) -> Callable:
    """Compile the (rewritten) ``fdef`` as a function reading ``fn``'s live globals and closure.

    ``extra_cells`` maps further free names of ``fdef`` to ``types.CellType`` objects the caller
    keeps (to hand values to the rewritten code without touching the module's globals).
    """
    extra_cells = dict(extra_cells or {})
    own = dict(zip(fn.__code__.co_freevars, fn.__closure__ or ()))
    names = list(fn.__code__.co_freevars) + [n for n in extra_cells if n not in own]
    code = _inner_code(fdef, fn, names, fn.__code__.co_filename)
    cells = {**own, **extra_cells}
    closure = tuple(cells[n] for n in code.co_freevars)
    rewritten = types.FunctionType(code, fn.__globals__, fdef.name, fn.__defaults__, closure or None)
    rewritten.__kwdefaults__ = fn.__kwdefaults__
    return rewritten
