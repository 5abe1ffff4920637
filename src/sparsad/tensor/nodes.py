"""Immutable nodes of an einsum graph (AutoHOOT §3), checked when they are built.

Every node knows its `shape` and its `inputs`; nothing is ever mutated, so passes build new
nodes and graphs share sub-graphs freely. Nodes hash and compare by identity: structural
equality (up to renaming of subscripts) is the business of `sparsad.tensor.cse`.
"""
from __future__ import annotations

import itertools
import numbers
from typing import Iterable, Sequence

import numpy as np
from opt_einsum import get_symbol

from sparsad.errors import DerivativeRuleError, DTypeError, FormatError, InputError, ShapeError, UnsupportedError

_ids = itertools.count()

SPARSE_FORMATS = ("coo", "csr")


class Node:
    """Base class: an immutable vertex of an einsum graph.

    >>> from sparsad import tensor as T
    >>> x = T.Variable("x", (2, 3))
    >>> isinstance(x, T.Node), x.shape, x.ndim
    (True, (2, 3), 2)
    """

    __slots__ = ("inputs", "shape", "uid")

    def __init__(self, inputs: Sequence["Node"], shape: Sequence[int]):
        for k, operand in enumerate(inputs):
            if not isinstance(operand, Node):
                raise InputError(f"{type(self).__name__}: input {k} is a {type(operand).__name__}, "
                                 "not a graph node; wrap arrays in Constant(...) or declare a Variable")
        object.__setattr__(self, "inputs", tuple(inputs))
        object.__setattr__(self, "shape", tuple(int(s) for s in shape))
        object.__setattr__(self, "uid", next(_ids))

    def __setattr__(self, name, value):
        raise AttributeError(f"{type(self).__name__} nodes are immutable; build a new node instead")

    # ----- description -------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def symmetry(self) -> tuple[tuple[int, ...], ...]:
        """Groups of axes the value is symmetric under (any permutation within a group leaves it
        unchanged); the optimizer may use it, so it is declared, never guessed."""
        return ()

    @property
    def label(self) -> str:
        """A short human name used in error messages and printed graphs."""
        return f"{type(self).__name__.lower()}{self.uid}"

    def params(self) -> tuple:
        """The non-node parameters, enough to rebuild the node from new inputs."""
        return ()

    def with_inputs(self, inputs: Sequence["Node"]) -> "Node":
        """The same operation applied to other inputs (the node itself when nothing changed)."""
        if all(a is b for a, b in zip(inputs, self.inputs)) and len(inputs) == len(self.inputs):
            return self
        return type(self)._rebuild(self.params(), tuple(inputs))

    @classmethod
    def _rebuild(cls, params: tuple, inputs: tuple) -> "Node":
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{self.label} {type(self).__name__} shape={self.shape}>"

    # ----- Python operators -------------------------------------------------------------
    def __add__(self, other):
        return Add(self, _as_node(other, self.shape, "+"))

    def __radd__(self, other):
        return Add(_as_node(other, self.shape, "+"), self)

    def __sub__(self, other):
        return Sub(self, _as_node(other, self.shape, "-"))

    def __rsub__(self, other):
        return Sub(_as_node(other, self.shape, "-"), self)

    def __neg__(self):
        return Scale(-1, self)

    def __mul__(self, other):
        if isinstance(other, numbers.Number):
            return Scale(other, self)
        return _hadamard(self, other)

    def __rmul__(self, other):
        if isinstance(other, numbers.Number):
            return Scale(other, self)
        return _hadamard(other, self)

    def __truediv__(self, other):
        if isinstance(other, numbers.Number):
            return Scale(1.0 / other, self)
        return _hadamard(self, Elementwise("reciprocal", other))

    def __pow__(self, power):
        if isinstance(power, Node):
            raise UnsupportedError("x ** y with a tensor exponent is not supported; write exp(y * log(x))")
        if power == 1:
            return self
        if power == 2:
            return _hadamard(self, self)
        if power == -1:
            return Elementwise("reciprocal", self)
        if power == 0.5:
            return Elementwise("sqrt", self)
        return Power(self, power)

    def __matmul__(self, other):
        if self.ndim == 2 and other.ndim == 2:
            return einsum("ij,jk->ik", self, other)
        if self.ndim == 2 and other.ndim == 1:
            return einsum("ij,j->i", self, other)
        if self.ndim == 1 and other.ndim == 2:
            return einsum("j,jk->k", self, other)
        if self.ndim == 1 and other.ndim == 1:
            return einsum("j,j->", self, other)
        raise ShapeError(f"@ needs operands of order 1 or 2, got shapes {self.shape} and {other.shape}; "
                         "use einsum for higher orders")

    @property
    def T(self) -> "Node":
        return Transpose(self, tuple(reversed(range(self.ndim))))

    def sum(self, axes: int | Iterable[int] | None = None) -> "Node":
        return Sum(self, axes)


