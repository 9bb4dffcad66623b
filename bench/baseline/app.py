"""The Python baseline: the /v1 HTTP contract of the existing embedding gateways
(POST /v1/ingest, GET /v1/jobs/{id}, POST /v1/search, GET /healthz, POST /embed, and
the OpenAI-style POST /v1/embeddings) implemented the usual way, so that the bench compares
embedwire with what such a gateway costs on the same machine, model and corpus.

FastAPI + uvicorn (one worker process), ONNX Runtime's Python API on the same
all-MiniLM-L6-v2 model file embedwire serves, the `tokenizers` package on its
tokenizer.json (max 256 tokens), mean pooling and L2 normalization, an in-memory
numpy matrix as the index (exact dot-product search), and ingestion as background
jobs run one at a time by a single worker thread, as such gateways do.

Route handlers are plain `def` functions, so FastAPI runs them on its thread pool
and ONNX Runtime (which releases the GIL while it computes) can overlap requests.
Nothing is tuned against the benchmark: the ONNX Runtime session uses its defaults
but the thread count, which is set like embedwire's (--threads, default 2), uvicorn
its defaults but the access log, which is off because embedwire logs no line per
request either, and numpy's BLAS runs one thread per call (see below), the usual
setting for a threaded Python service and far better than the default here.

Run: python bench/baseline/app.py --port 0   (it prints "listening on HOST:PORT"
to stderr once bound; GET /healthz says model_loaded once the model is ready).
"""

import os

# One BLAS thread per call, set before numpy loads OpenBLAS, as threaded Python
# services are deployed: each request runs on its own pool thread, and OpenBLAS's
# own threads (spinning between calls) fought them and ONNX Runtime for the cores.
# Measured on 2 cores with 10k vectors and 16 concurrent searches: ~13 searches/s
# with OpenBLAS's default threading, ~108 with one thread.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import base64
import queue
import socket
import sys
import threading
import time
import uuid
from contextlib import asynccontextmanager
from typing import Dict, List, Optional, Union

import numpy as np
import onnxruntime as ort
import uvicorn
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import Response
from pydantic import BaseModel
from tokenizers import Tokenizer

MAX_TOKENS = 256
INGEST_BATCH = 32
DEFAULT_MODEL_DIR = os.path.expanduser("~/.cache/embedwire/models/all-MiniLM-L6-v2")
MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"


class Embedder:
    """The model: tokenize, run, mean-pool over the attention mask, L2-normalize."""

    def __init__(self, model_dir: str, threads: int):
        self.tokenizer = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=MAX_TOKENS)
        self.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        self.session = ort.InferenceSession(
            os.path.join(model_dir, "model.onnx"), options, providers=["CPUExecutionProvider"]
        )

    def embed(self, texts: List[str]) -> np.ndarray:
        encodings = self.tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        types = np.array([e.type_ids for e in encodings], dtype=np.int64)
        (hidden,) = self.session.run(
            ["last_hidden_state"], {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        )
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.clip(norms, 1e-12, None)).astype(np.float32)

    def count_tokens(self, texts: List[str]) -> int:
        return sum(len(e.ids) - e.ids.count(0) for e in self.tokenizer.encode_batch(texts))


class Index:
    """Documents and their vectors, searched by an exact dot product."""

    def __init__(self, dim: int = 384):
        self.lock = threading.Lock()
        self.vectors = np.zeros((0, dim), dtype=np.float32)
        self.documents: List[dict] = []

    def add(self, documents: List[dict], vectors: np.ndarray) -> None:
        with self.lock:
            self.vectors = np.vstack([self.vectors, vectors])
            self.documents.extend(documents)

    def search(self, query: np.ndarray, top_k: int) -> List[dict]:
        with self.lock:
            vectors, documents = self.vectors, self.documents
        if len(documents) == 0:
            return []
        scores = vectors @ query
        k = min(top_k, len(documents))
        best = np.argpartition(-scores, k - 1)[:k]
        best = best[np.argsort(-scores[best])]
        return [
            {
                "id": documents[i]["id"],
                "score": float(scores[i]),
                "text": documents[i]["text"],
                "metadata": documents[i]["metadata"],
            }
            for i in best
        ]

    def __len__(self) -> int:
        return len(self.documents)


