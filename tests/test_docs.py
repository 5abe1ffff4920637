"""Every Python block of the user documentation runs, and the site builds without broken links.

The blocks of one page run in order in one namespace, as a reader would paste them; a block
that should not run is written as ```text or ```sh.
"""
from __future__ import annotations

import linecache
import re
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def user_pages() -> list[Path]:
    """README and the site's pages (docs/dev/ holds development notes, not part of the site)."""
    pages = [ROOT / "README.md"] + sorted(DOCS.rglob("*.md"))
    return [page for page in pages if "dev" not in page.relative_to(ROOT).parts[1:-1]]


def python_blocks(page: Path) -> list[str]:
    return PYTHON_BLOCK.findall(page.read_text())


PAGES_WITH_CODE = [page for page in user_pages() if python_blocks(page)]


@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_python_block_runs(page: Path, tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from sparsad.coarsen.plan import CoarsenFallbackWarning

    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": f"docs_{page.stem}"}
    for number, block in enumerate(python_blocks(page), start=1):
        filename = f"<{page.name}, block {number}>"
        # Registered as a source file, as a reader's script would be: coarsening reads function sources.
        linecache.cache[filename] = (len(block), None, block.splitlines(keepends=True), filename)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error", CoarsenFallbackWarning)  # an example that falls back is broken
                exec(compile(block, filename, "exec"), namespace)
        except Exception as error:  # the failing block, named, is the useful message
            pytest.fail(f"{page.relative_to(ROOT)}, block {number} raised {type(error).__name__}: {error}")


def test_site_builds_with_no_broken_links(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from build_docs import build
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    problems = build(str(tmp_path / "site"))
    assert not problems, "\n".join(problems)
    assert (tmp_path / "site" / "index.html").is_file()


def test_docs_have_no_development_paths():
    """User pages must not point into a developer's checkout or the project's issue tracker."""
    leaks = re.compile(r"/work/|\.\./shared|\bissue \d+\b")
    offenders = {str(page.relative_to(ROOT)): leaks.findall(page.read_text()) for page in user_pages()}
    offenders = {page: found for page, found in offenders.items() if found}
    assert not offenders, offenders