def _as_node(value, shape, op: str) -> Node:
    if isinstance(value, Node):
        return value
    if isinstance(value, numbers.Number):
        return Constant(np.full(shape, float(value)))
    raise InputError(f"operator {op}: cannot combine a node with a {type(value).__name__}; "
                     "wrap arrays in Constant(...)")


def _hadamard(a: Node, b: Node) -> Node:
    if not isinstance(b, Node) or not isinstance(a, Node):
        raise InputError("operator *: multiply nodes by nodes or by Python numbers")
    if a.ndim == 0 or b.ndim == 0:
        scalar, tensor = (a, b) if a.ndim == 0 else (b, a)
        letters = "".join(get_symbol(i) for i in range(tensor.ndim))
        return einsum(f",{letters}->{letters}", scalar, tensor)
    if a.shape != b.shape:
        raise ShapeError(f"operator *: shapes {a.shape} ({a.label}) and {b.shape} ({b.label}) differ; "
                         "elementwise products need equal shapes (use einsum to broadcast)")
    letters = "".join(get_symbol(i) for i in range(a.ndim))
    return einsum(f"{letters},{letters}->{letters}", a, b)


# ======================================================================================
# Sources
# ======================================================================================
ORTHONORMAL = ("row", "column")


def check_symmetry_groups(name: str, shape: tuple, symmetry) -> tuple[tuple[int, ...], ...]:
    """symmetry=[[0, 2], [1, 3]]: disjoint groups of at least two axes of equal extent."""
    try:
        groups = tuple(tuple(int(a) for a in g) for g in symmetry)
    except (TypeError, ValueError):
        raise InputError(f"Variable {name!r}: symmetry={symmetry!r} must be a list of axis groups, "
                         "e.g. [[0, 1]]") from None
    seen: set[int] = set()
    for g in groups:
        if len(g) < 2 or any(not 0 <= a < len(shape) for a in g) or seen & set(g) or len(set(g)) != len(g):
            raise InputError(f"Variable {name!r}: symmetry group {list(g)} must name two or more distinct "
                             f"axes of shape {shape}, each in one group only")
        if len({shape[a] for a in g}) != 1:
            raise ShapeError(f"Variable {name!r}: symmetric axes {list(g)} have different extents "
                             f"{[shape[a] for a in g]}")
        seen |= set(g)
    return tuple(tuple(sorted(g)) for g in groups)


class Variable(Node):
    """An input fed at run time. `sparse` may be "coo" or "csr" (then feeds stay sparse).

    symmetry=[[0, 1]] declares the value symmetric under swapping those axes (groups of any size,
    checked on every feed). orthonormal="column" declares a matrix M with M @ M.T = I (contracting
    its second axis with itself gives an identity), "row" one with M.T @ M = I; also checked.

    >>> import numpy as np
    >>> from sparsad import tensor as T
    >>> S = T.Variable("S", (2, 2), symmetry=[[0, 1]])
    >>> T.evaluate(S.sum(), {S: np.array([[1., 2.], [2., 1.]])})[0]
    np.float64(6.0)
    >>> T.evaluate(S.sum(), {"S": np.array([[1., 2.], [0., 1.]])})
    Traceback (most recent call last):
    ...
    sparsad.errors.InputError: ...
    """

    __slots__ = ("name", "sparse", "_symmetry", "orthonormal")

    def __init__(self, name: str, shape: Sequence[int], sparse: str | None = None,
                 symmetry: Sequence[Sequence[int]] = (), orthonormal: str | None = None):
        if not isinstance(name, str) or not name:
            raise InputError("Variable: name must be a non-empty string")
        shape = tuple(shape)
        if any((not isinstance(s, numbers.Integral)) or s < 0 for s in shape):
            raise ShapeError(f"Variable {name!r}: shape {shape} must be non-negative integers")
        if sparse is not None and sparse not in SPARSE_FORMATS:
            raise FormatError(f"Variable {name!r}: sparse={sparse!r}; use one of {SPARSE_FORMATS} or None")
        if sparse == "csr" and len(shape) != 2:
            raise FormatError(f"Variable {name!r}: CSR needs a matrix, got shape {shape}; use sparse='coo'")
        groups = check_symmetry_groups(name, shape, symmetry)
        if orthonormal is not None:
            if orthonormal not in ORTHONORMAL or len(shape) != 2:
                raise InputError(f"Variable {name!r}: orthonormal={orthonormal!r} needs a matrix and one of "
                                 f"{ORTHONORMAL}")
            rows, cols = shape
            if (orthonormal == "column" and rows > cols) or (orthonormal == "row" and cols > rows):
                raise ShapeError(f"Variable {name!r}: a {rows}x{cols} matrix cannot be {orthonormal}-orthonormal")
            if sparse:
                raise UnsupportedError(f"Variable {name!r}: orthonormal sparse matrices are not supported")
        super().__init__((), shape)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "sparse", sparse)
        object.__setattr__(self, "_symmetry", groups)
        object.__setattr__(self, "orthonormal", orthonormal)

    @property
    def symmetry(self) -> tuple[tuple[int, ...], ...]:
        return self._symmetry

    @property
    def label(self) -> str:
        return self.name

    def params(self):
        return (self.name, self.shape, self.sparse, self._symmetry, self.orthonormal)

    def __repr__(self):
        extra = f", sparse={self.sparse!r}" if self.sparse else ""
        extra += f", symmetry={[list(g) for g in self._symmetry]}" if self._symmetry else ""
        extra += f", orthonormal={self.orthonormal!r}" if self.orthonormal else ""
        return f"Variable({self.name!r}, {self.shape}{extra})"


