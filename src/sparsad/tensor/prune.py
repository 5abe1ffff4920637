"""Redundant node pruning (§5.2): Identity nodes, inverse-times-matrix, trivial einsums.

* An Identity operand I(a, b) of an einsum is dropped by renaming b to a, unless both a and b are
  output letters (then it states a structural constraint, e.g. the symmetry of a Hessian) or the
  merged letter would be left on no operand.
* A contraction of a tensor with its tensor inverse over the matching axes becomes identities
  (then pruned by the rule above). The tensor may appear fused into the einsum: its own operands
  are looked for among the consumer's operands with a consistent wiring.
* Two readings of an orthonormal matrix contracted over its orthonormal axis are an identity.
* A scalar constant operand of an einsum is pulled out as a Scale.
* einsum('ab->ab', x) is x; Scale(1, x) is x; x ** 1 is x.
"""
from __future__ import annotations

import itertools
from typing import Sequence

from sparsad.tensor.cse import leaf_equal
from sparsad.tensor.graph import fresh_letters, rewrite
from sparsad.tensor.transposes import resolve, transpose_parts
from sparsad.tensor.nodes import (
    Constant, Einsum, Identity, Node, Power, Scale, TensorInverse, Variable, is_zero, zeros,
)


def prune_identities_einsum(node: Einsum) -> Node:
    subs = list(node.in_subs)
    ops = list(node.inputs)
    out = node.out_sub
    # A scalar constant operand is a coefficient: pulled out as a Scale (zeros are left for
    # prune_trivial, which replaces the whole einsum).
    factor = 1
    for k in reversed(range(len(ops))):
        if len(ops) > 1 and isinstance(ops[k], Constant) and ops[k].shape == () and not is_zero(ops[k]):
            factor *= float(ops[k].value)
            del subs[k], ops[k]
    changed = True
    while changed:
        changed = False
        for k, op in enumerate(ops):
            if not isinstance(op, Identity) or len(ops) == 1:
                continue
            a, b = subs[k]
            others = "".join(s for j, s in enumerate(subs) if j != k)
            if a == b:
                if a in out:
                    continue
                if a not in others:      # trace(I) = n, a scalar factor
                    factor *= op.n
                del subs[k], ops[k]      # diag(I) is all ones: a factor of one
                changed = True
                break
            if a in out and b in out:
                continue
            keep, drop = (b, a) if a in out or (a not in others and b in others) else (a, b)
            renamed = [s.replace(drop, keep) for j, s in enumerate(subs) if j != k]
            if keep not in "".join(renamed):
                continue
            subs = renamed
            del ops[k]
            out = out.replace(drop, keep)
            changed = True
            break
    if len(ops) == len(node.inputs):
        return node
    result = Einsum(",".join(subs) + "->" + out, *ops)
    return Scale(factor, result) if factor != 1 else result


def prune_orthonormal_einsum(node: Einsum) -> Node:
    """M M^T = I for orthonormal="column" (M^T M = I for "row"): two readings of one orthonormal
    matrix contracted over that axis, and nowhere else, become an Identity (pruned next)."""
    subs, ops, out = list(node.in_subs), list(node.inputs), node.out_sub
    changed, any_change = True, False
    while changed:
        changed = False
        counts: dict[str, int] = {}
        for ch in "".join(subs) + out:
            counts[ch] = counts.get(ch, 0) + 1
        for j, k in itertools.combinations(range(len(ops)), 2):
            m = ops[j]
            if m is not ops[k] or not isinstance(m, Variable) or not m.orthonormal:
                continue
            axis = 1 if m.orthonormal == "column" else 0
            c = subs[j][axis]
            if subs[k][axis] != c or counts[c] != 2:
                continue
            keep = subs[j][1 - axis] + subs[k][1 - axis]
            subs[j], ops[j] = keep, Identity(m.shape[1 - axis])
            del subs[k], ops[k]
            changed = any_change = True
            break
    if not any_change:
        return node
    return Einsum(",".join(subs) + "->" + out, *ops)


