"""torch.compile(fullgraph=True) vs eager: forward + backward of the compile_program GCN layer
and of the whole GCN + sparse attention model of examples/frameworks_layers.py.

The compiled step runs the same sparsad kernels (custom ops, sparsad.torch._traced); what it can
gain is the fused dense part around them and less Python per op; what it costs is the custom-op
dispatch. Ratios are eager / compiled in the same run (> 1: compiled is faster). Cora from the
shared data folder when present, else a random graph.

    python -m bench.torch_compile [--quick]
"""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from bench.common import plot_bars, print_table, steady_time, write_csv

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "frameworks_layers.py"


def _example():
    if "frameworks_layers" not in sys.modules:  # (registered: dynamo looks functions' modules up)
        spec = importlib.util.spec_from_file_location("frameworks_layers", EXAMPLE)
        module = importlib.util.module_from_spec(spec)
        sys.modules["frameworks_layers"] = module
        spec.loader.exec_module(module)
    return sys.modules["frameworks_layers"]


def cases(quick: bool):
    """{name: (eager step, compiled step)}, each step a forward + backward."""
    import torch

    import sparsad.torch as st

    ex = _example()
    a_hat, features, labels, classes = ex.graph(small=quick)
    A, X, y = st.SparseMatrix.from_scipy(a_hat), torch.as_tensor(features), torch.as_tensor(labels)
    params = {k: torch.tensor(v, requires_grad=True) for k, v in ex.init(X.shape[1], 16, 8, classes).items()}
    gcn = st.compile_program(ex.GCN_LAYER, wrt=("H",), out_format="dense")
    model = ex.torch_model()

    def gcn_loss(A, X, params):
        return torch.relu(gcn(A=A, H=X @ params["W1"])).square().sum()

    def model_loss(A, X, params):
        return torch.nn.functional.cross_entropy(model(A, X, params), y)

    out = {}
    for name, loss in (("gcn layer", gcn_loss), ("gcn + attention model", model_loss)):
        compiled = torch.compile(loss, fullgraph=True)

        def step(run=loss):
            run(A, X, params).backward()

        def compiled_step(run=compiled):
            run(A, X, params).backward()

        out[name] = (step, compiled_step)
    return a_hat, out


def main(quick: bool = False) -> None:
    import torch

    torch.set_num_threads(1)
    a_hat, steps = cases(quick)
    print(f"graph: n={a_hat.shape[0]}, nnz={a_hat.nnz} (load average {os.getloadavg()[0]:.1f})", flush=True)
    rows = []
    for name, (eager, compiled) in steps.items():
        compiled()  # the compile (seconds), outside the timing
        t_eager = steady_time(eager, repeat=5, budget_s=2 if quick else 10)
        t_compiled = steady_time(compiled, repeat=5, budget_s=2 if quick else 10)
        rows.append({"case": name, "n": a_hat.shape[0], "nnz": a_hat.nnz, "eager_ms": 1e3 * t_eager,
                     "compiled_ms": 1e3 * t_compiled, "eager_over_compiled": t_eager / t_compiled})
    print_table(rows)
    print(write_csv("torch_compile", rows))
    print(plot_bars("torch_compile", rows, "case", "eager_over_compiled", logy=False,
                    title="eager / torch.compile(fullgraph) time, forward + backward"))


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
