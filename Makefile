# Every target installs what it needs by itself: a fresh clone needs only python3 (3.11+), node/npm and make.
SHELL := /bin/bash
.DEFAULT_GOAL := help
PYTHON ?= python3
UV_VERSION := 0.13.9
TOOLS := .tools
UV := $(TOOLS)/bin/uv
VENV := .venv
BIN := $(VENV)/bin
# jsii prints a banner on Node 20; the CLI's version check and notices need the internet.
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION := 1
export CDK_DISABLE_VERSION_CHECK := 1
export UV_PROJECT_ENVIRONMENT := $(VENV)
# Where the shell sets PYTHONDONTWRITEBYTECODE (CI images, some shells), every pytest worker and every subprocess a
# test starts would compile this repository's modules and rewrite each test module's asserts afresh (6 s of CPU per
# worker, about a sixth of `make check`): here they keep their bytecode, in __pycache__ (ignored by git).
unexport PYTHONDONTWRITEBYTECODE
CDK := node_modules/.bin/cdk

# The worker runs on Lambda's python3.13, and so does everything here (.venv), so the tests run the deployed
# runtime's version. pyenv's 3.13 where there is one (its shims answer only for the selected version); else uv
# finds a python3.13 on PATH or downloads one.
LAMBDA_PYTHON ?= $(or $(lastword $(wildcard $(HOME)/.pyenv/versions/3.13.*/bin/python3.13)),3.13)
# The deploy rehearsal's LocalStack runs from its own locked environment (rehearsal/), on the same Python.
REHEARSAL_VENV := .venv-rehearsal
# Context for the rehearsal's synth, e.g. REHEARSAL_CDK_ARGS="-c key=value".
REHEARSAL_CDK_ARGS ?=
export REHEARSAL_CDK_ARGS

.PHONY: help dev bundle dist screenshots schema lint check test rehearse demo synth deploy diff destroy local clean bench soak

help:
	@echo "make demo    run the order-confirmation job, then a batch of durable imports, end to end on the embedded local engine"
	@echo "make test    lint (ruff, mypy) and every test: unit, functional, infra, e2e (incl. a 2,000-job chaos soak), the console in a browser, rehearsal"
	@echo "make check   the fast loop: lint, and unit, functional and testing-API tests beside mypy, less those marked slow (under 2 minutes)"
	@echo "make rehearse  deploy the stack to LocalStack with the CDK CLI and run jobctl's procedure against it"
	@echo "make soak    the chaos soak at 10,000 jobs (SOAK_JOBS=n to change), then the models of a job's life (200 examples) and of a durable job's (100): faults injected, every promise checked"
	@echo "make schema  write the catalog's job names into docs/envelope.schema.json (after adding or renaming a job)"
	@echo "make dist    build the framework's distribution, sqs-jobs (wheel and sdist), into dist/: pip install 'sqs-jobs[worker,cdk,cli,testing]'"
	@echo "make dev     install everything (idempotent): .venv from uv.lock, the CDK CLI from package-lock.json"
	@echo "make local   start the local engine (moto server + Lambda SQS emulator) until Ctrl-C"
	@echo "make synth   synthesize the CloudFormation template offline into cdk.out/"
	@echo "make deploy  cdk deploy to the account and region of your AWS credentials"
	@echo "make bench   benchmarks (no AWS): outage retry policies and the circuit breaker, a batch of I/O-bound jobs side by side, DynamoDB writes, cost, import and per-record overhead, cold import of the deployed assets with and without bytecode, end-to-end jobs/s on the local engine, a rate limit shared by every worker, a noisy neighbour with and without fair queues, a high-priority job behind a backlog, a debounced burst, a batch of 1,000 under chaos, a durable import of 100,000 rows killed mid-step; then issue 33's goals, each met or not"

$(UV):
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

# The dependencies are compiled to bytecode here, once (about a minute): where PYTHONDONTWRITEBYTECODE is set (CI
# images, some shells), every interpreter (each pytest worker, each subprocess a test starts) would otherwise
# compile boto3, moto and the rest afresh, a quarter of `make check`'s CPU. The Makefile is a prerequisite: a
# change to how the venv is synced syncs it again (with nothing to install, in a second or two).
$(VENV)/.synced: uv.lock pyproject.toml lib/pyproject.toml Makefile | $(UV)
	$(UV) sync --locked --quiet --compile-bytecode --python $(LAMBDA_PYTHON)
	touch $@

