"""Backlog drain: how fast a split deployment works off many small jobs.

Posts JOBS jobs of 8 short documents through the gateway of a running
`scripts/cluster.sh` deployment (4 callers, no pause), polls every open job every
2 s as a client would, and prints the time until the last job ended and each
server's store calls in that time (from /metrics), busiest first.

    EMBEDWIRE_CLUSTER_DIR=/tmp/drain bash scripts/cluster.sh up
    python3 bench/backlog_drain.py /tmp/drain 300
    EMBEDWIRE_CLUSTER_DIR=/tmp/drain bash scripts/cluster.sh down
"""
import json, os, re, sys, time, urllib.request, concurrent.futures as cf
state = sys.argv[1]; jobs = int(sys.argv[2])
ports = dict(l.strip().split("=", 1) for l in open(f"{state}/ports.env") if "=" in l)
gw = f"http://127.0.0.1:{ports['GATEWAY_PORT']}"
servers = [f"http://127.0.0.1:{ports[k]}" for k in sorted(ports) if k.startswith("SERVER_PORT_")]
def post(path, body):
    req = urllib.request.Request(gw + path, json.dumps(body).encode(), {"content-type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=60))
def get(url):
    return urllib.request.urlopen(url, timeout=60).read().decode()
tag = str(int(time.time()))
def one(j):
    docs = [{"id": f"{tag}-{j}-{k}", "text": f"Document {j} {k} about backlog draining and store reads number {j*8+k}."} for k in range(8)]
    return post("/v1/ingest", {"documents": docs})["job_id"]
def metrics():
    out = {}
    for s in servers:
        for line in get(s + "/metrics").splitlines():
            m = re.match(r'embedwire_store_request_seconds_(sum|count)\{(.*)\} (\S+)', line)
            if m:
                op = re.search(r'operation="([^"]+)"', m.group(2)).group(1)
                out.setdefault(op, [0.0, 0.0])[0 if m.group(1) == "count" else 1] += float(m.group(3))
    return out
before = metrics()
t0 = time.time()
with cf.ThreadPoolExecutor(4) as ex:
    ids = list(ex.map(one, range(jobs)))
t1 = time.time()
print(f"posted {jobs} jobs in {t1-t0:.1f} s", flush=True)
open_ids = set(ids)
while open_ids:
    time.sleep(2)
    for i in list(open_ids):
        if json.loads(get(f"{gw}/v1/jobs/{i}"))["status"] in ("completed", "failed"):
            open_ids.discard(i)
    print(f"{time.time()-t0:.0f} s: {len(open_ids)} open", flush=True)
t2 = time.time()
after = metrics()
print(f"drained {jobs} jobs ({jobs*8} docs) in {t2-t0:.1f} s from first post: {jobs*60/(t2-t0):.1f} jobs/min")
rows = sorted(((op, after[op][0]-before.get(op,[0,0])[0], after[op][1]-before.get(op,[0,0])[1]) for op in after), key=lambda r: -r[2])
for op, n, s in rows:
    if n: print(f"{op:28s} calls {n:8.0f}  seconds {s:8.1f}  mean {1000*s/n:7.1f} ms")
