"""A peer connection that lived through a partition must not sit in TCP's
retransmission back-off once the path is back (issue 29, slow-fsync-leader:
a vote grant reached the old leader 1.8 s late, eleven seconds after a
partition had healed, on a connection whose retransmission gap had grown
during the partition).

Each run is a fresh network namespace of its own with only a loopback, whose
firewall cuts one transport's port for 8 s (tests/support/stuck_link.py).
With TCP's own timers alone, the lost segment is retransmitted about 6.5 s
and 13 s into the cut, so a's next message reaches b about 5 s after the
heal; with the transport's stall timeout (TCP_USER_TIMEOUT) the stuck
connection is aborted and dialled again, and the next message arrives within
the dial back-off.

Needs root, iproute2 and iptables (skipped without).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CUT = 8.0


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root (a network namespace and its firewall)"
    for tool in ("ip", "iptables"):
        if shutil.which(tool) is None:
            return f"needs {tool}"
    return None


def _in_namespace(*args: str) -> dict:
    ns = f"cfx{os.getpid()}-stall"
    subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    subprocess.run(["ip", "netns", "add", ns], check=True, capture_output=True, timeout=10)
    try:
        subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True,
                       capture_output=True, timeout=10)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [str(ROOT), str(ROOT / "tests" / "support")]))
        res = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-m", "stuck_link",
                              "--cut", str(CUT), "--wait", "15", *args],
                             capture_output=True, text=True, env=env, timeout=90)
        assert res.returncode == 0, res.stderr
        return json.loads(res.stdout.strip().splitlines()[-1])
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)


@pytest.mark.skipif(bool(_missing()), reason=_missing() or "")
def test_a_connection_stuck_in_retransmission_back_off_is_dialled_again():
    # The premise, measured: without a stall timeout the connection waits for
    # TCP's next retransmission, seconds after the path came back.
    plain = _in_namespace("--stall-timeout", "0")
    assert plain["delay"] is None or plain["delay"] > 3.5, plain
    assert plain["reconnects"] == 0, plain

    tuned = _in_namespace()          # the transport's default stall_timeout
    assert tuned["delay"] is not None and tuned["delay"] < 3.0, tuned
    assert tuned["reconnects"] >= 1, tuned
