"""Per-mode storage levels: dense, compressed and singleton (the level-format view of storage).

A level describes how the coordinates of one mode are stored beneath the positions of the
level above it. Levels hold no data; a `StoredTensor` holds the arrays. Field names are the
names of the physical arrays (Fig. 10 of ∇SD uses `len`, `pos`, `idx`, `row`, ...); `None`
means "let the format choose a default from the level's depth".

- Dense(N): every coordinate 0..N-1 under every parent position; child position is
  `parent * N + coordinate`. Field: the extent N (`size`).
- Compressed: the coordinates under parent position q are `crd[pos[q]:pos[q+1]]`; child
  position is the index into `crd`. At the root there is a single parent, so `pos` is just
  `[0, len]` and is not stored: the root keeps only `len` and `crd` (Fig. 10's vector COO).
- Singleton: exactly one coordinate `crd[q]` under each parent position q; the position passes
  through unchanged (the trailing modes of COO).

`unique`: no two entries under the same ancestors share a coordinate.
`ordered`: coordinates appear in increasing order under the same ancestors.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Dense:
    """A level that holds every key 0..size-1 of its mode (field `size`: the extent).

    >>> from sparsad.formats import Compressed, Dense, Format
    >>> Format((Dense(), Dense())).levels[1]
    Dense(size='dim1')
    """

    size: str | None = None

    unique = True
    ordered = True

    def fields(self, root: bool) -> tuple[str, ...]:
        return (self.size,)


@dataclass(frozen=True)
class Compressed:
    """A level that holds only the keys present, as CSR's columns: positions `pos` per parent
    entry and coordinates `crd` (at the root: `count` entries and their coordinates).

    >>> from sparsad.formats import Compressed, Dense, Format
    >>> Format((Dense(), Compressed())).levels[1]
    Compressed(unique=True, ordered=True, pos='pos1', crd='idx1', count='nnz')
    """

    unique: bool = True
    ordered: bool = True
    pos: str | None = None
    crd: str | None = None
    count: str | None = None  # the root's number of entries (the `len` of Fig. 10's vector COO)

    def fields(self, root: bool) -> tuple[str, ...]:
        return (self.count, self.crd) if root else (self.pos, self.crd)


@dataclass(frozen=True)
class Singleton:
    """A level with one coordinate `crd` per parent entry, as the column array of COO.

    >>> from sparsad.formats import Compressed, Format, Singleton, as_format
    >>> my_coo = Format((Compressed(unique=False), Singleton()))
    >>> as_format([[0.0, 3.0], [4.0, 0.0]], my_coo).to_logical()
    {0: {1: 3.0}, 1: {0: 4.0}}
    """

    unique: bool = True
    ordered: bool = True
    crd: str | None = None

    def fields(self, root: bool) -> tuple[str, ...]:
        return (self.crd,)


Level = Dense | Compressed | Singleton


def kind(level: Level) -> str:
    """'dense', 'compressed' or 'singleton'."""
    return type(level).__name__.lower()
