"""Fixtures that start real embedwire servers (see server_process.py).

``pseudo_server`` (fast deterministic fake model, shared by the whole session) serves
the transport tests; ``onnx_server`` (the real all-MiniLM-L6-v2) starts once, only for
the tests that check real vectors; ``start_server`` starts one with custom flags.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable, Iterator

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from server_process import ServerProcess  # noqa: E402


@pytest.fixture(scope="session")
def pseudo_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A pseudo-backend server for the whole session."""
    server = ServerProcess(tmp_path_factory.mktemp("pseudo"), ["--backend", "pseudo"])
    yield server
    server.stop()


@pytest.fixture(scope="session")
def onnx_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server with the real model (the default backend)."""
    server = ServerProcess(tmp_path_factory.mktemp("onnx"), ["--backend", "onnx"])
    yield server
    server.stop()


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[Callable[..., ServerProcess]]:
    """Starts servers with the given flags; all are stopped after the test."""
    started: list[ServerProcess] = []

    def start(*flags: str) -> ServerProcess:
        server = ServerProcess(tmp_path / f"server{len(started)}", list(flags))
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
