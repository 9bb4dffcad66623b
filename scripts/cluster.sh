#!/usr/bin/env bash
# A local split deployment on loopback: a 3-node Weaviate cluster, two embedwire-server
# processes storing into it (--store weaviate) and one embedwire-gateway in front of both.
# With --store postgres: a PostgreSQL primary and one streaming hot-standby replica
# instead, the servers writing to the primary and reading from the replica.
#
#   cluster.sh up [--store S] [--nodes N] [--replication R] [--store-only]
#                                                             start everything (or only the store), wait until ready
#   cluster.sh status                                         what runs, and whether each part is healthy
#   cluster.sh down                                           stop everything by pid (TERM, INT to PostgreSQL, then KILL after a grace period)
#   cluster.sh restart NAME [--kill]                          stop one process (SIGKILL with --kill: a crash), start it
#                                                             again on its ports and data, wait until it is ready
#
# --store weaviate|postgres|embedded: the servers' store (default: as saved, else weaviate).
# A different store than the saved cluster's starts on new ports with empty data. With
# embedded, each server has its own index in its data dir and no store runs.
#
# restart NAME: NAME as in `status` (weaviate-1, postgres-replica, server-0, gateway).
# embedwire-bench chaos kills processes with SIGKILL and brings them back this way.
#
# --nodes N: Weaviate nodes (default: as saved, else 3); the servers' collections get N shards.
#
# --replication R (or EMBEDWIRE_CLUSTER_REPLICATION=R; `make cluster REPLICATION=R`): replicas
# of each shard (default: as saved, else min(3, N)). At 3 on 3 nodes, with QUORUM writes and
# job reads, losing any one node stalls nothing. At 2, QUORUM needs both replicas of a shard:
# after one node is lost, jobs whose reads span a shard with a replica there wait (and say
# why in GetJob) until it is back. A collection keeps the factor it was created with, so a
# different R than the saved cluster's starts on new ports with empty data.
#
# --store-only (or its older name --weaviate-only): the store alone, no servers or gateway,
# for a program of your own (embedwire-bench store does). The addresses are in
# $STATE/ports.env (WEAVIATE_HTTP_i, WEAVIATE_GRPC_i; POSTGRES_PRIMARY_PORT,
# POSTGRES_REPLICA_PORT with the database `embedwire`) and the pids in $STATE/pids/
# (weaviate-i.pid; postgres-primary.pid, postgres-replica.pid).
#
# Every port is a free loopback port, picked at the first `up` and kept in the state dir
# (${EMBEDWIRE_CLUSTER_DIR:-$EMBEDWIRE_CACHE/cluster}) with the pids, logs and data, so
# `down` then `up` brings the same cluster back on its data. If a saved port has been
# taken meanwhile, `up` picks new ports and starts from empty data (and says so).
#
# PostgreSQL (pgvector included) runs from $EMBEDWIRE_CACHE/bin/pg. It refuses to run as
# root: as root, its servers run as the system user embedwire-pg and their data lives
# outside root's home (mode 700, which that user cannot traverse), in
# /var/lib/embedwire-pg/cluster-<hash of the state dir>/, linked as $STATE/data/postgres.
# The servers use the database `embedwire` (created at the first `up`).
# Needs `make setup` (weaviate-server, weaviate-refill and pg in $EMBEDWIRE_CACHE/bin, the release binaries).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

CACHE="${EMBEDWIRE_CACHE:-$HOME/.cache/embedwire}"
STATE="${EMBEDWIRE_CLUSTER_DIR:-$CACHE/cluster}"
WEAVIATE_BIN="$CACHE/bin/weaviate-server"
REFILL_BIN="$CACHE/bin/weaviate-refill"
PG_LINK="$CACHE/bin/pg"
PG_USER=embedwire-pg
PG_DB=embedwire
# The binaries to run (embedwire-bench passes the ones it measures).
SERVER_BIN="${EMBEDWIRE_CLUSTER_SERVER_BIN:-$PWD/target/release/embedwire-server}"
GATEWAY_BIN="${EMBEDWIRE_CLUSTER_GATEWAY_BIN:-$PWD/target/release/embedwire-gateway}"
# The nodes of the cluster in the state dir (`up --nodes` may change it).
WEAVIATE_NODES=3
[[ -f "$STATE/nodes" ]] && WEAVIATE_NODES="$(cat "$STATE/nodes")"
# The store of the cluster in the state dir (`up --store` may change it).
STORE=weaviate
[[ -f "$STATE/store" ]] && STORE="$(cat "$STATE/store")"
# The replication factor of the cluster in the state dir (`up --replication` may change it);
# a cluster saved before it was kept had the old default, min(2, nodes).
REPLICATION=""
if [[ -f "$STATE/replication" ]]; then
  REPLICATION="$(cat "$STATE/replication")"
elif [[ -f "$STATE/nodes" ]]; then
  REPLICATION="$((WEAVIATE_NODES < 2 ? WEAVIATE_NODES : 2))"
fi
SERVERS=2
# How long to wait for readiness: a cold Weaviate cluster takes ~15 s, a server loads its model.
READY_TIMEOUT_SECS=120
# How long a restarted Weaviate node may take to rebuild its vector indexes.
REBUILD_TIMEOUT_SECS=300
# How long a process may take to exit after SIGTERM before it gets SIGKILL.
STOP_GRACE_SECS=30

# The embedwire processes log to files: no colour codes in them.
export NO_COLOR=1

