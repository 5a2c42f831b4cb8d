# Kakehashi: `make run` for a local demo, `make test` for the whole suite (installs what it needs).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: run test venv dev-venv system-deps cluster-up cluster-harness cluster-down vendor lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.runtime: requirements.txt | $(BIN)/python
	$(BIN)/pip install -q -r requirements.txt
	touch $@

$(VENV)/.dev: requirements-dev.txt requirements.txt | $(BIN)/python
	$(BIN)/pip install -q -r requirements-dev.txt
	touch $@ $(VENV)/.runtime

venv: $(VENV)/.runtime
dev-venv: $(VENV)/.dev

## run: the portal on http://127.0.0.1:8000 with a Celery worker — SQLite, a file-system broker, local backend
run: venv
	$(BIN)/python manage.py migrate --noinput -v0
	$(BIN)/python manage.py setup_demo
	$(BIN)/python -m portal.devserver

## test: everything the tests need (apt packages too), the loopback test cluster, then the whole suite
test: dev-venv system-deps cluster-harness
	$(BIN)/python -m pytest $(PYTEST_ARGS)

system-deps:
	tests/system-deps.sh chromium fonts-ipafont-gothic

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

clean:
	rm -rf var