$(REHEARSAL_VENV)/.synced: rehearsal/uv.lock rehearsal/pyproject.toml | $(UV)
	UV_PROJECT_ENVIRONMENT=$(CURDIR)/$(REHEARSAL_VENV) $(UV) sync --locked --quiet --project rehearsal \
		--python $(LAMBDA_PYTHON)
	touch $@

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

# The console's browser test (tests/browser) drives Debian's chromium through Playwright; Playwright's own
# browser download is not used (it is unreachable from CI). Installed with apt-get (as root, else with sudo).
CHROMIUM := /usr/bin/chromium
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
$(CHROMIUM):
	@command -v apt-get >/dev/null || { echo "make: install Chromium at $(CHROMIUM) for the console's browser test" >&2; exit 1; }
	$(SUDO) apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium >/dev/null

# The sample app's database job (tests/e2e/test_sample_app_database.py) runs against a real PostgreSQL server:
# Debian's, started by the test as a throwaway cluster (tests/postgres_server.py), never as a system service.
POSTGRES := /usr/lib/postgresql
$(POSTGRES):
	@command -v apt-get >/dev/null || { echo "make: install PostgreSQL's server (Debian's postgresql) for the database test" >&2; exit 1; }
	$(SUDO) apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends postgresql >/dev/null

dev: $(VENV)/.synced node_modules/.installed $(CHROMIUM) $(POSTGRES)

# The workers' layer: the framework's worker (lib/sqs_jobs) and the `lambda` group of uv.lock (Powertools, the
# durable SDK), vendored for Lambda without Docker, compiled to bytecode. A no-op when nothing changed (its stamp).
bundle: $(VENV)/.synced
	$(BIN)/jobctl bundle build/layer --uv $(UV)

# The console's README screenshots (docs/images/), rendered by the browser tests' chromium on the local engine.
screenshots: $(VENV)/.synced $(CHROMIUM)
	$(BIN)/python -m scripts.console_screenshots

# The job enum of docs/envelope.schema.json, from the catalog (tests/unit/test_envelope.py fails until it matches).
schema: $(VENV)/.synced
	$(BIN)/python -m scripts.envelope_schema

# The framework's distribution (lib/): the wheel and sdist of sqs-jobs, its extras selecting what a project needs.
dist: | $(UV)
	$(UV) build --package sqs-jobs --out-dir dist --quiet --python $(PYTHON) --no-python-downloads
	@ls dist/sqs_jobs-*.whl

lint: $(VENV)/.synced
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy .

# The fast loop while working: everything that needs no CDK synth, local engine, browser or LocalStack, nor the
# model of a job's life (minutes), nor the tests marked slow (about 40 of 2,000 that wait seconds on the clock by
# design, a third of the loop's time): make test runs them all. mypy
# (its cache warm, it rechecks what changed) runs beside the tests; its report follows theirs. The layer (bundle, a
# no-op while uv.lock is unchanged) is what tests/unit/test_deployed_imports.py checks the jobs' imports against,
# and the cold-start benchmark's unit tests read.
check: $(VENV)/.synced bundle
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	@mypy_log=$$(mktemp); \
	$(BIN)/mypy . >"$$mypy_log" 2>&1 & typing=$$!; \
	$(BIN)/pytest -n 3 --dist worksteal -m "not model and not slow" tests/unit tests/functional tests/testing; tests=$$?; \
	wait $$typing; typed=$$?; cat "$$mypy_log"; rm -f "$$mypy_log"; \
	[ $$tests -eq 0 ] && [ $$typed -eq 0 ]

