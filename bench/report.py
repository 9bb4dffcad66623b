"""Writes bench/results/REPORT.md and its PNG plots from the CSV and JSON files the
benchmark programs leave in the results directory (bench/run.sh runs them all, then
this script with the venv Python):

- embed_bench_summary.csv (embed-bench: the in-process ONNX Runtime ceiling);
- latency/latency_bench_summary.csv (embedwire-bench latency: one caller's time, part by part);
- precision/precision_bench_summary.csv (embedwire-bench precision: int8 against fp32);
- wire/wire_bench.csv, wire/wire_summary.csv (embedwire-bench wire: gRPC dtypes against
  HTTP JSON, base64 and octet-stream);
- gateway/gateway_runs.csv, gateway/gateway_summary.csv, gateway/rss_*.csv
  (embedwire-bench gateway: embedwire against the Python baseline; HTTP against gRPC search);
- ghz/ghz_summary.csv (embedwire-bench ghz);
- index/index_bench.csv (embedwire-bench index at 100k);
- rerank/rerank_bench_summary.csv, rerank/rerank_bench_sweep.csv,
  rerank/rerank_bench_in_process.csv (embedwire-bench rerank: Rerank pairs/s against the
  cross-encoder's in-process ceiling, and the bi-encoder fallback);
- run_info.csv (bench/run.sh: each step's time and the machine's load around it).

A missing input leaves its section saying so; the report never invents a figure.
Every target is shown with PASS or MISS as its program judged it, and a MISS with
the context needed to see why (the CPU each side got, the machine's other load).
"""

import argparse
import csv
import datetime
import os
import platform
import subprocess

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read_csv(path):
    if not os.path.isfile(path):
        return None
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def num(value, default=None):
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


def fmt(value, digits=1):
    return "-" if value is None else f"{value:,.{digits}f}"


def table(headers, rows):
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


class Report:
    def __init__(self, results, plots):
        self.results, self.plots = results, plots
        self.parts = []
        self.targets = []  # (source, figure, measured, target, result, why)
        os.makedirs(plots, exist_ok=True)

    def add(self, text):
        self.parts.append(text)

    def path(self, *parts):
        return os.path.join(self.results, *parts)

    def save(self, fig, name):
        fig.tight_layout()
        fig.savefig(os.path.join(self.plots, name), dpi=110)
        plt.close(fig)
        rel = os.path.relpath(os.path.join(self.plots, name), self.results)
        return f"![{name}]({rel})\n"


# --------------------------------------------------------------------------- context


def machine():
    cpu = "unknown CPU"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal"):
                mem = f", {int(line.split()[1]) / 1024 / 1024:.0f} GiB RAM"
    except OSError:
        pass
    return f"{os.cpu_count()} cores ({cpu}){mem}, {platform.system()} {platform.release()}"


