"""Client settings that are checked without a server."""

from __future__ import annotations

import pytest

from embedwire._config import build_config


def config(addresses: object, **overrides: object):  # type: ignore[no-untyped-def]
    args: dict[str, object] = dict(
        timeout=5.0, api_key=None, metadata=(), root_certificates=None, tls=None, retry=None, channel_options_=()
    )
    args.update(overrides)
    return build_config(addresses, **args)  # type: ignore[arg-type]


def test_addresses_schemes_and_lists() -> None:
    parsed = config(["http://a:1", "https://b:2/", "c:3,d:4"]).addresses
    assert [(a.target, a.tls) for a in parsed] == [("a:1", False), ("b:2", True), ("c:3", False), ("d:4", False)]
    assert [a.tls for a in config("c:3", root_certificates=b"PEM").addresses] == [True]
    with pytest.raises(ValueError, match="no port"):
        config("localhost")
    with pytest.raises(ValueError, match="no server address"):
        config([])


def test_api_key_becomes_a_bearer_header() -> None:
    assert config("a:1", api_key="k3y", metadata=[("X-Team", "t")]).metadata == (
        ("x-team", "t"),
        ("authorization", "Bearer k3y"),
    )
    with pytest.raises(ValueError, match="api_key"):
        config("a:1", api_key="k", metadata=[("Authorization", "Bearer x")])
