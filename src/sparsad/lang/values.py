"""Run-time values of the reference interpreter and their semi-ring operations.

A value is a Python float, int or bool, or a dict from int keys to values. The empty dict `{}`
doubles as the zero of every type, so `+`, `*` and lookup need no type information.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from sparsad.errors import InputError, ProgramTypeError, ShapeError

ZERO: dict = {}


class ShapedDict(dict):
    """An input's dictionary (or one of its rows) that knows its extents: looking up a key
    outside them is a ShapeError, as in compiled code, not the zero of a missing key."""

    __slots__ = ("shape", "name", "axis")


def shaped(mapping: dict, shape: tuple[int, ...], name: str, axis: int = 0) -> ShapedDict:
    """`mapping` (nested to len(shape) levels) with every level made a ShapedDict."""
    result = ShapedDict(mapping)
    result.shape, result.name, result.axis = tuple(int(n) for n in shape), name, axis
    if len(shape) > 1:
        for key, item in result.items():
            if isinstance(item, dict):
                result[key] = shaped(item, shape[1:], name, axis + 1)
    return result


def is_dict(value: Any) -> bool:
    return isinstance(value, dict)


def as_number(value: Any) -> float | int:
    """A scalar value; the universal zero `{}` reads as 0."""
    if isinstance(value, dict):
        if value:
            raise ProgramTypeError("expected a scalar, got a dictionary")
        return 0
    return value


def as_key(value: Any) -> int:
    """A dictionary key: an int (the universal zero reads as 0)."""
    if isinstance(value, dict) and not value:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ProgramTypeError(f"dictionary keys are integers, got {value!r}")
    return value


def add(a: Any, b: Any) -> Any:
    """Semi-ring `+`: numbers add; dictionaries merge, adding the values of shared keys."""
    if isinstance(a, dict):
        if not a:
            return b
        if isinstance(b, dict):
            if not b:
                return a
            merged = dict(a)
            for key, value in b.items():
                merged[key] = add(merged[key], value) if key in merged else value
            return merged
        raise ProgramTypeError("cannot add a dictionary and a scalar")
    if isinstance(b, dict):
        if not b:
            return a
        raise ProgramTypeError("cannot add a scalar and a dictionary")
    a, b = _promoted(a, b)
    return a + b


def _promoted(a: Any, b: Any) -> tuple[Any, Any]:
    """float32 arithmetic only between two float32 values; with anything else (a constant, a
    float64 or an int) in float64, as in the compiled kernels (not NumPy's weak promotion)."""
    if isinstance(a, np.float32) is not isinstance(b, np.float32):
        return np.float64(a), np.float64(b)
    return a, b


def mul(a: Any, b: Any) -> Any:
    """Semi-ring `*`: scalar products, scaling, and the outer (tensor) product of dictionaries."""
    if isinstance(a, dict):
        return _entries((key, mul(value, b)) for key, value in a.items())
    if isinstance(b, dict):
        return _entries((key, mul(a, value)) for key, value in b.items())
    a, b = _promoted(a, b)
    return a * b


def _entries(pairs) -> dict:
    """A dictionary of these (key, value) pairs but those whose value is {} (no entry)."""
    return {key: value for key, value in pairs if not (isinstance(value, dict) and not value)}


def neg(a: Any) -> Any:
    if isinstance(a, dict):
        return {key: neg(value) for key, value in a.items()}
    return -a


def lookup(d: Any, key: Any) -> Any:
    """`d(key)`; a missing key gives the zero of d's value type."""
    if not isinstance(d, dict):
        raise ProgramTypeError(f"cannot look up a key in the scalar {d!r}")
    key = as_key(key)
    if key in d:
        return d[key]
    shape = getattr(d, "shape", None)
    if shape is not None:
        if not 0 <= key < shape[0]:
            raise ShapeError(f"the program looks up key {key} in axis {d.axis} of input {d.name!r}, "
                             f"whose extent is {shape[0]} (keys 0..{shape[0] - 1}); check the "
                             f"program's index arithmetic or the input's shape")
        if len(shape) > 1:  # a missing row of a sparse input: still shaped below
            return shaped({}, shape[1:], d.name, d.axis + 1)
    return zero_like_values(d)


def zero_like_values(d: dict) -> Any:
    for value in d.values():
        if isinstance(value, bool):
            return False
        if isinstance(value, int):
            return 0
        if isinstance(value, np.floating):
            return value.dtype.type(0)
        if isinstance(value, float):
            return 0.0
        return ZERO
    return ZERO


def from_input(value: Any, name: str = "input", shapes: bool = True) -> Any:
    """Turn a user input into an interpreter value (numbers, nested dicts).

    numpy arrays give every entry (dense); scipy.sparse, pydata/sparse and torch sparse give
    only the stored entries; storage-format objects give their logical dictionary. With `shapes`
    the dictionaries know the input's shape (ShapedDict): a lookup outside it is a ShapeError;
    without, it reads as a missing key (the zero), the semantics of physical arrays.
    """
    result = _from_input(value, name)
    return result if shapes else _plain(result)


def _plain(value: Any) -> Any:
    if isinstance(value, ShapedDict):
        return {key: _plain(item) for key, item in value.items()}
    return value


def _from_input(value: Any, name: str) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, dict):
        return without_empty(_check_dict(value, name))
    to_logical = getattr(value, "to_logical", None)
    if callable(to_logical):
        shape = getattr(value, "shape", None)
        logical = without_empty(to_logical())  # an empty fiber under a dense level is no entry
        return shaped(logical, shape, name) if shape else logical
    if isinstance(value, np.generic):
        return value if isinstance(value, np.float32) else value.item()
    if isinstance(value, np.ndarray):
        return _array_to_dict(value, name)
    try:
        import scipy.sparse as sp

        if sp.issparse(value):
            from sparsad.formats.validate import check_scipy

            check_scipy(value, f"input {name!r}")  # before tocoo, which trusts the arrays
            coo = value.tocoo()
            result: dict = {}
            rows, cols, data = coo.row.tolist(), coo.col.tolist(), _leaves(coo.data)
            zero = data[0] * 0 if data else 0.0
            for i, j, v in zip(rows, cols, data):
                row = result.setdefault(int(i), {})
                row[int(j)] = row.get(int(j), zero) + v
            return shaped(result, value.shape, name)
    except ImportError:  # pragma: no cover
        pass
    from sparsad.formats import as_format  # conversions of torch, pydata/sparse and others

    stored = as_format(value, name=name)
    return shaped(without_empty(stored.to_logical()), stored.shape, name)


