#!/usr/bin/env python3
"""Bulk embedding through the Python client: throughput and client CPU per vector.

Embeds N short texts with ``Client.embed_many`` (or ``AsyncClient.embed_many`` with
``--async``) against a running server and prints the wall time, vectors per second and
the CPU seconds this process spent (all its threads, user + system) per vector: the
client's own cost, to compare with the Rust client's. Use the pseudo backend to measure
the client rather than the model. A warm-up run opens the connection first.

Usage:
  python clients/python/bench_client.py 127.0.0.1:50051 --texts 100000 [--csv PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import resource
import time
from pathlib import Path

from embedwire import AsyncClient, Client

#: The columns of the CSV row, shared with the Rust client's bench
#: (clients/rust/src/bin/embedwire-client-bench.rs) so both append to one file.
CSV_FIELDS = [
    "client",
    "backend",
    "count",
    "batch_size",
    "concurrency",
    "seconds",
    "vectors_per_s",
    "cpu_seconds",
    "cpu_us_per_vector",
]


def cpu_seconds() -> float:
    """User + system CPU of this process, all threads."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def short_texts(n: int) -> list[str]:
    """n distinct short texts like search queries or titles (5 to 9 words), the same
    as the Rust client's bench embeds."""
    return [f"short text number {i} about topic {i % 97} and {i % 13}" for i in range(n)]


def run_sync(address: str, texts: list[str], batch_size: int, concurrency: int) -> tuple[str, float, float]:
    """(backend, wall seconds, CPU seconds) of one embed_many over texts."""
    with Client(address, timeout=120) as client:
        backend = client.info().backend
        # Connecting and the server's first batch are not measured (as in the Rust bench).
        # embed_many's private event loop and grpc.aio channel are made inside the
        # measured call, as at a user's first bulk call (~5 ms of the ~0.4 s).
        client.embed(["warm up"])
        wall, cpu = time.perf_counter(), cpu_seconds()
        vectors = client.embed_many(texts, batch_size=batch_size, max_concurrent_requests=concurrency)
        wall, cpu = time.perf_counter() - wall, cpu_seconds() - cpu
    assert vectors.shape[0] == len(texts)
    return backend, wall, cpu


def run_async(address: str, texts: list[str], batch_size: int, concurrency: int) -> tuple[str, float, float]:
    """Like run_sync, with AsyncClient."""

    async def run() -> tuple[str, float, float]:
        async with AsyncClient(address, timeout=120) as client:
            backend = (await client.info()).backend
            await client.embed(["warm up"])
            wall, cpu = time.perf_counter(), cpu_seconds()
            vectors = await client.embed_many(texts, batch_size=batch_size, max_concurrent_requests=concurrency)
            wall, cpu = time.perf_counter() - wall, cpu_seconds() - cpu
        assert vectors.shape[0] == len(texts)
        return backend, wall, cpu

    return asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("address", help="server address, host:port")
    parser.add_argument("--texts", type=int, default=100_000, help="number of texts to embed")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--concurrency", type=int, default=8, help="max_concurrent_requests")
    parser.add_argument("--async", dest="use_async", action="store_true", help="use AsyncClient")
    parser.add_argument("--csv", type=Path, help="append one result row to this CSV file")
    args = parser.parse_args()

    texts = short_texts(args.texts)
    runner = run_async if args.use_async else run_sync
    backend, wall, cpu = runner(args.address, texts, args.batch_size, args.concurrency)
    name = "python-async" if args.use_async else "python"
    row = {
        "client": name,
        "backend": backend,
        "count": args.texts,
        "batch_size": args.batch_size,
        "concurrency": args.concurrency,
        "seconds": f"{wall:.4f}",
        "vectors_per_s": f"{args.texts / wall:.1f}",
        "cpu_seconds": f"{cpu:.4f}",
        "cpu_us_per_vector": f"{cpu / args.texts * 1e6:.3f}",
    }
    print(f"{name} client, {backend} backend, {args.texts} texts, batch {args.batch_size}, {args.concurrency} in flight")
    print(f"total time:            {wall:.3f} s")
    print(f"vectors/s:             {args.texts / wall:.0f}")
    print(f"client CPU:            {cpu:.3f} s")
    print(f"client CPU per vector: {cpu / args.texts * 1e6:.2f} us")
    if args.csv:
        new = not args.csv.exists() or args.csv.stat().st_size == 0
        args.csv.parent.mkdir(parents=True, exist_ok=True)
        with args.csv.open("a", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=CSV_FIELDS)
            if new:
                writer.writeheader()
            writer.writerow(row)


if __name__ == "__main__":
    main()
