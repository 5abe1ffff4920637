"""A storage format: a sequence of per-mode levels plus the order in which modes are stored.

`Format(levels, mode_order)` stores logical mode `mode_order[d]` at level `d`; row-major
formats have `mode_order = (0, 1, ...)`, CSC and column-major have `(1, 0)`. Every named
format below is only a choice of levels, mode order and field names; none has code of its own.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from sparsad.errors import FormatError
from sparsad.formats.levels import Compressed, Dense, Level, Singleton, kind


@dataclass(frozen=True)
class Format:
    """A storage format: one level per stored mode (outermost first), the order in which the
    logical modes are stored (`mode_order`), and the name of the values array. Field names left
    unset are filled in (`pos1`, `idx1`, ...).

    >>> from sparsad.formats import Compressed, Dense, Format, as_format
    >>> my_csr = Format((Dense(), Compressed()), name="my_csr")
    >>> my_csr.describe()
    'my_csr [dense, compressed] mode order (0, 1)'
    >>> as_format([[1.0, 0.0], [0.0, 2.0]], my_csr).to_logical()
    {0: {0: 1.0}, 1: {1: 2.0}}
    """

    levels: tuple[Level, ...]
    mode_order: tuple[int, ...] | None = None
    values: str = "val"
    name: str = field(default="custom", compare=False)

    def __post_init__(self):
        levels = tuple(self.levels)
        if not levels:
            raise FormatError("a format needs at least one level; store a scalar as a Python float")
        order = self.mode_order if self.mode_order is not None else tuple(range(len(levels)))
        order = tuple(int(m) for m in order)
        if sorted(order) != list(range(len(levels))):
            raise FormatError(f"mode_order {order} must be a permutation of 0..{len(levels) - 1}, "
                              f"one entry per level")
        if isinstance(levels[0], Singleton):
            raise FormatError("the first level cannot be a singleton level (it has no parent "
                              "positions); use Compressed(unique=False) as in COO")
        for depth, level in enumerate(levels[:-1]):
            if not level.unique and not all(isinstance(x, Singleton) for x in levels[depth + 1:]):
                raise FormatError(f"level {depth} is not unique, so every level below it must be "
                                  f"a singleton level (as in COO)")
        levels = tuple(_with_default_names(level, depth) for depth, level in enumerate(levels))
        object.__setattr__(self, "levels", levels)
        object.__setattr__(self, "mode_order", order)
        names = [name for depth, level in enumerate(levels) for name in level.fields(depth == 0)]
        names.append(self.values)
        if len(set(names)) != len(names):
            raise FormatError(f"field names {names} must be distinct")
        for name in names:
            if not name.isidentifier():
                raise FormatError(f"field name {name!r} must be an identifier")

    @property
    def order(self) -> int:
        """The number of logical modes (1 for vectors, 2 for matrices, ...)."""
        return len(self.levels)

    def fields(self) -> tuple[str, ...]:
        """Names of the physical fields, outermost level first, values last."""
        cached = self.__dict__.get("_field_names")  # immutable: computed once (read on every call)
        if cached is None:
            names = [name for depth, level in enumerate(self.levels) for name in level.fields(depth == 0)]
            cached = self.__dict__["_field_names"] = (*names, self.values)
        return cached

    @property
    def is_dense(self) -> bool:
        cached = self.__dict__.get("_is_dense")  # immutable: computed once (read on every call)
        if cached is None:
            cached = self.__dict__["_is_dense"] = all(isinstance(level, Dense) for level in self.levels)
        return cached

    def describe(self) -> str:
        levels = ", ".join(kind(level) + ("" if level.unique else "(non-unique)")
                           for level in self.levels)
        return f"{self.name} [{levels}] mode order {self.mode_order}"

    def physical_definition(self, name: str):
        """The Physical SDQLite expression of this format over variables `{name}_{field}`."""
        from sparsad.formats.definition import physical_definition

        return physical_definition(self, name)


def _with_default_names(level: Level, depth: int) -> Level:
    if isinstance(level, Dense):
        return level if level.size else replace(level, size=f"dim{depth}")
    if isinstance(level, Compressed):
        return replace(level, pos=level.pos or f"pos{depth}", crd=level.crd or f"idx{depth}",
                       count=level.count or "nnz")
    return level if level.crd else replace(level, crd=f"idx{depth}")


# ----- the named formats (Fig. 10 field names where the paper gives them) -----

DENSE_VECTOR = Format((Dense("len"),), values="V", name="dense vector")
COO_VECTOR = Format((Compressed(count="len", crd="row"),), name="coo vector")
CSR = Format((Dense("len"), Compressed(pos="pos", crd="idx")), name="csr")
CSC = Format((Dense("len"), Compressed(pos="pos", crd="idx")), (1, 0), name="csc")
DCSR = Format((Compressed(count="len", crd="row"), Compressed(pos="pos", crd="idx")), name="dcsr")
DCSC = Format((Compressed(count="len", crd="col"), Compressed(pos="pos", crd="idx")), (1, 0),
              name="dcsc")
COO_MATRIX = Format((Compressed(unique=False, count="len", crd="row"), Singleton(crd="col")),
                    name="coo matrix")
DENSE_ROW_MAJOR = Format((Dense("rows"), Dense("cols")), values="M", name="dense row-major")
DENSE_COL_MAJOR = Format((Dense("cols"), Dense("rows")), (1, 0), values="M",
                         name="dense column-major")


def dense(order: int, column_major: bool = False) -> Format:
    """n-dimensional dense array (`M`, extents `dim0..`), row-major or column-major.

    >>> dense(2).describe()
    'dense row-major [dense, dense] mode order (0, 1)'
    """
    _check_order(order)
    if order == 1:
        return DENSE_VECTOR
    if order == 2:
        return DENSE_COL_MAJOR if column_major else DENSE_ROW_MAJOR
    modes = tuple(reversed(range(order))) if column_major else tuple(range(order))
    levels = tuple(Dense(f"dim{m}") for m in modes)
    return Format(levels, modes, values="M",
                  name=f"dense {order}-d {'column' if column_major else 'row'}-major")


def coo(order: int) -> Format:
    """n-dimensional COO: coordinates `idx0..idx{n-1}` of length `len`, values `val`.

    >>> coo(3).name
    'coo 3-d'
    """
    _check_order(order)
    if order == 1:
        return COO_VECTOR
    if order == 2:
        return COO_MATRIX
    levels = (Compressed(unique=False, count="len", crd="idx0"),
              *(Singleton(unique=(d == order - 1), crd=f"idx{d}") for d in range(1, order)))
    return Format(levels, name=f"coo {order}-d")


def csf(order: int) -> Format:
    """Compressed sparse fiber: every level compressed (`len`, `idx0`, then `pos{d}`, `idx{d}`).

    >>> [type(level).__name__ for level in csf(3).levels]
    ['Compressed', 'Compressed', 'Compressed']
    """
    _check_order(order)
    if order == 1:
        return COO_VECTOR
    levels = (Compressed(count="len", crd="idx0"),
              *(Compressed(pos=f"pos{d}", crd=f"idx{d}") for d in range(1, order)))
    return Format(levels, name=f"csf {order}-d")


def _check_order(order: int) -> None:
    if not isinstance(order, int) or order < 1:
        raise FormatError(f"a format's order must be an int >= 1, got {order!r}")


_BY_NAME = {
    "dense": lambda n: dense(n),
    "dense_row_major": lambda n: dense(n),
    "dense_col_major": lambda n: dense(n, column_major=True),
    "dense_column_major": lambda n: dense(n, column_major=True),
    "coo": coo,
    "csf": csf,
    "csr": lambda n: _only(n, 2, "csr", CSR),
    "csc": lambda n: _only(n, 2, "csc", CSC),
    "dcsr": lambda n: _only(n, 2, "dcsr", DCSR),
    "dcsc": lambda n: _only(n, 2, "dcsc", DCSC),
}

FORMAT_NAMES = tuple(_BY_NAME)


def _only(order: int, wanted: int, name: str, fmt: Format) -> Format:
    if order != wanted:
        raise FormatError(f"format {name!r} stores {wanted}-d tensors, not {order}-d; "
                          f"use 'coo', 'csf' or 'dense' for other orders")
    return fmt


def resolve(fmt: "Format | str", order: int) -> Format:
    """A Format from a Format or a name such as 'csr', for a tensor of the given order.

    >>> resolve("csr", 2).name
    'csr'
    >>> resolve("coo", 3).name
    'coo 3-d'
    """
    if isinstance(fmt, Format):
        if fmt.order != order:
            raise FormatError(f"format {fmt.name!r} has {fmt.order} levels but the tensor has "
                              f"{order} modes")
        return fmt
    if isinstance(fmt, str):
        key = fmt.lower().replace("-", "_").replace(" ", "_")
        if key in _BY_NAME:
            return _BY_NAME[key](order)
        raise FormatError(f"unknown format name {fmt!r}; expected one of {', '.join(FORMAT_NAMES)} "
                          f"or a sparsad.formats.Format")
    raise FormatError(f"format must be a name or a sparsad.formats.Format, not {type(fmt).__name__}")