def without_empty(value: Any) -> Any:
    """value without the keys whose value is (or becomes, once pruned) the empty dictionary:
    `{k -> {}}` is no entry. Numbers, zeros included, stay."""
    if not isinstance(value, dict) or not any(isinstance(item, dict) for item in value.values()):
        return value
    pruned = {}
    for key, item in value.items():
        item = without_empty(item)
        if not (isinstance(item, dict) and not item):
            pruned[key] = item
    return pruned


def _array_to_dict(array, name: str) -> Any:
    if array.dtype.kind not in "biuf":
        raise InputError(f"input {name!r} has dtype {array.dtype}; use a real, integer or bool array")
    if array.ndim == 0:
        return array[()] if array.dtype == np.float32 else array.item()
    listed = array.tolist()
    leaf = np.float32 if array.dtype == np.float32 else None  # float32 stays float32, as compiled

    def build(nested, axis):
        if isinstance(nested, list):
            # a row of no entries (an extent 0 below) is the empty dictionary: no key, as compiled
            items = ((i, build(item, axis + 1)) for i, item in enumerate(nested))
            result = ShapedDict((i, item) for i, item in items if not (isinstance(item, dict) and not item))
            result.shape, result.name, result.axis = array.shape[axis:], name, axis
            return result
        return leaf(nested) if leaf is not None else nested

    return build(listed, 0)


def _leaves(values) -> list:
    """Python floats, or numpy float32 scalars for float32 arrays (kept in their precision)."""
    if values.dtype == np.float32:
        return list(values)
    return values.tolist()


def _check_dict(value: dict, name: str) -> dict:
    for key, item in value.items():
        if isinstance(key, bool) or not isinstance(key, int):
            raise InputError(f"input {name!r} has the key {key!r}; dictionary keys must be integers")
        if isinstance(item, dict):
            _check_dict(item, name)
    return value


def prune_zeros(value: Any) -> Any:
    """The same value with zero entries and empty sub-dictionaries removed."""
    if isinstance(value, dict):
        pruned = {}
        for key, item in value.items():
            item = prune_zeros(item)
            if isinstance(item, dict):
                if item:
                    pruned[key] = item
            elif item != 0:
                pruned[key] = item
        return pruned
    return value


def values_equal(a: Any, b: Any, rtol: float = 1e-12, atol: float = 1e-12) -> bool:
    """Semantic equality: a missing key equals zero; numbers compare with tolerances."""
    a, b = _normalize(a), _normalize(b)
    return _close(prune_zeros(a), prune_zeros(b), rtol, atol)


def _normalize(value: Any) -> Any:
    if isinstance(value, (dict, bool, int, float)):
        return value
    return from_input(value)


def _close(a: Any, b: Any, rtol: float, atol: float) -> bool:
    if isinstance(a, dict) or isinstance(b, dict):
        a = a if isinstance(a, dict) else ({} if a == 0 else None)
        b = b if isinstance(b, dict) else ({} if b == 0 else None)
        if a is None or b is None:
            return False
        # a key on one side only compares with zero, within the tolerances (1e-69 vs a pruned 0.0)
        return all(_close(a.get(k, 0), b.get(k, 0), rtol, atol) for k in sorted(a.keys() | b.keys()))
    if isinstance(a, float) or isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return math.isclose(a, b, rel_tol=rtol, abs_tol=atol)
    return a == b
