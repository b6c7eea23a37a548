"""Which web pages may call the server. A browser lets any page send a POST to 127.0.0.1 (it only hides
the answer), and a page whose own name the attacker points at 127.0.0.1 (DNS rebinding) may read the
answers too. So a request that carries `Origin` must come from the server's own origin or one listed
in --allow-origin; without --api-key, `Host` must also be an IP literal, localhost, or a name listed
in --allow-host (a rebound page's Host is the attacker's name; an IP literal cannot be rebound). A
client that is no browser sends no Origin and is unaffected. Both modes (serve.py, and each Ray
replica) apply these rules in app.py's guard (docs/DESIGN.md §browsers).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from codes.common.errors import UserError
from codes.serve.edge.limits import excerpt

LOOPBACK_NAMES = frozenset({"localhost"})
DEFAULT_PORTS = {"http": "80", "https": "443"}
_ORIGIN = re.compile(r"([a-z][a-z0-9+.-]*)://([^/?#@\s]+)")


@dataclass(frozen=True)
class BrowserRules:
    origins: frozenset[str] = frozenset()  # --allow-origin, each as scheme://host[:port] in one spelling
    hosts: frozenset[str] = frozenset()  # --allow-host, names without a port, lower case


def browser_rules(allow_origin: list[str] | None, allow_host: list[str] | None) -> BrowserRules:
    """The flags checked: UserError naming a value that is no origin or no host name."""
    origins = set()
    for value in allow_origin or []:
        origin = _origin(value)
        if origin is None:
            raise UserError(f"--allow-origin {value!r} is not an origin; give scheme://host[:port], e.g. "
                            "http://localhost:3000 (no path)")
        origins.add(origin)
    hosts = set()
    for value in allow_host or []:
        name = host_name(value)
        if not name or "/" in name or any(c.isspace() for c in name):
            raise UserError(f"--allow-host {value!r} is not a host name; give a name such as tts.lan")
        hosts.add(name)
    return BrowserRules(frozenset(origins), frozenset(hosts))


def refusal(headers: dict[bytes, bytes], rules: BrowserRules, keyed: bool) -> tuple[str, str] | None:
    """(code, message) of a 403 for a request a web page may not make, or None."""
    host = headers.get(b"host", b"").decode("latin-1")
    origin = headers.get(b"origin")
    if origin is not None:
        shown = origin.decode("latin-1")
        normal = _origin(shown)
        if normal is None or (normal not in rules.origins and not _same_origin(normal, host)):
            return ("origin_not_allowed", f"requests from the web page at {excerpt(shown)} are refused; start the "
                                          "server with --allow-origin and that origin to let its pages call it")
    if not keyed and host:
        name = host_name(host)
        if not (_ip_literal(name) or name in LOOPBACK_NAMES or name in rules.hosts):
            return ("host_not_allowed", f"Host {excerpt(host)} is not a name of this server (a web page may have "
                                        "pointed its own name here); start the server with --allow-host and that "
                                        "name, or with --api-key")
    return None


def host_name(host: str) -> str:
    """The name in a Host value, without its port, lower case: "[::1]:8000" -> "::1", "Tts.LAN.:80" -> "tts.lan"."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:host.find("]")] if "]" in host else host
    if host.count(":") == 1:
        host = host.split(":")[0]
    return host.rstrip(".")


def _origin(value: str) -> str | None:
    """scheme://host[:port] in one spelling (lower case, no default port, no trailing dot or slash), or
    None for what is no origin. "null" (a sandboxed page, a file) stays "null"."""
    value = value.strip().lower().rstrip("/")
    if value == "null":
        return value
    found = _ORIGIN.fullmatch(value)
    if found is None:
        return None
    return f"{found[1]}://{_authority(found[2], found[1])}"


def _authority(host: str, scheme: str) -> str:
    name = host_name(host)
    port = host.rsplit(":", 1)[1] if host.count(":") == 1 or (host.startswith("[") and "]:" in host) else ""
    shown = f"[{name}]" if ":" in name else name
    return shown if not port or port == DEFAULT_PORTS.get(scheme) else f"{shown}:{port}"


def _same_origin(origin: str, host: str) -> bool:
    """The page was served by this server: its origin names the host and port the request was sent to
    (the scheme is not compared: behind a TLS proxy the page is https and the request reaches us as http)."""
    if origin == "null" or not host:
        return False
    scheme, authority = origin.split("://", 1)
    return authority == _authority(host.strip().lower(), scheme)


def _ip_literal(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True
