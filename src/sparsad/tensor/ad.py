"""Reverse-mode AD on einsum graphs (AutoHOOT §4): grad, vjp, jvp, hvp, jacobian, hessian.

One backward pass serves everything. Each adjoint carries `lead` extra leading axes: none for a
VJP (the cotangent has the output's shape) and the output's own axes for an explicit Jacobian,
whose seed is a product of Identity nodes (§4.2). In "explicit" mode every local Jacobian is
written as an einsum with Identity nodes tying output axes to input axes, exactly as in §4.2;
the optimizer's identity pruning removes the redundant ones. VJPs use the same rules but tie axes
by reusing letters directly, adding an Identity only where one is needed (repeated subscripts,
broadcast axes).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from sparsad.errors import InputError, ShapeError, UnsupportedError
from sparsad.tensor.graph import depends_on, einsum_view, fresh_letters, topological
from sparsad.tensor.nodes import (
    Add, Constant, Einsum, Elementwise, Identity, Node, Power, SampleAt, Scale, Sub, TensorInverse,
    Variable, zeros,
)


class _One(Constant):
    """The unit seed of a gradient: a scalar 1 that rules drop instead of multiplying by."""

    __slots__ = ()

    def __init__(self):
        super().__init__(np.array(1.0), name="one")


_One._rebuild = classmethod(lambda cls, params, inputs: cls())


def _is_one(node: Node) -> bool:
    return isinstance(node, _One)


def _local_einsum(in_subs, out, operands, k, adj, lead_n, explicit) -> Node:
    """Adjoint (with lead axes) of operand k of einsum(in_subs -> out, operands)."""
    lead = fresh_letters(lead_n, avoid=list(in_subs) + [out])
    used = set("".join(in_subs) + out + "".join(lead))
    target = in_subs[k]
    sizes = {}
    for sub, op in zip(in_subs, operands):
        sizes.update(zip(sub, op.shape))
    subs, ops = [], []
    if not (_is_one(adj) and lead_n == 0):
        subs.append("".join(lead) + out)
        ops.append(adj)
    present = set("".join(lead) + out)
    for j, (sub, op) in enumerate(zip(in_subs, operands)):
        if j != k:
            subs.append(sub)
            ops.append(op)
            present |= set(sub)
    result = []
    for ch in target:
        if not explicit and ch in present and ch not in result:
            result.append(ch)
        else:
            (m,) = fresh_letters(1, avoid=used)
            used.add(m)
            subs.append(ch + m)
            ops.append(Identity(sizes[ch]))
            result.append(m)
    if not ops:
        return adj
    return Einsum(",".join(subs) + "->" + "".join(lead) + "".join(result), *ops)


def _tie(adj: Node, lead_n: int, extra: Sequence[tuple[str, Node]] = ()) -> Node:
    """einsum of adj with Identity nodes tying each node axis to a fresh output axis (§4.2)."""
    n = adj.ndim - lead_n
    letters = fresh_letters(adj.ndim + n)
    lead, o, m = letters[:lead_n], letters[lead_n:adj.ndim], letters[adj.ndim:]
    subs = ["".join(lead + o)] + [s for s, _ in extra] + [o[j] + m[j] for j in range(n)]
    ops = [adj] + [op for _, op in extra] + [Identity(adj.shape[lead_n + j]) for j in range(n)]
    return Einsum(",".join(subs) + "->" + "".join(lead + m), *ops)


def _rule(node: Node, k: int, adj: Node, lead_n: int, explicit: bool) -> Node:
    """Contribution of `node`'s adjoint to the adjoint of its input k."""
    view = einsum_view(node)
    if view is not None:
        return _local_einsum(view[0], view[1], node.inputs, k, adj, lead_n, explicit)
    if isinstance(node, (Add, Sub)):
        out = _tie(adj, lead_n) if explicit else adj
        return Scale(-1, out) if (isinstance(node, Sub) and k == 1) else out
    if isinstance(node, Scale):
        return Scale(node.coef, _tie(adj, lead_n) if explicit else adj)
    if isinstance(node, (Elementwise, Power)):
        deriv = node.derivative()
        letters = fresh_letters(adj.ndim)
        lead, o = "".join(letters[:lead_n]), "".join(letters[lead_n:])
        if explicit:
            return _tie(adj, lead_n, [(o, deriv)])
        if _is_one(adj):
            return deriv
        return Einsum(f"{lead}{o},{o}->{lead}{o}", adj, deriv)
    if isinstance(node, SampleAt):
        if k == 1:                       # only the pattern's structure matters, not its values
            return zeros(adj.shape[:lead_n] + node.inputs[1].shape)
        if lead_n:
            raise UnsupportedError("explicit Jacobians through a masked (SampleAt) node are not supported")
        return SampleAt(adj, node.inputs[1])
    if isinstance(node, TensorInverse):
        # dY = -Y dA Y for Y = A^{-1} read as matrices; A is P+Q, Y is Q+P.
        ind, nd = node.ind, node.ndim
        letters = fresh_letters(lead_n + 2 * nd)
        lead = "".join(letters[:lead_n])
        p, q = "".join(letters[lead_n:lead_n + ind]), "".join(letters[lead_n + ind:lead_n + nd])
        p2 = "".join(letters[lead_n + nd:lead_n + nd + ind])
        q2 = "".join(letters[lead_n + nd + ind:lead_n + 2 * nd])
        if _is_one(adj):
            adj = Constant(np.array(1.0))
        return Scale(-1, Einsum(f"{lead}{q}{p},{q}{p2},{q2}{p}->{lead}{p2}{q2}", adj, node, node))
    raise InputError(f"no derivative rule for {type(node).__name__} node {node.label}")