class Constant(Node):
    """A fixed array baked into the graph.

    >>> import numpy as np
    >>> from sparsad import tensor as T
    >>> c = T.Constant(np.array([1., 2.]))
    >>> T.evaluate(2 * c, {})[0]
    array([2., 4.])
    """

    __slots__ = ("value", "name")

    def __init__(self, value, name: str | None = None):
        raw = np.asarray(value)
        if raw.dtype.kind == "c":
            raise DTypeError(f"Constant {name or ''}: complex values are not supported (dtype {raw.dtype}); "
                             "split the real and imaginary parts into two real tensors")
        if raw.dtype.kind not in "biuf":
            raise DTypeError(f"Constant {name or ''}: values of dtype {raw.dtype} are not numbers; "
                             "pass a real numeric array")
        array = np.array(raw, dtype=np.result_type(raw.dtype, np.float32))
        array.setflags(write=False)
        super().__init__((), array.shape)
        object.__setattr__(self, "value", array)
        object.__setattr__(self, "name", name)

    @property
    def label(self) -> str:
        return self.name or f"const{self.uid}"

    def params(self):
        return (self.value, self.name)


class Identity(Node):
    """The n x n identity matrix (§4.2): the building block of explicit Jacobians.

    >>> import numpy as np
    >>> from sparsad import tensor as T
    >>> x = T.Variable("x", (2,))
    >>> T.evaluate(T.einsum("ij,j->i", T.Identity(2), x), {x: np.array([1., 2.])})[0]
    array([1., 2.])
    """

    __slots__ = ("n",)

    def __init__(self, n: int):
        if not isinstance(n, numbers.Integral) or n < 0:
            raise ShapeError(f"Identity: size {n!r} must be a non-negative integer")
        super().__init__((), (n, n))
        object.__setattr__(self, "n", int(n))

    def params(self):
        return (self.n,)

    @property
    def symmetry(self) -> tuple[tuple[int, ...], ...]:
        return ((0, 1),)


class Zeros(Constant):
    """An all-zero constant. The optimizer recognises zeros by this type (and by looking at small
    constants' values), never by a name: a Constant named "zeros" is just a Constant.

    >>> import numpy as np
    >>> from sparsad import tensor as T
    >>> T.evaluate(T.Zeros((2,)), {})[0]
    array([0., 0.])
    """

    __slots__ = ()

    def __init__(self, shape: Sequence[int]):
        shape = tuple(shape)
        if any((not isinstance(s, numbers.Integral)) or s < 0 for s in shape):
            raise ShapeError(f"zeros: shape {shape} must be non-negative integers")
        # a read-only broadcast view: no memory however large the shape
        Node.__init__(self, (), shape)
        object.__setattr__(self, "value", np.broadcast_to(np.zeros((), dtype=np.float64), shape))
        object.__setattr__(self, "name", None)

    @property
    def label(self) -> str:
        return f"zeros{self.uid}"

    def params(self):
        return (self.shape,)


def zeros(shape: Sequence[int]) -> Zeros:
    """An all-zero tensor of `shape` (e.g. a direction that an HVP should prune away).

    >>> import numpy as np
    >>> from sparsad import tensor as T
    >>> T.evaluate(T.zeros((2,)), {})[0]
    array([0., 0.])
    """
    return Zeros(shape)


def is_zero(node: Node) -> bool:
    """True when `node` is known to be all zeros: a Zeros node, or a small Constant of zeros.

    Decided from the type and the stored values only, never from a name."""
    if isinstance(node, Zeros):
        return True
    return isinstance(node, Constant) and node.value.size <= 4096 and not np.any(node.value)


