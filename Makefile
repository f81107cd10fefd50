# Plimsoll: `make run` starts everything on the embedded default; `make test` runs the suite.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 8000
DEMO_PORT ?= 8001

.PHONY: run test test-deps lint format install migrate bench docs clean

$(VENV)/.installed: requirements.txt
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "Plimsoll needs Python 3.11, found " + sys.version.split()[0]'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements.txt
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
# Two passes: the tests that measure nothing in time run on three processes (pytest-xdist, each with a
# broker and a var/test/gwN of its own; worksteal, so that a process left with long end-to-end tests
# hands its queue to an idle one); then the `serial` ones (the engine, the demo, the end-to-end tests
# that measure time and a few more: tests/conftest.py) run alone. A pass that PYTEST_ARGS leaves
# without tests (pytest's exit 5) is not a failure. Three on CI's two cores: at two, the first pass kept the
# CPU 47 % busy (its end-to-end tests mostly wait on workers, servers and browsers); at four, tests that
# count pages in a few seconds or compare rates failed from the load (docs/development/tests.md).
# Bytecode is cached even where the environment says PYTHONDONTWRITEBYTECODE (as containers often do):
# otherwise each of the hundreds of Python processes the tests start (workers, targets, manage.py,
# gunicorn) compiles the portal again (≈ 1 s of CPU each), and the serial pass rewrites every test
# module's asserts again (≈ 16 s).
# Locust's virtualenv (bench/.venv-locust: on a clean clone a pip install of one to two minutes, which the
# serial pass's import test needs) is made while the first pass runs; a failed install is tried again there.
test: test-deps install
	@mkdir -p var/test
	$(BIN)/python -c "from bench.prereq import ensure_locust; ensure_locust()" >var/test/locust-install.log 2>&1 & \
	PLIMSOLL_VAR_DIR=$(CURDIR)/var/test env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -n 3 --dist worksteal -m "not serial" $(PYTEST_ARGS); \
	status=$$?; wait $$! || echo "Locust's install failed (var/test/locust-install.log): the serial pass tries again"; \
	[ $$status -eq 0 ] || [ $$status -eq 5 ]
	PLIMSOLL_VAR_DIR=$(CURDIR)/var/test env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -m serial $(PYTEST_ARGS) || [ $$? -eq 5 ]

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
