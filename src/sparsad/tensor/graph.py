"""Walking and rewriting einsum graphs: topological order, reachability, bottom-up rewrites."""
from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

from opt_einsum import get_symbol

from sparsad.tensor.nodes import Add, Einsum, Node, Scale, Sub, Sum, Transpose, Variable


def topological(outputs: Iterable[Node]) -> list[Node]:
    """Every node reachable from `outputs`, inputs before users, in a deterministic order."""
    order: list[Node] = []
    seen: set[int] = set()
    for root in outputs:
        stack = [(root, False)]
        while stack:
            node, expanded = stack.pop()
            if node.uid in seen:
                continue
            if expanded:
                seen.add(node.uid)
                order.append(node)
                continue
            stack.append((node, True))
            for child in reversed(node.inputs):
                if child.uid not in seen:
                    stack.append((child, False))
    return order


def variables(outputs: Iterable[Node]) -> list[Variable]:
    return [n for n in topological(outputs) if isinstance(n, Variable)]


def depends_on(outputs: Iterable[Node], targets: Iterable[Node]) -> set[int]:
    """uids of the nodes (among those reachable from outputs) whose value depends on a target."""
    target_ids = {t.uid for t in targets}
    result: set[int] = set()
    for node in topological(outputs):
        if node.uid in target_ids or any(c.uid in result for c in node.inputs):
            result.add(node.uid)
    return result


def rewrite(outputs: Sequence[Node], fn: Callable[[Node], Node]) -> list[Node]:
    """Rebuild the graph bottom-up: each node gets its rewritten inputs, then `fn` may replace it.

    Shared sub-graphs stay shared (memoised by node identity).
    """
    new: dict[int, Node] = {}
    for node in topological(outputs):
        rebuilt = node.with_inputs([new[c.uid] for c in node.inputs]) if node.inputs else node
        new[node.uid] = fn(rebuilt)
    return [new[o.uid] for o in outputs]


def is_linear(node: Node) -> bool:
    """Add, Sub and Scale: the nodes of a linear combination."""
    return isinstance(node, (Add, Sub, Scale))


def fold(node: Node, memo: dict[int, Any], inner: Callable[[Node], bool],
         combine: Callable[[Node], Any]) -> Any:
    """Bottom-up value of `node`, memoised by uid in `memo`: `combine(n)` reads the values of
    n's inputs from `memo` when `inner(n)`, and sees none otherwise (a leaf of the fold).
    Iterative, so deep chains do not hit Python's recursion limit."""
    stack = [node]
    while stack:
        n = stack[-1]
        if n.uid in memo:
            stack.pop()
            continue
        pending = [c for c in n.inputs if c.uid not in memo] if inner(n) else []
        if pending:
            stack.extend(pending)
            continue
        stack.pop()
        memo[n.uid] = combine(n)
    return memo[node.uid]


def einsum_view(node: Node) -> tuple[tuple[str, ...], str] | None:
    """Subscripts of a node that is an einsum in disguise (Einsum, Sum, Transpose), else None."""
    if isinstance(node, Einsum):
        return node.in_subs, node.out_sub
    if isinstance(node, (Sum, Transpose)):
        return node.as_einsum()
    return None


def fresh_letters(count: int, avoid: Iterable[str] = ()) -> list[str]:
    """`count` subscript letters not in `avoid`."""
    taken = set("".join(avoid))
    letters, i = [], 0
    while len(letters) < count:
        ch = get_symbol(i)
        if ch not in taken:
            letters.append(ch)
            taken.add(ch)
        i += 1
    return letters


def count_nodes(outputs: Iterable[Node], kind: type | None = None) -> int:
    return sum(1 for n in topological(outputs) if kind is None or isinstance(n, kind))
