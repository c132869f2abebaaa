# Simple AI Training — the two commands of the quick start: `make run` and `make test`.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed

.PHONY: run test lint venv clean containers environments

$(PY):
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "Python 3.11 is needed ($(PYTHON) not found; set PYTHON=...)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

$(STAMP): requirements.txt | $(PY)
	$(PIP) install --quiet -r requirements.txt
	touch $(STAMP)

venv: $(STAMP)

## Start everything in the foreground: a private PostgreSQL, Redis (if none answers), object storage, console, worker, beat, two nodes.
run: $(STAMP)
	$(PY) -m console.devserver

## The whole test suite, on PostgreSQL and Redis (started by .ci/run in CI).
TEST_ENV = DATABASE_URL=$${TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/simpleai} \
	REDIS_URL=$${TEST_REDIS_URL:-redis://127.0.0.1:6379/14}

# pytest-xdist workers (README: Tests); 0 runs the suite in one process
TEST_WORKERS ?= 3
TEST_XDIST = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadscope)

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(TEST_ENV) $(PY) manage.py check
	$(TEST_ENV) $(PY) manage.py makemigrations --check --dry-run
	$(TEST_ENV) $(PY) -m pytest $(TEST_XDIST) --durations=25 $(PYTEST_ARGS)

## Install Podman, runc and a registry, and build the test image (root; cached): the Docker runtime's tests need them.
containers: $(STAMP)
	$(PY) -m jobs.tests.e2e.containers

## Build the seeded training environments into the tests' node cache ($$SIMPLEAI_CACHE_DIR/environments; cached).
environments: $(STAMP)
	$(PY) -m jobs.tests.e2e.environments

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) staticfiles