def prune_trivial(node: Node) -> Node:
    """einsum('abc->abc', x) -> x, Scale(1, x) -> x, an einsum with a zero operand -> zeros."""
    if isinstance(node, Einsum) and any(is_zero(op) for op in node.inputs):
        return zeros(node.shape)
    if isinstance(node, Einsum) and len(node.inputs) == 1 and node.in_subs[0] == node.out_sub:
        return node.inputs[0]
    if transpose_parts(node) is not None:
        source, perm = resolve(node)         # a permutation within the source's symmetry: the source
        if perm == tuple(range(len(perm))):
            return source
    if isinstance(node, Scale) and float(node.coef) == 1.0:
        return node.inputs[0]
    if isinstance(node, Power) and node.exponent == 1.0:
        return node.inputs[0]
    return node


def _match_operands(pattern: Einsum, subs: list[str], ops: list[Node], used: set[int]):
    """Yield (positions, letter map) where pattern's operands appear among ops with one wiring."""
    def extend(i, positions, mapping):
        if i == len(pattern.inputs):
            yield list(positions), dict(mapping)
            return
        want_sub = pattern.in_subs[i]
        for pos, (sub, op) in enumerate(zip(subs, ops)):
            if pos in positions or pos in used or not leaf_equal(op, pattern.inputs[i]):
                continue
            new = dict(mapping)
            ok = True
            for p_ch, c_ch in zip(want_sub, sub):
                if new.get(p_ch, c_ch) != c_ch:
                    ok = False
                    break
                new[p_ch] = c_ch
            if ok and len(set(new.values())) == len(new):
                yield from extend(i + 1, positions + [pos], new)

    yield from extend(0, [], {})


def prune_inverse_einsum(node: Einsum) -> Node:
    """Replace A · A^{-1} (A an operand or fused in) by identities."""
    subs, ops, out = list(node.in_subs), list(node.inputs), node.out_sub
    for k, inv in enumerate(ops):
        if not isinstance(inv, TensorInverse):
            continue
        target, ind = inv.inputs[0], inv.ind
        nq = target.ndim - ind
        inv_sub = subs[k]
        q_y, p_y = inv_sub[:nq], inv_sub[nq:]
        if isinstance(target, Einsum):
            pattern = target
        else:
            letters = "".join(fresh_letters(target.ndim))
            pattern = Einsum(f"{letters}->{letters}", target)
        for positions, mapping in itertools.islice(_match_operands(pattern, subs, ops, {k}), 64):
            t_out = "".join(mapping[c] for c in pattern.out_sub)
            p_a, q_a = t_out[:ind], t_out[ind:]
            inner = set(mapping.values()) - set(t_out)
            rest = "".join(s for j, s in enumerate(subs) if j not in positions and j != k) + out
            if any(c in rest or c in inv_sub for c in inner):
                continue
            if q_a == q_y and not any(c in rest for c in q_a) and len(set(q_a)) == nq:
                pairs = list(zip(p_a, p_y))          # A[p, q] Y[q, p'] = I[p, p']
            elif p_a == p_y and not any(c in rest for c in p_a) and len(set(p_a)) == ind:
                pairs = list(zip(q_y, q_a))          # Y[q, p] A[p, q'] = I[q, q']
            else:
                continue
            keep = [j for j in range(len(ops)) if j not in positions and j != k]
            new_subs = [subs[j] for j in keep] + [a + b for a, b in pairs]
            sizes = node.sizes()
            new_ops = [ops[j] for j in keep] + [Identity(sizes[b]) for _, b in pairs]
            return Einsum(",".join(new_subs) + "->" + out, *new_ops)
    return node


def prune(nodes: Sequence[Node]) -> list[Node]:
    """Inverse pruning, identity pruning and trivial-node removal, bottom-up."""
    def one(node: Node) -> Node:
        if isinstance(node, Einsum):
            node = prune_orthonormal_einsum(node)
        if isinstance(node, Einsum):
            node = prune_inverse_einsum(node)
        if isinstance(node, Einsum):
            node = prune_identities_einsum(node)
        return prune_trivial(node)

    return rewrite(list(nodes), one)
