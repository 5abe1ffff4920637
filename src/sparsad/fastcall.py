"""The fast path of a compiled program called again on inputs of the same kinds.

A `CompiledProgram` call finds its plan from a signature of the inputs (formats, shapes, dtypes,
scalar types), converts each input to its stored form and gathers the kernel's arrays: about
ten microseconds of Python for a kernel that may run in one. After a call that ran compiled,
the program keeps a `RepeatCall`: per input name, in the order given, what the next call needs
to check to know that the same plan applies, and the one step that makes its kernel arrays:

- a Python float or int: the same type; the value is passed on;
- a C-contiguous float64/float32 ndarray stored dense without a copy: the same type, shape,
  dtype and contiguity; its buffer is passed on as the values array (read live by the kernel,
  so a change in place is seen, never stale);
- anything else (scipy.sparse, StoredTensor): the same type, and the program's own conversion
  step (`codegen.reuse`: an unchanged matrix is reused only when its index arrays still have the
  same checksum; a changed one is converted and validated again), whose signature must be the
  plan's;
- an input the plan's kernel does not read at all (a derivative that does not depend on it, such
  as the gradient of `lam * sum(x * x) + f(A, x)` w.r.t. lam, which never reads A): what selects
  the plan (type, shape, dtype, and for a stored input the same object: a new one is converted and
  validated on the full path, as on a first call). Its contents cannot change the answer, so they
  are neither converted nor checksummed again.

An input the plan reads in row order (`plan["reorder"]`: a CSC or COO read by rows) gets its
row-order copy (`CompiledProgram._reordered`, reused only while unchanged); inputs the plan
reads at another input's positions (`plan["shared"]`: a tangent with its matrix's pattern) must
still have that pattern, checked on every call as on the full path (one Numba pass per index
array, `codegen.reuse.same_contents`).

A derivative (`ad.api.Derivative`) of one wrt input has its own repeat on top: the seed renamed
to its internal input, the compiled program's repeat, and the result's shape checked against the
one its type gives (worked out once per plan), with no pass over its values.

The first repeat of a record also settles what later ones may skip (`RepeatCall.settle`): the
result's dtype, and `Kernel.prepare` when it passed every array on unchanged and the steps pin
what it checks (a caller's own StoredTensor is always prepared: nothing else checks its arrays).

A call that does not match (other names or order, another type, shape or dtype) takes the full
path, which records a new `RepeatCall`. The kernel's bounds guard (`codegen.guard`) runs on every
call but one kind: a prepared repeat whose stored inputs were all reused from the conversion
cache, when the guard reads the contents only of arrays the cache vouches for (the conversion's
own arrays and the fingerprinted index arrays: `codegen.reuse`) and the scalars are equal, gets
the answer the guard gave such a call before (`RepeatCall.passed`): every input of that answer is
provably what it was. Invalid inputs raise the same errors as on the full path (they fail the
match or the conversion, which validates).

>>> import numpy as np, scipy.sparse as sp, sparsad
>>> spmv = sparsad.compile("sum(<i, r> in A) { i -> sum(<j, a> in r) a * x(j) }")
>>> A, x = sp.identity(3, format="csr") * 2.0, np.ones(3)
>>> spmv(A=A, x=x)
array([2., 2., 2.])
>>> x[0] = 5.0  # changed in place: the repeated call reads the new values
>>> spmv(A=A, x=x)
array([10.,  2.,  2.])
"""
from __future__ import annotations

from operator import is_
from typing import Any, Mapping

import numpy as np

#: what RepeatCall.run returns when the inputs do not match its record
MISS = object()

_SCALAR, _DENSE, _STORED, _UNREAD = 0, 1, 2, 3
_FLOATS = (np.dtype(np.float64), np.dtype(np.float32))