# ======================================================================================
# Operations
# ======================================================================================
# Any other printable character names an axis: passes that fuse long chains need more symbols than
# the 52 ASCII letters (opt_einsum.get_symbol continues into Unicode); executors respell them.
RESERVED_SUBSCRIPT_CHARS = frozenset(",->.")


def parse_subscripts(subscripts: str, n_operands: int) -> tuple[tuple[str, ...], str]:
    """Split 'ij,jk->ik' into (('ij', 'jk'), 'ik'); implicit outputs follow NumPy's rule."""
    if not isinstance(subscripts, str):
        raise InputError(f"einsum: subscripts must be a string, got {type(subscripts).__name__}")
    text = subscripts.replace(" ", "")
    if "." in text:
        raise UnsupportedError("einsum: ellipsis '...' is not supported; name every axis")
    if "->" in text:
        lhs, out = text.split("->", 1)
        if "->" in out:
            raise InputError(f"einsum: subscripts {subscripts!r} contain '->' twice")
    else:
        lhs = text
        counts: dict[str, int] = {}
        for ch in lhs.replace(",", ""):
            counts[ch] = counts.get(ch, 0) + 1
        out = "".join(sorted(ch for ch, c in counts.items() if c == 1))
    ins = tuple(lhs.split(",")) if (lhs or n_operands > 0) else ()
    if n_operands == 1 and lhs == "":
        ins = ("",)
    if len(ins) != n_operands:
        raise InputError(f"einsum: subscripts {subscripts!r} name {len(ins)} operand(s) "
                         f"but {n_operands} operand(s) were given")
    for sub in ins + (out,):
        for ch in sub:
            if ch in RESERVED_SUBSCRIPT_CHARS or not ch.isprintable():
                raise InputError(f"einsum: subscript character {ch!r} in {subscripts!r} cannot name an axis; "
                                 "use letters (any other printable symbol but , - > . also works)")
    return ins, out


class Einsum(Node):
    """A tensor contraction in Einstein notation over any number of operands.

    >>> import numpy as np
    >>> from sparsad import tensor as T
    >>> A = T.Variable("A", (2, 2))
    >>> x = T.Variable("x", (2,))
    >>> y = T.Einsum("ij,j->i", A, x)
    >>> y.shape
    (2,)
    >>> T.evaluate(y, {A: np.eye(2), x: np.array([1., 2.])})[0]
    array([1., 2.])
    """

    __slots__ = ("in_subs", "out_sub")

    def __init__(self, subscripts: str, *operands: Node):
        if not operands:
            raise InputError(f"einsum {subscripts!r}: needs at least one operand")
        ins, out = parse_subscripts(subscripts, len(operands))
        sizes: dict[str, tuple[int, int, int]] = {}
        for k, (sub, op) in enumerate(zip(ins, operands)):
            if not isinstance(op, Node):
                raise InputError(f"einsum: operand {k} is a {type(op).__name__}, not a graph node")
            if len(sub) != op.ndim:
                raise ShapeError(f"einsum {subscripts!r}: operand {k} ({op.label}, shape {op.shape}) "
                                 f"has {op.ndim} axes but its subscripts {sub!r} name {len(sub)}")
            for axis, ch in enumerate(sub):
                size = op.shape[axis]
                if ch in sizes and sizes[ch][0] != size:
                    first_size, first_op, first_axis = sizes[ch]
                    raise ShapeError(
                        f"einsum {subscripts!r}: axis {axis} of operand {k} ({op.label}) has size {size} "
                        f"but subscript {ch!r} has size {first_size} at axis {first_axis} of operand "
                        f"{first_op} ({operands[first_op].label})")
                sizes.setdefault(ch, (size, k, axis))
        if len(set(out)) != len(out):
            raise InputError(f"einsum {subscripts!r}: output subscripts {out!r} repeat a letter")
        for ch in out:
            if ch not in sizes:
                raise InputError(f"einsum {subscripts!r}: output subscript {ch!r} names no input axis")
        super().__init__(operands, [sizes[ch][0] for ch in out])
        object.__setattr__(self, "in_subs", ins)
        object.__setattr__(self, "out_sub", out)

    @property
    def subscripts(self) -> str:
        return ",".join(self.in_subs) + "->" + self.out_sub

    def sizes(self) -> dict[str, int]:
        """Extent of every subscript letter."""
        result = {}
        for sub, op in zip(self.in_subs, self.inputs):
            for ch, size in zip(sub, op.shape):
                result[ch] = size
        return result

    def params(self):
        return (self.subscripts,)

    @classmethod
    def _rebuild(cls, params, inputs):
        return cls(params[0], *inputs)


