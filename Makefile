# Simple AI Training — the two commands of the quick start: `make run` and `make test`.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed
SIMPLEAI := $(VENV)/bin/simpleai

.PHONY: run test lint docs venv clean containers environments slurm

$(PY):
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "Python 3.11 is needed ($(PYTHON) not found; set PYTHON=...)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

$(STAMP): requirements.txt | $(PY)
	$(PIP) install --quiet -r requirements.txt
	touch $(STAMP)

# The `simpleai` command of this checkout, as a console script that runs simpleai.cli with the
# venv's Python. Written here rather than by `pip install -e .`: that needs a build backend
# fetched from the package index and a package list for this flat layout, and leaves an
# .egg-info behind; this needs nothing and follows the checkout wherever its code changes.
$(SIMPLEAI): Makefile | $(PY)
	printf '%s\n' '#!$(abspath $(PY))' '# written by make venv: the simpleai command of $(CURDIR)' \
		'import sys' "sys.path.insert(0, '$(CURDIR)')" 'from simpleai.cli import main' 'sys.exit(main())' > $@
	chmod +x $@

venv: $(STAMP) $(SIMPLEAI)

## Start everything in the foreground: a private PostgreSQL and Redis (with passwords), object storage, console, worker, beat, two nodes.
run: $(STAMP) $(SIMPLEAI)
	$(PY) -m console.devserver

## The whole test suite, on PostgreSQL and Redis (started by .ci/run in CI).
TEST_ENV = DATABASE_URL=$${TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/simpleai} \
	REDIS_URL=$${TEST_REDIS_URL:-redis://127.0.0.1:6379/14}

# pytest-xdist workers (docs/development.md); 0 runs the suite in one process
TEST_WORKERS ?= 3
TEST_XDIST = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadscope)

test: $(STAMP) $(SIMPLEAI)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(MAKE) --no-print-directory docs
	$(TEST_ENV) $(PY) manage.py check
	$(TEST_ENV) $(PY) manage.py makemigrations --check --dry-run
	$(TEST_ENV) $(PY) -m pytest $(TEST_XDIST) --durations=25 $(PYTEST_ARGS)

## Install Podman, runc and a registry, and build the test image (root; cached): the Docker runtime's tests need them.
containers: $(STAMP)
	$(PY) -m jobs.tests.e2e.containers

## Build the seeded training environments into the tests' node cache ($$SIMPLEAI_CACHE_DIR/environments; cached).
environments: $(STAMP)
	$(PY) -m jobs.tests.e2e.environments

## Start the tests' local Slurm cluster (root; Debian's Slurm packages) in the foreground, to try the backend by hand.
slurm: $(STAMP)
	$(PY) -m jobs.slurm.tests.cluster

## The documentation site (MkDocs, Material) into .run/site, strictly: a broken link, a missing page or an unknown anchor fails.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

## ruff, mypy (strict) and the import layering's contracts (lint-imports; [tool.importlinter] in pyproject.toml).
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

clean:
	rm -rf $(VENV) staticfiles
