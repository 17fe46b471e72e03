# The README's two commands: `make run` and `make test`. Both create .venv when it is missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Every install takes its versions from the lock (pyproject.toml declares ranges); reinstall
# whenever either changes. `make run` needs the trainer (and the API, for `kuberl serve` after
# it); `make test` needs everything.
LOCK := requirements.lock
TRAINER_INSTALLED := $(VENV)/.installed-trainer
INSTALLED := $(VENV)/.installed
PIP := $(BIN)/python -m pip install --quiet --constraint $(LOCK)

.PHONY: run test lint format crds dashboards bench install system-packages images gpu-check lock
# Debian packages some tests use as real peers: Prometheus and promtool (metrics, dashboards and
# alert rules), Chromium (the status page), buildah and debootstrap (the images). Installed when
# missing and this is Debian as root; elsewhere those tests skip and say which package they need.
SYSTEM_PACKAGES := prometheus chromium buildah debootstrap

install: $(INSTALLED)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# torch first, at the lock's version, and its CPU build (192 MB) where no NVIDIA GPU is seen:
# PyPI's Linux torch is the CUDA build, several GB with its libraries. On a GPU machine
# TORCH_INDEX is empty and PyPI's build comes; `make run TORCH_INDEX=URL` picks a build of torch's
# own index (https://download.pytorch.org/whl/cu128 for CUDA 12.8). Where the index cannot be
# reached, pip says so and takes torch from its other sources. Only torch itself is asked of that
# index; its dependencies come from PyPI, as every other package.
TORCH_CPU_INDEX := https://download.pytorch.org/whl/cpu
TORCH_INDEX ?= $(if $(shell command -v nvidia-smi 2>/dev/null),,$(TORCH_CPU_INDEX))
$(TRAINER_INSTALLED): pyproject.toml $(LOCK) | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(PIP) --no-deps torch $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX))
	$(PIP) torch
	$(PIP) -e '.[trainer,api]'
	touch $(TRAINER_INSTALLED)

$(INSTALLED): $(TRAINER_INSTALLED)
	$(PIP) -e '.[trainer,operator,api,dev]'
	touch $(INSTALLED)

run: $(TRAINER_INSTALLED)
	$(BIN)/kuberl train deploy/examples/cartpole-ppo.yaml
	@echo
	@echo "Next, as they can be typed here ('. $(BIN)/activate' puts kuberl on PATH):"
	@echo "  $(BIN)/kuberl evaluate runs/cartpole-ppo --episodes 100   # the trained policy, greedy"
	@echo "  $(BIN)/kuberl export runs/cartpole-ppo                    # policy.onnx, runs without kuberl"
	@echo "  $(BIN)/kuberl serve                                       # the REST API and status page"
	@echo "  $(BIN)/kuberl --help"

# Two processes, whole modules each (module fixtures such as the built images are made once); the
# slow modules go first (see tests/conftest.py). TEST_WORKERS=0 runs the suite in one process.
TEST_WORKERS ?= 2
test: $(INSTALLED) system-packages
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder

system-packages:
	@missing=$$(for p in $(SYSTEM_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing Debian packages: $$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	else \
		echo "not installed (their tests will skip): $$missing"; \
	fi

lint: $(INSTALLED)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/lint-imports

format: $(INSTALLED)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

crds: $(INSTALLED)
	$(BIN)/python -m kuberl_operator.crd > deploy/crds/kuberl.io_rljobs.yaml

# The Grafana dashboards in deploy/grafana/ (the chart links them); a test holds them equal.
dashboards: $(INSTALLED)
	$(BIN)/python deploy/grafana/generate.py

# The operator, API and CPU trainer images, built with buildah (see deploy/docker/README.md).
images:
	bash deploy/docker/build.sh

# Rewrite the lock from what .venv holds now (after changing pyproject.toml and installing):
# every package but kuberl itself, without local version labels (torch's +cpu), so that the
# same lock installs a CPU or a CUDA build of torch.
lock:
	{ sed -n '1,3p' $(LOCK); $(BIN)/python -m pip freeze --exclude-editable | grep -v ' @ ' \
		| sed -E 's/\+[A-Za-z0-9.]+$$//'; } > $(LOCK).new && mv $(LOCK).new $(LOCK)

# The GPU check of bench/README.md: one table in a few minutes on a CUDA machine, a dry run
# without one (ARGS=--quick for a short one).
gpu-check: $(INSTALLED)
	$(BIN)/python bench/gpu_check.py $(ARGS)
