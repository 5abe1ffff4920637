# One command sets up everything: each target builds .venv from the pins when missing or stale.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.sparsad-installed

.PHONY: demo test bench docs clean-venv

$(STAMP): requirements/all.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -r requirements/all.txt
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m sparsad demo

test: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider --timeout=600

bench: $(STAMP)
	$(PY) -m sparsad bench all

docs: $(STAMP)
	$(PY) -m mkdocs build --strict -d site

clean-venv:
	rm -rf $(VENV)
