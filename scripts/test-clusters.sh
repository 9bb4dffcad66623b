#!/usr/bin/env bash
# The store clusters that `make test` starts once for the whole run and shares between the
# tests that only read and write (server/it/tests: weaviate_store, postgres_store), each in
# collections or databases of its own: a 3-node Weaviate cluster and a PostgreSQL primary
# with a streaming replica, both by scripts/cluster.sh (--store-only) on free loopback
# ports, with fresh data, in state directories under target/test-clusters/. The tests that
# kill or stop store processes start clusters of their own, as does every test when these
# are not up (a test run by hand).
#
#   test-clusters.sh up     start both (a leftover of an interrupted run is stopped first)
#                           and print the variables the tests read, as `export` lines
#   test-clusters.sh down   stop both by pid (cluster.sh down); logs and data stay until
#                           the next `up`
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

ROOT="$PWD/target/test-clusters"
STORES=(weaviate postgres)

in_state() { EMBEDWIRE_CLUSTER_DIR="$ROOT/$1" bash scripts/cluster.sh "${@:2}"; }

case "${1:-}" in
  up)
    for store in "${STORES[@]}"; do
      [[ -d "$ROOT/$store" ]] && in_state "$store" down >/dev/null 2>&1
      # No ports.env: cluster.sh picks new ports and starts on empty data.
      rm -rf "${ROOT:?}/$store"
    done
    in_state weaviate up --store weaviate --nodes 3 --store-only >&2
    in_state postgres up --store postgres --store-only >&2
    echo "export EMBEDWIRE_TEST_WEAVIATE=$ROOT/weaviate EMBEDWIRE_TEST_POSTGRES=$ROOT/postgres"
    ;;
  down)
    for store in "${STORES[@]}"; do
      [[ -d "$ROOT/$store" ]] && in_state "$store" down
    done
    true
    ;;
  *)
    echo "usage: $0 up | down" >&2
    exit 2
    ;;
esac