class Jobs:
    """Ingestion jobs, run one at a time by one background thread."""

    def __init__(self, embedder: Embedder, index: Index):
        self.embedder, self.index = embedder, index
        self.jobs: Dict[str, dict] = {}
        self.pending: "queue.Queue[tuple]" = queue.Queue()
        threading.Thread(target=self._run, name="ingest", daemon=True).start()

    def submit(self, documents: List[dict]) -> dict:
        job = {
            "job_id": str(uuid.uuid4()),
            "status": "pending",
            "total_documents": len(documents),
            "processed_documents": 0,
            "started_at": time.time(),
            "finished_at": None,
        }
        self.jobs[job["job_id"]] = job
        self.pending.put((job, documents))
        return dict(job)

    def _run(self) -> None:
        while True:
            job, documents = self.pending.get()
            job["status"] = "running"
            try:
                for start in range(0, len(documents), INGEST_BATCH):
                    batch = documents[start : start + INGEST_BATCH]
                    vectors = self.embedder.embed([d["text"] for d in batch])
                    self.index.add(batch, vectors)
                    job["processed_documents"] += len(batch)
                job["status"] = "completed"
            except Exception as error:  # the job fails with its reason; others go on
                job["status"], job["error"] = "failed", str(error)
            job["finished_at"] = time.time()


class DocumentIn(BaseModel):
    id: Optional[str] = None
    text: str
    metadata: Dict[str, str] = {}


class IngestRequest(BaseModel):
    documents: List[DocumentIn]


class SearchRequest(BaseModel):
    query: str
    top_k: int = 5


class EmbedRequest(BaseModel):
    texts: List[str]


class EmbeddingsRequest(BaseModel):
    input: Union[str, List[str]]
    model: Optional[str] = None
    encoding_format: str = "float"
    dimensions: Optional[int] = None


def create_app(model_dir: str, threads: int) -> FastAPI:
    state = {}

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        embedder = Embedder(model_dir, threads)
        embedder.embed(["warm up"])
        index = Index()
        state.update(embedder=embedder, index=index, jobs=Jobs(embedder, index))
        yield

    app = FastAPI(lifespan=lifespan)

    @app.get("/healthz")
    def healthz():
        return {"status": "ok", "model_loaded": "embedder" in state, "document_count": len(state["index"])}

    @app.post("/v1/ingest")
    def ingest(request: IngestRequest):
        documents = [
            {"id": d.id or str(uuid.uuid4()), "text": d.text, "metadata": d.metadata} for d in request.documents
        ]
        return state["jobs"].submit(documents)

    @app.get("/v1/jobs/{job_id}")
    def get_job(job_id: str):
        job = state["jobs"].jobs.get(job_id)
        if job is None:
            raise HTTPException(status_code=404, detail="job not found")
        return job

    @app.post("/v1/search")
    def search(request: SearchRequest):
        started = time.perf_counter()
        query = state["embedder"].embed([request.query])[0]
        results = state["index"].search(query, request.top_k)
        return {"results": results, "took_ms": (time.perf_counter() - started) * 1e3}

    @app.post("/embed")
    def embed(request: EmbedRequest, http: Request):
        vectors = state["embedder"].embed(request.texts)
        if wants_bytes(http):
            return octet_stream(vectors)
        return {"embeddings": vectors.tolist()}

    @app.post("/v1/embeddings")
    def embeddings(request: EmbeddingsRequest, http: Request):
        texts = [request.input] if isinstance(request.input, str) else request.input
        vectors = state["embedder"].embed(texts)
        if request.dimensions:
            vectors = vectors[:, : request.dimensions]
            vectors = vectors / np.clip(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12, None)
        if wants_bytes(http):
            return octet_stream(vectors)
        if request.encoding_format == "base64":
            data = [base64.b64encode(v.astype("<f4").tobytes()).decode() for v in vectors]
        else:
            data = [v.tolist() for v in vectors]
        tokens = state["embedder"].count_tokens(texts)
        return {
            "object": "list",
            "data": [{"object": "embedding", "index": i, "embedding": e} for i, e in enumerate(data)],
            "model": request.model or MODEL_ID,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }

    return app


def wants_bytes(request: Request) -> bool:
    return "application/octet-stream" in request.headers.get("accept", "")


def octet_stream(vectors: np.ndarray) -> Response:
    return Response(
        content=np.ascontiguousarray(vectors, dtype="<f4").tobytes(),
        media_type="application/octet-stream",
        headers={"x-embedding-count": str(vectors.shape[0]), "x-embedding-dimensions": str(vectors.shape[1])},
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    parser.add_argument("--model-dir", default=os.environ.get("EMBEDWIRE_MODEL_DIR", DEFAULT_MODEL_DIR))
    parser.add_argument("--threads", type=int, default=2, help="ONNX Runtime intra-op threads")
    args = parser.parse_args()
    # Bound here, not by uvicorn, so that port 0 works and the real port is known.
    # IPPROTO_TCP must be explicit: asyncio sets TCP_NODELAY on accepted sockets only
    # when their proto says TCP, and without it every keep-alive answer written in
    # two parts (headers, body) waits ~40 ms for the client's delayed ACK.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))
    host, port = sock.getsockname()
    print(f"listening on {host}:{port}", file=sys.stderr, flush=True)
    config = uvicorn.Config(create_app(args.model_dir, args.threads), access_log=False, log_level="warning")
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
