"""The optimizer is deterministic and safe: the same stages in every process, every stage
type-checks, and a pass that fails inside is skipped with a warning naming it."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings, strategies as st

import sparsad
from sparsad.lang.interpret import evaluate
from sparsad.lang.parse import parse
from sparsad.lang.syntax import Sum, Var
from sparsad.lang.typecheck import infer, value_type
from sparsad.lang.values import values_equal
from sparsad.opt import pipeline
from sparsad.opt.egraph import saturate
from sparsad.opt.storage import loop_sizes, physical_inputs

from reference.generated import real_expr

# deep loop nests and derivatives of them: where egglog's expression layer used to fail at random
DEEP = {
    "sddmm": "sum(<i, r> in S) sum(<j, s> in r) s * (sum(<k, u> in U(i)) u * V(j)(k))",
    "mf": "sum(<i, r> in S) sum(<j, s> in r) let e = s - sum(<k, u> in U(i)) u * V(j)(k) in e * e",
    "chain": "sum(<i, r> in S) sum(<j, s> in r) sum(<k, t> in S(j)) sum(<l, u> in U(k)) s * t * u * u",
    "gcn": "sum(<i, r> in S) let h = sum(<j, a> in r) sum(<k, x> in U(j)) { k -> a * x } in "
           "sum(<k, hv> in h) sum(<c, w> in V(k)) hv * w * hv * w",
    "softmax": "sum(<i, r> in S) let z = sum(<j, s> in r) exp(s) in sum(<j, s> in r) (exp(s) / z) * (exp(s) / z)",
}

STAGES_SCRIPT = textwrap.dedent('''
    import hashlib, sys, warnings
    import numpy as np, scipy.sparse as sp, sparsad
    from sparsad.lang.printer import to_text
    from sparsad.opt.pipeline import optimize
    sys.path[:0] = [{tests!r}, {support!r}]
    from opt.test_deterministic import DEEP, stage_texts
    print(hashlib.sha256(stage_texts().encode()).hexdigest())
''')


def deep_inputs():
    rng = np.random.default_rng(0)
    S = sp.random(6, 6, density=0.4, random_state=1, format="csr")
    # square factors: the gcn program looks V up at the column keys of U, so their extents must agree
    return dict(S=S, U=rng.standard_normal((6, 6)), V=rng.standard_normal((6, 6)))


def stage_texts() -> str:
    """Every stage of every program of DEEP and of its gradients, printed."""
    from sparsad.lang.printer import to_text

    out = []
    inputs = deep_inputs()
    for name, text in DEEP.items():
        for wrt in [None] + sparsad.program(text).inputs:
            compiled = sparsad.compile(text) if wrt is None else sparsad.grad(text, wrt=wrt)._compiled_for(wrt)
            stored, _ = compiled.store(inputs)
            types = {n: t.logical_type() for n, t in stored.items()}
            logical = compiled._build(types) if compiled._build else compiled.expr
            _, stages = pipeline.optimize(logical, types, stored)
            out += [f"# {name} {wrt} {stage}\n{to_text(e)}" for stage, e in stages.items()]
    return "\n".join(out)


def test_the_same_stages_in_fresh_processes_with_different_hash_seeds():
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    script = STAGES_SCRIPT.format(tests=tests, support=os.path.join(tests, "support"))
    digests = set()
    for seed in ("0", "1", "12345"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                             timeout=300)
        assert run.returncode == 0, run.stderr[-2000:]
        digests.add(run.stdout.strip().splitlines()[-1])
    assert len(digests) == 1, digests


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(expr=real_expr(reals=["s"], ints=[], depth=5), seed=st.integers(0, 2**31))
def test_saturation_of_deep_generated_programs_type_checks_and_keeps_the_meaning(expr, seed):
    rng = np.random.default_rng(seed)
    inputs = {"x": rng.uniform(-1, 1, 3), "M": rng.uniform(-1, 1, (2, 3)), "s": float(rng.uniform(0.5, 1.5))}
    types = {n: value_type(v) for n, v in inputs.items()}
    saturated = saturate(expr, types)
    infer(saturated, types)
    assert values_equal(evaluate(saturated, inputs), evaluate(expr, inputs), rtol=1e-10, atol=1e-10)


def test_a_failing_optional_pass_is_skipped_with_a_warning_naming_it(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("simulated fault inside equality saturation")

    monkeypatch.setattr(pipeline, "_saturate", broken)
    text = DEEP["sddmm"]
    inputs = deep_inputs()
    with pytest.warns(sparsad.OptimizationWarning, match="'eqsat' failed"):
        value = sparsad.compile(text)(**inputs)
    S, U, V = inputs["S"].toarray(), inputs["U"], inputs["V"]
    assert value == pytest.approx(float(np.sum(S * (U @ V.T))), rel=1e-12)


def test_an_ill_typed_stage_is_never_passed_on(monkeypatch):
    def unbinding(expr, types):  # a pass that loses a binder: the stage must not type-check
        return Sum("k", "v", Var("S_pos"), Var("not_bound"))

    monkeypatch.setattr(pipeline, "eliminate_common_subexpressions", unbinding)
    inputs = {k: v for k, v in deep_inputs().items() if k != "V"}
    with pytest.warns(sparsad.OptimizationWarning, match="'cse' failed.*ill-typed"):
        value = sparsad.compile(DEEP["chain"])(**inputs)
    S, U = inputs["S"].toarray(), inputs["U"]
    assert value == pytest.approx(float(np.sum((S @ S) @ (U * U))), rel=1e-12)


def test_a_failing_required_stage_falls_back_to_the_interpreter_not_to_the_users_error(monkeypatch):
    def broken(expr, types, *extents):
        raise KeyError("simulated fault inside fusion")

    monkeypatch.setattr(pipeline, "fuse", broken)
    inputs = {k: v for k, v in deep_inputs().items() if k != "V"}
    compiled = sparsad.grad(DEEP["chain"], wrt="U")
    with pytest.warns(sparsad.FallbackWarning, match="grad w.r.t. U of .*optimizer failed: KeyError"):
        got = compiled(**inputs)
    S, U = inputs["S"].toarray(), inputs["U"]
    expected = 2.0 * U * ((S @ S).sum(axis=0))[:, None]
    assert isinstance(got, np.ndarray) and np.allclose(got, expected, rtol=1e-12)