def einsum(subscripts: str, *operands: Node) -> Einsum:
    """Build an Einsum node, e.g. ``einsum("ij,jk->ik", A, B)``; shapes are checked now.

    >>> import numpy as np
    >>> from sparsad import tensor as T
    >>> A = T.Variable("A", (2, 2))
    >>> B = T.Variable("B", (2, 4))
    >>> T.einsum("ij,jk->ik", A, B).shape
    (2, 4)
    """
    return Einsum(subscripts, *operands)


def tensordot(a: Node, b: Node, axes: int | Sequence = 2) -> Einsum:
    """numpy.tensordot: `axes` an integer (the last `axes` of a meet the first of b) or a pair
    (axes of a, axes of b) of integers or equal-length lists; free axes of a, then of b, remain.

    >>> import numpy as np
    >>> from sparsad import tensor as T
    >>> a, b = T.Variable("a", (2, 3)), T.Variable("b", (3, 4))
    >>> T.tensordot(a, b, 1).shape, T.tensordot(a, b, [[1], [0]]).shape
    ((2, 4), (2, 4))
    """
    if not isinstance(a, Node) or not isinstance(b, Node):
        raise InputError("tensordot: a and b must be graph nodes")
    if isinstance(axes, numbers.Integral) and not isinstance(axes, bool):
        if not 0 <= axes <= min(a.ndim, b.ndim):
            raise ShapeError(f"tensordot: axes={axes} must be between 0 and the orders of "
                             f"{a.label} ({a.ndim}) and {b.label} ({b.ndim})")
        a_axes, b_axes = list(range(a.ndim - axes, a.ndim)), list(range(axes))
    else:
        try:
            a_axes, b_axes = axes
            a_axes = [a_axes] if isinstance(a_axes, numbers.Integral) else list(a_axes)
            b_axes = [b_axes] if isinstance(b_axes, numbers.Integral) else list(b_axes)
        except (TypeError, ValueError):
            raise InputError(f"tensordot: axes={axes!r} must be an integer or a pair of axis lists, "
                             "e.g. [[1], [0]]") from None
        if len(a_axes) != len(b_axes):
            raise ShapeError(f"tensordot: axes={axes!r} pair {len(a_axes)} axes of {a.label} "
                             f"with {len(b_axes)} of {b.label}")
        for name, node, group in (("first", a, a_axes), ("second", b, b_axes)):
            if any(not isinstance(k, numbers.Integral) or not -node.ndim <= k < node.ndim for k in group):
                raise ShapeError(f"tensordot: {name} axes {group} out of range for {node.label} "
                                 f"of order {node.ndim}")
        a_axes = [int(k) % a.ndim for k in a_axes]
        b_axes = [int(k) % b.ndim for k in b_axes]
        if len(set(a_axes)) != len(a_axes) or len(set(b_axes)) != len(b_axes):
            raise ShapeError(f"tensordot: axes={axes!r} repeat an axis")
    la = [get_symbol(i) for i in range(a.ndim)]
    lb = [get_symbol(a.ndim + i) for i in range(b.ndim)]
    for i, j in zip(a_axes, b_axes):
        lb[j] = la[i]
    out = [c for i, c in enumerate(la) if i not in a_axes] + [c for j, c in enumerate(lb) if j not in b_axes]
    return einsum(f"{''.join(la)},{''.join(lb)}->{''.join(out)}", a, b)


class _Binary(Node):
    __slots__ = ()
    symbol = "?"

    def __init__(self, a: Node, b: Node):
        super().__init__((a, b), getattr(a, "shape", ()))
        if a.shape != b.shape:
            raise ShapeError(f"{type(self).__name__}: shapes {a.shape} ({a.label}) and {b.shape} ({b.label}) "
                             f"differ at axis {_first_mismatch(a.shape, b.shape)}; "
                             "no broadcasting: use einsum to expand a tensor first")

    @classmethod
    def _rebuild(cls, params, inputs):
        return cls(*inputs)


def _first_mismatch(a, b) -> int:
    for axis, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return axis
    return min(len(a), len(b))


class Add(_Binary):
    """Elementwise a + b of equal shapes.

    >>> import numpy as np
    >>> from sparsad import tensor as T
    >>> a, b = T.Variable("a", (2,)), T.Variable("b", (2,))
    >>> T.evaluate(T.Add(a, b), {a: np.array([1., 2.]), b: np.array([3., 5.])})[0]
    array([4., 7.])
    """
    __slots__ = ()
    symbol = "+"


