"""The package as a user meets it: a light import, lazy parts, one version, clear missing-extra errors."""
from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)


def test_import_loads_no_heavy_or_optional_dependency():
    result = run_python("import sys, sparsad; "
                        "print(sorted(m for m in ('egglog', 'sympy', 'torch', 'jax', 'dask', 'numba', 'sparse') "
                        "if m in sys.modules))")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_import_defers_the_language_and_numpy_until_first_use():
    result = run_python("import sys, sparsad; "
                        "print(sorted(m for m in sys.modules if m.startswith(('sparsad.', 'numpy')))); "
                        "from sparsad import grad, program; import sparsad as s; "
                        "print(all(getattr(s, n) is not None for n in s.__all__), grad.__module__, 'numpy' in sys.modules)")
    assert result.returncode == 0, result.stderr
    first, second = result.stdout.splitlines()
    assert first == "['sparsad._version', 'sparsad.errors']"
    assert second == "True sparsad.ad.api True"


def test_import_changes_no_global_configuration_of_jax():
    result = run_python("import jax, sparsad, sparsad.tensor; print(jax.config.jax_enable_x64)")
    if "ModuleNotFoundError" in result.stderr:
        return
    assert result.stdout.strip() == "False", result.stderr


def test_parts_are_lazy_attributes():
    result = run_python("import sparsad; print(sparsad.tensor.__name__, sparsad.coarsen.__name__)")
    assert result.stdout.split() == ["sparsad.tensor", "sparsad.coarsen"], result.stderr


def test_missing_framework_names_the_extra():
    code = ("import sys; sys.modules['torch'] = None\n"
            "try:\n    import sparsad.torch\n"
            "except ImportError as error:\n    print(type(error).__name__, '|', error)")
    result = run_python(code)
    name, message = result.stdout.split("|", 1)
    assert name.strip() == "MissingDependencyError"
    assert "pip install 'sparsad[torch]'" in message


def test_one_version_everywhere():
    import sparsad
    from sparsad._version import __version__

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"]["attr"] == "sparsad._version.__version__"
    assert sparsad.__version__ == __version__
    result = subprocess.run([sys.executable, "-m", "sparsad", "--version"], capture_output=True, text=True,
                            timeout=120)
    assert result.stdout.strip() == f"sparsad {__version__}"


def test_ships_type_information():
    assert (ROOT / "src" / "sparsad" / "py.typed").is_file()
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "py.typed" in pyproject["tool"]["setuptools"]["package-data"]["sparsad"]


def test_test_folders_do_not_shadow_the_frameworks():
    """tests/torch and tests/jax mirror the package; `tests/` itself must not be importable as a
    path entry, or `import torch` would find tests/torch where torch is not installed."""
    import os

    entries = {os.path.abspath(entry or ".") for entry in sys.path}
    assert str(ROOT / "tests") not in entries