def _accumulate(parts: list[Node]) -> Node:
    total = parts[0]
    for part in parts[1:]:
        total = Add(total, part)
    return total


def _backprop(y: Node, xs: Sequence[Node], seed: Node, lead_shape: tuple, explicit: bool,
              mask_sparse: bool = False) -> list[Node]:
    for x in xs:
        if not isinstance(x, Node):
            raise InputError(f"derivative: w.r.t. a {type(x).__name__}; pass graph nodes (Variables)")
    dep = depends_on([y], xs)
    pending: dict[int, list[Node]] = {y.uid: [seed]}
    total: dict[int, Node] = {}
    lead_n = len(lead_shape)
    for node in reversed(topological([y])):
        if node.uid not in pending or node.uid not in dep:
            continue
        adj = _accumulate(pending.pop(node.uid))
        total[node.uid] = adj
        for k, child in enumerate(node.inputs):
            if child.uid in dep:
                pending.setdefault(child.uid, []).append(_rule(node, k, adj, lead_n, explicit))
    results = []
    for x in xs:
        adj = total.get(x.uid)
        if adj is None:
            adj = zeros(tuple(lead_shape) + x.shape)
        elif _is_one(adj):
            adj = Constant(np.array(1.0))
        if mask_sparse and isinstance(x, Variable) and x.sparse and not lead_shape:
            adj = SampleAt(adj, x)      # masked: the gradient lives on x's pattern
        results.append(adj)
    return results


def _as_list(xs) -> tuple[list[Node], bool]:
    if isinstance(xs, Node):
        return [xs], True
    return list(xs), False


def _wrt_nodes(y: Node, xs, wrt, what: str):
    """`xs` (positional) or `wrt=` (the name used across sparsad): Variable nodes, or the names of
    Variables y depends on."""
    if (xs is None) == (wrt is None):
        raise InputError(f"{what}: name the variables to differentiate with respect to once, as {what}(y, xs) "
                         f"or {what}(y, wrt=xs)")
    chosen = xs if xs is not None else wrt
    if isinstance(chosen, str) or (not isinstance(chosen, Node) and any(isinstance(c, str) for c in chosen)):
        from sparsad.tensor.graph import variables

        found = {v.name: v for v in variables([y])}
        names = [chosen] if isinstance(chosen, str) else list(chosen)
        unknown = [n for n in names if isinstance(n, str) and n not in found]
        if unknown:
            raise InputError(f"{what}: wrt={unknown} names no Variable that y depends on; it reads {sorted(found)}")
        nodes = [found[n] if isinstance(n, str) else n for n in names]
        return nodes[0] if isinstance(chosen, str) else nodes
    return chosen


