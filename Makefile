# The README's two commands: `make run` and `make test`. Both create .venv when it is missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Reinstall whenever the dependency pins change.
INSTALLED := $(VENV)/.installed

.PHONY: run test lint format crds bench install

install: $(INSTALLED)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# torch first and pinned: an unpinned torch pulls a multi-GB CUDA build.
$(INSTALLED): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[trainer,operator,api,dev]'
	touch $(INSTALLED)

run: $(INSTALLED)
	$(BIN)/kuberl train deploy/examples/cartpole-ppo.yaml

test: $(INSTALLED)
	$(BIN)/python -m pytest

lint: $(INSTALLED)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/lint-imports

format: $(INSTALLED)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

crds: $(INSTALLED)
	$(BIN)/python -m kuberl_operator.crd > deploy/crds/kuberl.io_rljobs.yaml
