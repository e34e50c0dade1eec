# Two commands on a fresh machine: `make run` launches the chat, `make test` runs every test.
# Both create .venv and install the project into it first (`make setup`, quick when nothing changed).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# Extra arguments for `make run`, e.g. make run ARGS="--iface 10.77.0.1 --name Ann"
ARGS   ?=

.PHONY: setup run test test-core test-lan test-ui test-spark test-packaging check-python check-java bench-mop bundle \
        install-desktop clean

check-python:
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || { \
	  echo "M2MC needs Python 3.11 or newer; '$(PYTHON)' is $$($(PYTHON) --version 2>&1 || echo missing)."; \
	  echo "Install python3.11 (or newer) and python3-venv, or run: make PYTHON=/path/to/python3.11"; exit 1; }

check-java:
	@v=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n1); \
	if [ -z "$$v" ]; then echo "The analytics (PySpark) need Java 17 or newer, and no 'java' was found. Install openjdk-17-jre-headless."; exit 1; fi; \
	if [ "$$v" -lt 17 ]; then echo "The analytics (PySpark) need Java 17 or newer; 'java' is version $$v. Install openjdk-17-jre-headless."; exit 1; fi

$(STAMP): pyproject.toml setup.py middleware/_sborder.c middleware/_merkle.c packaging/system-deps.sh
	@$(MAKE) --no-print-directory check-python
	@bash packaging/system-deps.sh $(PYTHON)
	@[ -x $(BIN)/python ] || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip 2>/dev/null || true
	$(BIN)/python -m pip install --quiet -e '.[dev,analytics,study]'
	@touch $(STAMP)

setup: $(STAMP)

run: setup
	@if [ -x $(BIN)/m2mc-chat ]; then exec $(BIN)/m2mc-chat $(ARGS); \
	elif [ -x $(BIN)/m2mc-peer ]; then echo "m2mc-chat is not built yet; running the headless peer m2mc-peer (JSON-RPC on stdin)."; exec $(BIN)/m2mc-peer $(ARGS); \
	else echo "No chat program is built yet; running the S_b ordering benchmark instead."; exec $(BIN)/python -m m2mc.app.bench.mop --quick; fi

# Test processes for `make test`: most tests wait on peers, sockets and JVMs rather than the CPU,
# so five share two cores well: the whole suite at load 12-15, 830 s with four, 735 s with five
# (tests/conftest.py keeps tests that share a fixture together).
TEST_WORKERS ?= 5

# M2MC_NO_SKIP: a skipped test fails here, as under CI (tests/conftest.py).
PYTEST := M2MC_NO_SKIP=1 $(BIN)/python -m pytest -n $(TEST_WORKERS) --durations=15

test: setup check-java
	$(PYTEST)

# One area of the suite each (tests/<area>/); `make test` runs them all. Only the Spark tests need Java.
test-core: setup  # in-process: protocol cores, wire, stores, simulators, contracts
	$(PYTEST) tests/core
test-lan: setup  # m2mc-peer processes on private network namespaces (needs root)
	$(PYTEST) tests/lan
test-ui: setup  # the GUI on Xvfb, and m2mc-chat's command line
	$(PYTEST) tests/ui
test-spark: setup check-java
	$(PYTEST) tests/spark
test-packaging: setup  # the wheel in a clean venv, the PyInstaller bundle, the desktop files
	$(PYTEST) tests/packaging

bench-mop: setup
	$(BIN)/python -m m2mc.app.bench.mop

bundle: setup
	bash packaging/build-bundle.sh

install-desktop: setup
	@if [ -x dist/m2mc/m2mc-chat ]; then bash packaging/install-desktop.sh --bundle dist/m2mc; \
	else bash packaging/install-desktop.sh; fi

clean:
	rm -rf $(VENV) build dist .pytest_cache .hypothesis
