"""The systemd notifier (cronrd/runtime/sdnotify.py)."""

from __future__ import annotations

import os
import socket

from cronrd.runtime.sdnotify import Notifier


def test_notifier_sends_datagrams_and_is_a_noop_without_socket(tmp_path):
    assert Notifier({}).ready() is False
    path = str(tmp_path / "n.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.bind(path)
        n = Notifier({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "4000000",
                      "WATCHDOG_PID": str(os.getpid())})
        assert n.watchdog_interval == 4.0
        assert n.ready("3 jobs") and n.watchdog() and n.stopping()
        got = [s.recv(100).decode() for _ in range(3)]
    assert got == ["READY=1\nSTATUS=3 jobs", "WATCHDOG=1", "STOPPING=1"]
    other = Notifier({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "1", "WATCHDOG_PID": "1"})
    assert other.watchdog_interval is None  # the watchdog is for another process


def test_notifier_abstract_socket_address():
    assert Notifier({"NOTIFY_SOCKET": "@sd/notify"}).address == "\0sd/notify"
