# embedwire entry points. `run` and `test` do the setup themselves; every setup step
# is cached, so repeating it costs seconds.
CACHE ?= $(or $(EMBEDWIRE_CACHE),$(HOME)/.cache/embedwire)
BIN := $(CACHE)/bin
ARGS ?=
# The store of `make cluster`: weaviate or postgres.
STORE ?= weaviate
# Replicas per shard of `make cluster`'s Weaviate collections (empty: as saved, else
# min(3, nodes), so 3 on the default 3 nodes; REPLICATION=2 shows a stall on node loss).
REPLICATION ?=

.PHONY: setup run test test-fast lint bench bench-long cluster cluster-down

# The test runner (installed by scripts/setup-tools.sh) and its profile: release, like
# the binaries that `make setup` builds, so tests reuse that build (the model's
# tokenizer and the SIMD kernels also need the optimizer). Groups and timeouts:
# .config/nextest.toml.
NEXTEST := $(BIN)/cargo-nextest nextest
NEXTEST_FLAGS := --release --workspace
# Per-step times of the last `make test`.
TIMES := target/make-test-times.tsv
# What `make test-fast` leaves out: the cluster suites (modules weaviate and postgres of
# the server's `it`), bench quick (4.5 minutes of runs), and the four integration tests
# that take more than 8 s each on 2 cores (int8 quality on 2400 sentences, search during
# a large ingest, 64 closed-loop callers, the full-size cross-encoder against numpy).
# `make test` runs them all.
FAST_SLOW := ^(precision::int8_vectors_meet|search::searches_keep_answering_while_a_large_ingest|lifecycle::closed_loop_clients|rerank_reference::full_size)
FAST_FILTER := not (binary_id(embedwire-server-it::it) and test(/^(weaviate|postgres)::/)) and not binary(quick) and not test(/$(FAST_SLOW)/)

## setup: install the model, ONNX Runtime and dev tools; build the workspace (release)
setup:
	bash scripts/setup.sh

## run: serve the default model on 127.0.0.1:50051 (pass flags with ARGS="...")
run: setup
	./target/release/embedwire-server $(ARGS)

## cluster: a local split deployment on free loopback ports: a 3-node Weaviate cluster,
## two embedwire-server processes on it (--store weaviate) and embedwire-gateway in front;
## with STORE=postgres a PostgreSQL primary and one streaming replica instead (the servers
## write to the primary, read from the replica); prints the addresses
## (`bash scripts/cluster.sh status` shows them again); REPLICATION=N sets the replicas per
## shard (default 3 on 3 nodes: any one node may be lost)
cluster: setup
	bash scripts/cluster.sh up --store $(STORE) $(if $(REPLICATION),--replication $(REPLICATION))

## cluster-down: stop what `make cluster` started (its data and logs are kept)
cluster-down:
	bash scripts/cluster.sh down

## lint: buf lint on the protos
lint:
	$(BIN)/buf lint

## test: set up, lint, build the workspace and its tests in one cargo run, then every
## test of the workspace against the real model and binaries with cargo-nextest
## (including a quick run of the benchmarks, so they cannot rot, and the Weaviate and
## PostgreSQL cluster suites; the tests that only read and write share one Weaviate and
## one PostgreSQL cluster started for the run by scripts/test-clusters.sh, stopped at the
## end, also on failure or Ctrl-C), the doc tests, then the Python client's tests (which
## also run the Go and Node examples); prints the time of each step
test:
	@rm -f $(TIMES); set -e; \
	trap 'bash scripts/test-clusters.sh down >/dev/null 2>&1; bash scripts/timed.sh report $(TIMES)' EXIT; \
	trap 'exit 130' INT TERM; \
	step() { bash scripts/timed.sh step $(TIMES) "$$@"; }; \
	step setup bash scripts/setup.sh --no-build; \
	step lint $(BIN)/buf lint; \
	step build bash -c 'bash scripts/build-cache.sh restore; $(NEXTEST) run $(NEXTEST_FLAGS) --no-run && { bash scripts/build-cache.sh save --tests; true; }'; \
	step clusters bash -c 'bash scripts/test-clusters.sh up >target/test-clusters.env'; \
	. target/test-clusters.env; \
	step rust-tests $(NEXTEST) run $(NEXTEST_FLAGS); \
	step doc-tests cargo test --release --workspace --doc; \
	step pytest $(CACHE)/venv/bin/python -m pytest clients/python/tests -q

## test-fast: the inner loop (under 2 minutes after a build): the unit tests and the
## integration tests against the real model that need no cluster and run fast; no setup,
## so run `make setup` (or `make test`) once first
test-fast:
	$(NEXTEST) run $(NEXTEST_FLAGS) -E '$(FAST_FILTER)'

## bench: every benchmark of bench/run.sh (about 23 minutes: embed, wire, ghz, gateway,
## index at 100k, rerank and the Rust vs Python clients) with bench/results/REPORT.md
## and its plots
bench: setup
	bash bench/run.sh

## bench-long: the benchmarks kept out of `make bench` for time: embedwire-bench search (~6 min),
## embedwire-bench overload, embedwire-bench soak (10 min), embedwire-bench index at 1M vectors (~20 min; and the
## HNSW width it would pick checked on SciFact's embedded corpus and queries, ~5 min) and
## embedwire-bench store (~20 min: embedded store vs Weaviate 1 and 3 nodes and PostgreSQL, 10k documents)
## and embedwire-bench chaos, 100 SIGKILL-and-restart cycles under ingest per store (bench/results/chaos/)
## and embedwire-bench retrieval, search quality on SciFact's train split per store and mode (~40 min)
## and embedwire-bench collections, what named collections cost, per store (~2 min embedded, ~3 min PostgreSQL,
## ~25 min Weaviate: 1,000 collections are 4,000 classes)
bench-long: setup
	./target/release/embedwire-bench search
	./target/release/embedwire-bench overload
	./target/release/embedwire-bench soak
	./target/release/embedwire-bench index --sizes 1000000 --dataset ../shared/data/scifact-train
	./target/release/embedwire-bench store
	./target/release/embedwire-bench chaos --store embedded --cycles 100
	./target/release/embedwire-bench chaos --store postgres --cycles 100
	./target/release/embedwire-bench chaos --store weaviate --cycles 100
	./target/release/embedwire-bench retrieval
	./target/release/embedwire-bench collections
	./target/release/embedwire-bench collections --store postgres
	./target/release/embedwire-bench collections --store weaviate
