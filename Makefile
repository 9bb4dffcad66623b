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

.PHONY: setup run test lint bench bench-long cluster cluster-down

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

## test: lint, then every test of the workspace against the real model and binaries
## (including a quick run of the benchmarks, so they cannot rot), then the Python
## client's tests (which also run the Go and Node examples)
test: setup lint
	cargo test --release --workspace
	$(CACHE)/venv/bin/python -m pytest clients/python/tests -q

## bench: every benchmark of bench/run.sh (about 23 minutes: embed, wire, ghz, gateway,
## index at 100k, rerank and the Rust vs Python clients) with bench/results/REPORT.md
## and its plots
bench: setup
	bash bench/run.sh

## bench-long: the benchmarks kept out of `make bench` for time: embedwire-bench search (~6 min),
## embedwire-bench overload, embedwire-bench soak (10 min), embedwire-bench index at 1M vectors (~20 min) and
## embedwire-bench store (~20 min: embedded store vs Weaviate 1 and 3 nodes and PostgreSQL, 10k documents)
## and embedwire-bench chaos, 100 SIGKILL-and-restart cycles under ingest per store (bench/results/chaos/)
bench-long: setup
	./target/release/embedwire-bench search
	./target/release/embedwire-bench overload
	./target/release/embedwire-bench soak
	./target/release/embedwire-bench index --sizes 1000000
	./target/release/embedwire-bench store
	./target/release/embedwire-bench chaos --store embedded --cycles 100
	./target/release/embedwire-bench chaos --store postgres --cycles 100
	./target/release/embedwire-bench chaos --store weaviate --cycles 100
