"""Structured tensor inverse (§5.2): the inverse of a Kronecker-structured einsum is the
Kronecker product of the inverses of its factors, (A ⊗ B)^{-1} = A^{-1} ⊗ B^{-1}.

An einsum is Kronecker-structured when its operands fall into groups that share no subscript;
each group then owns some row axes (the first `ind` output axes) and some column axes. Groups
that are square (as many row entries as column entries) are inverted alone; the others are
merged into one group. Also: inv(c x) = inv(x) / c, and the inverse of a product of identities
is the same identities read the other way.
"""
from __future__ import annotations

from math import prod
from typing import Sequence

from sparsad.tensor.fuse import UnionFind
from sparsad.tensor.graph import rewrite
from sparsad.tensor.nodes import Einsum, Identity, Node, Scale, TensorInverse
from sparsad.tensor.transposes import resolve, transpose_parts


def _identity_inverse(node: Einsum, ind: int) -> Node | None:
    """inv of einsum(I, I, ... -> P + Q) where each I ties a row axis to a column axis."""
    if not all(isinstance(op, Identity) for op in node.inputs):
        return None
    rows, cols = node.out_sub[:ind], node.out_sub[ind:]
    for sub in node.in_subs:
        a, b = sub
        if not ((a in rows and b in cols) or (a in cols and b in rows)):
            return None
    return Einsum(node.subscripts.split("->")[0] + "->" + cols + rows, *node.inputs)


def _groups(node: Einsum) -> list[list[int]]:
    uf = UnionFind()
    owner: dict[str, int] = {}
    for k, sub in enumerate(node.in_subs):
        uf.find(k)
        for ch in sub:
            if ch in owner:
                uf.union(owner[ch], k)
            else:
                owner[ch] = k
    groups: dict[int, list[int]] = {}
    for k in range(len(node.inputs)):
        groups.setdefault(uf.find(k), []).append(k)
    return list(groups.values())


def decompose_inverse(inv: TensorInverse) -> Node:
    x, ind = inv.inputs[0], inv.ind
    if isinstance(x, Identity):
        return x                                   # I^{-1} = I: no n^3 inverse
    parts = transpose_parts(x)
    if parts is not None:                          # inv(A^T) = inv(A)^T
        source, perm = resolve(x)
        if perm == tuple(range(len(perm))):
            return decompose_inverse(TensorInverse(source, ind)) if source.ndim == x.ndim else inv
    if isinstance(x, Scale):
        return Scale(1.0 / float(x.coef), decompose_inverse(TensorInverse(x.inputs[0], ind)))
    if not isinstance(x, Einsum):
        return inv
    simple = _identity_inverse(x, ind)
    if simple is not None:
        return simple
    sizes = x.sizes()
    rows, cols = x.out_sub[:ind], x.out_sub[ind:]
    square, rest = [], []
    for g in _groups(x):
        letters = set("".join(x.in_subs[k] for k in g))
        r = [c for c in rows if c in letters]
        c_ = [c for c in cols if c in letters]
        if r and c_ and prod(sizes[c] for c in r) == prod(sizes[c] for c in c_):
            square.append(g)
        else:
            rest.append(g)
    if rest:
        merged = sorted(k for g in rest for k in g)
        letters = set("".join(x.in_subs[k] for k in merged))
        if square and not (any(c in letters for c in rows) and any(c in letters for c in cols)):
            square[0] = sorted(square[0] + merged)   # a scalar factor joins a square group
        else:
            square.append(merged)
    if len(square) < 2:
        return inv
    subs, ops = [], []
    for g in square:
        letters = set("".join(x.in_subs[k] for k in g))
        r = "".join(c for c in rows if c in letters)
        c_ = "".join(c for c in cols if c in letters)
        factor = Einsum(",".join(x.in_subs[k] for k in g) + "->" + r + c_, *[x.inputs[k] for k in g])
        factor_inv = _identity_inverse(factor, len(r)) or TensorInverse(factor, len(r))
        subs.append(c_ + r)
        ops.append(factor_inv)
    return Einsum(",".join(subs) + "->" + cols + rows, *ops)


def decompose_inverses(nodes: Sequence[Node]) -> list[Node]:
    """Split every structured TensorInverse into inverses of its Kronecker factors."""
    return rewrite(list(nodes), lambda n: decompose_inverse(n) if isinstance(n, TensorInverse) else n)
