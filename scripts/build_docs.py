"""Build the documentation site into site/ (or argv[1]) and fail on any warning that matters.

`mkdocs build --strict` would also fail on autorefs' notes about `[a, b]` in the printed output of
docstring examples (Markdown reads it as a reference link); those are not links of ours, so they
are reported and let through. Every other warning (a page missing from the nav, a broken link or
anchor, a docstring that cannot be collected) fails the build.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCSTRING_OUTPUT_NOTE = re.compile(r"mkdocs_autorefs: api/.*Could not find cross-reference target")


def build(site_dir: str = "site") -> list[str]:
    """Build the site; return the warnings that should fail it."""
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "-d", site_dir], cwd=ROOT,
                            capture_output=True, text=True, timeout=900)
    lines = (result.stdout + result.stderr).splitlines()
    # a warning may continue on indented lines (the list of pages missing from the nav)
    warnings, current = [], None
    for line in lines:
        if line.startswith(("WARNING", "ERROR")):
            current = line
            warnings.append(current)
        elif current is not None and line.startswith("  "):
            warnings[-1] += "\n" + line
        else:
            current = None
    if result.returncode != 0 and not warnings:
        warnings.append(f"mkdocs exited with {result.returncode}: {result.stderr[-2000:]}")
    return [w for w in warnings if not DOCSTRING_OUTPUT_NOTE.search(w)]


if __name__ == "__main__":
    problems = build(sys.argv[1] if len(sys.argv) > 1 else "site")
    print("\n".join(problems) if problems else "site built with no warnings")
    sys.exit(1 if problems else 0)
