# Plimsoll: `make run` starts everything on the embedded default; `make test` runs the suite.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 8000
DEMO_PORT ?= 8001

.PHONY: run test test-deps lint format install migrate bench docs clean

# --no-compile: pip would compile every module of every package (61 against 30 s on a 2-core machine, 2026-12-08);
# Python compiles the ones a process imports, once, on first import.
$(VENV)/.installed: requirements.txt
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "Plimsoll needs Python 3.11, found " + sys.version.split()[0]'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --no-compile -r requirements.txt
	touch $@

install: $(VENV)/.installed

migrate: install
	$(BIN)/python manage.py migrate --noinput

# Every process of `make run` knows the port it serves on: links in mail and webhooks follow it (SITE_URL).
run: export PLIMSOLL_PORT = $(PORT)
run: export PLIMSOLL_DEMO_PORT = $(DEMO_PORT)
run: migrate
	$(BIN)/python manage.py seed_demo --base-url http://127.0.0.1:$(DEMO_PORT)
	@echo
	@echo "  Plimsoll: http://127.0.0.1:$(PORT)/   log in as demo / demo   (Ctrl-C stops everything)"
	@echo
	PLIMSOLL_PORT=$(PORT) PLIMSOLL_DEMO_PORT=$(DEMO_PORT) $(BIN)/honcho start -f Procfile

# Tests keep their database, broker folder and key under var/test, apart from a running `make run`.
# First, what the tests need from Debian (Chromium, JMeter, a JDK, nginx): scripts/install-test-deps.sh
# installs it when missing (as root), or stops at once with the apt-get command to run.
# Then scripts/run-tests.sh: three lanes at once, each a pytest session with pytest-xdist processes of its own
# (a broker, a var/test/<lane>/gwN and test databases each): the tests that measure nothing in time on three
# processes at nice 19; the `serial` ones (durations, rates, latency bounds: tests/conftest.py) on two at
# nice 5; the `alone` ones (verdicts weighed against noise) on one at nice 0. The timed lanes mostly wait,
# and the kernel hands them the CPU first when they wake; the niced lane takes what they leave. A lane that
# PYTEST_ARGS leaves without tests (pytest's exit 5) is not a failure (docs/development/tests.md).
# Bytecode is cached even where the environment says PYTHONDONTWRITEBYTECODE (as containers often do):
# otherwise each of the hundreds of Python processes the tests start (workers, targets, manage.py,
# gunicorn) compiles the portal again (≈ 1 s of CPU each).
export PYTEST_ARGS
test: test-deps install
	bash scripts/run-tests.sh

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# The documentation site (docs/, mkdocs.yml) into site/; --strict fails on a broken link or anchor.
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

test-deps:
	bash scripts/install-test-deps.sh

# Benchmarks (never in the test suite): `make bench`, or `make bench BENCH_ARGS=--quick`.
bench: install
	$(BIN)/python -m bench $(BENCH_ARGS)

clean:
	rm -rf $(VENV) var site bench/.venv-locust