def vjp(y: Node, xs: Node | Sequence[Node] | None = None, v: Node | None = None, mask_sparse: bool = True, *,
        wrt: Node | str | Sequence[Node | str] | None = None, cotangent: Node | None = None) -> Node | list[Node]:
    """v^T J: the adjoint of each x in `xs` for a cotangent `v` shaped like y.

    `wrt=` (Variables or their names) may replace `xs`, and `cotangent=` may replace `v`, the
    names `sparsad.vjp` uses.

    The adjoint of a sparse Variable is masked to its pattern (SampleAt) unless mask_sparse=False.

    >>> import numpy as np
    >>> from sparsad import tensor as T
    >>> A = T.Variable("A", (2, 2))
    >>> x = T.Variable("x", (2,))
    >>> a = np.array([[1., 2.], [3., 4.]])
    >>> v = T.Variable("v", (2,))
    >>> vJ = T.vjp(T.einsum("ij,j->i", A, x), x, v)
    >>> T.evaluate(vJ, {A: a, x: np.ones(2), v: np.array([1., 0.])})[0]
    array([1., 2.])
    """
    xs = _wrt_nodes(y, xs, wrt, "vjp")
    if (v is None) == (cotangent is None):
        raise InputError("vjp: pass the cotangent once, as vjp(y, xs, v) or vjp(y, wrt=xs, cotangent=v)")
    v = v if v is not None else cotangent
    if v.shape != y.shape:
        raise ShapeError(f"vjp: cotangent v has shape {v.shape} but y ({y.label}) has shape {y.shape}")
    xs_list, single = _as_list(xs)
    out = _backprop(y, xs_list, v, (), explicit=False, mask_sparse=mask_sparse)
    return out[0] if single else out


def grad(y: Node, xs: Node | Sequence[Node] | None = None, mask_sparse: bool = True, *,
         wrt: Node | str | Sequence[Node | str] | None = None) -> Node | list[Node]:
    """Gradient of a scalar y with respect to each x (a graph, one node per x).

    `xs` may be given as `wrt=` (the name `sparsad.grad` uses), as Variables or their names; one
    Variable gives one node, a sequence a list. (A graph's inputs have no order, so there is no
    `argnums` here.)

    The gradient w.r.t. a sparse Variable is masked to its pattern (a sparse array evaluated by a
    sampled einsum) unless mask_sparse=False, which gives the dense-equivalent gradient.

    >>> import numpy as np
    >>> from sparsad import tensor as T
    >>> x = T.Variable("x", (2,))
    >>> g = T.grad(T.einsum("i,i->", x, x), x)
    >>> T.evaluate(g, {x: np.array([1., 2.])})[0]
    array([2., 4.])
    >>> T.evaluate(T.grad(T.einsum("i,i->", x, x), wrt="x"), {x: np.array([1., 2.])})[0]
    array([2., 4.])
    """
    xs = _wrt_nodes(y, xs, wrt, "grad")
    if y.shape != ():
        raise ShapeError(f"grad: y ({y.label}) has shape {y.shape}, not a scalar; use vjp or jacobian")
    xs_list, single = _as_list(xs)
    out = _backprop(y, xs_list, _One(), (), explicit=False, mask_sparse=mask_sparse)
    return out[0] if single else out


def jvp(y: Node, xs: Node | Sequence[Node], vs: Node | Sequence[Node]) -> Node:
    """J v by the double-VJP trick of §4.1: the VJP of u -> VJP(u, y, x) taken at v.

    >>> import numpy as np
    >>> from sparsad import tensor as T
    >>> A = T.Variable("A", (2, 2))
    >>> x = T.Variable("x", (2,))
    >>> a = np.array([[1., 2.], [3., 4.]])
    >>> v = T.Variable("v", (2,))
    >>> Jv = T.jvp(T.einsum("ij,j->i", A, x), x, v)
    >>> T.evaluate(Jv, {A: a, x: np.ones(2), v: np.array([1., 0.])})[0]
    array([1., 3.])
    """
    xs_list, _ = _as_list(xs)
    vs_list, _ = _as_list(vs)
    if len(vs_list) != len(xs_list):
        raise InputError(f"jvp: {len(xs_list)} inputs but {len(vs_list)} tangents")
    for x, v in zip(xs_list, vs_list):
        if x.shape != v.shape:
            raise ShapeError(f"jvp: tangent {v.label} has shape {v.shape} but {x.label} has shape {x.shape}")
    u = Variable("_jvp_u", y.shape)
    gs = _backprop(y, xs_list, u, (), explicit=False)
    parts = [_backprop(g, [u], v, (), explicit=False)[0] for g, v in zip(gs, vs_list)]
    result = _accumulate(parts)
    if u.uid in depends_on([result], [u]):
        raise InputError("jvp: internal error, the result still depends on the dummy cotangent")
    return result


