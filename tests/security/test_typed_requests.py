"""Every control command's arguments, forged (issue 30): a real daemon is
sent, for each typed request (ops/requests.py) and each of its fields, a
value of the wrong kind, NaN, infinity and an integer beyond 64 bits, and
arguments that are not an object. Each is refused as a usage error naming
the argument (exit code 2 for the CLI), nothing is done, and the daemon
answers the next request."""

from __future__ import annotations

import json
import socket
import typing

import pytest

from cronrd.ops import typed
from cronrd.ops.requests import REQUESTS

pytestmark = pytest.mark.integration


def send(path: str, raw: bytes) -> dict:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(path)
        s.sendall(raw + b"\n")
        f = s.makefile("rb")
        while True:
            msg = json.loads(f.readline())
            if "ok" in msg:
                return msg


def forged(kind: typing.Any) -> list[typing.Any]:
    """Values a field of ``kind`` must refuse."""
    if kind is bool:
        return [1, "true", [True]]
    if kind is int:
        return ["7", 1.5, True, 1 << 70, float("nan")]
    if kind is float:
        return ["7", True, float("nan"), float("inf")]
    if kind is str:
        return [7, ["x"], {"x": 1}]
    origin = typing.get_origin(kind)
    if origin is list:
        return ["x", [1], {"x": 1}]
    if origin is dict:
        return [["x"], {"k": 1}, "x"]
    return []


def cases():
    for op, cls in sorted(REQUESTS.items()):
        for spec in typed._specs(cls):
            if typed._mark(spec, typed.Names) is not None:
                values = [7, [], ["not-a-name"]]
            elif typed._mark(spec, typed.Time) is not None:
                values = [True, float("nan"), [1]]
            else:
                values = forged(spec.kind)
            for value in values:
                yield op, spec.name, value


def test_every_forged_argument_is_refused_and_the_daemon_goes_on(node):
    node.start()
    audited = len(node.call("audit", {"limit": 100000})["records"])
    refused = 0
    for op, name, value in cases():
        raw = json.dumps({"cmd": op, "args": {name: value}}).encode()  # NaN as JSON's NaN
        msg = send(node.socket, raw)
        assert msg["ok"] is False, (op, name, value, msg)
        assert msg.get("code") == 2, (op, name, value, msg)  # a usage error, not a crash
        refused += 1
    assert refused > 150
    for op in REQUESTS:  # arguments that are not an object
        for args in ([1, 2], "x", 7):
            msg = send(node.socket, json.dumps({"cmd": op, "args": args}).encode())
            assert msg["ok"] is False and msg.get("code") == 2, (op, args, msg)
    assert node.call("status")["ready"]
    # nothing was done, and no change was audited as allowed (root is refused nothing)
    assert len(node.call("audit", {"limit": 100000})["records"]) == audited
