"""Every optimizer pass keeps the values of the graph, and does what it is for."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparsad import tensor as T
from sparsad.tensor.contract_path import contraction_paths
from sparsad.tensor.cost import graph_cost
from sparsad.tensor.cse import Canonicalizer, cse
from sparsad.tensor.distribute import distribute
from sparsad.tensor.fuse import fuse
from sparsad.tensor.graph import count_nodes, topological
from sparsad.tensor.inverse import decompose_inverses
from sparsad.tensor.prune import prune
from sparsad.tensor.simplify import simplify


def values(nodes, feed):
    return T.Executor(nodes).run(feed)


def assert_same(before, after, feed, rtol=1e-10):
    for a, b in zip(values(before, feed), values(after, feed)):
        np.testing.assert_allclose(b, a, rtol=rtol, atol=1e-10)


def rand_feed(variables, seed=0):
    rng = np.random.default_rng(seed)
    feed = {v: rng.standard_normal(v.shape) for v in variables}
    return feed


def cp_problem(s=5, R=3):
    A, B, C = (T.Variable(n, (s, R)) for n in "ABC")
    X = T.Variable("X", (s, s, s))
    res = X - T.einsum("ir,jr,kr->ijk", A, B, C)
    loss = 0.5 * T.einsum("ijk,ijk->", res, res)
    return (A, B, C, X), loss


def test_distribution_pushes_sums_out_of_einsums():
    A, B, C, D = (T.Variable(n, (3, 3)) for n in "ABCD")
    e = T.einsum("ij,jk->ik", A + B, 2.0 * (C - D))
    (d,) = distribute([e])
    for n in topological([d]):
        if isinstance(n, T.Einsum):
            assert not any(isinstance(o, (T.Add, T.Sub, T.Scale)) for o in n.inputs)
    assert_same([e], [d], rand_feed([A, B, C, D]))


def test_fusion_makes_one_einsum_with_union_find():
    A, B, C = T.Variable("A", (3, 4)), T.Variable("B", (4, 4)), T.Variable("C", (4, 2))
    inner = T.einsum("ij,jk->ik", A, B)
    shared = T.einsum("ik,kl->il", inner, C)
    diag = T.einsum("jj->j", B)                     # repeated subscripts unite dimensions
    outer = T.einsum("il,il,k->ik", shared, shared, diag)
    (f,) = fuse([outer])
    assert isinstance(f, T.Einsum) and all(not isinstance(o, T.Einsum) for o in f.inputs)
    assert len(f.inputs) == 7                      # the shared sub-tree is cloned (linearised)
    assert_same([outer], [f], rand_feed([A, B, C]))


def test_identity_pruning_keeps_only_structural_identities():
    x = T.Variable("x", (4,))
    M = T.Variable("M", (4, 4))
    loss = T.einsum("i,ij,j->", x, M, x) + T.einsum("i,i->", x, x)
    H = T.hessian(loss, [x])[0][0]
    J = T.jacobian(T.einsum("ij,j->i", M, x), x)
    graph = fuse(distribute([H, J]))
    assert count_nodes(graph, T.Identity) > 0
    pruned = prune(graph)
    assert_same([H, J], pruned, rand_feed([x, M]))
    # H = M + M^T + I + I: only identities whose letters are both outputs survive; SymPy then
    # merges the two equal I terms into 2 I.
    assert count_nodes(pruned[:1], T.Identity) == 2
    merged = simplify(pruned)
    assert count_nodes(merged[:1], T.Identity) == 1
    assert_same([H, J], merged, rand_feed([x, M]))
    assert count_nodes(pruned[1:], T.Identity) == 0


def test_inverse_pruning_fused_or_plain():
    P, Q = T.Variable("P", (3, 3)), T.Variable("Q", (3, 3))
    v = T.Variable("v", (3,))
    M = T.einsum("ij,jk->ik", P, Q)
    e = T.einsum("ij,jk,k->i", T.tensorinv(M, 1), M, v)        # M^{-1} M v = v
    (f,) = fuse([e])
    (p,) = prune([f])
    assert count_nodes([p], T.TensorInverse) == 0
    assert p is v
    rng = np.random.default_rng(3)
    feed = {P: rng.standard_normal((3, 3)) + 3 * np.eye(3), Q: rng.standard_normal((3, 3)) + 3 * np.eye(3),
            v: rng.standard_normal(3)}
    assert_same([e], [p], feed)


def test_structured_inverse_splits_kronecker_factors():
    P, Q = T.Variable("P", (3, 3)), T.Variable("Q", (4, 4))
    K = T.einsum("ij,kl->ikjl", P, Q)            # P ⊗ Q as an order-4 tensor
    inv = T.tensorinv(K, 2)
    (d,) = decompose_inverses([inv])
    invs = [n for n in topological([d]) if isinstance(n, T.TensorInverse)]
    assert sorted(n.shape for n in invs) == [(3, 3), (4, 4)]
    rng = np.random.default_rng(1)
    feed = {P: rng.standard_normal((3, 3)) + 3 * np.eye(3), Q: rng.standard_normal((4, 4)) + 4 * np.eye(4)}
    assert_same([inv], [d], feed)


def test_sympy_collects_like_terms_up_to_renaming():
    A, B = T.Variable("A", (3, 3)), T.Variable("B", (3, 3))
    t1 = T.einsum("ij,jk->ik", A, B)
    t2 = T.einsum("ab,bc->ac", A, B)                 # the same term spelled differently
    e = 0.5 * t1 + 0.5 * t2 - A + (A - 0.25 * t1) * 4
    (s,) = simplify([e])
    # 0.5 t + 0.5 t - A + 4 A - t = 3 A
    assert isinstance(s, T.Scale) and float(s.coef) == 3.0 and s.inputs[0] is A
    assert_same([e], [s], rand_feed([A, B]))
    (z,) = simplify([t1 - t2])
    assert isinstance(z, T.Constant) and not z.value.any()


@pytest.mark.parametrize("strategy", ["greedy", "optimal"])
def test_contraction_paths_split_into_pairs(strategy):
    (A, B, C, X), loss = cp_problem()
    g = fuse(distribute(T.grad(loss, [A, B, C])))
    split = contraction_paths(g, strategy)
    for n in topological(split):
        if isinstance(n, T.Einsum):
            assert len(n.inputs) <= 2
    assert_same(g, split, rand_feed([A, B, C, X]))


def test_memory_limit_is_respected():
    A, B, C, D = T.Variable("A", (8, 2)), T.Variable("B", (2, 8)), T.Variable("C", (8, 2)), T.Variable("D", (2, 8))
    e = T.einsum("ab,bc,cd,de->ae", A, B, C, D)
    limit = 20
    (split,) = contraction_paths([e], "greedy", memory_limit=limit)
    for n in topological([split]):
        if isinstance(n, T.Einsum) and n is not split:
            assert int(np.prod(n.shape)) <= limit
    (free,) = contraction_paths([e], "greedy")
    assert_same([e], [split], rand_feed([A, B, C, D]))
    assert_same([e], [free], rand_feed([A, B, C, D]))


def test_cse_up_to_renaming_operand_order_and_transpose():
    A, B = T.Variable("A", (3, 4)), T.Variable("B", (4, 5))
    e1 = T.einsum("ij,jk->ik", A, B)
    e2 = T.einsum("qp,rq->rp", B, A)             # same diagram, other letters and operand order
    e3 = T.einsum("xy,yz->zx", A, B)             # the transpose
    out = cse([e1 + e2, e3])
    nodes = topological(out)
    assert sum(isinstance(n, T.Einsum) for n in nodes) == 1
    assert sum(isinstance(n, T.Transpose) for n in nodes) == 1
    assert_same([e1 + e2, e3], out, rand_feed([A, B]))
    canon = Canonicalizer()
    assert canon.id(e1) == canon.id(e2) != canon.id(e3)


def test_cp_als_update_becomes_dimension_tree_mttkrp():
    (A, B, C, X), loss = cp_problem(s=6, R=3)
    sites = [A, B, C]
    ups = [site - T.tensordot(T.tensorinv(T.hessian(loss, [site])[0][0]), T.grad(loss, site)) for site in sites]
    opt = T.optimize(ups, dimension_tree=sites)
    feed = rand_feed([A, B, C, X], seed=7)
    assert_same(ups, opt, feed, rtol=1e-8)
    nodes = topological(opt)
    # Only Gram-sized (R x R) inverses remain, one per update, and the big tensor X is
    # contracted twice per sweep (X·C shared by the A and B updates), not three times.
    invs = [n for n in nodes if isinstance(n, T.TensorInverse)]
    assert len(invs) == 3 and all(n.shape == (3, 3) for n in invs)
    big = [n for n in nodes if isinstance(n, T.Einsum) and any(o is X for o in n.inputs)]
    assert len(big) == 2
    assert count_nodes(opt, T.Identity) == 0


def test_optimize_passes_each_keep_values():
    (A, B, C, X), loss = cp_problem()
    V = [T.Variable(f"V{k}", (5, 3)) for k in range(3)]
    nodes = T.hvp(loss, [A, B, C], V) + [T.hessian(loss, [A])[0][0], T.jacobian(T.grad(loss, B), C)]
    feed = rand_feed([A, B, C, X] + V, seed=2)
    for passes in [("fuse",), ("fuse", "symbolic"), ("fuse", "symbolic", "path"),
                   ("fuse", "symbolic", "path", "cse"), ("path", "cse")]:
        assert_same(nodes, T.optimize(nodes, passes=passes), feed)


def test_to_source_runs_to_the_same_values():
    (A, B, C, X), loss = cp_problem()
    nodes = T.optimize(T.grad(loss, [A, B]) + [loss])
    src = T.to_source(nodes)
    namespace: dict = {}
    exec(compile(src, "<to_source>", "exec"), namespace)
    feed = rand_feed([A, B, C, X], seed=5)
    got = namespace["run"](**{v.name: feed[v] for v in (A, B, C, X)})
    for a, b in zip(values(nodes, feed), got):
        np.testing.assert_allclose(b, a, rtol=1e-12)


@st.composite
def graphs(draw):
    letters, sizes = "abc", {"a": 2, "b": 3, "c": 2}
    n_ops = draw(st.integers(2, 3))
    subs = [draw(st.text(alphabet=letters, min_size=1, max_size=3)) for _ in range(n_ops)]
    present = sorted(set("".join(subs)))
    out = "".join(draw(st.lists(st.sampled_from(present), unique=True, max_size=2)))
    return subs, out, sizes, draw(st.integers(0, 1000))


@settings(max_examples=25, deadline=None)
@given(graphs())
def test_generated_derivative_graphs_optimize_to_same_values(problem):
    subs, out, sizes, seed = problem
    xs = [T.Variable(f"x{k}", [sizes[c] for c in s]) for k, s in enumerate(subs)]
    y = T.einsum(",".join(subs) + "->" + out, *xs)
    loss = T.einsum(f"{out},{out}->", y, y) + 0.5 * T.einsum(f"{out},{out}->", y, y)
    vs = [T.Variable(f"v{k}", x.shape) for k, x in enumerate(xs)]
    nodes = T.grad(loss, xs) + T.hvp(loss, xs, vs) + [T.hessian(loss, [xs[0]])[0][0], T.jacobian(y, xs[-1])]
    opt = T.optimize(nodes)
    assert_same(nodes, opt, rand_feed(xs + vs, seed))
    assert count_nodes(opt, T.Identity) <= count_nodes(nodes, T.Identity)


def test_simplify_walks_shared_sums_once():
    # x_{k+1} = x_k + x_k shares each sum twice: 2^60 paths through the tree, 60 nodes.
    A = T.Variable("A", (3, 3))
    x = A
    for _ in range(60):
        x = x + x
    (s,) = simplify([T.einsum("ij->ji", x)])
    (inner,) = s.inputs
    assert isinstance(inner, T.Scale) and float(inner.coef) == 2.0 ** 60 and inner.inputs[0] is A


def test_distribution_keeps_an_einsum_whose_expansion_is_too_long():
    A, B = T.Variable("A", (3, 3)), T.Variable("B", (3, 3))
    sums = [A + B, A - B, 2.0 * A + B]
    e = T.einsum("ij,jk,kl->il", *sums)             # 2 * 2 * 2 = 8 terms
    (small,) = distribute([e], max_terms=8)
    (kept,) = distribute([e], max_terms=7)
    assert isinstance(small, (T.Add, T.Sub)) and kept is not small
    assert isinstance(kept, T.Einsum) and any(isinstance(o, (T.Add, T.Sub)) for o in kept.inputs)
    assert_same([e], [small], rand_feed([A, B]))
    assert_same([e], [kept], rand_feed([A, B]))


@settings(max_examples=20, deadline=None)
@given(st.permutations(range(8)), st.permutations("abcdefghi"))
def test_cse_identifies_a_long_chain_of_one_operand_in_any_spelling(order, letters):
    # eight copies of A: brute force over operand orders would try 8! = 40,320 of them
    A = T.Variable("A", (3, 3))
    chain = ["ab", "bc", "cd", "de", "ef", "fg", "gh", "hi"]
    rename = dict(zip("abcdefghi", letters))
    spelled = [("".join(rename[c] for c in chain[k]), A) for k in order]
    e1 = T.einsum(",".join(chain) + "->ai", *[A] * 8)
    e2 = T.einsum(",".join(s for s, _ in spelled) + "->" + rename["a"] + rename["i"], *[op for _, op in spelled])
    e3 = T.einsum(",".join(chain) + "->ia", *[A] * 8)     # its transpose
    canon = Canonicalizer()
    assert canon.id(e1) == canon.id(e2) != canon.id(e3)
    assert canon.einsum_form(e1)[0] == canon.einsum_form(e3)[0]


@settings(max_examples=20, deadline=None)
@given(st.permutations(range(6)), st.permutations("abcdef"))
def test_cse_tells_symmetric_diagrams_apart_in_any_spelling(order, letters):
    # every operand of a ring looks alike to refinement: the tie is searched, not guessed
    A = T.Variable("A", (2, 2))
    ring_subs = ["ab", "bc", "cd", "de", "ef", "fa"]
    rename = dict(zip("abcdef", letters))
    ring = T.einsum(",".join(ring_subs) + "->", *[A] * 6)                    # one 6-cycle
    respelled = T.einsum(",".join("".join(rename[c] for c in ring_subs[k]) for k in order) + "->", *[A] * 6)
    two = T.einsum("ab,bc,ca,de,ef,fd->", *[A] * 6)                          # two 3-cycles
    canon = Canonicalizer()
    assert canon.id(ring) == canon.id(respelled) != canon.id(two)
    r, r2, t = values([ring, respelled, two], rand_feed([A], seed=4))
    assert np.isclose(r, r2) and not np.isclose(r, t)


@st.composite
def expressions(draw):
    """Random small programs over two 3x3 matrices and a vector, with every node kind."""
    # variable names that collide with the library's own spellings must not matter either
    names = draw(st.sampled_from([("A", "B", "v"), ("zeros", "one", "_jvp_u"), ("I", "I", "I")]))
    A, B, v = T.Variable(names[0], (3, 3)), T.Variable(names[1], (3, 3)), T.Variable(names[2], (3,))
    pool = [A, B]
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(["matmul", "add", "sub", "scale", "tanh", "T", "inv", "hadamard", "sum",
                                     "const"]))
        x, y = draw(st.sampled_from(pool)), draw(st.sampled_from(pool))
        if kind == "matmul":
            pool.append(T.einsum("ij,jk->ik", x, y))
        elif kind == "add":
            pool.append(x + y)
        elif kind == "sub":
            pool.append(x - y)
        elif kind == "scale":
            pool.append(draw(st.sampled_from([0.5, -2.0, 3.0])) * x)
        elif kind == "tanh":
            pool.append(T.tanh(x))
        elif kind == "T":
            pool.append(x.T)
        elif kind == "hadamard":
            pool.append(x * y)
        elif kind == "sum":
            pool.append(T.einsum("i,j->ij", x.sum(0), v))
        elif kind == "const":
            # constants whose names claim what they are not: only values may matter
            value = draw(st.sampled_from(["zeros", "ones", "eye", "random", "scalar"]))
            name = draw(st.sampled_from([None, "zeros", "one", "I", "eye", "X"]))
            rng = np.random.default_rng(draw(st.integers(0, 99)))
            array = {"zeros": np.zeros((3, 3)), "ones": np.ones((3, 3)), "eye": np.eye(3),
                     "random": rng.standard_normal((3, 3)), "scalar": np.array(rng.standard_normal())}[value]
            c = T.Constant(array, name=name)
            pool.append(T.einsum(",ij->ij", c, x) if c.ndim == 0 else T.einsum("ij,jk->ik", c, x) + c)
        else:   # a well-conditioned inverse: (x x^T + 3 I)^{-1}
            spd = T.einsum("ij,kj->ik", x, x) + T.Constant(3.0 * np.eye(3))
            pool.append(T.tensorinv(spd, 1))
    out = pool[-1]
    loss = T.einsum("ij,ij->", out, out) + T.einsum("i,ij,j->", v, out, v)
    return (A, B, v), loss, draw(st.integers(0, 1000))


@settings(max_examples=25, deadline=None)
@given(expressions())
def test_generated_programs_optimize_to_same_values(problem):
    (A, B, v), loss, seed = problem
    V = [T.Variable("VA", (3, 3)), T.Variable("VB", (3, 3))]
    nodes = [loss] + T.grad(loss, [A, B, v]) + T.hvp(loss, [A, B], V) + [T.hessian(loss, [v])[0][0]]
    rng = np.random.default_rng(seed)
    feed = {x: 0.5 * rng.standard_normal(x.shape) for x in (A, B, v, *V)}
    unguarded = T.optimize(nodes, guard=False)
    assert_same(nodes, unguarded, feed, rtol=1e-9)
    guarded = T.optimize(nodes)
    assert graph_cost(guarded) == min(graph_cost(unguarded), graph_cost(T.optimize(nodes, passes=("path", "cse"))))


def test_a_constant_named_zeros_keeps_its_value():
    x = T.Variable("x", (3,))
    c = T.Constant(np.full(3, 3.0), name="zeros")
    e = T.einsum("i,i->i", x, c) + c
    feed = {x: np.ones(3)}
    for passes in [("fuse", "symbolic"), ("fuse", "symbolic", "path", "cse")]:
        np.testing.assert_array_equal(values([T.optimize(e, passes=passes, guard=False)], feed)[0], [6.0] * 3)
    # and a real zero is still pruned, whatever its name
    z = T.einsum("i,i->i", x, T.Constant(np.zeros(3), name="weights"))
    assert isinstance(T.optimize(z, guard=False), T.Constant)


@st.composite
def long_chains(draw):
    """Chains of 76-110 small matrices, built pairwise: fusing one needs more than 100 subscripts
    for the longer ones (opt_einsum's symbols leave ASCII after 52 and letters after 74)."""
    n = draw(st.integers(76, 110))
    dims = draw(st.lists(st.integers(1, 3), min_size=n + 1, max_size=n + 1))
    return dims, draw(st.integers(0, 1000)), draw(st.sampled_from(["chain", "grad"]))


@settings(max_examples=4, deadline=None)
@given(long_chains())
def test_graphs_over_a_hundred_subscripts_optimize_to_same_values(problem):
    dims, seed, what = problem
    mats = [T.Variable(f"M{k}", (dims[k], dims[k + 1])) for k in range(len(dims) - 1)]
    y = mats[0]
    for m in mats[1:]:
        y = T.einsum("ij,jk->ik", y, m)
    rng = np.random.default_rng(seed)
    feed = {m: rng.uniform(0.5, 1.0, m.shape) / np.sqrt(m.shape[0]) for m in mats}
    if what == "chain":
        nodes = [y]
        ref = [np.linalg.multi_dot([feed[m] for m in mats]) if len(mats) > 1 else feed[mats[0]]]
    else:
        loss = T.einsum("ij,ij->", y, y)
        nodes = T.grad(loss, [mats[0], mats[-1]])
        ref = values(nodes, feed)
    (fused,) = T.optimize([T.einsum("ij->ij", y)], passes=("fuse",))
    assert len({c for s in fused.in_subs for c in s}) == len(dims)
    for got, want in zip(values(T.optimize(nodes, guard=False), feed), ref):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-300)


