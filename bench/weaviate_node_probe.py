"""Per-node probe of documents a Weaviate chaos run could not find by their text.

For each document id, each chunk object is read on each Weaviate node by id
(node_name=weaviate-i, with its vector), then that vector is searched on each node
(gRPC Search nearVector, limit 10, 3 times; a node answers from its own replica) to
see which node's graph finds it. On the state dir a failed chaos run keeps:
    EMBEDWIRE_CLUSTER_DIR=STATE_DIR bash scripts/cluster.sh up --store-only
    python3 bench/weaviate_node_probe.py STATE_DIR DOC_ID...
    EMBEDWIRE_CLUSTER_DIR=STATE_DIR bash scripts/cluster.sh down
"""
import json, os, subprocess, sys, uuid, urllib.request
GRPCURL = os.path.expanduser("~/.cache/embedwire/bin/grpcurl")  # installed by make setup
PROTOS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "proto", "weaviate")
# The namespace of the store's object ids (server/src/store/weaviate/convert.rs).
NS = uuid.UUID("4c1f3a8e-3a5b-5d1e-9a7e-6d2b8f0c9e11")
state, docs = sys.argv[1], sys.argv[2:]
ports = dict(l.strip().split("=", 1) for l in open(f"{state}/ports.env") if "=" in l)
nodes = sorted(k for k in ports if k.startswith("WEAVIATE_HTTP_"))
def get(url):
    try:
        return json.load(urllib.request.urlopen(url, timeout=30))
    except urllib.error.HTTPError as e:
        return {"status": e.code}
def near(port, vec):
    body = json.dumps({"collection": "Embedwire", "limit": 10, "uses_123_api": True, "uses_125_api": True, "uses_127_api": True,
                       "near_vector": {"vector": vec}, "metadata": {"uuid": True, "distance": True}})
    out = subprocess.run([GRPCURL, "-plaintext", "-import-path", PROTOS, "-proto", "v1/weaviate.proto",
                          "-d", body, f"127.0.0.1:{port}", "weaviate.v1.Weaviate/Search"], capture_output=True, text=True)
    if out.returncode: return None, out.stderr[:200]
    r = json.loads(out.stdout)
    return [x.get("metadata", {}).get("id") for x in r.get("results", [])], None
cls = "Embedwire"
for doc in docs:
    for idx in range(4):
        cid = str(uuid.uuid5(NS, f"chunk\0{doc}\0{idx}"))
        seen = {}
        for i, k in enumerate(nodes):
            o = get(f"http://127.0.0.1:{ports[k]}/v1/objects/{cls}/{cid}?include=vector&node_name=weaviate-{i}")
            seen[i] = o.get("vector")
        if not any(seen.values()):
            if idx == 0: print(doc, "chunk 0 on no node")
            break
        print(doc, "chunk", idx, cid, "on nodes:", [i for i, v in seen.items() if v])
        vec = next(v for v in seen.values() if v)
        for i, k in enumerate(nodes):
            ranks = []
            for _ in range(3):
                hits, err = near(ports[k.replace("HTTP", "GRPC")], vec)
                ranks.append(err if err else (hits.index(cid) + 1 if cid in hits else None))
            print("   search on node", i, "rank per try:", ranks)
