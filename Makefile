# LoopGuard developer commands. `make test` is the one command CI runs (.ci/run).
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SHELL := /bin/bash
# Tests that start a Tansu of their own or do not depend on the pass's broker, and are slow (a
# real OpenClaw gateway): they run once, in the Tansu pass.
TANSU_ONLY := tests/integration/test_openclaw_gateway.py tests/integration/test_openclaw_outage.py \
	tests/integration/test_replay_report.py
# Not in the secured pass: `loopguard up` starts a broker of its own and has no secured mode
# (there its tests would repeat the Kafka pass); the framework adapters reach the broker only
# through RuntimeClient, whose secured connection tests/integration/test_client*.py prove.
NO_SECURE := tests/integration/test_up.py tests/integration/test_up_ready.py \
	tests/integration/test_installed_up.py \
	$(wildcard tests/integration/test_adapter_*.py)
# Tests that start Apache Kafka brokers of their own: they run once, in the Kafka pass.
KAFKA_ONLY := tests/integration/test_kafka_broker.py tests/integration/test_secure_kafka.py \
	tests/chaos/test_kafka_faults.py

.PHONY: install run demo test test-tansu test-kafka test-kafka-secure test-kafka-passes preflight prometheus kafka lint typecheck \
	unit compiled test-compiled test-local bench bench-compiled bench-deps bench-quick bench-memory clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)  ## virtualenv with loopguard-fleet[dev]

run: $(STAMP)  ## embedded broker + worker + demo fleet (Ctrl-C stops everything)
	$(BIN)/loopguard up --demo

# What the suites need besides the virtualenv: fail at once, in one line, on what is missing.
preflight:
	@command -v java >/dev/null 2>&1 || { echo "make test: install Java 17+ (Debian: apt-get install openjdk-17-jre-headless maven): the suites also run on Apache Kafka" >&2; exit 1; }
	@command -v mvn >/dev/null 2>&1 || ls $${XDG_CACHE_HOME:-$$HOME/.cache}/loopguard/kafka-*/.complete >/dev/null 2>&1 || { echo "make test: install Maven (Debian: apt-get install maven): it fetches the Apache Kafka jars" >&2; exit 1; }
	@command -v cc >/dev/null 2>&1 && $(PY) -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(sysconfig.get_paths()["include"] + "/Python.h"))' || { echo "make test: install a C compiler and Python's headers (Debian: apt-get install gcc python3-dev): the compiled engine's pass builds it" >&2; exit 1; }
	@command -v openssl >/dev/null 2>&1 || { echo "make test: install openssl (Debian: apt-get install openssl): the secured-Kafka tests make a throwaway CA" >&2; exit 1; }
	@{ command -v promtool && command -v prometheus; } >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; } || { echo "make test: install Prometheus (promtool and prometheus on PATH; Debian: apt-get install prometheus)" >&2; exit 1; }

prometheus:  ## Debian's prometheus (promtool + server, for the deploy tests) when missing
	@{ command -v promtool && command -v prometheus; } >/dev/null 2>&1 || { \
	  export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && \
	  apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }

kafka: $(STAMP)  ## the Apache Kafka broker's jars (deploy/kafka/pom.xml) into ~/.cache/loopguard
	@$(BIN)/python -m loopguard_fleet.streams.embedded kafka

lint: $(STAMP)  ## ruff lint + format check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# mypy names modules by their path, so it checks the installed names (loopguard_fleet.*) through a
# tree of links that lays the three folders out as the wheel does (pyproject: package-dir).
TYPECHECK_TREE := build/typecheck/loopguard_fleet
typecheck: $(STAMP)  ## mypy --strict on the engine, config and the stream side
	@mkdir -p $(TYPECHECK_TREE)
	@for p in detectors config streams; do ln -sfn ../../../$$p $(TYPECHECK_TREE)/$$p; done
	@ln -sfn ../../../integrations/adapters $(TYPECHECK_TREE)/adapters
	cd build/typecheck && $(abspath $(BIN))/mypy --config-file ../../pyproject.toml -p loopguard_fleet

unit: $(STAMP)  ## tests that need no broker
	$(BIN)/pytest -q tests/unit tests/property tests/golden

# The engine compiled by mypyc (setup.py), as a wheel unpacked where the compiled pass and the
# benchmarks put it first on the path. Built in the checkout, as tests/packaging/dists.py
# builds, so under its lock: the egg-info is written there.
# Rebuilt only when a file the wheel packs changed (a second `make bench` skips the ~75 s).
COMPILED := build/compiled
COMPILED_SOURCES := setup.py pyproject.toml deploy/kafka/pom.xml \
	$(shell find detectors config streams integrations/adapters -name '*.py' -o -name py.typed)
compiled: $(COMPILED)/.built  ## the mypyc-compiled engine and processing core, unpacked into build/compiled (~75 s)

