"""Near-duplicate recall without faults, the control of the Weaviate chaos runs' text misses.

Each of P docstring paragraphs is ingested COPIES times as "<paragraph> (chaos document n)"
(the chaos bench's texts: twins at cosine distance ~0.001) through the gateway of a running
`scripts/cluster.sh` deployment, 100 documents per job; then each document's own text is
searched (top 10) and the misses counted. A 4th argument skips the ingest (probe again,
say after `cluster.sh restart weaviate-1 --kill`).

    EMBEDWIRE_CLUSTER_DIR=/tmp/dup bash scripts/cluster.sh up
    python3 bench/near_duplicates_probe.py /tmp/dup 2000 3
    EMBEDWIRE_CLUSTER_DIR=/tmp/dup bash scripts/cluster.sh down
"""
import json, sys, time, urllib.request, concurrent.futures as cf
state, P, COPIES = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ports = dict(l.strip().split("=", 1) for l in open(f"{state}/ports.env") if "=" in l)
gw = f"http://127.0.0.1:{ports['GATEWAY_PORT']}"
def post(path, body):
    req = urllib.request.Request(gw + path, json.dumps(body).encode(), {"content-type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=120))
paras, seen = [], set()
for line in open(__import__("os").path.expanduser("~/.cache/embedwire/bench/search_bench_docstrings.jsonl")):
    d = json.loads(line)
    if "text" not in d: continue
    for p in d["text"].split("\n\n"):
        p = " ".join(p.split())
        if 100 <= len(p) <= 600 and p not in seen:
            seen.add(p); paras.append(p)
    if len(paras) >= P: break
paras = paras[:P]
N = P * COPIES
texts = {f"chaos-{n:06}": f"{paras[n % P]} (chaos document {n})" for n in range(N)}
ids = list(texts)
jobs = [] if len(sys.argv) > 4 else [post("/v1/ingest", {"documents": [{"id": i, "text": texts[i]} for i in ids[k:k+100]]})["job_id"] for k in range(0, N, 100)]
print(f"{N} documents in {len(jobs)} jobs posted", flush=True)
while True:
    open_ = [j for j in jobs if json.load(urllib.request.urlopen(f"{gw}/v1/jobs/{j}"))["status"] not in ("completed", "failed")]
    if not open_: break
    time.sleep(3)
print("jobs ended", flush=True)
def probe(i):
    hits = post("/v1/search", {"query": texts[i], "top_k": 10})["results"]
    return i, [h["id"] for h in hits]
missed = []
with cf.ThreadPoolExecutor(4) as ex:
    for i, hit_ids in ex.map(probe, ids):
        if i not in hit_ids: missed.append((i, hit_ids[:2]))
print(f"missed by own text (top 10): {len(missed)} of {N}")
for m in missed[:20]: print("  ", m)
