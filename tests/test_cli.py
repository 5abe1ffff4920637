"""The `sparsad` command: run, check, grad, demo."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

from sparsad.cli import main


def test_run_with_matrix_market_and_numpy_inputs(tmp_path, capsys):
    A = sp.random(6, 6, density=0.4, format="csr", random_state=0)
    scipy.io.mmwrite(tmp_path / "A.mtx", A)
    np.save(tmp_path / "x.npy", np.arange(6.0))
    assert main(["run", "sum(<i, r> in A) { i -> sum(<j, a> in r) a * x(j) }",
                 "-i", f"A={tmp_path / 'A.mtx'}", "-i", f"x={tmp_path / 'x.npy'}",
                 "-o", str(tmp_path / "y.npy")]) == 0
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), A @ np.arange(6.0))
    assert main(["run", "sum(<i, r> in M) r(i)", "-i", f"M={tmp_path / 'A.mtx'}"]) == 0
    assert float(capsys.readouterr().out.strip().splitlines()[-1]) == pytest.approx(A.diagonal().sum())


def test_run_with_out_format_and_program_file(tmp_path, capsys):
    (tmp_path / "scale.sdql").write_text("s * M")
    scipy.io.mmwrite(tmp_path / "M.mtx", sp.identity(3, format="csr"))
    assert main(["run", str(tmp_path / "scale.sdql"), "-i", "s=2", "-i", f"M={tmp_path / 'M.mtx'}",
                 "--out-format", "csr"]) == 0
    assert "3 stored entries" in capsys.readouterr().out


def test_check_reports_errors_with_line_and_column(capsys):
    assert main(["check", "sum(<i, a> in V)\n  a *"]) == 2
    err = capsys.readouterr().err
    assert "ProgramError" in err and "line 2, column 6" in err and len(err.strip().splitlines()) == 1
    assert main(["check", "sum(<i, a> in x) a", "-t", "x=real"]) == 2
    assert "sum iterates over a dictionary" in capsys.readouterr().err
    assert main(["check", "sum(<i, r> in M) r(i)", "-t", "M=tensor 2"]) == 0
    assert "ok: type real" in capsys.readouterr().out


def test_grad_prints_the_section_4_3_derivative(capsys):
    assert main(["grad", "sum(<i, a> in V1) a * V2(i)", "--wrt", "V2"]) == 0
    out = capsys.readouterr().out
    assert "let V2' = sum(<i1, _> in V2)" in out and "a * V2'(i) + a' * V2(i)" in out
    assert "mode=auto runs reverse mode" in out


def test_grad_with_inputs_prints_the_value(tmp_path, capsys):
    np.save(tmp_path / "v1.npy", np.array([1.0, 2.0]))
    np.save(tmp_path / "v2.npy", np.array([3.0, 4.0]))
    assert main(["grad", "sum(<i, a> in V1) a * V2(i)", "--wrt", "V2",
                 "-i", f"V1={tmp_path / 'v1.npy'}", "-i", f"V2={tmp_path / 'v2.npy'}"]) == 0
    assert capsys.readouterr().out.strip().endswith("[1. 2.]")


def test_bad_input_spec_is_a_clear_exit(capsys):
    assert main(["run", "x", "-i", "nonsense"]) == 2
    assert "NAME=FILE" in capsys.readouterr().err


def test_demo_runs_as_a_module_and_matches():
    done = subprocess.run([sys.executable, "-m", "sparsad", "demo", "--grid", "4"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "All results match NumPy/SciPy." in done.stdout
    assert "SMMM d/dB" in done.stdout
    for pillar in ("sparsad.torch:", "sparsad.tensor:", "sparsad.coarsen:"):   # one run of each other pillar
        assert pillar in done.stdout
    assert "match: NO" not in done.stdout and "FAILED" not in done.stdout


def test_show_prints_the_optimized_derivative_for_given_formats(tmp_path, capsys):
    scipy.io.mmwrite(tmp_path / "A.mtx", sp.random(6, 5, density=0.4, format="csr", random_state=0))
    np.save(tmp_path / "x.npy", np.ones(5))
    batax = "sum(<i, r> in A) sum(<j, v1> in r) sum(<k, v2> in r) { j -> ((beta * v1) * v2) * (x(k)) }"
    assert main(["show", batax, "--wrt", "x", "--jacobian", "-i", f"A={tmp_path / 'A.mtx'}",
                 "-i", f"x={tmp_path / 'x.npy'}", "-i", "beta=1.5"]) == 0
    out = capsys.readouterr().out
    assert "A_idx(A_pos(" in out and "beta * " in out
    assert main(["show", batax, "--stage", "code", "-i", f"A={tmp_path / 'A.mtx'}",
                 "-i", f"x={tmp_path / 'x.npy'}", "-i", "beta=1.5"]) == 0
    assert "@njit" in capsys.readouterr().out
    assert main(["show", batax]) == 2
    assert "depends on the inputs" in capsys.readouterr().err


def _bad_files(tmp_path):
    complex_matrix = sp.random(3, 3, density=0.5, format="coo", random_state=0) * (1 + 2j)
    scipy.io.mmwrite(tmp_path / "complex.mtx", complex_matrix)
    (tmp_path / "garbage.mtx").write_text("not a matrix market file\n")
    (tmp_path / "garbage.npy").write_bytes(b"\x00\x01 nope")
    np.save(tmp_path / "objects.npy", np.array([{}, 1], dtype=object), allow_pickle=True)
    np.save(tmp_path / "x.npy", np.ones(3))
    return tmp_path


BAD_INVOCATIONS = [
    [], ["nonsense"], ["run"], ["run", "x", "--out-format", "weird"], ["run", "sum(<i, a> in"],
    ["run", "expp(a)", "-i", "a=1"], ["run", "a + b", "-i", "a=1"], ["run", "a", "-i", "a=1", "-i", "b=2"],
    ["run", "a", "-i", "=1"], ["run", "a", "-i", "a=hello"], ["run", "a", "-t", "a"],
    ["run", "a", "-t", "a=tensr 2"], ["run", "missing.sdql"], ["run", "a", "-i", "a={tmp}/nothere.npy"],
    ["run", "sum(<i, r> in A) r(i)", "-i", "A={tmp}/complex.mtx"],
    ["run", "sum(<i, r> in A) r(i)", "-i", "A={tmp}/garbage.mtx"],
    ["run", "sum(<i, a> in x) a", "-i", "x={tmp}/garbage.npy"],
    ["run", "sum(<i, a> in x) a", "-i", "x={tmp}/objects.npy"],
    ["run", "sum(<i, a> in x) a * y(i)", "-i", "x={tmp}/x.npy", "-i", "y=2"],
    ["run", "(" * 200 + "a" + ")" * 200, "-i", "a=1"],
    ["run", "x(7)", "-i", "x={tmp}/x.npy"],
    ["grad", "a * a"], ["grad", "a * a", "--wrt", "b"], ["grad", "a * a", "--wrt", "a", "--mode", "fast"],
    ["show", "a", "--stage", "nope", "-i", "a=1"], ["show", "a", "-f", "a"],
    ["show", "sum(<i, a> in x) a", "--stage", "code", "-i", "x={tmp}/x.npy", "-f", "x=weird"],
    ["check", "a", "-t", "a=matrix"], ["demo", "--grid", "x"], ["bench", "nosuchsuite"],
]


@pytest.mark.parametrize("argv", BAD_INVOCATIONS, ids=lambda argv: " ".join(argv)[:40] or "empty")
def test_every_bad_invocation_prints_one_line_and_exits_2(argv, tmp_path, capsys):
    folder = _bad_files(tmp_path)
    argv = [a.replace("{tmp}", str(folder)) for a in argv]
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sparsad"), captured.err
    assert "Traceback" not in captured.err


def test_a_complex_matrix_market_file_is_refused_not_truncated(tmp_path, capsys):
    _bad_files(tmp_path)
    assert main(["run", "sum(<i, r> in A) r(i)", "-i", f"A={tmp_path / 'complex.mtx'}"]) == 2
    assert "DTypeError" in capsys.readouterr().err
