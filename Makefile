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

run: $(STAMP)
	$(BIN)/memstream up --demo

# The suite waits on servers and processes more than it computes: two pytest workers halve it.
TEST_WORKERS ?= 2

test: $(STAMP)
	$(BIN)/pytest -q -p no:cacheprovider -n $(TEST_WORKERS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python tools/package_checks.py

bench: $(STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .memstream build *.egg-info
