"""Builders of tensor-network graphs: matrix product states (MPS) and operators (MPO).

Each builder declares one Variable per site and returns the einsum contracting the whole chain,
so derivatives of network expressions (energies, overlaps, local Hessians for DMRG) are ordinary
graphs. Site layouts (left bond first, as AutoHOOT's):

* MPS: end sites (bond, phys), middle sites (left, right, phys); the output has one physical
  axis per site.
* MPO: end sites (bond, up, down), middle sites (left, right, up, down); the output lists every
  up axis, then every down axis. With symmetric=True each site is declared symmetric in
  (up, down), as a real Hamiltonian built from symmetric local operators is, which lets the
  optimizer merge a local Hessian's transposed halves into one einsum.

>>> from sparsad import tensor as T
>>> state, sites = T.mps(4, ranks=[5, 6, 7])
>>> state.shape, [s.shape for s in sites]
((2, 2, 2, 2), [(5, 2), (5, 6, 2), (6, 7, 2), (7, 2)])
"""
from __future__ import annotations

import numbers
from typing import Sequence

from sparsad.errors import InputError
from sparsad.tensor.graph import fresh_letters
from sparsad.tensor.nodes import Einsum, Variable


def _check(num: int, ranks: Sequence[int], size: int, what: str) -> list[int]:
    if not isinstance(num, numbers.Integral) or num < 2:
        raise InputError(f"{what}: num={num!r} sites; a chain needs at least 2")
    ranks = list(ranks)
    if len(ranks) != num - 1 or any(not isinstance(r, numbers.Integral) or r < 1 for r in ranks):
        raise InputError(f"{what}: ranks={ranks!r} must be {num - 1} positive bond dimensions for {num} sites")
    if not isinstance(size, numbers.Integral) or size < 1:
        raise InputError(f"{what}: size={size!r} must be a positive physical dimension")
    return [int(r) for r in ranks]


def _bond_shape(ranks: list[int], i: int, num: int) -> list[int]:
    return ([ranks[i - 1]] if i > 0 else []) + ([ranks[i]] if i < num - 1 else [])


def mps(num: int, ranks: Sequence[int], size: int = 2, name: str = "A") -> tuple[Einsum, list[Variable]]:
    """(the full state as one einsum of shape (size,) * num, the site Variables A0..A{num-1}).

    >>> from sparsad import tensor as T
    >>> state, sites = T.mps(3, [2, 2], size=2)
    >>> state.shape, [site.shape for site in sites]
    ((2, 2, 2), [(2, 2), (2, 2, 2), (2, 2)])
    """
    ranks = _check(num, ranks, size, "mps")
    letters = iter(fresh_letters(2 * num))
    bonds = [next(letters) for _ in ranks]
    phys = [next(letters) for _ in range(num)]
    sites, subs = [], []
    for i in range(num):
        left = [bonds[i - 1]] if i > 0 else []
        right = [bonds[i]] if i < num - 1 else []
        shape = _bond_shape(ranks, i, num) + [size]
        sites.append(Variable(f"{name}{i}", shape))
        subs.append("".join(left + right + [phys[i]]))
    return Einsum(",".join(subs) + "->" + "".join(phys), *sites), sites


def mpo(num: int, ranks: Sequence[int], size: int = 2, name: str = "H",
        symmetric: bool = True) -> tuple[Einsum, list[Variable]]:
    """(the full operator as one einsum, up axes then down axes; the site Variables).

    >>> from sparsad import tensor as T
    >>> op, sites = T.mpo(2, [3], size=2)
    >>> op.shape, [site.shape for site in sites]
    ((2, 2, 2, 2), [(3, 2, 2), (3, 2, 2)])
    """
    ranks = _check(num, ranks, size, "mpo")
    letters = iter(fresh_letters(3 * num))
    bonds = [next(letters) for _ in ranks]
    up = [next(letters) for _ in range(num)]
    down = [next(letters) for _ in range(num)]
    sites, subs = [], []
    for i in range(num):
        left = [bonds[i - 1]] if i > 0 else []
        right = [bonds[i]] if i < num - 1 else []
        legs = left + right
        shape = _bond_shape(ranks, i, num) + [size, size]
        symmetry = [[len(legs), len(legs) + 1]] if symmetric else []
        sites.append(Variable(f"{name}{i}", shape, symmetry=symmetry))
        subs.append("".join(legs + [up[i], down[i]]))
    return Einsum(",".join(subs) + "->" + "".join(up + down), *sites), sites
