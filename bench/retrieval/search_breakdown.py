"""Where a search's time goes on a running server: SciFact train queries one at a time
over HTTP `/v1/search`, then the means of what the server's `/metrics` recorded meanwhile
(model time per batch, queue wait, each store operation, the whole HTTP request).

    python bench/retrieval/search_breakdown.py --server 127.0.0.1:PORT --ingest 3000
    python bench/retrieval/search_breakdown.py --server 127.0.0.1:PORT --mode hybrid

`--ingest N` first stores the corpus's first N documents (through `/v1/ingest`, waiting
for the jobs). Run it once per mode against the same server (e.g. a server of
`scripts/cluster.sh up --store weaviate`) and compare: a mode's extra time shows up as
the operations it adds or slows.
"""

from __future__ import annotations

import argparse
import json
import re
import time
import urllib.request
from pathlib import Path

DATASET = Path(__file__).resolve().parents[3] / "shared/data/scifact-train"
SERVER_FIGURES = re.compile(
    r'embedwire_(inference_seconds|queue_wait_seconds|http_request_duration_seconds)_(sum|count)'
    r'(\{route="/v1/search"\})? (\S+)'
)
STORE_FIGURES = re.compile(r'embedwire_store_request_seconds_(sum|count)\{store="[^"]+",operation="([^"]+)"\} (\S+)')


def read_metrics(server: str) -> dict[tuple[str, str], float]:
    """(figure, "sum" | "count") -> value for the model, queue, HTTP and store figures."""
    figures: dict[tuple[str, str], float] = {}
    page = urllib.request.urlopen(f"http://{server}/metrics").read().decode()
    for line in page.splitlines():
        server_figure = SERVER_FIGURES.match(line)
        if server_figure and (server_figure[1] != "http_request_duration_seconds" or server_figure[3]):
            figures[(server_figure[1], server_figure[2])] = float(server_figure[4])
        store_figure = STORE_FIGURES.match(line)
        if store_figure:
            figures[(store_figure[2], store_figure[1])] = float(store_figure[3])
    return figures


def post(server: str, path: str, body: object) -> dict:
    request = urllib.request.Request(
        f"http://{server}{path}", json.dumps(body).encode(), {"content-type": "application/json"}
    )
    return json.load(urllib.request.urlopen(request))


def ingest(server: str, dataset: Path, count: int) -> None:
    """Stores the first `count` corpus documents (title and text) and waits for their jobs."""
    documents = []
    with open(dataset / "corpus.jsonl") as lines:
        for line in lines:
            document = json.loads(line)
            documents.append({"id": document["_id"], "text": f"{document['title']}\n{document['text']}".strip()})
            if len(documents) == count:
                break
    jobs = [post(server, "/v1/ingest", {"documents": documents[i : i + 200]})["job_id"] for i in range(0, count, 200)]
    while True:
        states = [json.load(urllib.request.urlopen(f"http://{server}/v1/jobs/{job}"))["status"] for job in jobs]
        if all(state in ("completed", "failed") for state in states):
            print(f"ingested: {states.count('completed')} of {len(jobs)} jobs completed")
            return
        time.sleep(2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", required=True, help="host:port of the server's HTTP")
    parser.add_argument("--mode", default="vector", choices=["vector", "keyword", "hybrid"])
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument("--dataset", type=Path, default=DATASET)
    parser.add_argument("--ingest", type=int, default=0, help="store the corpus's first N documents first")
    args = parser.parse_args()
    if args.ingest:
        ingest(args.server, args.dataset, args.ingest)
    with open(args.dataset / "queries.jsonl") as lines:
        queries = [json.loads(line)["text"] for line in lines][: args.queries]

    def search(query: str) -> None:
        post(args.server, "/v1/search", {"query": query, "top_k": args.top_k, "mode": args.mode})

    for query in queries[:20]:
        search(query)
    before = read_metrics(args.server)
    latencies = []
    for query in queries:
        started = time.perf_counter()
        search(query)
        latencies.append(time.perf_counter() - started)
    after = read_metrics(args.server)
    latencies.sort()
    print(f"{args.mode}: client p50 {latencies[len(latencies) // 2] * 1e3:.2f} ms over {len(latencies)} queries")
    for figure in sorted({name for name, _ in after}):
        calls = after.get((figure, "count"), 0) - before.get((figure, "count"), 0)
        if calls > 0:
            seconds = after[(figure, "sum")] - before.get((figure, "sum"), 0)
            print(f"  {figure:32} {int(calls):6} calls, mean {seconds / calls * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