def commit():
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True)
        return out.stdout.strip() + (" (with uncommitted changes)" if dirty.stdout.strip() else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def header(rep, quick):
    info = read_csv(rep.path("run_info.csv")) or []
    total = sum(num(r["seconds"], 0) for r in info)
    rep.add("# embedwire benchmark report\n\n")
    rep.add(
        f"Generated {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')} by `bench/run.sh{' --quick' if quick else ''}` "
        f"on {machine()}, commit {commit()}.\n"
    )
    if quick:
        rep.add("\n**Quick mode**: every piece ran for a few seconds on small inputs. The figures are rough and "
                "say nothing about the targets; run `bench/run.sh` for real ones.\n")
    rep.add("\nAll figures in one table come from the same run on the same machine; targets are ratios "
            "measured in that run, because this machine is small and shared. Load average is the machine's "
            "run queue (`/proc/loadavg`) before and after each step: above the core count, something else "
            "was competing for the CPU.\n\n")
    if info:
        rows = [[r["step"], fmt(num(r["seconds"]), 0) + " s", r["load_before"], r["load_after"], r["status"]] for r in info]
        rows.append(["**total**", fmt(total, 0) + " s", "", "", ""])
        rep.add(table(["step", "time", "load avg before", "load avg after", "exit"], rows))
    rep.add("\n")


# --------------------------------------------------------------------------- targets


def index_rows(rep):
    """The index scenario's CSV of this run: run.sh keeps it in index/, apart from the
    index_bench.csv of a separate 1M run."""
    return read_csv(rep.path("index", "index_bench.csv")) or read_csv(rep.path("index_bench.csv"))


def collect_targets(rep):
    """Every judged row of the programs' summary CSVs."""
    sources = [
        ("embed-bench", rep.path("embed_bench_summary.csv")),
        ("latency-bench", rep.path("latency", "latency_bench_summary.csv")),
        ("precision-bench", rep.path("precision", "precision_bench_summary.csv")),
        ("wire-bench", rep.path("wire", "wire_summary.csv")),
        ("gateway-bench", rep.path("gateway", "gateway_summary.csv")),
        ("rerank-bench", rep.path("rerank", "rerank_bench_summary.csv")),
    ]
    for source, path in sources:
        for row in read_csv(path) or []:
            if row.get("result") in ("PASS", "MISS"):
                limit = f"{row['comparison']} {num(row['limit']):g}"
                rep.targets.append([source, row["figure"], f"{num(row['measured']):.3g} {row['unit']}", limit, row["result"]])
    for row in index_rows(rep) or []:
        if row.get("result") in ("PASS", "MISS"):
            rep.targets.append(
                ["index-bench", f"{row['figure']} ({row['size']})", f"{num(row['value']):.4g} {row['unit']}", row["target"], row["result"]]
            )


def why_missed(rep, source, figure):
    """The context that explains a MISS, from the figures of the same run."""
    gw = {r["figure"]: r for r in read_csv(rep.path("gateway", "gateway_summary.csv")) or []}
    runs = read_csv(rep.path("gateway", "gateway_runs.csv")) or []
    info = {r["step"]: r for r in read_csv(rep.path("run_info.csv")) or []}
    load = lambda step: f"load average {info[step]['load_before']} -> {info[step]['load_after']}" if step in info else ""
    if source == "gateway-bench" and "embedwire / baseline" in figure:
        head = {r["target"]: r for r in runs if r["run"] == "headline"}
        e, b = head.get("embedwire"), head.get("baseline")
        cpu = ""
        if e and b:
            cpu = (f"server CPU during the run: embedwire {num(e['server_cores']):.2f} cores, baseline "
                   f"{num(b['server_cores']):.2f} cores; ")
        if "RSS" in figure:
            return (cpu + rss_story(rep, "embedwire") + " " + rss_story(rep, "baseline") + " The step early in "
                    "the ingest is ONNX Runtime's memory arena growing to the size of the bulk batches (both "
                    "gateways run ONNX Runtime with its arena on); the growth after it is the documents. "
                    + load("gateway-bench"))
        return cpu + load("gateway-bench")
    if source == "gateway-bench" and "gRPC" in figure:
        return ("both sides run the same model on the same index; the difference is the HTTP/1.1 + JSON "
                "path against HTTP/2 + protobuf. " + load("gateway-bench"))
    if source == "wire-bench":
        wire = {r["variant"]: r for r in read_csv(rep.path("wire", "wire_bench.csv")) or []}
        g, j = wire.get("grpc_float32"), wire.get("http_json_float")
        if g and j:
            return (f"server {num(g['server_cores']):.2f} / bench {num(g['bench_cores']):.2f} cores under gRPC, "
                    f"{num(j['server_cores']):.2f} / {num(j['bench_cores']):.2f} under JSON; " + load("wire-bench"))
    if source == "embed-bench":
        summary = {r["figure"]: r for r in read_csv(rep.path("embed_bench_summary.csv")) or []}
        cpu = summary.get("throughput CPU server / bench")
        ceiling = summary.get("in-process ceiling (best)")
        text = ""
        if cpu and ceiling:
            text = (f"the ceiling ({num(ceiling['measured']):.0f}/s) and the server run are measured one after the "
                    f"other, and the server got {num(cpu['measured']):.2f} of the 2 cores in its run; ")
        return text + load("embed-bench") + " (other processes competing shift one side more than the other)"
    if source == "index-bench":
        return load("index-bench")
    if source == "rerank-bench":
        best = rerank_best(rep, "cross-encoder")
        if best:
            return (f"at c={best['concurrency']}: server {num(best['server_cores']):.2f} / bench "
                    f"{num(best['bench_cores']):.2f} / other {num(best['other_cores']):.2f} cores, model busy "
                    f"{num(best['model_busy']):.2f}, {num(best['inputs_per_batch']):.1f} pairs per batch, "
                    f"{best['refused']} refused; " + load("rerank-bench"))
        return load("rerank-bench")
    return ""


def rss_story(rep, target):
    """How a gateway's RSS grew: when healthy, after ingest, at its peak."""
    rss = read_csv(rep.path("gateway", f"rss_{target}.csv")) or []
    if not rss:
        return ""
    first = num(rss[0]["rss_mib"])
    ingest = [num(r["rss_mib"]) for r in rss if r["phase"] == "ingest"]
    summary = {r["figure"]: r for r in read_csv(rep.path("gateway", "gateway_summary.csv")) or []}
    docs = num(summary.get("setup documents", {}).get("measured"), 0)
    peak = max(num(r["rss_mib"]) for r in rss)
    text = f"{target}: {first:.0f} MiB when healthy"
    if ingest:
        early = ingest[min(len(ingest) - 1, max(1, len(ingest) // 20))]
        text += (f", {early:.0f} MiB early in the ingest, {ingest[-1]:.0f} MiB after it "
                 f"({(ingest[-1] - early) * 1024 / max(docs, 1):.1f} KiB per document after that)")
    return text + f", peak {peak:.0f} MiB."


def targets_section(rep):
    rep.add("## Targets\n\n")
    if not rep.targets:
        rep.add("No program wrote a judged figure (none ran?).\n\n")
        return
    rows = []
    for source, figure, measured, limit, result in rep.targets:
        why = why_missed(rep, source, figure) if result == "MISS" else ""
        rows.append([source, figure, measured, limit, f"**{result}**" if result == "MISS" else result, why])
    passed = sum(1 for t in rep.targets if t[4] == "PASS")
    rep.add(f"{passed} of {len(rep.targets)} targets met.\n\n")
    rep.add(table(["bench", "figure", "measured", "target", "result", "context of a MISS"], rows))
    rep.add("\n")


# --------------------------------------------------------------------------- sections


def embed_section(rep):
    rep.add("## Embed throughput against the in-process ceiling (embed-bench)\n\n")
    rows = read_csv(rep.path("embed_bench_summary.csv"))
    if not rows:
        rep.add("embed-bench did not run.\n\n")
        return
    rep.add("The same model file run by ONNX Runtime inside the bench process (the ceiling), then the server "
            "binary under 32 concurrent one-sentence gRPC clients.\n\n")
    rep.add(table(["figure", "measured", "target", "result"],
                  [[r["figure"], f"{num(r['measured']):,.3g} {r['unit']}",
                    f"{r['comparison']} {num(r['limit']):g}" if r["comparison"] else "", r["result"]] for r in rows]))
    rep.add("\n")


def wire_section(rep):
    rep.add("## JSON against binary: the same embeddings, every encoding (wire-bench)\n\n")
    rows = read_csv(rep.path("wire", "wire_bench.csv"))
    summary = {r["figure"]: r for r in read_csv(rep.path("wire", "wire_summary.csv")) or []}
    if not rows:
        rep.add("wire-bench did not run.\n\n")
        return
    texts = int(num(summary.get("setup texts per call", {}).get("measured"), 0))
    dim = int(num(summary.get("setup dim", {}).get("measured"), 384))
    backend = next((f.split()[-1] for f in summary if f.startswith("setup backend")), "?")
    conc = rows[0]["concurrency"]
    rep.add(f"One server ({backend} backend), {texts} texts per call, {conc} workers with one connection each "
            "(HTTP/1.1 keep-alive or HTTP/2), every answer decoded into vectors inside the timed call, the "
            "variants alternating in rounds. Bytes are counted on the client's sockets (headers and framing "
            "included). Server encode: the server's own encoding code timed in-process on the same vectors. "
            "Client decode: the captured answer decoded in Rust, and in Python (`bench/decode_bench.py`: "
            "json.loads against numpy.frombuffer). Server CPU per call: from /proc with one client.\n\n")
    out = []
    for r in rows:
        bpr = num(r["bytes_per_response"])
        out.append([
            r["description"], fmt(num(r["rps"])),
            f"{fmt(num(r['p50_ms']))} / {fmt(num(r['p95_ms']))} / {fmt(num(r['p99_ms']))}",
            fmt(bpr, 0), fmt(bpr / texts if texts else None, 1),
            fmt(num(r["server_encode_ms"]), 3), fmt(num(r["rust_decode_ms"]), 3), fmt(num(r["python_decode_ms"]), 3),
            fmt(num(r["server_cpu_ms_per_call_c1"]), 2), r["errors"],
        ])
    rep.add(table(["encoding", "req/s", "p50 / p95 / p99 ms", "bytes/response", "bytes/embedding",
                   "server encode ms", "decode Rust ms", "decode Python ms", "server CPU ms/call", "errors"], out))
    rep.add(f"\nA {dim}-dimension float32 vector is {dim * 4} bytes raw.\n\n")

    names = [r["variant"] for r in rows]
    fig, ax = plt.subplots(figsize=(9, 4))
    per = [num(r["bytes_per_response"]) / max(texts, 1) for r in rows]
    bars = ax.bar(names, per, color=["#2a7" if n.startswith("grpc") else "#c63" for n in names])
    ax.bar_label(bars, fmt="%.0f", fontsize=8)
    ax.set_ylabel("bytes on the wire per embedding")
    ax.set_title(f"Bytes per embedding by encoding ({texts} texts/call, dim {dim})")
    ax.tick_params(axis="x", rotation=35)
    rep.add(rep.save(fig, "wire_bytes_per_embedding.png"))

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4))
    bars = a1.bar(names, [num(r["rps"]) for r in rows], color=["#2a7" if n.startswith("grpc") else "#c63" for n in names])
    a1.bar_label(bars, fmt="%.0f", fontsize=8)
    a1.set_ylabel("requests/s")
    a1.set_title(f"Throughput at concurrency {conc}")
    a1.tick_params(axis="x", rotation=35)
    x = range(len(rows))
    for i, (p, color) in enumerate([("p50_ms", "#48c"), ("p95_ms", "#e93"), ("p99_ms", "#c33")]):
        a2.bar([k + (i - 1) * 0.27 for k in x], [num(r[p]) for r in rows], width=0.27, label=p[:3], color=color)
    a2.set_xticks(list(x))
    a2.set_xticklabels(names, rotation=35, ha="right")
    a2.set_ylabel("ms")
    a2.set_title("Latency percentiles")
    a2.legend()
    rep.add(rep.save(fig, "wire_throughput_latency.png"))

    # Issue 4: one 256-text call.
    one = {r["variant"]: r for r in rows}
    picks = [("http_json_float", "HTTP JSON floats"), ("http_json_base64", "HTTP base64"),
             ("http_octet_stream", "HTTP octet-stream"), ("grpc_float32", "gRPC bytes (FLOAT32)")]
    out = []
    for name, label in picks:
        r = one.get(name)
        if r:
            out.append([label, fmt(num(r["one_call_wire_bytes"]), 0), fmt(num(r["server_encode_ms"]), 3),
                        fmt(num(r["python_decode_ms"]), 3), fmt(num(r["rust_decode_ms"]), 3)])
    if out:
        rep.add(f"\n### One {texts}-text embed call\n\n")
        rep.add(table(["answer", "bytes on the wire", "server encode ms", "client decode Python ms",
                       "client decode Rust ms"], out))
        rep.add("\nPython decode: `json.loads` + `numpy.array` for JSON floats, `json.loads` + base64 + "
                "`numpy.frombuffer` for base64, `numpy.frombuffer` for octet-stream, `ParseFromString` + "
                "`numpy.frombuffer` for gRPC; every result checked equal to the gRPC FLOAT32 vectors.\n\n")


def gateway_section(rep):
    rep.add("## The /v1 contract under the existing gateways' load pattern (gateway-bench)\n\n")
    runs = read_csv(rep.path("gateway", "gateway_runs.csv"))
    summary = {r["figure"]: r for r in read_csv(rep.path("gateway", "gateway_summary.csv")) or []}
    if not runs:
        rep.add("gateway-bench did not run.\n\n")
        return
    docs = int(num(summary.get("setup documents", {}).get("measured"), 0))
    rep.add(f"Each gateway alone on the machine: cold start (spawn to the first `/healthz` saying the model is "
            f"loaded), {docs:,} Python docstring paragraphs through `POST /v1/ingest` followed to completed, "
            "five warm-up searches `{\"query\": \"warmup\", \"top_k\": 3}`, then N workers, each on its own "
            "keep-alive HTTP/1.1 connection, sending `{\"query\": \"example query about RAG gateways\", "
            "\"top_k\": 5}`; the server's RSS sampled from /proc/PID/status every 100 ms. The baseline is "
            "`bench/baseline/app.py`: FastAPI + uvicorn + onnxruntime (Python) on the same model file with "
            "the same thread count, a numpy index, ingestion one job at a time. Every call of the headline "
            "run is in `gateway/requests_<gateway>.csv`.\n\n")
    by = {}
    for r in runs:
        by.setdefault(r["target"], []).append(r)
    out = []
    for target, rs in by.items():
        head = next((r for r in rs if r["run"] == "headline"), None)
        cold = next((r for r in rs if r["run"] == "cold_start"), None)
        ingest = next((r for r in rs if r["run"] == "ingest"), None)
        if head:
            out.append([target, head["concurrency"], head["requests"], head["errors"], fmt(num(head["rps"])),
                        f"{fmt(num(head['p50_ms']))} / {fmt(num(head['p95_ms']))} / {fmt(num(head['p99_ms']))}",
                        fmt(num(head["rss_peak_mib"]), 0), fmt(num(cold["seconds"]) if cold else None, 2),
                        fmt(num(ingest["rps"]) if ingest else None),
                        f"{fmt(num(head['server_cores']), 2)} / {fmt(num(head['bench_cores']), 2)}"])
    rep.add(table(["gateway", "concurrency", "requests", "errors", "req/s", "p50 / p95 / p99 ms", "RSS peak MiB",
                   "cold start s", "ingest docs/s", "CPU server / bench"], out))
    rep.add("\n")

    fig, ax = plt.subplots(figsize=(7, 4))
    for target, rs in by.items():
        pts = sorted((int(r["concurrency"]), num(r["rps"])) for r in rs if r["run"] == "sweep")
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=target)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("concurrent workers")
    ax.set_ylabel("requests/s")
    ax.set_title("/v1/search throughput against concurrency")
    ax.legend()
    rep.add(rep.save(fig, "gateway_throughput_vs_concurrency.png"))

    fig, ax = plt.subplots(figsize=(7, 4))
    heads = [(t, next(r for r in rs if r["run"] == "headline")) for t, rs in by.items() if any(r["run"] == "headline" for r in rs)]
    for i, (p, color) in enumerate([("p50_ms", "#48c"), ("p95_ms", "#e93"), ("p99_ms", "#c33")]):
        bars = ax.bar([k + (i - 1) * 0.27 for k in range(len(heads))], [num(h[p]) for _, h in heads], width=0.27,
                      label=p[:3], color=color)
        ax.bar_label(bars, fmt="%.1f", fontsize=8)
    ax.set_xticks(range(len(heads)))
    ax.set_xticklabels([t for t, _ in heads])
    ax.set_ylabel("ms")
    ax.set_title("/v1/search latency percentiles, headline run")
    ax.legend()
    rep.add(rep.save(fig, "gateway_latency_percentiles.png"))

    fig, ax = plt.subplots(figsize=(9, 4))
    for target in by:
        rss = read_csv(rep.path("gateway", f"rss_{target}.csv")) or []
        if rss:
            ax.plot([num(r["t_s"]) for r in rss], [num(r["rss_mib"]) for r in rss], label=target)
    ax.set_xlabel("seconds since healthy (ingest, then the search runs)")
    ax.set_ylabel("RSS MiB")
    ax.set_title("Server RSS over time")
    ax.legend()
    rep.add(rep.save(fig, "gateway_rss_over_time.png"))

    compare = {r["run"]: r for r in by.get("embedwire", []) if r["run"].startswith("compare")}
    if compare:
        rep.add("\n### /v1/search through the in-process HTTP layer against the gRPC Search rpc\n\n"
                "The same embedwire server and index, real query sentences in the same rotation, the same "
                "concurrency, one connection per worker on both sides, alternating in rounds.\n\n")
        out = []
        for run, label in [("compare_http", "HTTP /v1/search"), ("compare_grpc", "gRPC Search")]:
            r = compare.get(run)
            if r:
                out.append([label, r["concurrency"], r["requests"], r["errors"], fmt(num(r["rps"])),
                            f"{fmt(num(r['p50_ms']))} / {fmt(num(r['p95_ms']))} / {fmt(num(r['p99_ms']))}",
                            fmt(num(r["server_cores"]), 2)])
        rep.add(table(["path", "concurrency", "requests", "errors", "req/s", "p50 / p95 / p99 ms", "server cores"], out))
        rep.add("\n")


def ghz_section(rep):
    rep.add("## gRPC under ghz (ghz-suite)\n\n")
    rows = read_csv(rep.path("ghz", "ghz_summary.csv"))
    if not rows:
        rep.add("ghz-suite did not run.\n\n")
        return
    rep.add("The configs checked in under `bench/ghz/` (real query sentences as data), each at several "
            "concurrencies (ghz workers, one connection each), a few seconds per run; calls in flight at "
            "the end are waited for. ghz's JSON summaries are in `ghz/<backend>/`. On this 2-core machine "
            "ghz itself uses much of the CPU the server would otherwise get (`server` column: the server's "
            "share), so the pseudo-backend figures are a floor of the server's transport throughput.\n\n")
    for backend in dict.fromkeys(r["backend"] for r in rows):
        rs = [r for r in rows if r["backend"] == backend]
        rep.add(f"**{backend} backend**\n\n")
        rep.add(table(["config", "concurrency", "calls/s", "texts/s", "p50 / p95 / p99 ms", "errors", "server cores"],
                      [[r["config"], r["concurrency"], fmt(num(r["ok_rps"])), fmt(num(r["texts_per_s"]), 0),
                        f"{fmt(num(r['p50_ms']), 2)} / {fmt(num(r['p95_ms']), 2)} / {fmt(num(r['p99_ms']), 2)}",
                        r["errors"], fmt(num(r["server_cores"]), 2)] for r in rs]))
        rep.add("\n")
    backends = list(dict.fromkeys(r["backend"] for r in rows))
    fig, axes = plt.subplots(1, len(backends), figsize=(6 * len(backends), 4), squeeze=False)
    for ax, backend in zip(axes[0], backends):
        for config in dict.fromkeys(r["config"] for r in rows):
            pts = sorted((int(r["concurrency"]), num(r["texts_per_s"])) for r in rows
                         if r["backend"] == backend and r["config"] == config)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=config)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("concurrency")
        ax.set_ylabel("texts/s (searches/s for search)")
        ax.set_title(f"ghz, {backend} backend")
        ax.legend(fontsize=8)
    rep.add(rep.save(fig, "ghz_throughput_vs_concurrency.png"))
    rep.add("\n")