# Three pytest workers on two cores: many tests wait on a local engine or a browser, not the CPU (pytest-xdist);
# work stealing keeps the others busy beside the soak, the longest test (495 s against 834 s with two workers).
# The deploy rehearsal, which mostly waits on LocalStack and the CDK CLI, runs beside the suite, and so does mypy
# (on a clean clone its cold run took minutes before the first test started); their output follows the suite's,
# and any of them failing fails the target.
test: dev bundle $(REHEARSAL_VENV)/.synced
	@rehearsal_log=$$(mktemp); mypy_log=$$(mktemp); \
	$(MAKE) --no-print-directory rehearse >"$$rehearsal_log" 2>&1 & rehearsal=$$!; \
	$(BIN)/ruff check . && $(BIN)/ruff format --check .; styled=$$?; \
	$(BIN)/mypy . >"$$mypy_log" 2>&1 & typing=$$!; \
	$(BIN)/pytest -n 3 --dist worksteal --durations=12; suite=$$?; \
	wait $$typing; typed=$$?; \
	echo "--- mypy, run beside the suite:"; cat "$$mypy_log"; rm -f "$$mypy_log"; \
	wait $$rehearsal; rehearsed=$$?; \
	echo "--- the deploy rehearsal (make rehearse), run beside the suite:"; \
	cat "$$rehearsal_log"; rm -f "$$rehearsal_log"; \
	echo "make test: ruff exit $$styled, mypy exit $$typed, suite exit $$suite, rehearsal exit $$rehearsed"; \
	[ $$styled -eq 0 ] && [ $$typed -eq 0 ] && [ $$suite -eq 0 ] && [ $$rehearsed -eq 0 ]

# The deploy rehearsal (tests/rehearsal), in its own pytest run: LocalStack started once, the app deployed to it
# by the CDK CLI (synth, bootstrap, deploy), then jobctl's status, list, redrive and discard against the stack.
rehearse: $(VENV)/.synced node_modules/.installed bundle $(REHEARSAL_VENV)/.synced
	$(BIN)/pytest tests/rehearsal

demo: $(VENV)/.synced
	$(BIN)/python -m example.demo

# Benchmarks, not tests: print figures (recorded in docs/benchmarks.md); `python -m bench.<name> --help`.
bench: $(VENV)/.synced bundle
	$(BIN)/python -m bench.outage
	$(BIN)/python -m bench.parallel
	$(BIN)/python -m bench.writes
	$(BIN)/python -m bench.cost
	$(BIN)/python -m bench.overhead
	$(BIN)/python -m bench.cold_start
	$(BIN)/python -m bench.throughput
	$(BIN)/python -m bench.rate_limit
	$(BIN)/python -m bench.noisy_neighbour
	$(BIN)/python -m bench.priorities
	$(BIN)/python -m bench.slow_invoicing
	$(BIN)/python -m bench.cli_startup
	$(BIN)/python -m bench.debounce
	$(BIN)/python -m bench.batch
	$(BIN)/python -m bench.durable_import
	$(BIN)/python -m bench.goals

# The chaos soak at full size (make test runs it at 2,000 jobs); `python -m example.soak --help`.
SOAK_JOBS ?= 10000
# The model of a job's life (tests/functional/test_model.py) runs longer and randomized here than in make test, and
# prints the examples and steps it ran.
MODEL_SOAK_EXAMPLES ?= 200
# The durable model (tests/functional/test_model_durable.py) likewise; its examples cost more (executions run).
MODEL_DURABLE_SOAK_EXAMPLES ?= 100
soak: $(VENV)/.synced
	$(BIN)/python -m example.soak --jobs $(SOAK_JOBS)
	MODEL_EXAMPLES=$(MODEL_SOAK_EXAMPLES) MODEL_RANDOM=1 $(BIN)/pytest -q -s -p no:cacheprovider tests/functional/test_model.py
	MODEL_EXAMPLES=$(MODEL_DURABLE_SOAK_EXAMPLES) MODEL_RANDOM=1 $(BIN)/pytest -q -s -p no:cacheprovider \
		tests/functional/test_model_durable.py

# Options pass through: make local LOCAL_ARGS="--chaos transient=0.1 --standin invoicing_api_url:mode=hang".
LOCAL_ARGS ?=
local: $(VENV)/.synced
	$(BIN)/jobctl local --port 4566 $(LOCAL_ARGS)

synth: dev bundle
	$(CDK) synth --quiet $(CDK_ARGS)

diff: dev bundle
	$(CDK) diff $(CDK_ARGS)

deploy: dev bundle
	$(CDK) deploy $(CDK_ARGS)

destroy: dev
	$(CDK) destroy $(CDK_ARGS)

clean:
	rm -rf $(VENV) $(REHEARSAL_VENV) $(TOOLS) node_modules cdk.out build dist .mypy_cache .ruff_cache .pytest_cache