class RepeatCall:
    """What a repeated call of one plan checks and does, per input (see the module docstring)."""

    __slots__ = ("names", "steps", "constants", "plan", "kind", "dense", "reorder", "shared", "unread", "dtype",
                 "extra", "pinned", "scalars", "guarded")

    def __init__(self, names: tuple, steps: tuple, constants: dict, plan: dict, kind: str | None, dense: bool):
        # steps, one per input in call order: (name, how, type, then per `how`)
        #   _SCALAR: (None, None, None); _DENSE: (shape, dtype, the values array's kernel name);
        #   _STORED: (the plan's signature of it, whether the conversion cache holds it, None);
        #   _UNREAD: (shape, dtype, the recorded object for a stored input, else None)
        self.names, self.steps, self.constants, self.plan = names, steps, constants, plan
        self.kind, self.dense = kind, dense  # formats.natural.input_kind of the recorded inputs
        # inputs read through a row-order copy; (second, first) pairs read by position; the
        # index arrays the kernel no longer takes (see CompiledProgram._make_plan)
        self.reorder = frozenset(plan.get("reorder", ()))
        self.shared, self.unread = tuple(plan.get("shared", ())), tuple(plan.get("unread", ()))
        # set by `settle` on the first repeat: the kernel's result dtype (fixed by the dtypes the
        # steps pin), and when later repeats may skip `Kernel.prepare`, the stored inputs' bound
        # forms they must still have and the arrays the kernel does not take
        self.dtype = None
        self.extra: tuple = ()
        self.pinned: dict | None = None
        self.scalars = tuple(step[0] for step in steps if step[1] == _SCALAR)
        # (the stored inputs' proofs, the scalars, the guard's answer) of a pinned call whose
        # guard read only arrays proven unchanged (see `passed`)
        self.guarded: tuple | None = None

    @classmethod
    def record(cls, program: Any, inputs: Mapping[str, Any], plan: dict, bound: Mapping[str, tuple]) \
            -> "RepeatCall | None":
        """The record of a call that just ran `plan`'s kernel on `inputs`, whose stored forms that
        call bound are `bound` (by name, as `CompiledProgram._bound` returns them: not the program's
        last bound forms, which another thread may have replaced meanwhile), or None when some
        input's kind has no fast step."""
        from sparsad.formats import StoredTensor
        from sparsad.formats.natural import input_kind

        steps, constants = [], {}
        read = _read_arrays(plan)
        for name, value in inputs.items():
            kind = type(value)
            if kind is float or kind is int:
                steps.append((name, _SCALAR, kind, None, None, None))
                continue
            memo = bound.get(name)
            if memo is None:
                return None
            tensor = memo[0]
            if read is not None and not any(field in read for field in memo[2]) and \
                    name not in plan["reorder"] and not any(name in pair for pair in plan["shared"]):
                shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
                if type(shape) is tuple and isinstance(dtype, np.dtype):
                    steps.append((name, _UNREAD, kind, shape, dtype, None if kind is np.ndarray else value))
                    continue
            if kind is np.ndarray and name not in program.formats and _shares_values(value, tensor):
                fields = tensor.physical_arrays(name)
                key = f"{name}_{tensor.format.values}"
                sizes = {k: v for k, v in fields.items() if k != key}
                if not all(type(v) is int for v in sizes.values()):
                    return None
                constants.update(sizes)
                steps.append((name, _DENSE, kind, value.shape, value.dtype, key))
                continue
            module = kind.__module__ or ""
            if not (module.startswith("scipy.sparse") or kind is StoredTensor):
                return None  # torch, jax, pydata: their conversions are not pinned by type alone
            steps.append((name, _STORED, kind, memo[1], tensor is not value, None))
        kind, dense = input_kind(inputs)
        return cls(tuple(inputs), tuple(steps), constants, plan, kind, dense)

    def settle(self, program: Any, kernel: Any, arrays: dict, prepared: dict) -> None:
        """After the first repeat (`arrays` as `arrays` gave them, `prepared` as `Kernel.prepare`
        made them): the result dtype, and whether later repeats are prepared already.

        They are when `prepare` passed every array on unchanged, by the same name, and each will
        have the same properties again: a dense input's dtype, shape and contiguity and a scalar's
        type are pinned by the steps; a converted input's arrays are the same objects while its
        bound form is the same (`codegen.reuse` checks the user's arrays' layouts on every call,
        and a new bound form is prepared again). A StoredTensor of the caller's (arrays of theirs
        that nothing else checks), a row-order copy, derived arrays or renamed parameters: always
        prepared."""
        self.dtype = kernel._dtype(prepared)
        if self.reorder or self.plan.get("derived") or any(p != n for p, n in kernel._external.items()) or \
                any(how == _STORED and not detail for _, how, _, _, detail, _ in self.steps):
            return
        if any(prepared[name] is not arrays.get(name) for name in prepared):
            return
        pinned = {name: program._bound_inputs.get(name) for name, how, *_ in self.steps if how == _STORED}
        if any(memo is None or any(field in prepared and arrays.get(field) is not array
                                   for field, array in memo[2].items()) for memo in pinned.values()):
            return  # (another thread bound another form meanwhile: these arrays are not its)
        self.extra = tuple(name for name in arrays if name not in prepared)
        self.pinned = pinned

    def arrays(self, program: Any, inputs: Mapping[str, Any]) -> tuple[dict, bool, tuple | None] | Any:
        """(the kernel's arrays for `inputs`, whether they are prepared already: see `settle`, and
        the proofs of the stored inputs: per stored input in step order, the fields of its
        stored form the conversion cache vouches for (`ConversionCache.proven`), None when one
        was not reused from the cache), or MISS when the inputs do not match the record."""
        if len(inputs) != len(self.names) or tuple(inputs) != self.names:
            return MISS
        arrays = dict(self.constants)
        tensors = {} if self.shared else None
        pinned = self.pinned
        prepared = pinned is not None
        proofs: list | None = []
        for name, how, kind, expected, detail, key in self.steps:
            value = inputs[name]
            if type(value) is not kind:
                return MISS
            if how == _SCALAR:
                arrays[name] = value
            elif how == _UNREAD:
                if value.shape != expected or value.dtype != detail or (key is not None and value is not key):
                    return MISS
            elif how == _DENSE:
                if value.shape != expected or value.dtype != detail or not value.flags.c_contiguous:
                    return MISS
                arrays[key] = value if value.ndim == 1 else value.reshape(-1)
            else:
                tensor = program._conversions.reused(name, value, program.formats.get(name)) if detail else None
                if tensor is None:
                    proofs = None
                elif proofs is not None:
                    proofs.append(program._conversions.proven(name, tensor))
                bound = program._bound(name, tensor if tensor is not None else program._store_one(name, value))
                if bound[1] != expected:
                    return MISS
                if prepared and bound is not pinned.get(name):
                    prepared = False  # another stored form: its arrays are prepared again
                if tensors is not None:
                    tensors[name] = bound[0]
                arrays.update(program._reordered(name, value, bound[0]) if name in self.reorder else bound[2])
        if tensors is not None:  # the plan reads `second` at `first`'s positions: same pattern?
            _same_pattern = program._same_pattern
            for second, first in self.shared:
                if second not in tensors or first not in tensors or \
                        not _same_pattern(tensors[first], tensors[second]):
                    return MISS
        for name in self.unread:
            arrays.pop(name, None)
        if prepared:
            for name in self.extra:
                arrays.pop(name, None)
        return arrays, prepared, (tuple(proofs) if proofs is not None else None)

    def passed(self, kernel: Any, arrays: dict, proofs: tuple | None) -> tuple | None:
        """The guard's answer (`Kernel.checked`) for a prepared call's `arrays`, reused from an
        earlier call of this record when it cannot differ.

        The guard's answer is a function of the contents of the arrays it `reads`, the lengths
        of arrays and the scalars. On a prepared call every stored input is its pinned bound
        form (the same array objects); when each was reused from the conversion cache with the
        same proof as then (the fields whose contents cannot have changed: `codegen.reuse`), the
        guard reads only proven fields, and the scalars are equal, every one of those is what it
        was, dense inputs' lengths being pinned by their steps. A pattern result's row pointers
        (made per call, returned to the caller) are never reused."""
        memo = self.guarded
        scalars = tuple(arrays.get(name) for name in self.scalars) if self.scalars else ()  # (None: not taken)
        if memo is not None and proofs is not None and len(proofs) == len(memo[0]) and \
                all(map(is_, proofs, memo[0])) and scalars == memo[1]:
            sizes, extents = memo[2]
            return list(sizes), list(extents), None
        answer = kernel.checked(arrays)
        if answer is None or answer[2] is not None or proofs is None:
            return answer
        proven = {f"{name}_{field}" for (name, how, *_), fields in
                  zip((step for step in self.steps if step[1] == _STORED), proofs) for field in fields}
        if kernel.guard_reads <= proven:
            self.guarded = (proofs, scalars, (tuple(answer[0]), tuple(answer[1])))
        return answer


def _read_arrays(plan: dict) -> frozenset | None:
    """The physical arrays (by name) the plan's kernel and its per-call derived arrays read, or
    None when that is not known (then every input is treated as read)."""
    kernel = plan.get("kernel")
    names = getattr(kernel, "_external_names", None)
    if names is None:
        return None
    derived = set()
    for spec in plan.get("derived", ()):  # (base, pos, idx, ncols): interchange transposes pos/idx
        if len(spec) != 4:
            return None
        derived.update(spec[1:3])
    return names | derived


def _shares_values(value: np.ndarray, tensor: Any) -> bool:
    """Whether a dense stored form's values array is `value`'s own buffer, in row-major order."""
    values = getattr(tensor, "values", None)
    return bool(value.ndim >= 1 and value.flags.c_contiguous and value.dtype in _FLOATS
                and tensor.format.is_dense and tuple(tensor.format.mode_order) == tuple(range(value.ndim))
                and isinstance(values, np.ndarray) and values.dtype == value.dtype and values.size == value.size
                and values.__array_interface__["data"][0] == value.__array_interface__["data"][0])