def hvp(y: Node, xs: Node | Sequence[Node], vs: Node | Sequence[Node]) -> Node | list[Node]:
    """H v for scalar y: grad(<grad(y, x), v>, x) (§4.1); one node per x.

    >>> import numpy as np
    >>> from sparsad import tensor as T
    >>> x = T.Variable("x", (2,))
    >>> v = T.Variable("v", (2,))
    >>> Hv, = T.hvp(T.einsum("i,i->", x, x), [x], [v])
    >>> T.evaluate(Hv, {x: np.array([1., 2.]), v: np.array([1., -1.])})[0]
    array([ 2., -2.])
    """
    xs_list, single = _as_list(xs)
    vs_list, _ = _as_list(vs)
    if len(vs_list) != len(xs_list):
        raise InputError(f"hvp: {len(xs_list)} inputs but {len(vs_list)} vectors")
    gs = grad(y, xs_list, mask_sparse=False)
    inner = []
    for g, v, x in zip(gs, vs_list, xs_list):
        if v.shape != x.shape:
            raise ShapeError(f"hvp: vector {v.label} has shape {v.shape} but {x.label} has shape {x.shape}")
        letters = "".join(fresh_letters(x.ndim))
        inner.append(Einsum(f"{letters},{letters}->", g, v))
    out = grad(_accumulate(inner), xs_list)
    return out[0] if single else out


def _identity_seed(shape: tuple) -> Node:
    if shape == ():
        return _One()
    letters = fresh_letters(2 * len(shape))
    a, b = letters[:len(shape)], letters[len(shape):]
    subs = ",".join(a[j] + b[j] for j in range(len(shape)))
    return Einsum(f"{subs}->{''.join(a + b)}", *[Identity(s) for s in shape])


def jacobian(y: Node, x: Node) -> Node:
    """Explicit Jacobian of shape y.shape + x.shape, built with Identity nodes (§4.2).

    >>> import numpy as np
    >>> from sparsad import tensor as T
    >>> A = T.Variable("A", (2, 2))
    >>> x = T.Variable("x", (2,))
    >>> a = np.array([[1., 2.], [3., 4.]])
    >>> J = T.jacobian(T.einsum("ij,j->i", A, x), x)
    >>> T.evaluate(J, {A: a, x: np.ones(2)})[0]
    array([[1., 2.],
           [3., 4.]])
    """
    return _backprop(y, [x], _identity_seed(y.shape), y.shape, explicit=True)[0]


def chainjacobian(dz_dy: Node, dy_dx: Node, y_ndim: int) -> Node:
    """The chain rule on explicit Jacobians: dz/dx = dz/dy · dy/dx, contracting the last `y_ndim`
    axes of dz_dy (shape z + y) with the first `y_ndim` of dy_dx (shape y + x).

    >>> import numpy as np
    >>> from sparsad import tensor as T
    >>> A = T.Variable("A", (2, 2))
    >>> x = T.Variable("x", (2,))
    >>> a = np.array([[1., 2.], [3., 4.]])
    >>> y = T.Variable("y", (2,))
    >>> dz_dy = T.jacobian(T.einsum("i,i->", y, y), y)      # shape (2,)
    >>> dy_dx = T.jacobian(T.einsum("ij,j->i", A, x), x)   # shape (2, 2)
    >>> dz_dx = T.chainjacobian(dz_dy, dy_dx, 1)
    >>> T.evaluate(dz_dx, {y: np.ones(2), A: a, x: np.ones(2)})[0]
    array([ 8., 12.])
    """
    from sparsad.tensor.nodes import tensordot

    if not isinstance(y_ndim, int) or not 0 <= y_ndim <= min(dz_dy.ndim, dy_dx.ndim):
        raise InputError(f"chainjacobian: y_ndim={y_ndim!r} must count axes shared by both Jacobians")
    if dz_dy.shape[dz_dy.ndim - y_ndim:] != dy_dx.shape[:y_ndim]:
        raise ShapeError(f"chainjacobian: dz/dy ends in {dz_dy.shape[dz_dy.ndim - y_ndim:]} but dy/dx "
                         f"starts with {dy_dx.shape[:y_ndim]}")
    return tensordot(dz_dy, dy_dx, y_ndim)


def hessian(y: Node, xs: Node | Sequence[Node]) -> list[list[Node]]:
    """Explicit Hessian blocks H[i][j] of shape x_i.shape + x_j.shape for scalar y.

    >>> import numpy as np
    >>> from sparsad import tensor as T
    >>> x = T.Variable("x", (2,))
    >>> (H,), = T.hessian(T.einsum("i,i->", x, x), [x])
    >>> T.evaluate(H, {x: np.array([1., 2.])})[0]
    array([[2., 0.],
           [0., 2.]])
    """
    if y.shape != ():
        raise ShapeError(f"hessian: y ({y.label}) has shape {y.shape}, not a scalar")
    xs_list, _ = _as_list(xs)
    firsts = [jacobian(y, x) for x in xs_list]
    return [[jacobian(g, xj) for xj in xs_list] for g in firsts]
