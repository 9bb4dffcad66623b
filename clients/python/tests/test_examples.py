"""The Go and Node example clients (clients/examples) build from proto/ and embed
against a real server. The first run installs their toolchain pieces (Go plugins, npm
packages) into the cache, which takes a minute; later runs take seconds."""

from __future__ import annotations

import subprocess

from server_process import REPO_ROOT, ServerProcess

SCRIPT = REPO_ROOT / "clients" / "examples" / "run-examples.sh"


def test_go_and_node_examples_print_the_dimension(pseudo_server: ServerProcess) -> None:
    result = subprocess.run(
        ["bash", str(SCRIPT), pseudo_server.address],
        capture_output=True,
        text=True,
        timeout=900,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, f"run-examples.sh failed:\n{result.stderr[-4000:]}"
    lines = result.stdout.splitlines()
    assert lines == ["go: 384", "node: 384"], f"stdout {lines}\nstderr:\n{result.stderr[-4000:]}"