def transposes_left(graph):
    """Pure transposes of the graph that folding could have removed (should be none)."""
    from sparsad.tensor.transposes import transpose_parts

    users: dict[int, list] = {}
    for n in topological(graph):
        for c in n.inputs:
            users.setdefault(c.uid, []).append(n)
    outputs = {n.uid for n in graph}
    bad = []
    for n in topological(graph):
        parts = transpose_parts(n)
        if parts is None:
            continue
        source, perm = parts
        if (perm == tuple(range(len(perm))) or isinstance(source, (T.Identity, T.Transpose))
                or transpose_parts(source) is not None
                or any(isinstance(u, T.Einsum) and transpose_parts(u) is None for u in users.get(n.uid, []))):
            bad.append(n)                       # identity, symmetric source, chain, or foldable
        elif isinstance(source, T.Einsum) and source.uid not in outputs and all(
                isinstance(u, T.Einsum) for u in users[source.uid]):
            bad.append(n)                       # the producer could have been re-oriented
    return bad


@settings(max_examples=30, deadline=None)
@given(expressions())
def test_optimized_graphs_keep_no_foldable_transpose(problem):
    (A, B, v), loss, seed = problem
    V = [T.Variable("VA", (3, 3)), T.Variable("VB", (3, 3))]
    nodes = [loss] + T.grad(loss, [A, B, v]) + T.hvp(loss, [A, B], V) + [T.hessian(loss, [v])[0][0]]
    rng = np.random.default_rng(seed)
    feed = {x: 0.5 * rng.standard_normal(x.shape) for x in (A, B, v, *V)}
    for opt in (T.optimize(nodes, guard=False), T.optimize(nodes, passes=("path", "cse"))):
        assert transposes_left(opt) == []
        assert_same(nodes, opt, feed, rtol=1e-9)


