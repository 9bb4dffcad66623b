"""The committed stubs under src/embedwire/v1 are what generate.py makes from proto/
today: a proto change without regenerating fails here."""

from __future__ import annotations

import importlib.util
from pathlib import Path

CLIENT_DIR = Path(__file__).resolve().parents[1]


def load_generator():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("embedwire_generate", CLIENT_DIR / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_stubs_match_a_fresh_generation(tmp_path: Path) -> None:
    generator = load_generator()
    generator.generate(tmp_path)
    stale = []
    for relative in generator.generated_files():
        fresh = (tmp_path / relative).read_bytes()
        committed = CLIENT_DIR / "src" / relative
        if not committed.exists() or committed.read_bytes() != fresh:
            stale.append(relative)
    assert not stale, f"stale stubs {stale}: run `python clients/python/generate.py`"
    generated = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.py*")}
    assert generated == set(generator.generated_files()), "generate.py's file list is out of date"
