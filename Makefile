# epochal: two commands do everything on a fresh machine.
#   make run   installs, migrates and starts API + worker on the embedded default
#   make test  installs what tests need and runs the suite (make test-slow: the long checks)
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
FASHION_DIR := /usr/share/datasets/fashion-mnist
PYTEST_ARGS ?=
# Tests side by side, a module per process: most of a test's time is waiting on the processes
# it started (API, worker, training child), so two at a time fit two cores. TEST_JOBS=1: serial.
TEST_JOBS ?= 2

.PHONY: install run test test-slow test-compose lint docs bench bench-gpu gpu-smoke clean data

install: $(STAMP) data

$(STAMP): pyproject.toml client/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check --upgrade pip
	# Both distributions, editable: the client (epochal_client, the `epochal` command) and the
	# server (app, worker, migrations). torch==2.13.0 resolves to the CPU wheel on this
	# machine's disk; GPU machines use the worker image (DEPLOY.md).
	$(BIN)/python -m pip install -q --disable-pip-version-check -e "./client[cli,plot]" -e ".[worker,dev]"
	touch $(STAMP)

# Debian packages, best effort (needs apt and root): dataset-fashion-mnist puts the IDX files
# under /usr/share/datasets/fashion-mnist (without it, fashion_mnist jobs say where to put them);
# docker-compose validates docker-compose.yml in the tests (no engine needed for `config`);
# chromium runs the dashboard's browser test (driven by Playwright, never `playwright install`).
DEBS := $(if $(wildcard $(FASHION_DIR)),,dataset-fashion-mnist) $(if $(shell command -v docker-compose),,docker-compose) $(if $(wildcard /usr/bin/chromium),,chromium)
data:
	@if [ -n "$(strip $(DEBS))" ] && command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	  (apt-get install -y -qq $(DEBS) >/dev/null 2>&1 || \
	   (apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq $(DEBS) >/dev/null 2>&1)) || \
	  echo "note: could not install $(DEBS) with apt"; \
	fi

run: install
	$(BIN)/epochal up

# With PYTHONDONTWRITEBYTECODE set (some CI images set it), each pytest worker would rewrite and
# compile every test module and plugin again: collection took 28 s instead of 14 s here.
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest $(if $(filter-out 1,$(TEST_JOBS)),-n $(TEST_JOBS) --dist loadfile)
test: install
	$(PYTEST) -m "not slow and not compose" $(PYTEST_ARGS)

# The long checks (tests/conftest.py SLOW_MODULES): multi-process scenarios, the installed
# wheels and images, accuracy and memory runs. CI runs them after `make test`.
test-slow: install
	$(PYTEST) -m "slow and not compose" $(PYTEST_ARGS)

# The deployment (tests/compose): a Docker engine of its own (docker.io, docker-compose and
# mmdebstrap come from apt when missing), the images built from the Dockerfile and the stack
# run by docker-compose. Minutes long and root only, so a step of its own, not part of `test`.
test-compose: install
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -m compose tests/compose -x $(PYTEST_ARGS)

lint: install
	$(BIN)/ruff check app worker client migrations tools tests benchmarks
	$(BIN)/lint-imports
	$(BIN)/python -m mypy

# The docs site (docs/, mkdocs.yml) into site/; --strict fails on a broken link, anchor or page.
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

bench: install
	$(BIN)/python -m benchmarks

bench-gpu: install
	$(BIN)/python -m benchmarks.gpu

# The GPU path through the real service (every precision, all GPUs): a few minutes; says so
# and exits 0 where there is no GPU.
gpu-smoke: install
	$(BIN)/python -m benchmarks.gpu_smoke

clean:
	rm -rf $(VENV) .epochal .pytest_cache .mypy_cache test-artifacts