@pytest.mark.parametrize("order", [3, 4])
def test_dimension_tree_sweeps_have_no_transpose(order):
    s, R = 4, 2
    letters = "ijkl"[:order]
    X = T.Variable("X", (s,) * order)
    sites = [T.Variable(f"A{n}", (s, R)) for n in range(order)]
    model = T.einsum(",".join(c + "r" for c in letters) + "->" + letters, *sites)
    res = X - model
    loss = 0.5 * T.einsum(f"{letters},{letters}->", res, res)
    ups = [a - T.tensordot(T.tensorinv(T.hessian(loss, [a])[0][0]), T.grad(loss, a)) for a in sites]
    mttkrp = [T.einsum(letters + "," + ",".join(c + "r" for k, c in enumerate(letters) if k != n)
                       + "->" + letters[n] + "r", X, *[a for k, a in enumerate(sites) if k != n])
              for n in range(order)]
    feed = rand_feed([X, *sites], seed=order)
    for graph in (ups, mttkrp):
        opt = T.optimize(graph, dimension_tree=sites)
        assert transposes_left(opt) == []
        assert not any(isinstance(n, T.Transpose) for n in topological(opt))
        assert_same(graph, opt, feed, rtol=1e-8)


def test_identity_inverses_and_transposes_are_pruned():
    A = T.Variable("A", (3, 3))
    I3 = T.Identity(3)
    cases = [T.einsum("ij,jk->ik", T.tensorinv(I3, 1), A), T.einsum("ij,jk->ik", T.transpose(I3), A),
             T.einsum("ij,jk->ik", T.tensorinv(T.transpose(I3), 1), A),
             T.einsum("ij,jk->ik", T.tensorinv(2.0 * I3, 1), A)]
    feed = rand_feed([A])
    for e in cases:
        opt = T.optimize(e, guard=False)
        assert count_nodes([opt], T.TensorInverse) == 0 and count_nodes([opt], T.Identity) == 0
        assert_same([e], [opt], feed)
    assert T.optimize(T.tensorinv(I3, 1)) is I3 or isinstance(T.optimize(T.tensorinv(I3, 1)), T.Identity)
    K = T.einsum("ij,kl->ikjl", I3, T.Identity(2))
    assert count_nodes([T.optimize(T.tensorinv(K, 2))], T.TensorInverse) == 0


