"""codes.serve.edge.origins: which web pages a request may come from (the server tests send them for real)."""

from __future__ import annotations

import pytest

from codes.common.errors import UserError
from codes.serve.edge.origins import browser_rules, host_name, refusal

RULES = browser_rules(["http://localhost:3000/", "HTTPS://App.Example.com:443"], ["tts.lan", "Box.LAN:8000"])


def code(keyed: bool = False, **headers) -> str | None:
    refused = refusal({name.encode(): value.encode() for name, value in headers.items()}, RULES, keyed)
    return refused and refused[0]


@pytest.mark.parametrize("host, origin", [
    ("127.0.0.1:8000", "http://127.0.0.1:8000"),  # the server's own page
    ("localhost", "http://localhost:80"),  # a default port is no port
    ("tts.lan:8000", "https://tts.lan:8000"),  # behind a TLS proxy the page is https, the request http
    ("127.0.0.1:8000", "http://localhost:3000"),  # allowed, spelled as the flag was spelled otherwise
    ("127.0.0.1:8000", "https://app.example.com"),
])
def test_own_and_allowed_origins_are_answered(host, origin):
    assert code(host=host, origin=origin) is None


@pytest.mark.parametrize("origin", ["http://evil.example", "null", "http://localhost:3001", "https://localhost:3000",
                                    "not an origin"])
def test_other_origins_are_refused_with_or_without_a_key(origin):
    assert code(host="127.0.0.1:8000", origin=origin) == "origin_not_allowed"
    assert code(keyed=True, host="127.0.0.1:8000", origin=origin) == "origin_not_allowed"


@pytest.mark.parametrize("host", ["127.0.0.1:8000", "10.0.0.7", "[::1]:8000", "[2001:db8::1]", "localhost:8000",
                                  "LOCALHOST.", "tts.lan", "box.lan:9000"])
def test_ip_literals_localhost_and_allowed_names_are_answered_without_a_key(host):
    assert code(host=host) is None


@pytest.mark.parametrize("host", ["evil.example:8000", "localhost.evil.example", "2130706433", "tts.lan.evil"])
def test_other_names_are_refused_without_a_key_and_answered_with_one(host):
    assert code(host=host) == "host_not_allowed"
    assert code(host=host, origin=f"http://{host}") == "host_not_allowed"  # a rebound page is its own origin
    assert code(keyed=True, host=host) is None


def test_host_names_and_bad_flags():
    assert [host_name(h) for h in ("[::1]:8000", "Tts.LAN.:80", "::1", "a.b")] == ["::1", "tts.lan", "::1", "a.b"]
    with pytest.raises(UserError, match="--allow-origin 'http://a/b' is not an origin"):
        browser_rules(["http://a/b"], None)
    with pytest.raises(UserError, match="--allow-host 'a b' is not a host name"):
        browser_rules(None, ["a b"])
