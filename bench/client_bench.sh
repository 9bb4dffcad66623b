#!/usr/bin/env bash
# bench/client_bench.sh [--quick]: the Rust and the Python clients embedding the same
# short texts (100k; --quick: 2k) through embed_many against one pseudo-backend server
# (the transport alone, so the client's own cost shows), with the same batch size
# and requests in flight. Prints total time and client CPU per vector for each, and
# the Python / Rust ratio of CPU per vector (target: at most 1.5). Each client runs
# three times, alternating, and the median counts (this machine is noisy).
# Results: $RESULTS/clients/client_bench.csv (one row per run) and summary.csv.
set -euo pipefail
cd "$(dirname "$0")/.."
QUICK=""
[[ "${1:-}" == "--quick" ]] && QUICK=1
CACHE="${EMBEDWIRE_CACHE:-$HOME/.cache/embedwire}"
PYTHON="$CACHE/venv/bin/python"
# The Python client of this checkout, whatever checkout the venv's editable install
# points to.
export PYTHONPATH="$PWD/clients/python/src${PYTHONPATH:+:$PYTHONPATH}"
RESULTS="${BENCH_RESULTS_DIR:-bench/results}/clients"
COUNT=$([[ -n "$QUICK" ]] && echo 2000 || echo 100000)
ROUNDS=$([[ -n "$QUICK" ]] && echo 1 || echo 3)
BATCH=64
CONCURRENCY=8
mkdir -p "$RESULTS"
CSV="$RESULTS/client_bench.csv"
rm -f "$CSV"

DATA="$(mktemp -d)"
LOG="$DATA/server.log"
./target/release/embedwire-server --backend pseudo --listen 127.0.0.1:0 --data-dir "$DATA/data" 2>"$LOG" &
SERVER_PID=$!
trap 'kill $SERVER_PID 2>/dev/null; rm -rf "$DATA"' EXIT
ADDRESS=""
for _ in $(seq 200); do
    ADDRESS="$(sed -n 's/.*listening on \([0-9.:]*\).*/\1/p' "$LOG" | head -1)"
    [[ -n "$ADDRESS" ]] && curl -sf "http://$ADDRESS/readyz" >/dev/null && break
    sleep 0.05
done
[[ -n "$ADDRESS" ]] || { echo "server did not start: $(cat "$LOG")" >&2; exit 1; }

for round in $(seq "$ROUNDS"); do
    ./target/release/embedwire-client-bench --server "http://$ADDRESS" --count "$COUNT" \
        --batch-size "$BATCH" --concurrency "$CONCURRENCY" --csv "$CSV"
    "$PYTHON" clients/python/bench_client.py "$ADDRESS" --texts "$COUNT" \
        --batch-size "$BATCH" --concurrency "$CONCURRENCY" --csv "$CSV"
    "$PYTHON" clients/python/bench_client.py "$ADDRESS" --texts "$COUNT" \
        --batch-size "$BATCH" --concurrency "$CONCURRENCY" --async --csv "$CSV"
done

"$PYTHON" - "$CSV" "$RESULTS/summary.csv" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
by_client = {}
for row in rows:
    by_client.setdefault(row["client"], []).append(row)
summary = []
for client, runs in by_client.items():
    summary.append({
        "client": client,
        "runs": len(runs),
        "seconds": statistics.median(float(r["seconds"]) for r in runs),
        "vectors_per_s": statistics.median(float(r["vectors_per_s"]) for r in runs),
        "cpu_us_per_vector": statistics.median(float(r["cpu_us_per_vector"]) for r in runs),
    })
rust = next(s for s in summary if s["client"] == "rust")
print(f"{'client':<16}{'runs':>5}{'seconds':>10}{'vectors/s':>12}{'CPU us/vector':>15}{'x Rust':>9}")
for s in summary:
    s["ratio_to_rust"] = s["cpu_us_per_vector"] / rust["cpu_us_per_vector"]
    print(f"{s['client']:<16}{s['runs']:>5}{s['seconds']:>10.3f}{s['vectors_per_s']:>12.0f}{s['cpu_us_per_vector']:>15.2f}{s['ratio_to_rust']:>9.2f}")
worst = max(s["ratio_to_rust"] for s in summary if s["client"] != "rust")
print(f"target: Python client CPU per vector <= 1.5 x Rust: worst Python variant {worst:.2f} x -> {'PASS' if worst <= 1.5 else 'MISS'}")
with open(sys.argv[2], "w", newline="") as out:
    writer = csv.DictWriter(out, fieldnames=list(summary[0].keys()))
    writer.writeheader()
    writer.writerows(summary)
PY