def test_cse_sees_through_transposes_and_identity_symmetry():
    A, B, v = T.Variable("A", (3, 4)), T.Variable("B", (4, 3)), T.Variable("v", (3,))
    canon = Canonicalizer()
    e = T.einsum("ij,jk->ik", A, B)
    e_t = T.einsum("ij,jk->ki", A, B)
    assert canon.id(T.transpose(e)) == canon.id(e_t) != canon.id(e)
    assert canon.id(T.transpose(T.transpose(e))) == canon.id(e)
    # a consumer reading a transpose is the consumer reading the source the other way round
    assert canon.id(T.einsum("ki,k->i", e_t, v)) == canon.id(T.einsum("ik,k->i", e, v))
    assert canon.id(T.einsum("ij,j->i", T.transpose(e), v)) == canon.id(T.einsum("ji,j->i", e, v))
    I3, I4 = T.Identity(3), T.Identity(4)
    assert canon.id(T.einsum("ab,cd->abcd", I3, I4)) == canon.id(T.einsum("ba,dc->abcd", I3, I4))
    assert canon.id(T.einsum("ab,cd->abcd", I3, I3)) != canon.id(T.einsum("ac,bd->abcd", I3, I3))
    assert canon.id(T.transpose(I3)) == canon.id(I3)
    out = cse([T.einsum("ij,jk->ik", A, B) + T.transpose(T.einsum("ab,bc->ca", A, B))])
    assert count_nodes(out, T.Einsum) == 1
    assert_same([e + e], out, rand_feed([A, B]))