log() { echo "cluster: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# The processes, in start order (stopped in reverse).
process_names() {
  local i
  if [[ "$STORE" == postgres ]]; then
    echo postgres-primary
    echo postgres-replica
    [[ -f "$STATE/store-only" ]] && return
  elif [[ "$STORE" == weaviate ]]; then
    for ((i = 0; i < WEAVIATE_NODES; i++)); do echo "weaviate-$i"; done
    [[ -f "$STATE/store-only" ]] && return
  fi
  for ((i = 0; i < SERVERS; i++)); do echo "server-$i"; done
  echo gateway
}

pid_of() { cat "$STATE/pids/$1.pid" 2>/dev/null || true; }
alive() { local pid; pid="$(pid_of "$1")"; [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; }

# Free loopback ports as shell assignments, all distinct, every socket held until all
# are picked. Weaviate needs two pairs per node: the intra-cluster data port is taken to
# be gossip + 1 (its fallback for a peer whose metadata has not arrived) and, with
# CLUSTER_IN_LOCALHOST, a peer's Raft RPC port is always computed as its Raft port + 1.
# With --store postgres: one port each for the primary and the replica instead.
# Below the kernel's ephemeral range (ip_local_port_range), not from it as bind(0) would:
# a restarted process takes its ports again, and while it is down any outgoing
# connection may get one of them as its source port (a chaos run's first node restart
# died on "bind: address already in use" for its Raft RPC port that way).
pick_ports() {
  python3 - "$WEAVIATE_NODES" "$SERVERS" "$STORE" <<'EOF'
import random, socket, sys
nodes, servers, store = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
with open("/proc/sys/net/ipv4/ip_local_port_range") as ranges:
    ephemeral_low = int(ranges.read().split()[0])
LOWEST = 10000
held = []
def bind(port, kind=socket.SOCK_STREAM):
    s = socket.socket(socket.AF_INET, kind)
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        s.close()
        raise
    held.append(s)
    return s.getsockname()[1]
def candidate():
    # A port with its successor also below the ephemeral range (pairs need port + 1).
    return random.randrange(LOWEST, ephemeral_low - 1) if ephemeral_low > LOWEST + 1000 else 0
def free():
    while True:
        try:
            return bind(candidate())
        except OSError:
            continue
def pair(udp):
    while True:
        try:
            first = bind(candidate())
        except OSError:
            continue
        try:
            bind(first + 1)
            if udp:
                bind(first, socket.SOCK_DGRAM)
            return first
        except OSError:
            continue
if store != "weaviate":
    nodes = 0
if store == "postgres":
    print(f"POSTGRES_PRIMARY_PORT={free()}")
    print(f"POSTGRES_REPLICA_PORT={free()}")
for i in range(nodes):
    print(f"WEAVIATE_HTTP_{i}={free()}")
    print(f"WEAVIATE_GRPC_{i}={free()}")
    print(f"WEAVIATE_GOSSIP_{i}={pair(True)}")
    print(f"WEAVIATE_RAFT_{i}={pair(False)}")
    print(f"WEAVIATE_PROFILING_{i}={free()}")
for i in range(servers):
    print(f"SERVER_PORT_{i}={free()}")
print(f"GATEWAY_PORT={free()}")
EOF
}

# Whether every port in ports.env can be bound right now (TCP, and UDP for gossip).
saved_ports_free() {
  python3 - "$STATE/ports.env" <<'EOF'
import socket, sys
for line in open(sys.argv[1]):
    name, port = line.strip().split("=")
    kinds = [socket.SOCK_STREAM, socket.SOCK_DGRAM] if "GOSSIP" in name else [socket.SOCK_STREAM]
    ports = [int(port), int(port) + 1] if "GOSSIP" in name or "RAFT" in name else [int(port)]
    for p in ports:
        for kind in kinds:
            s = socket.socket(socket.AF_INET, kind)
            if kind == socket.SOCK_STREAM:
                # As the servers do: a port in TIME_WAIT from earlier clients is free to them.
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                sys.exit(1)
            finally:
                s.close()
EOF
}

port() { local var="$1"; echo "${!var}"; }

weaviate_http_urls() {
  local i urls=()
  for ((i = 0; i < WEAVIATE_NODES; i++)); do urls+=("http://127.0.0.1:$(port "WEAVIATE_HTTP_$i")"); done
  (IFS=,; echo "${urls[*]}")
}

weaviate_grpc_addrs() {
  local i addrs=()
  for ((i = 0; i < WEAVIATE_NODES; i++)); do addrs+=("127.0.0.1:$(port "WEAVIATE_GRPC_$i")"); done
  (IFS=,; echo "${addrs[*]}")
}

# Runs "$@" detached (own session, survives this script), output to logs/NAME.log.
launch() {
  local name="$1"; shift
  mkdir -p "$STATE/pids" "$STATE/logs"
  echo "=== $(date -Is) start: $*" >>"$STATE/logs/$name.log"
  setsid "$@" </dev/null >>"$STATE/logs/$name.log" 2>&1 &
  echo $! >"$STATE/pids/$name.pid"
}

# A joining node exits at once if none of its CLUSTER_JOIN addresses answers, so node 0
# starts alone and the others join the nodes started before them once node 0 gossips.
start_weaviate() {
  local i join=()
  for ((i = 0; i < WEAVIATE_NODES; i++)); do
    launch_weaviate_node "$i" "${join[@]}"
    if ((i == 0)); then
      wait_listening weaviate-0 "$(port WEAVIATE_GOSSIP_0)" || return 1
    fi
    join+=("127.0.0.1:$(port "WEAVIATE_GOSSIP_$i")")
  done
}

# Node I, joining the gossip addresses given (none: it starts alone).
launch_weaviate_node() {
  local i="$1" raft_join=() join=("${@:2}") k gossip raft
  for ((k = 0; k < WEAVIATE_NODES; k++)); do raft_join+=("weaviate-$k:$(port "WEAVIATE_RAFT_$k")"); done
  gossip="$(port "WEAVIATE_GOSSIP_$i")"
  raft="$(port "WEAVIATE_RAFT_$i")"
  mkdir -p "$STATE/data/weaviate-$i"
  # CLUSTER_ADVERTISE_ADDR: otherwise a node may advertise an IPv6 address and die on
  # "too many colons". GO_PROFILING_PORT: every node would take 6060.
  # COLLECTION_RETRIEVAL_STRATEGY=LocalOnly: by default every write asks the Raft leader
  # for the collection's schema, so losing the leader node stalls all writes until a
  # new one is elected (10-20 s at Weaviate's default timeouts); the servers' schema is
  # made once at start, so each node's own copy serves.
  # ASYNC_REPLICATION_*: a node back from a crash gets the writes it missed about 10 s
  # after its return rather than 35 s (Weaviate's defaults are a 30 s propagation delay
  # and a 30 s check interval, sized for networks slower than loopback). The servers
  # route around a node until it has caught up; the fault tests (server/it/tests/weaviate/)
  # run their clusters the same way.
  # ASYNC_REPLICATION_HASHTREE_HEIGHT=10: every shard replica keeps a hash tree for that
  # repair, 2 MiB at Weaviate's height 16, held whether the shard holds anything or not;
  # named collections are four classes each, and 50 of them made the nodes' heap 1.2 GiB
  # each, 84% hash trees (pprof). Height 10 (1,024 leaves, 32 KiB) still narrows a
  # repair to about a thousandth of a shard.
  # DISABLE_GRAPHQL: Weaviate rebuilds its whole GraphQL schema on every schema change,
  # under the schema lock, so creating a class took longer the more classes there were
  # (0.16 s at 5, 0.55 s at 200); the servers speak gRPC and REST only.
  # ASYNC_INDEXING: a node SIGKILLed during a write could keep the object but lose its
  # vector from the HNSW graph, for good (38 of 14,512 documents in a 100-cycle chaos
  # run); queued on disk first, the vector is replayed at restart (2 of 14,400 still
  # slipped through: cmd_restart's rebuild closes that). A queued vector is
  # not searchable yet: the servers wait for the queues to drain before ending a job,
  # and QUEUE_SCHEDULER_INTERVAL=100ms (default 1 s) keeps that wait short. A queue's
  # open chunk is indexed only after ASYNC_INDEXING_STALE_TIMEOUT without a write (default
  # 100 ms): under a steady stream of writes the queues rarely paused that long, and the
  # jobs of a 100-cycle chaos run fell 10 minutes behind; 10 ms lets them drain.
  launch "weaviate-$i" env -i PATH="$PATH" HOME="$HOME" \
    AUTHENTICATION_ANONYMOUS_ACCESS_ENABLED=true \
    COLLECTION_RETRIEVAL_STRATEGY=LocalOnly \
    ASYNC_REPLICATION_PROPAGATION_DELAY=5s \
    ASYNC_REPLICATION_FREQUENCY=5s \
    ASYNC_REPLICATION_HASHTREE_HEIGHT=10 \
    DISABLE_GRAPHQL=true \
    ASYNC_INDEXING=true \
    QUEUE_SCHEDULER_INTERVAL=100ms \
    ASYNC_INDEXING_STALE_TIMEOUT=10ms \
    DEFAULT_VECTORIZER_MODULE=none \
    DISABLE_TELEMETRY=true \
    LOG_LEVEL=info \
    LOG_FORMAT=text \
    PERSISTENCE_DATA_PATH="$STATE/data/weaviate-$i" \
    CLUSTER_HOSTNAME="weaviate-$i" \
    CLUSTER_IN_LOCALHOST=true \
    CLUSTER_ADVERTISE_ADDR=127.0.0.1 \
    CLUSTER_GOSSIP_BIND_PORT="$gossip" \
    CLUSTER_DATA_BIND_PORT="$((gossip + 1))" \
    RAFT_PORT="$raft" \
    RAFT_INTERNAL_RPC_PORT="$((raft + 1))" \
    RAFT_JOIN="$(IFS=,; echo "${raft_join[*]}")" \
    RAFT_BOOTSTRAP_EXPECT="$WEAVIATE_NODES" \
    GRPC_PORT="$(port "WEAVIATE_GRPC_$i")" \
    GO_PROFILING_PORT="$(port "WEAVIATE_PROFILING_$i")" \
    ${join[0]:+CLUSTER_JOIN="$(IFS=,; echo "${join[*]}")"} \
    "$WEAVIATE_BIN" --scheme http --host 127.0.0.1 --port "$(port "WEAVIATE_HTTP_$i")"
}

# Polls until NAME accepts TCP connections on PORT; fails if it exits or times out.
wait_listening() {
  local deadline=$((SECONDS + READY_TIMEOUT_SECS))
  until (exec 3<>"/dev/tcp/127.0.0.1/$2") 2>/dev/null; do
    alive "$1" && ((SECONDS < deadline)) || { log "$1 does not listen on $2; see $STATE/logs/$1.log"; return 1; }
    sleep 0.2
  done
}

# PostgreSQL's binaries through the link's target, so that embedwire-pg never has to
# traverse /root to reach them.
pg_bin() { echo "$(readlink -f "$PG_LINK")/bin/$1"; }

# Where the PostgreSQL data lives (see the header): the primary's and the replica's data
# directories and the servers' Unix sockets.
pg_dir() {
  if [[ "$(id -u)" == 0 ]]; then
    echo "/var/lib/embedwire-pg/cluster-$(printf '%s' "$STATE" | sha256sum | cut -c1-12)"
  else
    echo "$STATE/data/postgres"
  fi
}

# The prefix that runs a command as the PostgreSQL user (as root: embedwire-pg;
# otherwise as we are), with nothing of our environment (no PG* variables, no HOME that
# user cannot read).
PG_AS=(env -i PATH=/usr/bin:/bin LC_ALL=C)
[[ "$(id -u)" == 0 ]] && PG_AS+=(setpriv "--reuid=$PG_USER" "--regid=$PG_USER" --init-groups)

# psql on PORT, database DB: rows one per line, columns separated by |.
pg_sql() {
  env -i PATH=/usr/bin:/bin LC_ALL=C PGCONNECT_TIMEOUT=2 PGOPTIONS="-c client_min_messages=warning" \
    "$(pg_bin psql)" -X -q -A -t -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$1" -U postgres -d "$2" -c "$3"
}

# Both servers read it (the replica gets it with pg_basebackup); the port and the
# socket directory differ and are given on the command line.
PG_SETTINGS="
# embedwire local cluster (scripts/cluster.sh)
listen_addresses = '127.0.0.1'
wal_level = replica
max_wal_senders = 4
hot_standby = on
fsync = on
# WAL the primary keeps for a replica that was down a while (down, then up).
wal_keep_size = '256MB'
# A replica reconnects to a restarted primary within this (default 5 s).
wal_retrieve_retry_interval = '1s'
# The connection pools of several servers at once (make test shares this cluster between
# tests that run in parallel, each starting servers; the default is 100).
max_connections = 200
"

# The postmaster itself runs (no pg_ctl), so its pid is the one in pids/.
launch_postgres() {
  local role="$1" port="$2" dir
  dir="$(pg_dir)"
  launch "postgres-$role" "${PG_AS[@]}" "$(pg_bin postgres)" -D "$dir/$role" -p "$port" \
    -c "unix_socket_directories=$dir"
}

# The primary (initdb on first use), then the replica (a copy of the running primary,
# -R: it streams from it), then the database and pgvector in it, once the replica has them.
start_postgres() {
  local dir log="$STATE/logs/postgres-primary.log"
  dir="$(pg_dir)"
  [[ -x "$(pg_bin postgres)" ]] || die "$PG_LINK/bin/postgres not found: run \`make setup\`"
  mkdir -p "$dir" "$STATE/logs" "$STATE/data"
  if [[ "$(id -u)" == 0 ]]; then
    getent passwd "$PG_USER" >/dev/null || die "user $PG_USER missing: run \`make setup\`"
    chown "$PG_USER:" "$dir"
    chmod 700 "$dir"
    ln -sfn "$dir" "$STATE/data/postgres"
  fi
  if [[ ! -f "$dir/primary/PG_VERSION" ]]; then
    rm -rf "$dir/primary" "$dir/replica"
    log "initdb of the primary in $dir/primary"
    "${PG_AS[@]}" "$(pg_bin initdb)" -D "$dir/primary" -U postgres --auth=trust -E UTF8 --locale=C >>"$log" 2>&1 ||
      { log "initdb failed; see $log"; return 1; }
    echo "$PG_SETTINGS" >>"$dir/primary/postgresql.conf"
    echo "host replication all 127.0.0.1/32 trust" >>"$dir/primary/pg_hba.conf"
  fi
  launch_postgres primary "$POSTGRES_PRIMARY_PORT"
  wait_ready postgres-primary || return 1
  if [[ ! -f "$dir/replica/PG_VERSION" ]]; then
    rm -rf "$dir/replica"
    log="$STATE/logs/postgres-replica.log"
    log "pg_basebackup of the primary into $dir/replica"
    # --checkpoint=fast: the default spread checkpoint makes it wait about 90 s.
    "${PG_AS[@]}" "$(pg_bin pg_basebackup)" -h 127.0.0.1 -p "$POSTGRES_PRIMARY_PORT" -U postgres -D "$dir/replica" \
      -R -X stream --checkpoint=fast >>"$log" 2>&1 || { log "pg_basebackup failed; see $log"; return 1; }
  fi
  launch_postgres replica "$POSTGRES_REPLICA_PORT"
  wait_ready postgres-replica || return 1
  if [[ -z "$(pg_sql "$POSTGRES_PRIMARY_PORT" postgres "SELECT 1 FROM pg_database WHERE datname = '$PG_DB'")" ]]; then
    pg_sql "$POSTGRES_PRIMARY_PORT" postgres "CREATE DATABASE $PG_DB" || return 1
  fi
  # Here rather than by two servers starting at once (CREATE EXTENSION IF NOT EXISTS races).
  pg_sql "$POSTGRES_PRIMARY_PORT" "$PG_DB" "CREATE EXTENSION IF NOT EXISTS vector" || return 1
  local deadline=$((SECONDS + READY_TIMEOUT_SECS))
  until [[ "$(pg_sql "$POSTGRES_REPLICA_PORT" "$PG_DB" "SELECT 1 FROM pg_extension WHERE extname = 'vector'" 2>/dev/null)" == 1 ]]; do
    ((SECONDS < deadline)) || { log "the replica did not receive database $PG_DB"; return 1; }
    sleep 0.2
  done
}

postgres_url() { echo "postgres://postgres@127.0.0.1:$1/$PG_DB"; }

start_servers() {
  local i
  for ((i = 0; i < SERVERS; i++)); do launch_server "$i"; done
}

# Server I on its port and data dir (with the embedded store, its index lives there).
launch_server() {
  local i="$1" store_args=(--store embedded)
  if [[ "$STORE" == postgres ]]; then
    store_args=(--store postgres
      --postgres-url "$(postgres_url "$POSTGRES_PRIMARY_PORT")"
      --postgres-read-url "$(postgres_url "$POSTGRES_REPLICA_PORT")")
  elif [[ "$STORE" == weaviate ]]; then
    store_args=(--store weaviate
      --weaviate-http "$(weaviate_http_urls)"
      --weaviate-grpc "$(weaviate_grpc_addrs)"
      --replication-factor "$REPLICATION"
      --shards "$WEAVIATE_NODES")
  fi
  mkdir -p "$STATE/data/server-$i"
  launch "server-$i" "$SERVER_BIN" \
    "${store_args[@]}" \
    --listen "127.0.0.1:$(port "SERVER_PORT_$i")" \
    --data-dir "$STATE/data/server-$i"
}

start_gateway() {
  local i upstreams=()
  for ((i = 0; i < SERVERS; i++)); do upstreams+=("http://127.0.0.1:$(port "SERVER_PORT_$i")"); done
  launch gateway "$GATEWAY_BIN" --listen "127.0.0.1:$GATEWAY_PORT" --upstream "$(IFS=,; echo "${upstreams[*]}")"
}

http_ok() { curl -fsS -o /dev/null --max-time 2 "$1" 2>/dev/null; }

# Whether node i reports every node HEALTHY on /v1/nodes and, on /v1/cluster/statistics,
# every node ready with one Raft leader and the same applied index ("synchronized").
# After a restart on old data, ready and HEALTHY come before that, and a schema change
# sent in between can fail ("grpc: the client connection is closing").
weaviate_settled() {
  local base="http://127.0.0.1:$(port "WEAVIATE_HTTP_$1")"
  {
    curl -fsS --max-time 2 "$base/v1/nodes" && echo && curl -fsS --max-time 2 "$base/v1/cluster/statistics"
  } 2>/dev/null | python3 -c '
import json, sys
nodes, stats = (json.loads(line) for line in sys.stdin.read().splitlines() if line.strip())
want = int(sys.argv[1])
leaders = {s.get("leaderId") for s in stats["statistics"]}
ok = (sum(n.get("status") == "HEALTHY" for n in nodes["nodes"]) == want
      and stats["synchronized"] and len(stats["statistics"]) == want
      and len(leaders) == 1 and "" not in leaders and None not in leaders
      and all(s.get("ready") for s in stats["statistics"]))
sys.exit(0 if ok else 1)' "$WEAVIATE_NODES" 2>/dev/null
}

# The readiness probe of one process: 0 when ready.
ready() {
  case "$1" in
    weaviate-*)
      local i="${1#weaviate-}"
      http_ok "http://127.0.0.1:$(port "WEAVIATE_HTTP_$i")/v1/.well-known/ready" && weaviate_settled "$i"
      ;;
    postgres-primary) [[ "$(pg_sql "$POSTGRES_PRIMARY_PORT" postgres "SELECT pg_is_in_recovery()" 2>/dev/null)" == f ]] ;;
    postgres-replica)
      # In recovery and streaming from the primary.
      [[ "$(pg_sql "$POSTGRES_REPLICA_PORT" postgres "SELECT pg_is_in_recovery() AND EXISTS (
          SELECT 1 FROM pg_stat_wal_receiver WHERE status = 'streaming')" 2>/dev/null)" == t ]]
      ;;
    server-*) http_ok "http://127.0.0.1:$(port "SERVER_PORT_${1#server-}")/readyz" ;;
    gateway) http_ok "http://127.0.0.1:$GATEWAY_PORT/readyz" ;;
  esac
}

