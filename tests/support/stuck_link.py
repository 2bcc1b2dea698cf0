"""A peer connection that lives through a partition, measured.

Run inside a network namespace of its own (``ip netns exec NS python -m
stuck_link ...``): it changes that namespace's firewall. Two transports, a
and b, on the namespace's loopback; a sends b a message every 100 ms (as a
leader's heartbeats). Once a message got through, every packet to and from
b's port is dropped for ``--cut`` seconds (a's established connection and
any new SYN alike), then let through again. Prints one JSON line: how long
after the heal b received a's next message (``null`` if not within
``--wait`` seconds), and a's reconnect count.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import subprocess
import time

from cronrd.raft.types import Message, MsgType
from cronrd.runtime.peers.transport import Transport

LOCAL = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOCAL, 0))
        return int(s.getsockname()[1])


def firewall(op: str, port: int) -> None:
    for match in ("--dport", "--sport"):
        subprocess.run(["iptables", op, "INPUT", "-p", "tcp", match, str(port), "-j", "DROP"],
                       check=True, capture_output=True, timeout=10)


async def measure(cut: float, wait: float, **tuning: float | None) -> dict:
    got: list[tuple[float, int]] = []
    pa, pb = free_port(), free_port()
    b = Transport("b", (LOCAL, pb), {"a": (LOCAL, pa)},
                  lambda m: got.append((time.monotonic(), m.index)), tls=None, insecure=True,
                  **tuning)
    a = Transport("a", (LOCAL, pa), {"b": (LOCAL, pb)}, lambda m: None, tls=None,
                  insecure=True, **tuning)
    await b.start()
    await a.start()
    index = 0

    async def beat() -> None:
        nonlocal index
        while True:
            index += 1
            a.send(Message(MsgType.APP, to="b", frm="a", term=1, index=index))
            await asyncio.sleep(0.1)

    beats = asyncio.get_running_loop().create_task(beat())
    try:
        deadline = time.monotonic() + 10
        while not got:
            if time.monotonic() > deadline:
                raise SystemExit("no message got through before the cut")
            await asyncio.sleep(0.01)
        firewall("-I", pb)
        cut_at = time.monotonic()
        await asyncio.sleep(cut)     # the fault's length, not a wait for a result
        firewall("-D", pb)
        healed = time.monotonic()
        deadline = healed + wait
        delay = None
        while time.monotonic() < deadline:
            late = [t for t, _ in got if t >= healed]
            if late:
                delay = late[0] - healed
                break
            await asyncio.sleep(0.01)
        return {"cut": healed - cut_at, "delay": delay, "reconnects": a.stats["reconnects"],
                "connect_failures": a.stats["connect_failures"]}
    finally:
        beats.cancel()
        await a.close()
        await b.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cut", type=float, default=13.0)
    ap.add_argument("--wait", type=float, default=20.0)
    ap.add_argument("--stall-timeout", type=float, default=None,
                    help="the transport's stall_timeout; 0 = none (the default is its own)")
    args = ap.parse_args()
    kwargs = {} if args.stall_timeout is None else {
        "stall_timeout": args.stall_timeout or None}
    print(json.dumps(asyncio.run(measure(args.cut, args.wait, **kwargs))))


if __name__ == "__main__":
    main()
