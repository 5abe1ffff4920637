"""The `sparsad` command: run, check, demo, bench."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from sparsad._version import __version__
from sparsad.errors import DTypeError, InputError, SparsadError, did_you_mean


class UsageError(InputError):
    """A bad command line: the CLI prints it on one line and exits with status 2."""


class _ArgumentParser(argparse.ArgumentParser):
    """argparse, but a bad command line is one line on stderr (no usage block) and status 2."""

    def error(self, message: str):  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message} (see {self.prog} --help)")


def _pairs(items: list[str] | None, what: str) -> dict[str, str]:
    result = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise UsageError(f"{what} {item!r} must look like NAME=VALUE")
        result[name.strip()] = value
    return result


def _program_text(arg: str) -> str:
    path = Path(arg)
    if path.suffix in (".sdql", ".sd", ".txt") or (len(arg) < 255 and path.is_file()):
        if not path.is_file():
            raise UsageError(f"no program file {arg!r}")
        return path.read_text()
    return arg


def load_input(spec: str) -> tuple[str, Any]:
    """NAME=FILE.mtx | NAME=FILE.npy | NAME=NUMBER."""
    name, sep, value = spec.partition("=")
    if not sep or not name.isidentifier():
        raise UsageError(f"input {spec!r} must look like NAME=FILE.mtx, NAME=FILE.npy or NAME=3.5")
    if value.endswith(".mtx"):
        import scipy.io
        import scipy.sparse

        matrix = scipy.io.mmread(value)
        if matrix.dtype.kind not in "biuf":
            raise DTypeError(f"input {name!r}: {value} holds {matrix.dtype} values; sparsad computes "
                             f"over reals: split it into real and imaginary parts (two real inputs)")
        return name, scipy.sparse.csr_matrix(matrix).astype(float)
    if value.endswith(".npy"):
        import numpy as np

        return name, np.load(value, allow_pickle=False)
    for cast in (int, float):
        try:
            return name, cast(value)
        except ValueError:
            pass
    if value in ("true", "false"):
        return name, value == "true"
    raise UsageError(f"cannot read input {name!r} from {value!r}: give a .mtx or .npy file or a number")


def _print_value(value: Any, output: str | None) -> None:
    import numpy as np
    import scipy.sparse as sp

    if output:
        if sp.issparse(value):
            import scipy.io

            scipy.io.mmwrite(output, value)
        else:
            np.save(output, np.asarray(value))
        print(f"wrote {output}")
        return
    if sp.issparse(value):
        print(f"{type(value).__name__} {value.shape} with {value.nnz} stored entries")
        print(value)
    else:
        with np.printoptions(threshold=50, linewidth=100):
            print(value)


def cmd_run(args) -> int:
    from sparsad.lang.program import program

    prog = program(_program_text(args.program), _pairs(args.type, "type"))
    inputs = dict(load_input(spec) for spec in args.input or [])
    _print_value(prog(out_format=args.out_format, **inputs), args.output)
    return 0


def cmd_grad(args) -> int:
    from sparsad.ad.api import grad, jacobian

    types = _pairs(args.type, "type")
    from sparsad.lang.program import program

    prog = program(_program_text(args.program), types)
    make = jacobian if args.jacobian else grad
    wrt = args.wrt[0] if len(args.wrt) == 1 else args.wrt  # one --wrt: one result; several: a dict by name
    derivative = make(prog, wrt=wrt, mode=args.mode)
    inputs = dict(load_input(spec) for spec in args.input or [])
    if args.show or not inputs:
        if args.mode == "auto" and not args.jacobian:
            # the paper's `gradient e x` (Fig. 7, §4.3), then what mode="auto" runs
            paper = make(prog, wrt=wrt, mode="tensorized")
            print("# gradient e x, tensorized forward mode (∇SD Fig. 7):")
            print(paper.show("derivative"))
            print(f"\n# mode=auto runs {derivative.resolved_mode()} mode:")
        print(derivative.show("derivative"))
    if inputs:
        result = derivative(out_format=args.out_format, **inputs)
        if len(args.wrt) > 1:
            for name, value in result.items():
                print(f"d/d{name}:")
                _print_value(value, None)
        else:
            _print_value(result, args.output)
    return 0


def cmd_show(args) -> int:
    """Print a stage of the compilation pipeline for the given inputs (their formats decide it)."""
    from sparsad.compiler import STAGES, CompiledProgram
    from sparsad.lang.program import program

    prog = program(_program_text(args.program), _pairs(args.type, "type"))
    inputs = dict(load_input(spec) for spec in args.input or [])
    formats = _pairs(args.format, "format")
    if args.wrt:
        from sparsad.ad.api import grad, jacobian

        target = (jacobian if args.jacobian else grad)(prog, wrt=args.wrt).compiled(formats=formats)
    else:
        target = CompiledProgram(prog, formats)
    if args.stage in ("source", "derivative") or not inputs:
        if args.stage not in ("source", "derivative"):
            raise UsageError(f"show: stage {args.stage!r} depends on the inputs' formats; "
                             "give them with -i NAME=FILE")
        print(target.show(args.stage))
        return 0
    target(**inputs)
    print(target.show(args.stage))
    return 0


def cmd_check(args) -> int:
    from sparsad.lang.program import program

    types = _pairs(args.type, "type")
    prog = program(_program_text(args.program), types)
    print(prog.text())
    missing = [n for n in prog.inputs if n not in types]
    if missing:
        print(f"parsed; inputs {prog.inputs}. Declare {missing} with -t NAME=TYPE to type-check.")
    else:
        print(f"ok: type {prog.infer_type()}")
    return 0


def cmd_demo(args) -> int:
    from sparsad.demo import run_demo

    return 0 if run_demo(grid=args.grid) else 1


def cmd_bench(args) -> int:
    import importlib

    root = Path(__file__).resolve().parents[2]
    if not (root / "bench").is_dir():
        raise UsageError("bench runs from a source checkout (the bench/ folder is not installed)")
    sys.path.insert(0, str(root))
    available = sorted(p.stem for p in (root / "bench").glob("*.py") if p.stem not in ("__init__", "common"))
    names = available if args.suite == "all" else [args.suite]
    for name in names:
        if name not in available:
            raise UsageError(f"no benchmark suite {name!r}; available: {', '.join(available)}"
                             f"{did_you_mean(name, available)}")
        print(f"\n##### bench {name} #####")
        importlib.import_module(f"bench.{name}").main(quick=args.quick)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = _ArgumentParser(prog="sparsad", description="Differentiable sparse tensor programs.")
    parser.add_argument("--version", action="version", version=f"sparsad {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run a program on inputs with the reference interpreter")
    run.add_argument("program", help="program text or a file holding it")
    run.add_argument("-i", "--input", action="append", metavar="NAME=FILE|VALUE",
                     help="an input: a .mtx or .npy file or a number (repeatable)")
    run.add_argument("-t", "--type", action="append", metavar="NAME=TYPE", help="declare an input's type")
    run.add_argument("--out-format", default="natural",
                     choices=["natural", "dense", "csr", "csc", "coo", "dict"])
    run.add_argument("-o", "--output", help="write the result to a .npy or .mtx file")
    run.set_defaults(func=cmd_run)

    grad = sub.add_parser("grad", help="differentiate a program; print the derivative and, given inputs, its value")
    grad.add_argument("program", help="program text or a file holding it")
    grad.add_argument("--wrt", action="append", required=True, help="input to differentiate by (repeatable)")
    grad.add_argument("-i", "--input", action="append", metavar="NAME=FILE|VALUE")
    grad.add_argument("-t", "--type", action="append", metavar="NAME=TYPE", help="declare an input's type")
    grad.add_argument("--mode", default="auto", choices=["auto", "reverse", "tensorized", "forward"])
    grad.add_argument("--jacobian", action="store_true", help="the Jacobian of a non-scalar program")
    grad.add_argument("--show", action="store_true", help="print the derivative program even with inputs")
    grad.add_argument("--out-format", default="natural", choices=["natural", "dense", "csr", "csc", "coo", "dict"])
    grad.add_argument("-o", "--output", help="write the result to a .npy or .mtx file")
    grad.set_defaults(func=cmd_grad)

    show = sub.add_parser("show", help="print a stage of compiling a program (or its derivative)")
    show.add_argument("program")
    show.add_argument("--stage", default="optimized",
                      help="source, derivative, sparsity, storage, fuse, eqsat, normalize, dps, cse, "
                           "optimized or code")
    show.add_argument("--wrt", action="append", help="show the derivative with respect to this input")
    show.add_argument("--jacobian", action="store_true")
    show.add_argument("-i", "--input", action="append", metavar="NAME=FILE|VALUE")
    show.add_argument("-t", "--type", action="append", metavar="NAME=TYPE")
    show.add_argument("-f", "--format", action="append", metavar="NAME=FORMAT",
                      help="store an input in this format (csr, csc, coo, dense, dcsr, ...)")
    show.set_defaults(func=cmd_show)

    check = sub.add_parser("check", help="parse and type-check a program")
    check.add_argument("program")
    check.add_argument("-t", "--type", action="append", metavar="NAME=TYPE",
                       help="declare an input's type, e.g. A='tensor 2'")
    check.set_defaults(func=cmd_check)

    demo = sub.add_parser("demo", help="run the paper's kernels against NumPy/SciPy")
    demo.add_argument("--grid", type=int, default=8, help="Poisson grid size (matrix order grid^2)")
    demo.set_defaults(func=cmd_demo)

    bench = sub.add_parser("bench", help="run a benchmark suite from bench/ (or 'all')")
    bench.add_argument("suite", nargs="?", default="all")
    bench.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    bench.set_defaults(func=cmd_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; a bad invocation prints one line on stderr and returns 2."""
    try:
        args = build_parser().parse_args(argv)
        return args.func(args)
    except SparsadError as error:
        return _fail(f"{type(error).__name__}: {error}")
    except (OSError, ValueError, TypeError, KeyError, IndexError, MemoryError, RecursionError,
            UnicodeError, EOFError) as error:  # unreadable files, foreign libraries' complaints
        return _fail(f"{type(error).__name__}: {error}")


def _fail(message: str) -> int:
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    print(f"sparsad: {lines[0] if lines else 'error'}", file=sys.stderr)
    return 2
