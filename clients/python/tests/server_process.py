"""Runs the real ``embedwire-server`` binary for a test and stops it afterwards.

The server binds ``127.0.0.1:0`` and logs ``listening on 127.0.0.1:PORT`` on stderr;
stderr goes to a file (not a pipe, which a chatty server could fill and block on) that
is polled for that line. Readiness is then polled through the gRPC health service.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path
from typing import Sequence

from embedwire import Client

#: The repository root: tests/ -> python/ -> clients/ -> root.
REPO_ROOT = Path(__file__).resolve().parents[3]
SERVER_BINARY = REPO_ROOT / "target" / "release" / "embedwire-server"
_LISTENING = re.compile(r"listening on (\S+:\d+)")


class ServerProcess:
    """One running server.

    Attributes:
        address: ``127.0.0.1:PORT`` it listens on.
        log_path: its stderr, for the failure messages of tests.
    """

    def __init__(self, data_dir: Path, flags: Sequence[str], *, ready_timeout: float = 60.0) -> None:
        if not SERVER_BINARY.exists():
            raise RuntimeError(f"{SERVER_BINARY} is missing: run `cargo build --release -p embedwire-server`")
        data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = data_dir / "server.log"
        self._log = self.log_path.open("wb")
        self._process = subprocess.Popen(
            [str(SERVER_BINARY), "--listen", "127.0.0.1:0", "--data-dir", str(data_dir / "data"), *flags],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._log,
            cwd=REPO_ROOT,
        )
        try:
            self.address = self._wait_for_address(ready_timeout)
            with Client(self.address) as client:
                client.wait_until_ready(ready_timeout)
        except BaseException:
            self.stop()
            raise

    def _wait_for_address(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = _LISTENING.search(self.log_path.read_text(errors="replace"))
            if match:
                return match.group(1)
            if self._process.poll() is not None:
                raise RuntimeError(f"server exited with {self._process.returncode}:\n{self.log()}")
            time.sleep(0.02)
        raise RuntimeError(f"server did not log its address within {timeout}s:\n{self.log()}")

    def log(self) -> str:
        """The server's stderr so far (last 4000 characters)."""
        return self.log_path.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        """Kills the server and waits for it."""
        if self._process.poll() is None:
            self._process.kill()
        self._process.wait(timeout=30)
        self._log.close()