def index_section(rep):
    rep.add("## Vector index (index-bench)\n\n")
    rows = index_rows(rep)
    if not rows:
        rep.add("index-bench did not run.\n\n")
        return
    rep.add("Synthetic clustered vectors, dim 384; the 1M size is a separate command (its HNSW build alone "
            "takes 15+ minutes): `./target/release/embedwire-bench index --sizes 1000000`.\n\n")
    rep.add(table(["figure", "size", "value", "target", "result"],
                  [[r["figure"], r["size"], f"{r['value']} {r['unit']}", r["target"], r["result"]]
                   for r in rows if not r["figure"].startswith("setup")]))
    rep.add("\n")


def rerank_best(rep, scorer):
    """The sweep point with the most pairs/s of `scorer`."""
    rows = [r for r in read_csv(rep.path("rerank", "rerank_bench_sweep.csv")) or [] if r["scorer"] == scorer]
    return max(rows, key=lambda r: num(r["pairs_per_s"], 0)) if rows else None


def rerank_section(rep):
    rep.add("## Rerank throughput against the in-process ceiling (rerank-bench)\n\n")
    sweep = read_csv(rep.path("rerank", "rerank_bench_sweep.csv"))
    summary = read_csv(rep.path("rerank", "rerank_bench_summary.csv")) or []
    ceiling = read_csv(rep.path("rerank", "rerank_bench_in_process.csv")) or []
    if not sweep:
        rep.add("rerank-bench did not run.\n\n")
        return
    rep.add("Rerank calls of one query and 20 passages of ~60 tokens (Python docstrings, varied between calls), "
            "closed-loop gRPC clients at each concurrency, against a server with `--rerank-model-dir` (the "
            "full-size MiniLM cross-encoder that `scripts/model/make_minilm_cross_encoder.py` builds) and against "
            "one without (the bi-encoder fallback: the embedding model's cosine). The ceiling is the same "
            "cross-encoder run in-process by the server crate's code and ONNX settings, pairs tokenized "
            "beforehand. Refused calls (RESOURCE_EXHAUSTED, admission by expected queue time) are counted; a "
            "refused client backs off 5 ms doubling to 200 ms. `rerank/rerank_bench.md` has the full tables.\n\n")
    rep.add(table(["figure", "measured", "target", "result"],
                  [[r["figure"], f"{num(r['measured']):,.4g} {r['unit']}",
                    f"{r['comparison']} {num(r['limit']):g}" if r["comparison"] else "", r["result"]] for r in summary]))
    rep.add("\n")
    rep.add(table(["scorer", "c", "pairs/s", "calls", "refused", "errors", "p50 / p99 ms", "server / bench / other cores",
                   "model busy", "inputs/batch"],
                  [[r["scorer"], r["concurrency"], fmt(num(r["pairs_per_s"])), r["calls_ok"], r["refused"], r["errors"],
                    f"{fmt(num(r['p50_ms']))} / {fmt(num(r['p99_ms']))}",
                    f"{fmt(num(r['server_cores']), 2)} / {fmt(num(r['bench_cores']), 2)} / {fmt(num(r['other_cores']), 2)}",
                    fmt(num(r["model_busy"]), 2), fmt(num(r["inputs_per_batch"]))] for r in sweep]))
    rep.add("\n")

    fig, ax = plt.subplots(figsize=(7, 4))
    for scorer, color in [("cross-encoder", "#2a7"), ("bi-encoder", "#48c")]:
        pts = sorted((int(r["concurrency"]), num(r["pairs_per_s"])) for r in sweep if r["scorer"] == scorer)
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", color=color, label=f"server, {scorer}")
    if ceiling:
        best = max(ceiling, key=lambda r: num(r["pairs_per_s"], 0))
        rate = num(best["pairs_per_s"])
        ax.axhline(rate, color="#c33", linestyle="--",
                   label=f"in-process ceiling, cross-encoder ({rate:.0f} pairs/s @ batch {best['batch_size']})")
        ax.axhline(0.9 * rate, color="#c33", linestyle=":", label="0.9 x ceiling (target)")
    ax.set_xscale("log", base=2)
    levels = sorted({int(r["concurrency"]) for r in sweep})
    ax.set_xticks(levels, [str(c) for c in levels])
    ax.set_xlabel("concurrent clients (1 query x 20 passages per call)")
    ax.set_ylabel("pairs/s")
    ax.set_ylim(bottom=0)
    ax.set_title("Rerank pairs/s against concurrency")
    ax.legend(fontsize=8)
    rep.add(rep.save(fig, "rerank_pairs_vs_concurrency.png"))
    rep.add("\n")


def rerun_section(rep):
    rep.add("## Rerun\n\n"
            "```\nbench/run.sh            # everything, about 18 minutes on 2 cores; writes this report\n"
            "bench/run.sh --quick    # every piece for a few seconds (what `make test` runs)\n"
            "./target/release/embedwire-bench wire --help   # each scenario has its own flags\n"
            "./target/release/embedwire-bench gateway --help\n./target/release/embedwire-bench ghz --help\n```\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    parser.add_argument("--quick", action="store_true", help="label the report as a quick run")
    args = parser.parse_args()
    rep = Report(args.results, os.path.join(args.results, "plots"))
    collect_targets(rep)
    header(rep, args.quick)
    targets_section(rep)
    embed_section(rep)
    wire_section(rep)
    gateway_section(rep)
    ghz_section(rep)
    index_section(rep)
    rerank_section(rep)
    rerun_section(rep)
    out = os.path.join(args.results, "REPORT.md")
    with open(out, "w") as f:
        f.write("".join(rep.parts))
    print(f"wrote {out} and {len(os.listdir(rep.plots))} plots in {rep.plots}")


if __name__ == "__main__":
    main()
