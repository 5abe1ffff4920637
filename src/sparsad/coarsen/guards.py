"""Fingerprints of Python values a plan depends on, checked at every call.

A plan bakes in the values the tracer read: non-tensor arguments, module globals, closure
cells, attributes of modules and objects, entries of containers.  A plan is reused only while
every one of them has the fingerprint it had when the plan was built; otherwise a new plan is
traced.  Fingerprints are by *content* for data (numbers, strings, tuples, lists, dicts, arrays,
objects' attribute dicts) and by identity only for code-like objects (modules, functions,
classes), so a fresh list with the same numbers reuses the plan and a mutated one does not.

>>> fingerprint([1.0, 2]) == fingerprint([1.0, 2]), fingerprint([1.0, 2]) == fingerprint([1.0, 3])
(True, False)
"""
from __future__ import annotations

import functools
import hashlib
import struct
import types
from typing import Any, Callable

MAX_ITEMS = 100_000   # elements of a container (or array) worth fingerprinting by content
MAX_DEPTH = 12


class Unkeyable(Exception):
    """A value whose content cannot be fingerprinted (too large, too deep, or of an opaque type)."""


_SCALARS = (type(None), bool, int, float, complex, str, bytes)
_FLOAT_BITS = struct.Struct("<d").pack   # the float's exact bits
_CODE_LIKE = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType, type,
              types.BuiltinMethodType, types.MethodWrapperType, types.WrapperDescriptorType, types.CodeType)


def fingerprint(value: Any, depth: int = 0) -> tuple:
    """A hashable token equal for equal content (see the module docstring); ``Unkeyable`` if none."""
    if depth > MAX_DEPTH:
        raise Unkeyable("nested too deeply")
    kind = type(value)
    if kind in _SCALARS:
        return (kind.__name__, _FLOAT_BITS(value) if kind is float else value)  # -0.0, NaN signs/payloads differ
    if isinstance(value, types.FunctionType):
        return ("fn", id(value), id(value.__code__), id(value.__defaults__))
    if isinstance(value, _CODE_LIKE):
        return ("id", id(value))
    if kind in (tuple, list):
        if len(value) > MAX_ITEMS:
            raise Unkeyable(f"a {kind.__name__} of {len(value)} items")
        return (kind.__name__,) + tuple(fingerprint(v, depth + 1) for v in value)
    if isinstance(value, tuple):  # named tuples and other tuple subclasses: their type and elements
        if len(value) > MAX_ITEMS:
            raise Unkeyable(f"a {kind.__name__} of {len(value)} items")
        extra = getattr(value, "__dict__", None)
        return (("tuple-of", id(kind)) + tuple(fingerprint(v, depth + 1) for v in value)
                + ((fingerprint(extra, depth + 1),) if isinstance(extra, dict) else ()))
    if kind is dict:
        if len(value) > MAX_ITEMS:
            raise Unkeyable(f"a dict of {len(value)} items")
        return ("dict",) + tuple((fingerprint(k, depth + 1), fingerprint(v, depth + 1)) for k, v in value.items())
    if kind in (set, frozenset):
        return (kind.__name__,) + tuple(sorted((fingerprint(v, depth + 1) for v in value), key=repr))
    module = (kind.__module__ or "").split(".")[0]
    if module == "numpy":
        import numpy as np
        if isinstance(value, np.generic):
            return ("np", str(value.dtype), value.tobytes())
        if isinstance(value, np.ndarray):
            return _array_print(value)
        if isinstance(value, np.dtype):
            return ("np.dtype", str(value))
    if module == "torch":
        import torch
        if isinstance(value, torch.Tensor):
            if value.is_sparse or value.layout != torch.strided:
                raise Unkeyable("a sparse tensor")
            # requires_grad too: a plan traced while it was off baked the tensor in as a constant
            return _array_print(value.detach().cpu().numpy(), str(value.dtype), str(value.device),
                                value.requires_grad)
        if isinstance(value, (torch.dtype, torch.device)):
            return ("torch", str(value))
    if module in ("jax", "jaxlib"):
        import numpy as np
        try:
            return _array_print(np.asarray(value), str(getattr(value, "dtype", "")))
        except Exception as exc:  # a tracer or an abstract value: no content
            raise Unkeyable(f"a {kind.__name__}") from exc
    if isinstance(value, functools.partial):  # its function and bound arguments live outside __dict__
        return ("partial", id(kind), fingerprint(value.func, depth + 1), fingerprint(value.args, depth + 1),
                fingerprint(value.keywords, depth + 1), fingerprint(value.__dict__, depth + 1))
    attrs = getattr(value, "__dict__", None)
    if isinstance(attrs, dict):
        return ("obj", id(kind), fingerprint(attrs, depth + 1))
    slots = getattr(kind, "__slots__", None)
    if slots is not None:
        names = (slots,) if isinstance(slots, str) else tuple(slots)
        return ("slots", id(kind)) + tuple(fingerprint(getattr(value, n, None), depth + 1) for n in names)
    raise Unkeyable(f"a value of type {kind.__name__}")


def _array_print(array, *extra) -> tuple:
    if array.size > MAX_ITEMS:
        raise Unkeyable(f"an array of {array.size} elements")
    import numpy as np
    digest = hashlib.blake2b(np.ascontiguousarray(array).tobytes(), digest_size=16).hexdigest()
    return ("array", str(array.dtype), tuple(array.shape), digest) + extra


_NOTHING = object()  # (never read from anything)


def _frozen(value, depth: int = 0) -> bool:
    """Whether ``value`` can never change content: scalars, strings, and tuples/frozensets of them."""
    kind = type(value)
    if kind in _SCALARS:
        return True
    if kind in (tuple, frozenset) and depth < MAX_DEPTH and len(value) <= 64:
        return all(_frozen(v, depth + 1) for v in value)
    return False


class Guards:
    """Values read while tracing: ``(description, reader, fingerprint)``; ``hold()`` re-reads them."""

    def __init__(self):
        self.entries: list[tuple[str, Callable[[], Any], tuple]] = []
        self._seen: set = set()
        self._identity: list = []   # (reader, object) compared by identity
        self._held: list = []       # owners and values named in _seen, kept alive so ids stay unique
        self._content: list = []    # (reader, fingerprint) compared by content

    def add(self, description: str, reader: Callable[[], Any], value: Any, owner: Any = None) -> None:
        """``owner`` is the object the value is read from (a closure cell, a globals dict, an object):
        entries are the same only if both the description and the owner are (never the text alone)."""
        seen = (description, id(owner), id(value))
        if seen in self._seen:
            return
        self._seen.add(seen)
        self._held.append((owner, value))
        token = fingerprint(value)
        self.entries.append((description, reader, token))
        if token[0] == "id":   # modules, classes, builtins: the same object is all that matters
            self._identity.append((reader, value))
        else:  # the same object again, when it cannot change, needs no fingerprint (the common case)
            self._content.append((reader, token, value if _frozen(value) else _NOTHING))

    def hold(self) -> bool:
        """Whether every value read still has its fingerprint (called on every call: kept cheap)."""
        try:
            for reader, value in self._identity:
                if reader() is not value:
                    return False
            for reader, token, frozen in self._content:
                value = reader()
                if value is not frozen and fingerprint(value) != token:
                    return False
        except Exception:  # the name vanished, or the value became unkeyable
            return False
        return True

    def changed(self) -> list[str]:
        """Descriptions of the values whose fingerprint differs now (for messages and tests)."""
        out = []
        for description, reader, token in self.entries:
            try:
                same = fingerprint(reader()) == token
            except Exception:
                same = False
            if not same:
                out.append(description)
        return out
