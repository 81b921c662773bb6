# Build everything from nothing: `make demo` trains and plays, `make test` runs the test suite.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# torch first, as the CPU build: with torch already installed, pip never fetches a CUDA build.
TORCH_SPEC ?= torch==2.13.0
# Byte-compiled modules are kept between the test processes (ignored by git). A machine that sets
# PYTHONDONTWRITEBYTECODE made every process compile the package again and re-rewrite the tests' asserts: about a
# fifth of the CPU time of subprocess-heavy test files. An empty value turns it off for the recipes here only.
export PYTHONDONTWRITEBYTECODE :=

.PHONY: demo test test-fast lint bench bench-check docs clean node-client

NODE_CLIENT := examples/node_client

$(BIN)/activate:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.installed: $(BIN)/activate pyproject.toml
	$(BIN)/pip install -q "$(TORCH_SPEC)"
	$(BIN)/pip install -q -e ".[dev]"
	touch $@

# The Node.js example client's one dependency (onnxruntime-node, CPU build) for tests/test_serve_node.py; where npm
# is missing the test skips and says so. npm's CUDA download is skipped: the test acts on the CPU.
node-client:
	@if command -v npm >/dev/null 2>&1; then \
		(cd $(NODE_CLIENT) && npm install --no-audit --no-fund --onnxruntime-node-install-cuda=skip) \
		|| echo "npm install failed: tests/test_serve_node.py will skip"; \
	else echo "npm not found: tests/test_serve_node.py will skip"; fi

demo: $(VENV)/.installed
	$(BIN)/python examples/demo.py

# ruff (lint and format), then the type check of workbench/ (mypy, configured in pyproject.toml), then the tests and the notebooks.
test: $(VENV)/.installed node-client
	$(BIN)/ruff check workbench tests benchmarks examples notebooks tools
	$(BIN)/ruff format --check workbench tests benchmarks examples notebooks tools
	$(BIN)/mypy
	# -p no:nbmake outside the notebooks: loading that plugin imports nbformat's schema checks, about 2 s a process.
	# Two workers, a test file each at a time; then the browser, Ray and timing tests, on two workers again: one
	# drives the browser tests one after another, the other the Ray and timing files (tests/conftest.py groups them).
	$(BIN)/pytest -q -ra --durations=15 -n 2 --dist loadfile -p no:nbmake -m "not browser and not ray and not timing"
	$(BIN)/pytest -q -ra --durations=10 -n 2 --dist loadgroup -p no:nbmake -m "browser or ray or timing"
	cd notebooks && WB_QUICK=1 ../$(BIN)/pytest -q -n 2 --nbmake --nbmake-timeout=600 *.ipynb

# The inner loop: the unit tests only (no test marked slow, browser, Ray or timing), stopping at the first failure.
test-fast: $(VENV)/.installed
	$(BIN)/ruff check workbench tests benchmarks examples notebooks tools
	$(BIN)/ruff format --check workbench tests benchmarks examples notebooks tools
	$(BIN)/pytest -q -x -n 2 --durations=30 -p no:nbmake -m "not slow and not browser and not ray and not timing"

lint: $(VENV)/.installed
	$(BIN)/ruff check workbench tests benchmarks examples notebooks tools
	$(BIN)/ruff format --check workbench tests benchmarks examples notebooks tools
	$(BIN)/mypy

# The documentation site (mkdocs.yml): the guides of docs/ and the API reference from the docstrings, built with
# warnings as errors (a broken link or reference fails): open build/site/index.html, or `$(BIN)/mkdocs serve`.
docs: $(VENV)/.installed
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# The learning checks (the unit tests never train to a score): short rows over 3 seeds, each seed its own process,
# against the thresholds of benchmarks/results/bench_check.json, then the reference weight hashes. Exit 1 on a drop.
# Re-record after a change meant to change learning: $(BIN)/python benchmarks/bench_check.py --record
bench-check: $(VENV)/.installed
	$(BIN)/python benchmarks/bench_check.py

bench: $(VENV)/.installed
	$(BIN)/pip install -q -e ".[bench]"
	$(BIN)/python benchmarks/cartpole.py

clean:
	rm -rf $(VENV) runs build *.egg-info
