# The two commands of the README contract: `make run` and `make test`.
# Both create the virtual environment on first use; nothing outside the
# project folder is touched except $NAGA_HOME (default ~/.naga) by `make run`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint typecheck pytest proto bench clean

$(STAMP): pyproject.toml
	@echo "naga: creating $(VENV) and installing (first run takes a minute)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

run: $(STAMP)
	$(BIN)/naga daemon start --foreground

test: lint typecheck pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/pyright

pytest: $(STAMP)
	$(BIN)/pytest

proto: $(STAMP)
	$(BIN)/python scripts/gen_proto.py

bench: $(STAMP)
	$(BIN)/python bench/ledger_append.py --home $$(mktemp -d) --count 20000
	$(BIN)/python bench/core_rpc.py
	$(BIN)/python bench/model_request_bytes.py

clean:
	rm -rf $(VENV) build *.egg-info
