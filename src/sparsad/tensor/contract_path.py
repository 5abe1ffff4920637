"""Contraction-path selection (§5.3): each many-operand einsum becomes a tree of small einsums.

The order comes from `paths.choose_path`: by default the cheaper of opt_einsum's greedy and
exact orders ("cheapest"), or any opt_einsum strategy by name. With a
`memory_limit` (in elements) opt_einsum never plans an intermediate larger than that; where no
pairwise step fits it contracts the remaining operands in one einsum, which we keep as one node.
"""
from __future__ import annotations

from typing import Sequence

from sparsad.tensor.executor import canonical_subscripts
from sparsad.tensor.graph import rewrite
from sparsad.tensor.nodes import Einsum, Node
from sparsad.tensor.paths import DEFAULT_PATH, choose_path


def plan(in_subs: Sequence[str], out: str, shapes: Sequence[tuple], path: str = DEFAULT_PATH,
         memory_limit: int | None = None) -> list[tuple[int, ...]]:
    """opt_einsum's contraction path (positions in a shrinking operand list)."""
    subs = canonical_subscripts(in_subs, out)
    return choose_path(subs, shapes, path, memory_limit)[0]


def build_tree(in_subs: Sequence[str], operands: Sequence[Node], out: str,
               steps: Sequence[tuple[int, ...]]) -> Node:
    """Einsum nodes following `steps`; each intermediate keeps only letters still needed."""
    items = list(zip(in_subs, operands))
    for step in steps:
        picked = [items[i] for i in step]
        for i in sorted(step, reverse=True):
            del items[i]
        if items:
            needed = set("".join(s for s, _ in items) + out)
            letters = "".join(s for s, _ in picked)
            new_out = "".join(dict.fromkeys(c for c in letters if c in needed))
        else:
            new_out = out
        node = Einsum(",".join(s for s, _ in picked) + "->" + new_out, *[op for _, op in picked])
        items.append((new_out, node))
    if len(items) != 1:
        node = Einsum(",".join(s for s, _ in items) + "->" + out, *[op for _, op in items])
        return node
    sub, node = items[0]
    if sub != out:
        node = Einsum(f"{sub}->{out}", node)
    return node


def split_einsum(node: Einsum, path: str = DEFAULT_PATH, memory_limit: int | None = None) -> Node:
    """`node` as a tree of (mostly pairwise) einsums in opt_einsum's order."""
    if len(node.inputs) <= 2:
        return node
    steps = plan(node.in_subs, node.out_sub, [op.shape for op in node.inputs], path, memory_limit)
    return build_tree(node.in_subs, node.inputs, node.out_sub, steps)


def sampled_einsums(nodes: Sequence[Node]) -> set[int]:
    """uids of einsums read only through SampleAt: they run as sampled einsums, kept whole."""
    from sparsad.tensor.graph import topological
    from sparsad.tensor.nodes import SampleAt

    users: dict[int, list[Node]] = {}
    for n in topological(nodes):
        for c in n.inputs:
            users.setdefault(c.uid, []).append(n)
    return {uid for uid, us in users.items() if all(isinstance(u, SampleAt) and u.inputs[0].uid == uid for u in us)}


def contraction_paths(nodes: Sequence[Node], path: str = DEFAULT_PATH, memory_limit: int | None = None) -> list[Node]:
    """Split every einsum of the graph along its chosen contraction path (except sampled ones)."""
    keep = sampled_einsums(nodes)
    return rewrite(list(nodes), lambda n: split_einsum(n, path, memory_limit)
                   if isinstance(n, Einsum) and n.uid not in keep else n)
