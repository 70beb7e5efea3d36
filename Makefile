# mqbed: `make run` and `make test` each set everything up first (idempotent).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
SYSTEM_PACKAGES := rabbitmq-server activemq openjdk-17-jre-headless prometheus docker.io \
                   docker-compose mmdebstrap chromium libxstream-java libjettison-java
SCENARIO ?= workloads/scenarios/quickstart.yaml
# The suite runs in pytest-xdist workers: most integration tests wait on live runs (a run at
# 100-200 msg/s keeps a core ~40 % busy), so two workers halve the wall time on 2 cores.
# tests/docker stays in one worker (one private dockerd). TEST_WORKERS=0 runs in one process.
TEST_WORKERS ?= 2
PYTEST_PARALLEL := -n $(TEST_WORKERS) --dist loadgroup
# PYTEST_ADDOPTS unset: no environment may add --noconftest or -p no:tests.ci_rules (the suite's
# rules, tests/ci_rules.py) to the targets' pytest runs.
PYTEST := env -u PYTEST_ADDOPTS $(BIN)/pytest

.PHONY: setup system venv run test lint unit clean

setup: system venv

system:
	@deploy/bin/ensure-system-packages $(SYSTEM_PACKAGES)

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints.txt
	@test -x $(BIN)/python || { rm -f $(VENV); $(PYTHON) -m venv $(VENV); }  # rm -f: a stray link, never a directory
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[dev]'
	@touch $@

run: setup
	$(BIN)/mqbed run $(SCENARIO)

lint: venv
	$(BIN)/ruff check testbed emulator workloads tests
	$(BIN)/ruff format --check testbed emulator workloads tests
	$(BIN)/mypy
	$(BIN)/lint-imports

test: setup lint
	MQBED_GATE_PHASE=defer $(PYTEST) $(PYTEST_PARALLEL) --durations=60
	MQBED_GATE_PHASE=only $(PYTEST) --durations=5

unit: venv
	$(PYTEST) $(PYTEST_PARALLEL) tests/unit

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
