# One command sets up everything: each target builds .venv from the pins when missing or stale.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.sparsad-installed

.PHONY: demo test bench fuzz determinism docs check-install test-latest clean-venv

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
	$(PY) scripts/build_docs.py site

# A clean virtual environment, the built wheel with the [torch] extra, and the quick start.
check-install:
	bash scripts/check_install.sh $(PYTHON)

# The test suite against the newest releases the declared ranges admit (torch stays the pinned CPU build).
test-latest:
	test -x .venv-latest/bin/python || $(PYTHON) -m venv .venv-latest
	.venv-latest/bin/python -m pip install -q --upgrade "$$(grep '^torch==' requirements/all.txt)"
	.venv-latest/bin/python -m pip install -q --upgrade -e '.[jax,dask,sparse,bench,test,docs,solvers]'
	.venv-latest/bin/python -m pytest -q -p no:cacheprovider --timeout=600

# the long crash-isolated fuzz campaign (issue 12): FUZZ_MINUTES of cases, report in FUZZ_REPORT
FUZZ_MINUTES ?= 60
FUZZ_REPORT ?= fuzz-report.json
fuzz: $(STAMP)
	$(PY) tests/fuzz/campaign.py --minutes $(FUZZ_MINUTES) --report $(FUZZ_REPORT)

# the optimizer plans every core corpus case identically in DETERMINISM_PROCESSES fresh processes
# (different hash seeds; issue 11); DETERMINISM_TIER=full for all programs (hours on 2 cores)
DETERMINISM_PROCESSES ?= 25
DETERMINISM_TIER ?= core
determinism: $(STAMP)
	$(PY) -m bench.corpus_stages --processes $(DETERMINISM_PROCESSES) --tier $(DETERMINISM_TIER)

clean-venv:
	rm -rf $(VENV) .venv-latest
