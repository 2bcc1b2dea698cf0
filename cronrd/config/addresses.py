"""Peer addresses: ``"HOST:PORT"`` / ``"[IPV6]:PORT"`` <-> (host, port), and loopback."""

from __future__ import annotations

import ipaddress

from .model import Address


def parse_address(value: object) -> Address:
    """``"host:port"`` or ``"[v6addr]:port"`` -> (host, port); ValueError says why."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"must be a string \"HOST:PORT\" such as \"10.0.0.1:7000\" "
                         f"(got {value!r})")
    text = value.strip()
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or not rest.startswith(":"):
            raise ValueError(f"{value!r} is not \"[IPV6]:PORT\", e.g. \"[::1]:7000\"")
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"{host!r} in {value!r} is not an IPv6 address") from None
        port_text = rest[1:]
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            raise ValueError(f"{value!r} has no port; write \"HOST:PORT\", e.g. "
                             f"\"{text}:7000\"")
        if ":" in host:
            raise ValueError(f"{value!r}: write an IPv6 address in brackets, e.g. "
                             f"\"[{host}]:{port_text}\"")
        if not host:
            raise ValueError(f"{value!r} has no host; write \"HOST:PORT\" (use 0.0.0.0 "
                             "or [::] to listen on every interface)")
        if any(c.isspace() or c in "/@[]" for c in host):
            raise ValueError(f"{host!r} in {value!r} is not a host name or IP address")
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ValueError(f"port {port_text!r} in {value!r} must be a number from 1 to 65535")
    return host, int(port_text)


def format_address(addr: Address) -> str:
    host, port = addr
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"



def is_loopback(host: str) -> bool:
    """True for localhost, 127.0.0.0/8 and ::1 (also as ::ffff:127.x.y.z); no DNS."""
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False  # another host name: it may resolve to anything
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_loopback or (mapped is not None and mapped.is_loopback)
