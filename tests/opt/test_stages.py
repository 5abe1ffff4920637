"""sparsad.opt.stages: which top-level lets a program is cut at, and that the stages compute the
program (each stage run by the interpreter, chained, against the program itself)."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import sparsad
from sparsad.lang.parse import parse
from sparsad.opt.stages import split_stages

XW = "sum(<k, xr> in X) { k -> sum(<f, x> in xr) sum(<c, w> in W(f)) { c -> x * w } }"
AGG = "sum(<i, r> in A) {{ i -> sum(<k, a> in r) sum(<c, v> in {H}(k)) {{ c -> a * v }} }}"
CASES = {
    # name: (program, names of the cut lets in order)
    "gcn": (f"let XW = {XW} in " + AGG.format(H="XW"), ["XW"]),
    "read twice": (f"let XW = {XW} in (sum(<k, r> in XW) sum(<c, v> in r) v * v) + "
                   "(sum(<k, r> in XW) sum(<c, v> in r) v)", ["XW"]),
    "chain": (f"let XW = {XW} in let H = {AGG.format(H='XW')} in "
              "sum(<i, r> in A) sum(<k, a> in r) sum(<c, v> in H(k)) a * v * H(i)(c)", ["XW", "H"]),
    "shadowed input": (f"let X = {XW} in " + AGG.format(H="X"), ["X_1"]),
    "scalar read in a loop": ("let s = sum(<k, xr> in X) sum(<f, x> in xr) x * x in "
                              "sum(<k, xr> in X) { k -> sum(<f, x> in xr) { f -> x / s } }", ["s"]),
    "read once outside loops": (f"let XW = {XW} in sum(<k, r> in XW) sum(<c, v> in r) v", []),
    "a view": ("let B = sum(<i, r> in A) { i -> sum(<j, a> in r) { j -> 2.0 * a } } in "
               "sum(<i, r> in A) sum(<j, a> in r) a * B(i)(j) * B(j)(i)", []),
    "loop-free": ("let s = 2.0 * t in sum(<k, xr> in X) sum(<f, x> in xr) x * s", []),
    "let inside a loop": ("sum(<i, r> in A) { i -> let t = sum(<j, a> in r) a * X(j)(0) in "
                          "sum(<j, a> in r) { j -> a * t } }", []),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_cuts_exactly_the_lets_worth_materialising(name):
    text, cut = CASES[name]
    stages = split_stages(parse(text))
    assert [s.name for s in stages[:-1]] == cut
    assert stages[-1].name is None
    assert split_stages(parse(text)) == stages  # deterministic


def test_keep_vetoes_a_cut_and_the_let_stays_inside():
    text, _ = CASES["chain"]
    stages = split_stages(parse(text), keep=lambda name, value: name != "XW")
    assert [s.name for s in stages[:-1]] == ["H"]
    assert "XW" not in stages[0].inputs and {"X", "W", "A"} <= set(stages[0].inputs)


@pytest.mark.parametrize("name", sorted(CASES))
def test_chained_stages_compute_the_program(name):
    text, _ = CASES[name]
    rng = np.random.default_rng(3)
    A = sp.random(7, 7, density=0.4, format="csr", random_state=3) + sp.eye(7, format="csr")
    inputs = dict(A=A.tocsr(), X=rng.standard_normal((7, 5)), W=rng.standard_normal((5, 3)), t=0.5)
    program = sparsad.program(text)
    want = program(**{n: inputs[n] for n in program.inputs})
    env = dict(inputs)
    for stage in split_stages(program.expr):
        result = sparsad.program(stage.expr)(**{n: env[n] for n in stage.inputs})
        if stage.name is not None:
            env[stage.name] = result
    np.testing.assert_allclose(_dense(result), _dense(want), rtol=1e-12, atol=1e-12)


def _dense(value):
    return value.toarray() if sp.issparse(value) else np.asarray(value, dtype=float)


# -- generated let-chains: the chained stages compute what the program computes ----------------
BLOCKS = {  # dense n x m values from earlier names P, Q (n x m) and s (a scalar)
    "times W": "sum(<k, r> in {P}) {{ k -> sum(<f, x> in r) sum(<c, w> in W(f)) {{ c -> x * w }} }}",
    "aggregate": "sum(<i, r> in A) {{ i -> sum(<k, a> in r) sum(<c, v> in {P}(k)) {{ c -> a * v }} }}",
    "product": "sum(<k, r> in {P}) {{ k -> sum(<c, v> in r) {{ c -> v * {Q}(k)(c) }} }}",
    "scaled": "sum(<k, r> in {P}) {{ k -> sum(<c, v> in r) {{ c -> v * {s} }} }}",
}


@st.composite
def let_chains(draw):
    dense, scalars, lets = ["X"], ["t"], []
    for index in range(draw(st.integers(1, 4))):
        if draw(st.booleans()) and index:
            name, value = f"s{index}", "sum(<k, r> in {P}) sum(<c, v> in r) v * {Q}(k)(c)"
            scalars.append(name)
        else:
            name, value = f"H{index}", BLOCKS[draw(st.sampled_from(sorted(BLOCKS)))]
            dense.append(name)
        pick = st.sampled_from(dense[:-1] if name.startswith("H") else dense)
        lets.append((name, value.format(P=draw(pick), Q=draw(pick), s=draw(st.sampled_from(scalars)))))
    last = draw(st.sampled_from(dense))
    body = f"sum(<k, r> in {last}) sum(<c, v> in r) v * {draw(st.sampled_from(dense))}(k)(c) * {scalars[-1]}"
    return "".join(f"let {n} = {v} in " for n, v in lets) + body


@settings(max_examples=25, deadline=None)
@given(let_chains())
def test_generated_let_chains_split_into_stages_that_compute_the_program(text):
    rng = np.random.default_rng(0)
    A = (sp.random(6, 6, density=0.4, format="csr", random_state=0) + sp.eye(6, format="csr")).tocsr()
    inputs = dict(A=A, X=rng.standard_normal((6, 3)), W=rng.standard_normal((3, 3)), t=0.5)
    program = sparsad.program(text)
    want = program(**{n: inputs[n] for n in program.inputs})
    env = dict(inputs)
    stages = split_stages(program.expr)
    assert split_stages(program.expr) == stages
    for stage in stages:
        result = sparsad.program(stage.expr)(**{n: env[n] for n in stage.inputs})
        if stage.name is not None:
            env[stage.name] = result
    np.testing.assert_allclose(_dense(result), _dense(want), rtol=1e-10, atol=1e-10)