class Sub(_Binary):
    """Elementwise a - b of equal shapes.

    >>> import numpy as np
    >>> from sparsad import tensor as T
    >>> a, b = T.Variable("a", (2,)), T.Variable("b", (2,))
    >>> T.evaluate(a - b, {a: np.array([1., 2.]), b: np.array([3., 5.])})[0]
    array([-2., -3.])
    """
    __slots__ = ()
    symbol = "-"


class Scale(Node):
    """coef * x for a real scalar `coef` (a number or a SymPy number).

    >>> import numpy as np
    >>> from sparsad import tensor as T
    >>> x = T.Variable("x", (2,))
    >>> T.evaluate(T.Scale(3, x), {x: np.array([1., 2.])})[0]
    array([3., 6.])
    """

    __slots__ = ("coef",)

    def __init__(self, coef, x: Node):
        try:
            float(coef)
        except (TypeError, ValueError):
            raise InputError(f"Scale: coefficient {coef!r} is not a real number") from None
        super().__init__((x,), getattr(x, "shape", ()))
        object.__setattr__(self, "coef", coef)

    def params(self):
        return (self.coef,)

    @classmethod
    def _rebuild(cls, params, inputs):
        return cls(params[0], inputs[0])


# name -> (NumPy implementation name, derivative builder f'(x) as nodes); rules as data.
def _d_exp(x):
    return Elementwise("exp", x)


def _d_log(x):
    return Elementwise("reciprocal", x)


def _d_sin(x):
    return Elementwise("cos", x)


def _d_cos(x):
    return Scale(-1, Elementwise("sin", x))


def _d_tanh(x):
    return Elementwise("sech2", x)


def _d_sech2(x):
    return Scale(-2, _hadamard(Elementwise("sech2", x), Elementwise("tanh", x)))


def _d_sqrt(x):
    return Scale(0.5, Elementwise("reciprocal", Elementwise("sqrt", x)))


def _d_reciprocal(x):
    r = Elementwise("reciprocal", x)
    return Scale(-1, _hadamard(r, r))


def _d_square(x):
    return Scale(2, x)


ELEMENTWISE = {
    "exp": _d_exp,
    "log": _d_log,
    "sin": _d_sin,
    "cos": _d_cos,
    "tanh": _d_tanh,
    "sech2": _d_sech2,
    "sqrt": _d_sqrt,
    "reciprocal": _d_reciprocal,
    "square": _d_square,
}


class Elementwise(Node):
    """f(x) applied entry by entry, f one of ELEMENTWISE.

    >>> import numpy as np
    >>> from sparsad import tensor as T
    >>> x = T.Variable("x", (2,))
    >>> T.evaluate(T.Elementwise("exp", x), {x: np.zeros(2)})[0]
    array([1., 1.])
    """

    __slots__ = ("fn",)

    def __init__(self, fn: str, x: Node):
        if fn not in ELEMENTWISE:
            raise UnsupportedError(f"Elementwise: unknown function {fn!r}; known: {sorted(ELEMENTWISE)}")
        super().__init__((x,), getattr(x, "shape", ()))
        object.__setattr__(self, "fn", fn)

    def derivative(self) -> Node:
        rule = ELEMENTWISE.get(self.fn)
        if rule is None:
            raise DerivativeRuleError(f"Elementwise {self.fn!r} has no derivative rule")
        return rule(self.inputs[0])

    def params(self):
        return (self.fn,)

    @classmethod
    def _rebuild(cls, params, inputs):
        return cls(params[0], inputs[0])


def _make_fn(name):
    def fn(x: Node) -> Elementwise:
        return Elementwise(name, x)

    fn.__name__ = name
    fn.__doc__ = (f"Elementwise {name}(x), as numpy.{name}.\n\n"
                  ">>> import numpy as np\n>>> from sparsad import tensor as T\n"
                  '>>> x = T.Variable("x", (2,)); v = np.array([0.5, 2.0])\n'
                  f">>> bool(np.allclose(T.evaluate(T.{name}(x), {{x: v}})[0], np.{name}(v)))\nTrue\n")
    return fn


exp, log, sin, cos, tanh, sqrt, reciprocal, square = (
    _make_fn(n) for n in ("exp", "log", "sin", "cos", "tanh", "sqrt", "reciprocal", "square"))


