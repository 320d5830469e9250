# kquota: the two commands a user needs are `make demo` and `make test`.
# Everything they need is installed by the targets below; downloads and builds
# are cached under $(KQUOTA_CACHE) (outside the clone) so only the first run pays.

SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
export KQUOTA_CACHE ?= $(HOME)/.cache/kquota
export PIP_DISABLE_PIP_VERSION_CHECK := 1
# pytest arguments, e.g. `make test PYTEST_ARGS="-k reconcile -x"`
PYTEST_ARGS ?=

.PHONY: help setup venv tools lint test test-unit demo crds clean

help:
	@echo "make demo   - local Kafka + kube-apiserver + operator + examples, then show status (Ctrl-C stops all)"
	@echo "make test   - install everything and run every test (lint, types, layers, unit, integration, e2e)"
	@echo "make crds   - regenerate crds/ and the Helm chart's copy from the pydantic models"

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

venv: $(VENV)/.installed

# Kafka jars (Maven Central), the kube-apiserver harness (Go modules), helm (Go modules).
tools: venv
	$(PY) -m tests.harness prepare

setup: tools

lint: venv
	$(VENV)/bin/ruff check operator tests bench
	$(VENV)/bin/ruff format --check operator tests bench
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

test: setup lint
	$(PY) -m pytest $(PYTEST_ARGS)

test-unit: venv
	$(PY) -m pytest -m unit $(PYTEST_ARGS)

crds: venv
	$(PY) -m kquota.crdgen

demo: setup
	$(PY) -m tests.harness demo

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build *.egg-info operator/*.egg-info
