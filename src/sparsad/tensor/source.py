"""to_source: an einsum graph printed as a plain NumPy + opt_einsum Python function."""
from __future__ import annotations

import keyword
import re
from typing import Sequence

import numpy as np

from sparsad.errors import UnsupportedError
from sparsad.tensor.executor import canonical_subscripts
from sparsad.tensor.graph import topological
from sparsad.tensor.nodes import (
    Add, Constant, Einsum, Elementwise, Identity, Node, Power, Scale, Sub, Sum, TensorInverse, Transpose,
    Variable,
)

_FUNCS = {
    "exp": "np.exp({})", "log": "np.log({})", "sin": "np.sin({})", "cos": "np.cos({})",
    "tanh": "np.tanh({})", "sqrt": "np.sqrt({})", "reciprocal": "1.0 / {}", "square": "{0} * {0}",
    "sech2": "1.0 / np.cosh({}) ** 2",
}


def _identifier(name: str, taken: set[str]) -> str:
    base = re.sub(r"\W", "_", name) or "v"
    if base[0].isdigit() or keyword.iskeyword(base):
        base = "v_" + base
    candidate, k = base, 1
    while candidate in taken:
        candidate, k = f"{base}_{k}", k + 1
    taken.add(candidate)
    return candidate


def _constant(value: np.ndarray) -> str:
    if not np.any(value):
        return f"np.zeros({value.shape!r})"
    if value.size > 10_000:
        raise UnsupportedError(f"to_source: a Constant of shape {value.shape} is too large to print; "
                               "make it a Variable and feed it")
    return f"np.array({value.tolist()!r})"


def to_source(nodes: Node | Sequence[Node], name: str = "run") -> str:
    """Python source of `def run(<variables>): ... return (<outputs>,)` computing `nodes`.

    >>> from sparsad import tensor as T
    >>> x = T.Variable("x", (2,))
    >>> source = T.to_source(T.einsum("i,i->", x, x))
    >>> print(source[source.index("def "):].strip())
    def run(x):
        t1 = oe.contract('a,a->', x, x)
        return (t1,)
    """
    outs = [nodes] if isinstance(nodes, Node) else list(nodes)
    order = topological(outs)
    taken: set[str] = {"np", "oe", name}
    names: dict[int, str] = {}
    params = []
    for node in order:
        if isinstance(node, Variable):
            names[node.uid] = _identifier(node.name, taken)
            params.append(names[node.uid])
    lines = []
    count = 0
    for node in order:
        if isinstance(node, Variable):
            continue
        count += 1
        var = _identifier(f"t{count}", taken)
        names[node.uid] = var
        args = [names[c.uid] for c in node.inputs]
        if isinstance(node, Identity):
            expr = f"np.eye({node.n})"
        elif isinstance(node, Constant):
            expr = _constant(node.value)
        elif isinstance(node, Einsum):
            subs = canonical_subscripts(node.in_subs, node.out_sub)
            expr = f"oe.contract({subs!r}, {', '.join(args)})"
        elif isinstance(node, Add):
            expr = f"{args[0]} + {args[1]}"
        elif isinstance(node, Sub):
            expr = f"{args[0]} - {args[1]}"
        elif isinstance(node, Scale):
            expr = f"{float(node.coef)!r} * {args[0]}"
        elif isinstance(node, Elementwise):
            expr = _FUNCS[node.fn].format(args[0])
        elif isinstance(node, Power):
            expr = f"{args[0]} ** {node.exponent!r}"
        elif isinstance(node, Sum):
            expr = f"{args[0]}.sum(axis={node.axes!r})"
        elif isinstance(node, Transpose):
            expr = f"{args[0]}.transpose({node.perm!r})"
        elif isinstance(node, TensorInverse):
            expr = f"np.linalg.tensorinv({args[0]}, ind={node.ind})"
        else:
            raise UnsupportedError(f"to_source: no printer for {type(node).__name__} nodes "
                                   "(masked sparse gradients run in the Executor only)")
        lines.append(f"    {var} = {expr}")
    result = ", ".join(names[o.uid] for o in outs)
    header = ["import numpy as np", "import opt_einsum as oe", "", "",
              f"def {name}({', '.join(params)}):"]
    return "\n".join(header + lines + [f"    return ({result},)", ""])
