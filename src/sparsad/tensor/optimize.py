"""The graph optimizer of Algorithm 1, passes in the paper's order.

    G = FuseAllEinsum(Distribution(G))            OPT1: longer einsums
    G = SymbolicExecution(G)                      OPT2: inverses, identities, SymPy (to a fixpoint)
    G = OptContractPath(G)                        path selection (or dimension trees)
    OG = CSE(G)                                   OPT3
    OG = FoldTransposes(OG)                       no node only permutes axes

The passes are heuristics: on deep derivative graphs (nested inverses, say) distribution and
fusion can build a graph that costs more than the one they started from. With `guard` (the
default) the result is compared under `cost.graph_cost` with the input given only the path and
CSE passes, and the cheaper of the two is returned. Graphs with sparse variables are exempt: the
model counts dense flops, and there the passes are what keep sparse operands from densifying.
"""
from __future__ import annotations

from typing import Sequence

from sparsad.tensor.contract_path import contraction_paths
from sparsad.tensor.cost import graph_cost
from sparsad.tensor.cse import Canonicalizer, cse
from sparsad.tensor.dimension_tree import dimension_tree as constrain_dimension_tree
from sparsad.tensor.distribute import distribute
from sparsad.tensor.fuse import fuse
from sparsad.tensor.inverse import decompose_inverses
from sparsad.tensor.graph import variables
from sparsad.tensor.nodes import Node
from sparsad.tensor.paths import DEFAULT_PATH
from sparsad.tensor.prune import prune
from sparsad.tensor.simplify import simplify
from sparsad.tensor.transposes import fold_transposes

PASSES = ("fuse", "symbolic", "path", "cse")


def longer_einsums(nodes: Sequence[Node]) -> list[Node]:
    """OPT1: distribution then fusion."""
    return fuse(distribute(nodes))


def symbolic(nodes: Sequence[Node], max_rounds: int = 8) -> list[Node]:
    """OPT2: prune inverses and identities, split structured inverses, collect terms; repeat
    (with distribution and fusion in between) until the graph stops changing."""
    graph = list(nodes)
    canon = Canonicalizer()
    before = [canon.id(n) for n in graph]
    for _ in range(max_rounds):
        graph = prune(graph)
        graph = decompose_inverses(graph)
        graph = longer_einsums(graph)
        graph = prune(graph)
        graph = simplify(graph)
        graph = longer_einsums(graph)
        after = [canon.id(n) for n in graph]
        if after == before:
            break
        before = after
    return graph


def optimize(nodes: Node | Sequence[Node], *, passes: Sequence[str] = PASSES, path: str = DEFAULT_PATH,
             memory_limit: int | None = None, dimension_tree: Sequence[Node] | None = None,
             guard: bool = True):
    """The optimized graph (same values, cheaper): returns a node for a node, a list for a list.

    passes: any subset of ("fuse", "symbolic", "path", "cse"). path: "cheapest" (the default:
    the fewer-flops of opt_einsum's greedy and exact orders, the exact ones for einsums of up to
    10 operands) or any opt_einsum strategy ("greedy", "optimal", "dp", ...). memory_limit: the
    largest intermediate (elements) a path may plan.
    dimension_tree: sites A_1..A_N when nodes[i] updates A_i in an alternating sweep (§5.4).
    guard: return the input with only path selection and CSE applied when the cost model rates
    that cheaper than the full result.

    >>> import numpy as np
    >>> from sparsad import tensor as T
    >>> x = T.Variable("x", (2,))
    >>> y = T.einsum("i,i->", x, x) + T.einsum("j,j->", x, x)
    >>> fast = T.optimize(y)          # CSE and simplification: 2 * <x, x>
    >>> T.evaluate([y, fast], {x: np.array([1., 2.])})
    [np.float64(10.0), np.float64(10.0)]
    """
    single = isinstance(nodes, Node)
    graph = [nodes] if single else list(nodes)
    unknown = set(passes) - set(PASSES)
    if unknown:
        from sparsad.errors import InputError

        raise InputError(f"optimize: unknown passes {sorted(unknown)}; choose from {PASSES}")
    result = _run_passes(graph, passes, path, memory_limit, dimension_tree)
    if guard and {"fuse", "symbolic"} & set(passes) and not _has_sparse_variable(graph):
        plain = _run_passes(graph, [p for p in passes if p in ("path", "cse")], path, memory_limit, None)
        if graph_cost(plain) < graph_cost(result):
            result = plain
    return result[0] if single else result


def _has_sparse_variable(graph: Sequence[Node]) -> bool:
    # the cost model is dense; on sparse operands the passes are what avoid densifying them
    return any(v.sparse for v in variables(graph))


def _run_passes(graph: list[Node], passes: Sequence[str], path: str, memory_limit: int | None,
                dimension_tree: Sequence[Node] | None) -> list[Node]:
    if "fuse" in passes:
        graph = longer_einsums(graph)
    if "symbolic" in passes:
        graph = symbolic(graph)
    if "path" in passes:
        if dimension_tree is not None:
            graph = constrain_dimension_tree(graph, list(dimension_tree), path, memory_limit)
        else:
            graph = contraction_paths(graph, path, memory_limit)
    if "cse" in passes:
        graph = cse(graph)
    if "path" in passes or "cse" in passes:
        graph = fold_transposes(graph)
    return graph