class Power(Node):
    """x ** exponent entry by entry, for a real exponent (x ** 2, ** -1, ** 0.5 build cheaper nodes).

    >>> import numpy as np
    >>> from sparsad import tensor as T
    >>> x = T.Variable("x", (2,))
    >>> T.evaluate(T.Power(x, 3), {x: np.array([1., 2.])})[0]
    array([1., 8.])
    """

    __slots__ = ("exponent",)

    def __init__(self, x: Node, exponent: float):
        if not isinstance(x, Node):
            raise InputError("power: x must be a graph node")
        if isinstance(exponent, bool) or not isinstance(exponent, numbers.Real) or not np.isfinite(exponent):
            raise InputError(f"power: exponent {exponent!r} must be a finite real number")
        super().__init__((x,), x.shape)
        object.__setattr__(self, "exponent", float(exponent))

    def derivative(self) -> Node:
        x, p = self.inputs[0], self.exponent
        if p == 0:
            return Zeros(x.shape)
        if p == 1:
            return Constant(np.ones(x.shape))
        return Scale(p, x if p == 2 else Power(x, p - 1))

    def params(self):
        return (self.exponent,)

    @classmethod
    def _rebuild(cls, params, inputs):
        return cls(inputs[0], params[0])


def power(x: Node, exponent: float) -> Node:
    """x ** exponent entry by entry, e.g. ``power(x, 3)`` or ``power(x, -0.5)``.

    >>> import numpy as np
    >>> from sparsad import tensor as T
    >>> x = T.Variable("x", (2,))
    >>> T.evaluate(T.power(x, -1), {x: np.array([1., 2.])})[0]
    array([1. , 0.5])
    """
    return x ** exponent


def norm(x: Node) -> Node:
    """The Frobenius (2-)norm sqrt(sum x^2) of a tensor of any order, a scalar node.

    >>> import numpy as np
    >>> from sparsad import tensor as T
    >>> x = T.Variable("x", (2,))
    >>> T.evaluate(T.norm(x), {x: np.array([3., 4.])})[0]
    np.float64(5.0)
    """
    if not isinstance(x, Node):
        raise InputError("norm: x must be a graph node")
    letters = "".join(get_symbol(i) for i in range(x.ndim))
    return Elementwise("sqrt", Einsum(f"{letters},{letters}->", x, x))


class Sum(Node):
    """Sum of x over `axes` (all axes when None).

    >>> import numpy as np
    >>> from sparsad import tensor as T
    >>> A = T.Variable("A", (2, 2))
    >>> a = np.array([[1., 2.], [3., 4.]])
    >>> T.evaluate([T.Sum(A, 0), A.sum()], {A: a})
    [array([4., 6.]), np.float64(10.0)]
    """

    __slots__ = ("axes",)

    def __init__(self, x: Node, axes: int | Iterable[int] | None = None):
        if not isinstance(x, Node):
            raise InputError("Sum: x must be a graph node")
        if axes is None:
            axes = tuple(range(x.ndim))
        elif isinstance(axes, numbers.Integral):
            axes = (int(axes),)
        norm = []
        for a in axes:
            if not -x.ndim <= a < x.ndim:
                raise ShapeError(f"Sum: axis {a} is out of range for {x.label} of shape {x.shape}")
            norm.append(a % x.ndim)
        if len(set(norm)) != len(norm):
            raise ShapeError(f"Sum: axes {tuple(axes)} repeat an axis of {x.label}")
        super().__init__((x,), [s for i, s in enumerate(x.shape) if i not in norm])
        object.__setattr__(self, "axes", tuple(sorted(norm)))

    def params(self):
        return (self.axes,)

    @classmethod
    def _rebuild(cls, params, inputs):
        return cls(inputs[0], params[0])

    def as_einsum(self) -> tuple[tuple[str, ...], str]:
        letters = "".join(get_symbol(i) for i in range(self.inputs[0].ndim))
        return (letters,), "".join(ch for i, ch in enumerate(letters) if i not in self.axes)


class Transpose(Node):
    """Axes of x permuted: out.shape[i] == x.shape[perm[i]].

    >>> import numpy as np
    >>> from sparsad import tensor as T
    >>> A = T.Variable("A", (2, 2))
    >>> a = np.array([[1., 2.], [3., 4.]])
    >>> T.evaluate(T.Transpose(A, (1, 0)), {A: a})[0]
    array([[1., 3.],
           [2., 4.]])
    """

    __slots__ = ("perm",)

    def __init__(self, x: Node, perm: Sequence[int]):
        if not isinstance(x, Node):
            raise InputError("Transpose: x must be a graph node")
        perm = tuple(int(p) for p in perm)
        if sorted(perm) != list(range(x.ndim)):
            raise ShapeError(f"Transpose: perm {perm} is not a permutation of the {x.ndim} axes of {x.label}")
        super().__init__((x,), [x.shape[p] for p in perm])
        object.__setattr__(self, "perm", perm)

    def params(self):
        return (self.perm,)

    @classmethod
    def _rebuild(cls, params, inputs):
        return cls(inputs[0], params[0])

    def as_einsum(self) -> tuple[tuple[str, ...], str]:
        letters = "".join(get_symbol(i) for i in range(self.inputs[0].ndim))
        return (letters,), "".join(letters[p] for p in self.perm)


