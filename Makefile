# LoopGuard developer commands. `make test` is the one command CI runs (.ci/run).
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install run demo test lint typecheck unit bench bench-quick bench-memory clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)  ## virtualenv with loopguard[dev]

run: $(STAMP)  ## embedded broker + worker + demo fleet (Ctrl-C stops everything)
	$(BIN)/loopguard up --demo

lint: $(STAMP)  ## ruff lint + format check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)  ## mypy --strict on the engine and config
	$(BIN)/mypy detectors config

unit: $(STAMP)  ## tests that need no broker
	$(BIN)/pytest -q tests/unit tests/property tests/golden

test: lint typecheck  ## everything CI runs: lint, types, all tests (starts its own broker)
	$(BIN)/pytest -q

bench: $(STAMP)  ## workloads E, P (+ direct prototype), L of BENCH.md (~11 min)
	$(BIN)/python bench/engine.py
	$(BIN)/python bench/pipeline.py
	$(BIN)/python bench/latency.py

bench-memory: $(STAMP)  ## RSS per active run at 10,000 runs (~3 min)
	$(BIN)/python bench/memory.py

bench-quick: $(STAMP)  ## all four, small (smoke figures, under 2 minutes)
	$(BIN)/python bench/engine.py --quick
	$(BIN)/python bench/pipeline.py --quick
	$(BIN)/python bench/latency.py --quick
	$(BIN)/python bench/memory.py --quick

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
