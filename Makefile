# memstream — two commands from a fresh clone: `make run` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE := 1

.PHONY: install run test lint bench clean

$(STAMP): pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# The CPU build first: an unpinned torch would pull a multi-GB CUDA build.
	$(BIN)/pip install --quiet "torch==2.13.0"
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

# Bytecode of the sources, written before each run (a no-op when it is current): where
# PYTHONDONTWRITEBYTECODE is set, as on this project's CI machines, every process would
# otherwise compile them again on import, ~0.2 s a CLI call and more for a worker.
COMPILE := $(BIN)/python -m compileall -q memstream domain projections workers cli bench tests/support

run: $(STAMP)
	$(COMPILE)
	$(BIN)/memstream up --demo

# The suite waits on servers and processes more than it computes: two pytest workers halve it.
# A few tests take most of the time: a worker that runs out of tests takes the other's
# (worksteal) instead of idling while it finishes its share.
TEST_WORKERS ?= 2

test: $(STAMP)
	$(COMPILE)
	$(BIN)/pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist worksteal

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python tools/package_checks.py

bench: $(STAMP)
	$(COMPILE)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .memstream build *.egg-info