$(COMPILED)/.built: $(STAMP) $(COMPILED_SOURCES)
	rm -rf $(COMPILED) && mkdir -p $(COMPILED)
	# setuptools' build tree would carry an earlier build's shared library into the wheel.
	flock build/dists.lock sh -c 'rm -rf build/lib.* build/bdist.* && \
	  LOOPGUARD_COMPILE=1 $(BIN)/pip wheel -q --no-build-isolation --no-deps -w $(COMPILED)/wheel .'
	cd $(COMPILED) && $(abspath $(BIN))/python -m zipfile -e wheel/*.whl .
	touch $@

test-compiled: compiled  ## the verdict suites, and a worker on Tansu, against the compiled engine (the sources stay the reference)
	time LOOPGUARD_TEST_COMPILED=1 PYTHONPATH=$(COMPILED) $(BIN)/pytest -q -p no:cacheprovider \
	  tests/unit tests/property tests/golden tests/differential tests/integration/test_worker.py

test-tansu: $(STAMP)  ## every test, the broker ones on the embedded Tansu
	time $(BIN)/pytest -q --durations=15 $(addprefix --ignore=,$(KAFKA_ONLY))

test-kafka: kafka  ## the integration and chaos suites on Apache Kafka (and the Kafka-only tests)
	time LOOPGUARD_TEST_BROKER=kafka $(BIN)/pytest -q --durations=15 tests/integration tests/chaos \
	  $(addprefix --ignore=,$(TANSU_ONLY))

# The Kafka-only files start brokers of their own (plain or secured): the Kafka pass runs them.
test-kafka-secure: kafka  ## the integration suite on a SASL_SSL Kafka with ACLs (docs/security.md)
	time LOOPGUARD_TEST_BROKER=kafka-secure $(BIN)/pytest -q --durations=15 tests/integration \
	  $(addprefix --ignore=,$(filter tests/integration/%,$(KAFKA_ONLY)) $(TANSU_ONLY) $(NO_SECURE))

# The broker passes mostly wait (brokers, workers, subprocesses: ~1/3 of a core each), so the
# Tansu pass runs beside the two Kafka passes; each pass's output is printed whole when it ends.
test: preflight prometheus kafka lint typecheck  ## everything CI runs
	@$(MAKE) --no-print-directory -j2 --output-sync=recurse test-local test-kafka-passes

test-local: $(STAMP)  ## the compiled engine's pass, then every test on Tansu
	@$(MAKE) --no-print-directory test-compiled
	@$(MAKE) --no-print-directory test-tansu

test-kafka-passes: kafka  ## the Kafka pass, then the secured one
	@$(MAKE) --no-print-directory test-kafka
	@$(MAKE) --no-print-directory test-kafka-secure

# OpenClaw's published module (tests/differential pins it), the benches' same-run baseline, and
# the Node it runs on there (bench/openclaw_node.py): the plugin's pinned one, in OpenClaw's range.
bench-deps:
	@test -d tests/differential/node_modules/openclaw || (cd tests/differential && npm ci --ignore-scripts --no-audit --no-fund)
	@test -x integrations/openclaw/node_modules/.bin/node || (cd integrations/openclaw && npm ci --no-audit --no-fund)

# L runs on Apache Kafka only (Tansu saturates at its 1,000 single-record produce requests a
# second: docs/performance.md), with the worker the image runs: compiled.
bench: kafka bench-deps compiled  ## E and M against OpenClaw's module (from the sources and compiled); O, the OTLP bridge; P and the policy reload on Tansu and on Apache Kafka (P on Kafka also exactly-once); L on Apache Kafka, the worker compiled
	$(BIN)/python bench/engine.py
	PYTHONPATH=$(COMPILED) $(BIN)/python bench/engine.py
	$(BIN)/python bench/modern_runs.py
	PYTHONPATH=$(COMPILED) $(BIN)/python bench/modern_runs.py
	$(BIN)/python bench/otlp_bridge.py --with-p
	$(BIN)/python bench/pipeline.py
	$(BIN)/python bench/pipeline.py --broker kafka --exactly-once
	$(BIN)/python bench/latency.py --broker kafka --seconds 30 --worker-env PYTHONPATH=$(abspath $(COMPILED))
	$(BIN)/python bench/policy_reload.py
	$(BIN)/python bench/policy_reload.py --broker kafka

bench-compiled: compiled bench-deps  ## E, M and P with the compiled engine (docs/performance.md, "The compiled engine")
	PYTHONPATH=$(COMPILED) $(BIN)/python bench/engine.py
	PYTHONPATH=$(COMPILED) $(BIN)/python bench/modern_runs.py
	PYTHONPATH=$(COMPILED) $(BIN)/python bench/pipeline.py

bench-memory: $(STAMP)  ## RSS per active run at 10,000 runs (~3 min)
	$(BIN)/python bench/memory.py

bench-quick: kafka bench-deps  ## all of them, small (smoke figures, not for planning)
	$(BIN)/python bench/engine.py --quick
	$(BIN)/python bench/modern_runs.py --quick
	$(BIN)/python bench/otlp_bridge.py --quick --with-p
	$(BIN)/python bench/pipeline.py --quick
	$(BIN)/python bench/pipeline.py --quick --broker kafka --exactly-once
	$(BIN)/python bench/latency.py --quick
	$(BIN)/python bench/latency.py --quick --broker kafka
	$(BIN)/python bench/policy_reload.py --quick
	$(BIN)/python bench/memory.py --quick

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