def transpose(x: Node, perm: Sequence[int] | None = None) -> Transpose:
    """Axes of x permuted by `perm` (reversed when None), like numpy.transpose.

    >>> import numpy as np
    >>> from sparsad import tensor as T
    >>> t = T.Variable("t", (2, 3, 4))
    >>> T.transpose(t).shape, T.transpose(t, (1, 0, 2)).shape
    ((4, 3, 2), (3, 2, 4))
    """
    return Transpose(x, tuple(reversed(range(x.ndim))) if perm is None else perm)


class TensorInverse(Node):
    """numpy.linalg.tensorinv: x of shape P + Q (len(P) == ind) has inverse of shape Q + P.

    >>> import numpy as np
    >>> from sparsad import tensor as T
    >>> A = T.Variable("A", (2, 2))
    >>> T.evaluate(T.TensorInverse(A, 1), {A: 2 * np.eye(2)})[0]
    array([[0.5, 0. ],
           [0. , 0.5]])
    """

    __slots__ = ("ind",)

    def __init__(self, x: Node, ind: int = 2):
        if not isinstance(x, Node):
            raise InputError("tensorinv: x must be a graph node")
        if not 0 < ind < x.ndim:
            raise ShapeError(f"tensorinv: ind={ind} must split the {x.ndim} axes of {x.label} "
                             "into two non-empty groups")
        rows = int(np.prod(x.shape[:ind]))
        cols = int(np.prod(x.shape[ind:]))
        if rows != cols:
            raise ShapeError(f"tensorinv: {x.label} of shape {x.shape} is not square for ind={ind}: "
                             f"axes 0..{ind - 1} hold {rows} entries but axes {ind}..{x.ndim - 1} hold {cols}")
        super().__init__((x,), x.shape[ind:] + x.shape[:ind])
        object.__setattr__(self, "ind", int(ind))

    def params(self):
        return (self.ind,)

    @classmethod
    def _rebuild(cls, params, inputs):
        return cls(inputs[0], params[0])


def tensorinv(x: Node, ind: int | None = None) -> TensorInverse:
    """Tensor inverse; `ind` defaults to half the order (a Hessian of shape X.shape + X.shape).

    >>> import numpy as np
    >>> from sparsad import tensor as T
    >>> A = T.Variable("A", (2, 2))
    >>> T.evaluate(T.tensorinv(A), {A: np.array([[2., 0.], [0., 4.]])})[0]
    array([[0.5 , 0.  ],
           [0.  , 0.25]])
    """
    if ind is None:
        if x.ndim % 2:
            raise ShapeError(f"tensorinv: {x.label} has odd order {x.ndim}; pass ind explicitly")
        ind = x.ndim // 2
    return TensorInverse(x, ind)


# Sources are rebuilt from their own parameters (they have no inputs to replace).
Variable._rebuild = classmethod(lambda cls, params, inputs: cls(*params))
Constant._rebuild = classmethod(lambda cls, params, inputs: cls(params[0], params[1]))
Identity._rebuild = classmethod(lambda cls, params, inputs: cls(params[0]))
Zeros._rebuild = classmethod(lambda cls, params, inputs: cls(params[0]))


class SampleAt(Node):
    """x read only at the stored entries of a sparse Variable: a sparse array with its pattern.

    This is how gradients with respect to sparse Variables are masked (the sparsad convention):
    an einsum under SampleAt is evaluated at the pattern's coordinates only (a sampled einsum),
    never densely.

    >>> import numpy as np
    >>> from sparsad import tensor as T
    >>> import scipy.sparse
    >>> X = T.Variable("X", (2, 2), sparse="coo"); W = T.Variable("W", (2, 2))
    >>> g = T.grad(T.einsum("ij,ij->", X, W), X)   # dloss/dX = W, read at X's entries only
    >>> type(g).__name__
    'SampleAt'
    >>> T.evaluate(g, {X: scipy.sparse.coo_matrix(np.eye(2)), W: np.ones((2, 2))})[0].todense()
    array([[1., 0.],
           [0., 1.]])
    """

    __slots__ = ()

    def __init__(self, x: Node, pattern: Variable):
        if not isinstance(pattern, Variable) or not pattern.sparse:
            raise InputError("SampleAt: pattern must be a sparse Variable")
        if not isinstance(x, Node) or x.shape != pattern.shape:
            raise ShapeError(f"SampleAt: {getattr(x, 'label', x)} has shape {getattr(x, 'shape', None)} "
                             f"but the pattern {pattern.name!r} has shape {pattern.shape}")
        super().__init__((x, pattern), x.shape)

    @classmethod
    def _rebuild(cls, params, inputs):
        return cls(*inputs)
