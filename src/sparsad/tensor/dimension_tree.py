"""Constrained contraction paths for dimension trees (§5.4, Algorithm 2).

For the einsum that updates site A_i in an alternating sweep over A_1..A_N, the sites are
contracted in the order A_N, ..., A_{i+1}, A_1, ..., A_{i-1}. Step i of Algorithm 2 contracts
everything except the sites still to come, lets opt_einsum choose a path for that, and keeps the
sub-tree whose root is the first contraction involving site L[i] (its nearest ancestor). The kept
sub-trees are shared between the updates of consecutive sites, and CSE then computes them once.

Inverse operands (from structured inverses, e.g. the Gram inverse of CP-ALS) apply to the
finished gradient, so they are held back to the end rather than contracted into the tree early.
"""
from __future__ import annotations

from typing import Sequence

from sparsad.tensor.contract_path import plan, sampled_einsums, split_einsum
from sparsad.tensor.paths import DEFAULT_PATH
from sparsad.tensor.graph import rewrite, topological
from sparsad.tensor.nodes import Einsum, Node, TensorInverse


def _has_inverse(node: Node) -> bool:
    return any(isinstance(n, TensorInverse) for n in topological([node]))


def constrained_path(node: Einsum, order: Sequence[Node], path: str = DEFAULT_PATH,
                     memory_limit: int | None = None) -> Node:
    """Algorithm 2: an einsum tree for `node` whose sites are contracted in `order`."""
    items: list[tuple[str, Node]] = list(zip(node.in_subs, node.inputs))
    out = node.out_sub
    sites = [s for s in order if any(op is s for _, op in items)]
    held = [_has_inverse(op) and not any(op is x for x in sites) for _, op in items]
    deferred = [it for it, h in zip(items, held) if h]
    items = [it for it, h in zip(items, held) if not h]
    needed_outside = out + "".join(s for s, _ in deferred)
    for i, site in enumerate(sites):
        later = sites[i + 1:]
        is_later = [any(op is x for x in later) for _, op in items]
        chosen = [j for j, late in enumerate(is_later) if not late]
        if len(chosen) < 2:
            continue
        rest = "".join(items[j][0] for j, late in enumerate(is_later) if late) + needed_outside
        letters = "".join(items[j][0] for j in chosen)
        sub_out = "".join(dict.fromkeys(c for c in letters if c in rest))
        steps = plan([items[j][0] for j in chosen], sub_out, [items[j][1].shape for j in chosen], path, memory_limit)
        # Follow the path until the first contraction that involves every copy of `site`.
        groups = [[j] for j in chosen]
        site_pos = {j for j in chosen if items[j][1] is site}
        group = None
        for step in steps:
            merged = sorted(k for pos in step for k in groups[pos])
            for pos in sorted(step, reverse=True):
                del groups[pos]
            groups.append(merged)
            if site_pos <= set(merged):
                group = merged
                break
        if group is None or len(group) < 2:
            continue
        others = "".join(items[j][0] for j in range(len(items)) if j not in group) + needed_outside
        g_letters = "".join(items[j][0] for j in group)
        g_out = "".join(dict.fromkeys(c for c in g_letters if c in others))
        if len(group) == len(items) and not deferred:
            g_out = out            # the last group is the result: no transpose after it
        sub = Einsum(",".join(items[j][0] for j in group) + "->" + g_out, *[items[j][1] for j in group])
        subtree = split_einsum(sub, path, memory_limit)
        items = [it for j, it in enumerate(items) if j not in group] + [(g_out, subtree)]
    items += deferred
    final = Einsum(",".join(s for s, _ in items) + "->" + out, *[op for _, op in items])
    if len(items) == 1 and items[0][0] == out:
        return items[0][1]
    return split_einsum(final, path, memory_limit)


def sweep_order(sites: Sequence[Node], i: int) -> list[Node]:
    """The constraint order for updating sites[i]: A_N, ..., A_{i+1}, A_1, ..., A_{i-1}."""
    return list(reversed(sites[i + 1:])) + list(sites[:i])


def dimension_tree(nodes: Sequence[Node], sites: Sequence[Node], path: str = DEFAULT_PATH,
                   memory_limit: int | None = None) -> list[Node]:
    """nodes[i] updates sites[i]: give each of its einsums the constrained path of §5.4.

    Nodes beyond len(sites) get ordinary paths. Run CSE afterwards to share the sub-trees.
    """
    from sparsad.tensor.contract_path import contraction_paths

    result = []
    for i, node in enumerate(nodes):
        if i >= len(sites):
            result += contraction_paths([node], path, memory_limit)
            continue
        order = sweep_order(sites, i)
        keep = sampled_einsums([node])

        def one(n: Node, order=order, keep=keep) -> Node:
            if isinstance(n, Einsum) and len(n.inputs) > 2 and n.uid not in keep:
                return constrained_path(n, order, path, memory_limit)
            return n

        result += rewrite([node], one)
    return result
