#!/usr/bin/env bash
# A new user's install: build the wheel, install it with the [torch] extra into a clean virtual
# environment (CPU torch first, so pip keeps it), then run every Python block of the quick start
# from outside the checkout. Usage: scripts/check_install.sh [python]
set -euo pipefail
PYTHON="${1:-python3}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

"$PYTHON" -m venv "$WORK/venv"
PIP="$WORK/venv/bin/pip"
"$PIP" install -q --upgrade pip
"$PIP" wheel -q --no-deps -w "$WORK/dist" "$ROOT"
# CPU build of PyTorch (the pinned one); elsewhere: pip install torch --index-url <PyTorch's CPU index>
"$PIP" install -q "$(grep '^torch==' "$ROOT/requirements/all.txt")"
"$PIP" install -q "$(ls "$WORK"/dist/sparsad-*.whl)[torch]"

cd "$WORK"
"$WORK/venv/bin/python" - "$ROOT/docs/quickstart.md" <<'PY'
import linecache, re, sys, warnings
text = open(sys.argv[1]).read()
namespace = {"__name__": "quickstart"}
warnings.simplefilter("error", UserWarning)  # a fallback or densify warning means the example is broken
for number, block in enumerate(re.findall(r"^```python\n(.*?)^```", text, re.S | re.M), start=1):
    filename = f"<quickstart.md, block {number}>"
    linecache.cache[filename] = (len(block), None, block.splitlines(keepends=True), filename)
    exec(compile(block, filename, "exec"), namespace)
import sparsad
print(f"quick start ran with sparsad {sparsad.__version__} from {sparsad.__file__}")
PY
"$WORK/venv/bin/sparsad" --version
