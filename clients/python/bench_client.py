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

CSV_FIELDS = [
    "client",
    "texts",
    "batch_size",
    "concurrency",
    "wall_s",
    "vectors_per_s",
    "cpu_s",
    "cpu_us_per_vector",
]


def cpu_seconds() -> float:
    """User + system CPU of this process, all threads."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def short_texts(n: int) -> list[str]:
    """n distinct short texts (a handful of tokens each)."""
    return [f"short text number {i} about topic {i % 97}" for i in range(n)]


def run_sync(address: str, texts: list[str], batch_size: int, concurrency: int) -> tuple[float, float]:
    with Client(address, timeout=120) as client:
        client.embed_many(texts[: batch_size * concurrency], batch_size=batch_size, max_concurrent_requests=concurrency)
        wall, cpu = time.perf_counter(), cpu_seconds()
        vectors = client.embed_many(texts, batch_size=batch_size, max_concurrent_requests=concurrency)
        wall, cpu = time.perf_counter() - wall, cpu_seconds() - cpu
    assert vectors.shape[0] == len(texts)
    return wall, cpu


def run_async(address: str, texts: list[str], batch_size: int, concurrency: int) -> tuple[float, float]:
    async def run() -> tuple[float, float]:
        async with AsyncClient(address, timeout=120) as client:
            warm = texts[: batch_size * concurrency]
            await client.embed_many(warm, batch_size=batch_size, max_concurrent_requests=concurrency)
            wall, cpu = time.perf_counter(), cpu_seconds()
            vectors = await client.embed_many(texts, batch_size=batch_size, max_concurrent_requests=concurrency)
            wall, cpu = time.perf_counter() - wall, cpu_seconds() - cpu
        assert vectors.shape[0] == len(texts)
        return wall, cpu

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
    wall, cpu = runner(args.address, texts, args.batch_size, args.concurrency)
    name = "python-async" if args.use_async else "python"
    row = {
        "client": name,
        "texts": args.texts,
        "batch_size": args.batch_size,
        "concurrency": args.concurrency,
        "wall_s": round(wall, 4),
        "vectors_per_s": round(args.texts / wall, 1),
        "cpu_s": round(cpu, 4),
        "cpu_us_per_vector": round(cpu / args.texts * 1e6, 3),
    }
    print(
        f"{name}: {args.texts} texts in {wall:.2f} s ({row['vectors_per_s']:.0f} vectors/s), "
        f"client CPU {cpu:.2f} s = {row['cpu_us_per_vector']:.2f} us/vector "
        f"(batch {args.batch_size}, concurrency {args.concurrency})"
    )
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
