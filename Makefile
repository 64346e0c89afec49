# ledgerd: one file for every set-up step.  `make serve` runs the service with
# embedded defaults; `make test` installs everything and runs the whole suite.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install system-packages serve cluster test pytest lint typecheck openapi openapi-check bench console-screenshots partitions clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: system-packages $(STAMP)
	@scripts/install-s3.sh
	@scripts/install-etcd.sh
	@scripts/install-partition.sh
	@scripts/install-fuse.sh
	@scripts/install-typescript.sh
	@scripts/install-console.sh

# Debian packages the tests need (util-linux for losetup). Only as root; a
# non-root run falls back to a preallocated file for the journal.
system-packages:
	@if [ "$$(id -u)" = 0 ] && ! command -v losetup >/dev/null; then \
	  apt-get update -qq && apt-get install -y -qq --no-install-recommends util-linux; fi

# The quick start offloads to a real local S3 (Ceph radosgw on 127.0.0.1, see
# docs/operations-s3.md) whose data persists in $(S3_DIR); it is stopped when
# ledgerd exits.  Without Ceph installed it runs with offload off.  While it runs,
# $(S3_DIR)/endpoint.json tells `ledgerd export`/`verify` in another shell where
# it is (docs/spark.md); they look for data/s3/endpoint.json by default.
S3_DIR    ?= data/s3
S3_BUCKET ?= ledgerd
# $(call with_s3,COMMAND): start the local S3, run COMMAND with it, stop it after.
# Exit status 2: Ceph is not installed (the tool says so), COMMAND runs without S3.
# Every line printed comes from the tool or the service, in one format (LOG_FORMAT).
with_s3 = rc=0; s3=$$($(BIN)/python -m tools.local_s3 start --dir $(S3_DIR) --bucket $(S3_BUCKET)) || rc=$$?; \
	if [ $$rc = 0 ]; then \
	  eval "$$s3"; export LEDGERD_S3_BUCKET=$(S3_BUCKET); \
	  trap '$(BIN)/python -m tools.local_s3 stop --dir $(S3_DIR)' EXIT; trap 'exit 130' INT TERM; \
	elif [ $$rc != 2 ]; then exit $$rc; fi; \
	$(1)
serve: install
	@$(call with_s3,$(BIN)/ledgerd serve)

# The cluster quick start: a real etcd, three nodes in cluster mode on
# 127.0.0.1:8081-8083 (docs/cluster.md, "Running a cluster") and the same local
# S3 as `make serve`; data persists in $(CLUSTER_DIR) and $(S3_DIR).
# `make cluster CLUSTER_TLS=1`: HTTPS to and between the nodes, with a CA made
# under $(CLUSTER_DIR)/pki.
CLUSTER_DIR ?= data/cluster
CLUSTER_TLS ?=
cluster: install
	@$(call with_s3,$(BIN)/python -m tools.local_cluster run --dir $(CLUSTER_DIR) $(if $(CLUSTER_TLS),--tls))

lint: $(STAMP)
	$(BIN)/ruff check .

typecheck: $(STAMP)
	$(BIN)/mypy

# A hung test fails the run after 40 minutes instead of stalling CI.
# Two workers: the suite's long tests (crash, power loss, Spark, cluster chaos)
# spend most of their time waiting on child processes and devices.
pytest: $(STAMP)
	timeout --kill-after=30 2400 $(BIN)/pytest -q -ra --durations=10 -n 2

# The spec is exported from the app; CI fails when the checked-in copy or the
# generated client drifts from it.
openapi: $(STAMP)
	$(BIN)/python openapi/export.py
	BIN=$(abspath $(BIN)) openapi/generate_client.sh

openapi-check: $(STAMP)
	$(BIN)/python openapi/export.py --check
	BIN=$(abspath $(BIN)) openapi/generate_client.sh --check

test: install lint typecheck openapi-check pytest

# Every benchmark in one run, then docs/benchmarks.md regenerated from
# bench/results/*.json.  BENCH_ARGS, e.g. BENCH_ARGS=--quick or
# BENCH_ARGS='--only redis --duration 5'.  Installs the peer (redis-server) first.
BENCH_ARGS ?=
bench: install
	@scripts/install-bench.sh
	$(BIN)/python -m bench $(BENCH_ARGS)

# The console's screenshots in docs/console/ (docs/console.md), taken by its
# browser tests against a live node and a live cluster; not part of `make test`.
console-screenshots: install
	LEDGERD_CONSOLE_SCREENSHOTS=docs/console $(BIN)/python -m pytest -q tests/console

# The partition suite's long runs (docs/partitions.md): one run per seed, each
# with its own network namespaces, a report per run under $(PARTITIONS_DIR) and a
# summary table.  Root only.  E.g. make partitions SEEDS=1-3 DURATION=120 NODES=5
SEEDS          ?= 1-3
DURATION       ?= 120
NODES          ?= 3
PARTITIONS_DIR ?= data/partitions
partitions: install
	$(BIN)/python -m tools.partitions --seeds $(SEEDS) --duration $(DURATION) \
	  --nodes $(NODES) --out $(PARTITIONS_DIR)

clean:
	rm -rf $(VENV) build *.egg-info
