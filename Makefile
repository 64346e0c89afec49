# ledgerd: one file for every set-up step.  `make serve` runs the service with
# embedded defaults; `make test` installs everything and runs the whole suite.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install system-packages serve test pytest lint typecheck openapi openapi-check client bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: system-packages $(STAMP)

# Debian packages the tests need (util-linux for losetup). Only as root; a
# non-root run falls back to a preallocated file for the journal.
system-packages:
	@if [ "$$(id -u)" = 0 ] && ! command -v losetup >/dev/null; then \
	  apt-get update -qq && apt-get install -y -qq --no-install-recommends util-linux; fi

serve: install
	$(BIN)/ledgerd serve

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check . || true

typecheck: $(STAMP)
	$(BIN)/mypy

pytest: $(STAMP)
	$(BIN)/pytest -q -ra

test: install lint typecheck pytest

bench: install
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) build *.egg-info
