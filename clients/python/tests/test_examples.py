"""The Go and Node example clients (clients/examples) build from proto/, embed and
rerank against a real server with the real model. The first run installs their
toolchain pieces (Go plugins, npm packages) into the cache, which takes a minute; later
runs take seconds."""

from __future__ import annotations

import subprocess

from embedwire import Client
from server_process import REPO_ROOT, ServerProcess

SCRIPT = REPO_ROOT / "clients" / "examples" / "run-examples.sh"
#: The examples rerank three texts against "How do I bake bread at home?"; only text 1
#: ("Knead the dough, ...") is about it.
RELEVANT_TEXT = 1


def test_go_and_node_examples_embed_and_rerank(onnx_server: ServerProcess) -> None:
    with Client(onnx_server.address) as client:
        scorer = client.info().rerank_scorer
    assert scorer.startswith("bi-encoder:"), scorer
    result = subprocess.run(
        ["bash", str(SCRIPT), onnx_server.address],
        capture_output=True,
        text=True,
        timeout=900,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, f"run-examples.sh failed:\n{result.stderr[-4000:]}"
    lines = result.stdout.splitlines()
    assert lines == [
        "go: 384",
        f"go rerank: best={RELEVANT_TEXT} scorer={scorer}",
        "node: 384",
        f"node rerank: best={RELEVANT_TEXT} scorer={scorer}",
    ], f"stdout {lines}\nstderr:\n{result.stderr[-4000:]}"