# Polls until every named process is ready; fails (with its log's tail) if one exits.
wait_ready() {
  local deadline=$((SECONDS + READY_TIMEOUT_SECS)) name pending
  while :; do
    pending=()
    for name in "$@"; do
      if ! alive "$name"; then
        log "$name exited; last lines of $STATE/logs/$name.log:"
        awk '/^=== /{run=""} {run=run $0 "\n"} END{printf "%s", run}' "$STATE/logs/$name.log" | tail -n 20 >&2
        return 1
      fi
      ready "$name" || pending+=("$name")
    done
    ((${#pending[@]} == 0)) && return 0
    if ((SECONDS > deadline)); then
      log "not ready after ${READY_TIMEOUT_SECS}s: ${pending[*]} (logs in $STATE/logs)"
      return 1
    fi
    sleep 0.5
  done
}

print_addresses() {
  local i
  if [[ "$STORE" == postgres ]]; then
    echo "postgres-primary  $(postgres_url "$POSTGRES_PRIMARY_PORT")  (data in $(pg_dir)/primary)"
    echo "postgres-replica  $(postgres_url "$POSTGRES_REPLICA_PORT")  (hot standby, streaming)"
    [[ -f "$STATE/store-only" ]] && return
  elif [[ "$STORE" == weaviate ]]; then
    for ((i = 0; i < WEAVIATE_NODES; i++)); do
      echo "weaviate-$i  http://127.0.0.1:$(port "WEAVIATE_HTTP_$i")  grpc 127.0.0.1:$(port "WEAVIATE_GRPC_$i")"
    done
    [[ -f "$STATE/store-only" ]] && return
  fi
  for ((i = 0; i < SERVERS; i++)); do
    echo "server-$i    127.0.0.1:$(port "SERVER_PORT_$i") (gRPC and HTTP)"
  done
  echo "gateway     http://127.0.0.1:$GATEWAY_PORT"
}

cmd_status() {
  if [[ ! -f "$STATE/ports.env" ]]; then
    echo "no cluster (state dir $STATE)"
    return 0
  fi
  source "$STATE/ports.env"
  local name state running=0 total=0
  while read -r name; do
    total=$((total + 1))
    if alive "$name"; then
      running=$((running + 1))
      if ready "$name"; then state="running, healthy"; else state="running, NOT ready"; fi
      echo "$name  pid $(pid_of "$name")  $state"
    else
      echo "$name  not running"
    fi
  done < <(process_names)
  echo "$running of $total processes running; addresses:"
  print_addresses
}

cmd_up() {
  # Without --store and --nodes: the saved cluster's store and size (weaviate and 3 for a
  # new one), so `down` then `up` brings back the same cluster.
  local store_only=false nodes="$WEAVIATE_NODES" nodes_given=false store="$STORE"
  local replication="${EMBEDWIRE_CLUSTER_REPLICATION:-}"
  while (($# > 0)); do
    case "$1" in
      --replication)
        [[ "${2:-}" =~ ^[1-9][0-9]*$ ]] || die "--replication needs a number of replicas (1 or more)"
        replication="$2"
        shift
        ;;
      --store-only | --weaviate-only) store_only=true ;;
      --nodes)
        [[ "${2:-}" =~ ^[1-9][0-9]*$ ]] || die "--nodes needs a number of nodes (1 or more)"
        nodes="$2"
        nodes_given=true
        shift
        ;;
      --store)
        [[ "${2:-}" =~ ^(weaviate|postgres|embedded)$ ]] || die "--store needs weaviate, postgres or embedded"
        store="$2"
        shift
        ;;
      *) die "unknown option $1 (usage: $0 up [--store weaviate|postgres|embedded] [--nodes N] [--replication R] [--store-only])" ;;
    esac
    shift
  done
  # Without --replication: the saved cluster's, if it has as many nodes; else min(3, nodes).
  if [[ -z "$replication" ]]; then
    if [[ -n "$REPLICATION" ]] && ((nodes == WEAVIATE_NODES)); then
      replication="$REPLICATION"
    else
      replication="$((nodes < 3 ? nodes : 3))"
    fi
  fi
  if [[ "$store" == weaviate ]] && ((replication > nodes)); then
    die "--replication $replication exceeds the cluster's $nodes Weaviate nodes"
  fi
  if [[ "$store" == postgres ]]; then
    $nodes_given && die "--nodes is the size of a Weaviate cluster; --store postgres runs a primary and one replica"
    [[ -x "$PG_LINK/bin/postgres" ]] || die "$PG_LINK/bin/postgres not found: run \`make setup\`"
  elif [[ "$store" == embedded ]]; then
    $nodes_given && die "--nodes is the size of a Weaviate cluster; --store embedded runs no store"
    $store_only && die "--store embedded has no store to run alone"
  else
    [[ -x "$WEAVIATE_BIN" ]] || die "$WEAVIATE_BIN not found: run \`make setup\`"
  fi
  if ! $store_only; then
    [[ -x "$SERVER_BIN" && -x "$GATEWAY_BIN" ]] || die "release binaries missing: run \`make setup\`"
  fi
  if [[ -f "$STATE/ports.env" ]]; then
    local name dead=()
    local -i running=0
    while read -r name; do
      if alive "$name"; then running+=1; else dead+=("$name"); fi
    done < <(process_names)
    if ((running > 0)); then
      cmd_status
      if ((${#dead[@]} > 0)); then
        log "partly up (not running: ${dead[*]}); \`$0 down\`, then \`$0 up\` starts it all again"
        return 1
      fi
      if [[ "$store" != "$STORE" ]]; then
        log "it stores in $STORE, not $store"
      elif [[ "$STORE" == weaviate ]] && ((nodes != WEAVIATE_NODES)); then
        log "it has $WEAVIATE_NODES Weaviate nodes, not $nodes"
      elif [[ "$STORE" == weaviate ]] && [[ "$replication" != "$REPLICATION" ]]; then
        log "its collections have $REPLICATION replicas per shard, not $replication"
      fi
      log "already up (\`$0 down\` first to start again)"
      return 0
    fi
  fi

  mkdir -p "$STATE"
  rm -rf "$STATE/pids"
  local saved_nodes="$WEAVIATE_NODES" saved_store="$STORE" saved_replication="$REPLICATION"
  WEAVIATE_NODES="$nodes"
  STORE="$store"
  REPLICATION="$replication"
  if [[ -f "$STATE/ports.env" && "$saved_store" == "$store" ]] &&
    { [[ "$store" != weaviate ]] || { ((saved_nodes == nodes)) && [[ "$saved_replication" == "$replication" ]]; }; } &&
    saved_ports_free; then
    log "starting on the saved ports and data in $STATE"
  else
    if [[ -d "$STATE/data" ]]; then
      if [[ "$saved_store" != "$store" ]]; then
        log "the saved cluster stored in $saved_store, not $store; starting on new ports with empty data"
      elif ((saved_nodes != nodes)); then
        log "the saved cluster had $saved_nodes nodes, not $nodes; starting on new ports with empty data"
      elif [[ "$store" == weaviate && "$saved_replication" != "$replication" ]]; then
        log "the saved cluster's collections have $saved_replication replicas per shard, not $replication;" \
          "starting on new ports with empty data"
      else
        log "saved ports are taken; starting on new ports with empty data"
      fi
    fi
    # As root, PostgreSQL's data is outside the state dir (see the header).
    [[ "$(id -u)" == 0 ]] && rm -rf "$(pg_dir)"
    rm -rf "$STATE/data"
    pick_ports >"$STATE/ports.env.new"
    mv "$STATE/ports.env.new" "$STATE/ports.env"
    echo "$nodes" >"$STATE/nodes"
    echo "$store" >"$STATE/store"
    echo "$replication" >"$STATE/replication"
  fi
  if $store_only; then touch "$STATE/store-only"; else rm -f "$STATE/store-only"; fi
  source "$STATE/ports.env"

  local started=$SECONDS weaviate=()
  if [[ "$STORE" == postgres ]]; then
    start_postgres || { cmd_down; die "PostgreSQL did not come up"; }
    log "PostgreSQL primary and streaming replica ready after $((SECONDS - started)) s"
  elif [[ "$STORE" == weaviate ]]; then
    mapfile -t weaviate < <(process_names | grep '^weaviate-')
    start_weaviate || { cmd_down; die "the Weaviate cluster did not come up"; }
    wait_ready "${weaviate[@]}" || { cmd_down; die "the Weaviate cluster did not come up"; }
    log "Weaviate cluster of $WEAVIATE_NODES nodes healthy after $((SECONDS - started)) s" \
      "(the servers' collections: $WEAVIATE_NODES shards, $REPLICATION replicas each)"
  fi
  if ! $store_only; then
    local servers=()
    mapfile -t servers < <(process_names | grep '^server-')
    start_servers
    wait_ready "${servers[@]}" || { cmd_down; die "the embedwire servers did not come up"; }
    start_gateway
    wait_ready gateway || { cmd_down; die "the gateway did not come up"; }
  fi
  log "up after $((SECONDS - started)) s (state, logs and data in $STATE):"
  print_addresses
}

# SIGTERM is a smart shutdown to PostgreSQL, which waits for every session to end;
# SIGINT is its fast shutdown (sessions are cut, a checkpoint is written).
stop_signal() { [[ "$1" == postgres-* ]] && echo INT || echo TERM; }

# TERM (INT to PostgreSQL) to everything (reverse start order), then KILL whatever
# outlives the grace period.
cmd_down() {
  [[ -d "$STATE/pids" ]] || { log "nothing is up"; return 0; }
  local names=() name pid
  mapfile -t names < <(process_names | tac)
  for name in "${names[@]}"; do
    alive "$name" && kill "-$(stop_signal "$name")" "$(pid_of "$name")" 2>/dev/null || true
  done
  local deadline=$((SECONDS + STOP_GRACE_SECS))
  for name in "${names[@]}"; do
    while alive "$name" && ((SECONDS < deadline)); do sleep 0.2; done
    if alive "$name"; then
      pid="$(pid_of "$name")"
      log "$name (pid $pid) still runs after ${STOP_GRACE_SECS}s; KILL"
      kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$STATE/pids/$name.pid"
  done
  rmdir "$STATE/pids" 2>/dev/null || true
  log "down (data and logs kept in $STATE)"
}

# Weaviate does not check at start that a shard's vector index holds every object the
# shard stores: a node killed during a write can keep an object whose vector never
# reached its queue, and searches that node answers miss it for good (async replication
# compares objects, not the graph). Measured in 100-cycle chaos runs: 38 of 14,512
# documents at Weaviate's defaults, 2 of 14,400 with ASYNC_INDEXING. So a restarted
# node's graphs are rebuilt from its objects (discard_vector_graphs below), and
# weaviate-refill (scripts/weaviate-refill) marks each vector index for it while the node
# is down: at start the node queues every vector it stores. Prints how many indexes it
# marked; run it before discard_vector_graphs, which removes what it counts.
#
# Not Weaviate's repair (/debug/index/repair/vector, used here until 2026-11-30): it ends
# by deleting from the graph every vector whose object it did not visit, and it visits
# only the objects that existed when it began, so a write indexed while it runs is
# tombstoned and that node's searches miss the document for good. The chaos runs' text
# misses were that: up to 8 documents per run, written during a repair on one node.
mark_vector_refill() {
  local i="$1"
  "$REFILL_BIN" "$STATE/data/weaviate-$i"
}

# Marked or repaired, a node queues only vectors its graph does not contain, and a SIGKILL can
# leave a graph containing a vector it cannot reach: Weaviate 1.35's index queue deletes
# a chunk of vectors before it flushes the HNSW log of their inserts (DiskQueue's done
# callback: removeChunk, then the Flush of OnBatchProcessed), and that log goes through a
# user-space buffer, so a node record can reach disk without the links to and from it.
# Searches that node answers then miss the document for good: 2 of 14,952 in the
# 100-cycle chaos run of 2026-11-29, found at rank 1 by a search another node answered.
# So a restarted node's graphs are thrown away before it starts: it comes back with
# empty vector indexes, the refill queues every vector it stores, and the restart waits
# for the rebuild (servers keep searches off a node whose queue is far longer than the
# others', see the weaviate store's complete_nodes). Every restart, not only those after
# a crash: a crash cannot be told from a stop here, since a process SIGKILLed a moment
# before still answers `kill -0` while it dies (and as a zombie until reaped): a first
# version that rebuilt only after an unclean stop rebuilt none of the 100 node restarts of
# a 100-cycle chaos run (the bench kills, then restarts at once).
discard_vector_graphs() {
  local i="$1"
  find "$STATE/data/weaviate-$i" -type d \( -name '*.hnsw.commitlog.d' -o -name '*.hnsw.snapshot.d' \) \
    -prune -exec rm -rf {} +
}

# Waits until node I has queued the vectors of the MARKED indexes (its log after line
# FROM says so once per index), and then until each of its shards' vector queues has been
# seen empty once (a queue is first in, first out: empty after the refill means the
# re-queued vectors are in the graph).
wait_rebuilt() {
  local i="$1" from="$2" marked="$3"
  python3 - "$STATE/logs/weaviate-$i.log" "$from" "$marked" "weaviate-$i" \
    "http://127.0.0.1:$(port "WEAVIATE_HTTP_$i")" "$REBUILD_TIMEOUT_SECS" <<'EOF2'
import json, re, sys, time, urllib.request
log_path, start, marked, name, url, timeout = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], float(sys.argv[6])
# How each index's refill ends in the node's log (logfmt; FillQueue and ConvertQueue in
# Weaviate's adapters/repos/db/shard_async.go): queued, nothing to queue into, or failed.
ended = re.compile(r'msg="(enqueued vectors from LSM store|preload queue: (vector index|queue) not found'
                   r'|preload shard for target vector)')
deadline = time.monotonic() + timeout
def refills_done():
    with open(log_path, errors="replace") as log:
        return sum(1 for n, line in enumerate(log) if n >= start and ended.search(line))
while refills_done() < marked:
    if time.monotonic() > deadline:
        sys.exit(f"{name}: {refills_done()} of {marked} vector index refills ended within {timeout:.0f} s")
    time.sleep(0.2)
owing = None
while True:
    try:
        with urllib.request.urlopen(f"{url}/v1/nodes?output=verbose", timeout=10) as answer:
            nodes = json.load(answer)["nodes"]
        shards = next((n.get("shards") or [] for n in nodes if n["name"] == name), [])
        busy = {(s["class"], s["name"]) for s in shards if s.get("vectorQueueLength", 0) > 0}
        owing = busy if owing is None else owing & busy
        if not owing:
            break
    except Exception:
        pass
    if time.monotonic() > deadline:
        sys.exit(f"{name}: vector queues not seen empty within {timeout:.0f} s ({len(owing or [])} shards)")
    time.sleep(0.2)
EOF2
}

# Stops NAME (SIGKILL with --kill, else as `down` does), starts it again on its ports and
# data, and waits until it is ready (a Weaviate node: until the cluster has settled).
cmd_restart() {
  local name="${1:-}" kill=false pid deadline i join=() log_lines marked=0 names
  [[ "${2:-}" == --kill ]] && kill=true
  [[ -f "$STATE/ports.env" && -d "$STATE/pids" ]] || die "no cluster is up in $STATE"
  # Not `process_names | grep -q`: grep quits at the match, and under pipefail the writer's
  # SIGPIPE failed the check now and then ("no process server-1" in a chaos run).
  names="$(process_names)"
  grep -qx -- "$name" <<<"$names" || die "no process $name (one of: $(tr '\n' ' ' <<<"$names"))"
  source "$STATE/ports.env"
  if alive "$name"; then
    pid="$(pid_of "$name")"
    if $kill; then kill -KILL "$pid"; else kill "-$(stop_signal "$name")" "$pid"; fi
    deadline=$((SECONDS + STOP_GRACE_SECS))
    while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && { log "$name (pid $pid) still runs after ${STOP_GRACE_SECS}s; KILL"; kill -KILL "$pid"; }
    while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
  fi
  case "$name" in
    weaviate-*)
      for ((i = 0; i < WEAVIATE_NODES; i++)); do
        [[ "weaviate-$i" != "$name" ]] && join+=("127.0.0.1:$(port "WEAVIATE_GOSSIP_$i")")
      done
      marked="$(mark_vector_refill "${name#weaviate-}")"
      discard_vector_graphs "${name#weaviate-}"
      log_lines="$(wc -l < "$STATE/logs/$name.log" 2>/dev/null || echo 0)"
      launch_weaviate_node "${name#weaviate-}" "${join[@]}"
      ;;
    postgres-primary) launch_postgres primary "$POSTGRES_PRIMARY_PORT" ;;
    postgres-replica) launch_postgres replica "$POSTGRES_REPLICA_PORT" ;;
    server-*) launch_server "${name#server-}" ;;
    gateway) start_gateway ;;
  esac
  wait_ready "$name" || die "$name did not come back (logs in $STATE/logs)"
  if [[ "$name" == weaviate-* ]]; then
    wait_rebuilt "${name#weaviate-}" "$log_lines" "$marked" || log "WARNING: $name's vector indexes not seen rebuilt"
  fi
  log "$name restarted (pid $(pid_of "$name"))"
}

case "${1:-}" in
  up) shift; cmd_up "$@" ;;
  down) cmd_down ;;
  status) cmd_status ;;
  restart) shift; cmd_restart "$@" ;;
  *)
    echo "usage: $0 up [--store weaviate|postgres|embedded] [--nodes N] [--replication R] [--store-only] | down | status" \
      "| restart NAME [--kill]" >&2
    exit 2
    ;;
esac
