# mqbed: `make run` and `make test` each set everything up first (idempotent).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
SYSTEM_PACKAGES := rabbitmq-server activemq openjdk-17-jre-headless prometheus docker.io \
                   docker-compose mmdebstrap chromium libxstream-java libjettison-java
SCENARIO ?= workloads/scenarios/quickstart.yaml

.PHONY: setup system venv run test lint unit clean

setup: system venv

system:
	@deploy/bin/ensure-system-packages $(SYSTEM_PACKAGES)

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[dev]'
	@touch $@

run: setup
	$(BIN)/mqbed run $(SCENARIO)

lint: venv
	$(BIN)/ruff check testbed emulator workloads tests
	$(BIN)/mypy

test: setup lint
	$(BIN)/pytest

unit: venv
	$(BIN)/pytest tests/unit

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
