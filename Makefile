# cgbench developer tasks. `make help` lists them.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
# torch is needed by the tests (real-engine backend); on a CUDA machine bring your own build and
# set TORCH_SPEC (or install torch into the venv first: an importable torch is left alone).
TORCH_SPEC ?= torch==2.13.0
ARGS ?=
# pytest with bytecode caching on even where the environment turns it off: its rewritten test modules
# are then cached in __pycache__ (gitignored) and a second run skips about 6 s of rewriting per worker.
PYTEST := PYTHONDONTWRITEBYTECODE= $(BIN)/pytest

.DEFAULT_GOAL := help

help: ## List the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

$(VENV)/.core: pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e .
	@touch $@

$(VENV)/.dev: $(VENV)/.core
	@$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[dev]"
	@touch $@

install: $(VENV)/.core ## Create the venv and install cgbench (simulator only, no torch)

dev: $(VENV)/.dev ## Install everything the tests need (torch CPU build included)

run: $(VENV)/.core ## Run the default job (cgbench run; pass overrides with ARGS="model=transformer")
	$(BIN)/cgbench run $(ARGS)

lint: $(VENV)/.dev ## ruff
	$(BIN)/ruff check cgbench tests scripts

deps-check: $(VENV)/.dev ## Every module cgbench imports is declared in pyproject.toml (deptry; the test suite runs it too)
	$(BIN)/deptry cgbench

# worksteal: an idle worker takes queued tests from a busy one, so one long test does not leave a core idle.
# Three tiers (tests/conftest.py): test-fast < test < test-all. The cluster tests (marked slurm) run in
# `make test-slurm`, which CI runs after test-all.
test: $(VENV)/.dev ## Lint, then every test but the end-to-end ones (marked e2e), each property at the quick depth (times: README)
	$(BIN)/ruff check cgbench tests scripts
	$(PYTEST) -q -n 2 --dist worksteal -m "not e2e and not slurm" --hypothesis-profile=quick

test-fast: $(VENV)/.dev ## The edit-run loop: the tests not marked slow or e2e, at the quick depth (times: README)
	$(PYTEST) -q -x -n 2 --dist worksteal -m "not slow and not e2e and not slurm" --hypothesis-profile=quick

test-all: $(VENV)/.dev ## Lint, then the whole suite (all but the cluster tests of make test-slurm): what CI runs
	$(BIN)/ruff check cgbench tests scripts
	$(PYTEST) -q -n 2 --dist worksteal -m "not slurm"

test-deep: $(VENV)/.dev ## The whole suite with hypothesis's deep profile (4,000 examples for the engine-equality and invariant properties; 1,000 live runs per rule set against Megatron's code when CGBENCH_MEGATRON_LM or CGBENCH_MEGATRON_GIT names it)
	$(PYTEST) -q -n 2 --dist worksteal -m "not slurm" --hypothesis-profile=deep

megatron-diff: $(VENV)/.dev ## cgbench against Megatron-LM's own code, live (needs CGBENCH_MEGATRON_LM or CGBENCH_MEGATRON_GIT; ARGS="--runs 1000")
	$(PY) scripts/megatron_diff.py live $(ARGS)
	$(PY) scripts/megatron_diff.py routing $(ARGS)

# Debian's chromium package; as root, or through a password-less sudo. Never fails: without it the
# browser tests skip and say why.
browser: ## Install Chromium for the HTML report's headless-browser tests (where it is missing)
	@if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then \
	    echo "browser: $$(command -v chromium || command -v chromium-browser)"; \
	elif ! command -v apt-get >/dev/null 2>&1; then \
	    echo "browser: no apt-get here; the report's browser tests skip (install Chromium, or set CGBENCH_CHROMIUM)"; \
	else \
	    if [ "$$(id -u)" = 0 ]; then as_root=""; elif sudo -n true 2>/dev/null; then as_root="sudo -n"; else as_root=none; fi; \
	    if [ "$$as_root" = none ]; then echo "browser: not root and no sudo; the report's browser tests skip"; \
	    else export DEBIAN_FRONTEND=noninteractive; \
	        $$as_root apt-get install -y -q chromium >/dev/null 2>&1 \
	        || { $$as_root apt-get update -q >/dev/null 2>&1 && $$as_root apt-get install -y -q chromium >/dev/null 2>&1; } \
	        && echo "browser: installed $$(command -v chromium)" \
	        || echo "browser: apt-get could not install chromium; the report's browser tests skip"; \
	    fi; \
	fi

sweep: $(VENV)/.core ## Run the default sweep (conf/sweep/default.yaml)
	$(BIN)/cgbench sweep --jobs 2 $(ARGS)

bench: $(VENV)/.dev ## Simulator and matcher performance benchmark: prints its table and writes it into docs/performance.md (and docs/performance-bench.json)
	$(PY) scripts/bench.py --write $(ARGS)

# a sweep writes its point files on one line; the committed reference is indented, for git diff
baseline: $(VENV)/.core ## Regenerate results/baseline/ (the CI gate's reference)
	rm -rf results/baseline
	$(BIN)/cgbench sweep sweep=ci --out results/baseline
	$(PY) scripts/indent_results.py results/baseline

ci-gate: $(VENV)/.core ## Run the CI sweep and compare it with results/baseline/ (exit 1 on a missing, failed, changed or regressed point)
	rm -rf results/sweeps/ci-check
	$(BIN)/cgbench sweep sweep=ci --out results/sweeps/ci-check
	$(BIN)/cgbench compare results/baseline results/sweeps/ci-check $(if $(GITHUB_STEP_SUMMARY),--markdown "$(GITHUB_STEP_SUMMARY)")

test-slurm: $(VENV)/.dev ## Cluster tests on the local SLURM (bash scripts/slurm-local.sh start first; skipped without it)
	$(PYTEST) -q -rs -m slurm tests/analysis/test_slurm.py tests/analysis/test_executors.py

gpu-check: ## On a GPU machine: GPU tests, a small real-engine sweep and calibration (scripts/gpu_check.sh)
	bash scripts/gpu_check.sh

native: $(VENV)/.core ## Compile the simulator's hot modules with mypyc (optional: needs a C compiler; same results, faster)
	$(PY) -m pip install -q -e ".[native]"
	$(PY) scripts/build_native.py

clean-native: ## Remove the compiled simulator (plain Python again)
	$(PY) scripts/build_native.py --clean

clean: ## Remove the venv, caches and the compiled simulator (keeps results/)
	-@test -x $(PY) && $(PY) scripts/build_native.py --clean >/dev/null
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache .hypothesis build dist *.egg-info

.PHONY: help install dev run lint deps-check browser test test-fast test-all test-deep megatron-diff test-slurm sweep bench baseline ci-gate gpu-check native clean-native clean
