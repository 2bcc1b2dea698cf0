"""A trivial replicated key-value store on cronrd's Raft, as an OS process.

Used by the real-process Raft tests and by bench/raft_bench.py. Clients
speak a line protocol on --client HOST:PORT, one request per line, answered
in any order (so a client may keep many in flight):

    ID put KEY VALUE   ->  ID ok INDEX
    ID get KEY         ->  ID ok VALUE|-        (linearizable: ReadIndex)
    ID status          ->  ID ok ROLE LEADER TERM COMMIT APPLIED
    error replies      ->  ID err notleader LEADER | ID err dropped REASON
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from cronrd.errors import NotLeader, ProposalDropped  # noqa: E402
from cronrd.raft.types import ConfState  # noqa: E402
from cronrd.runtime.log.raft_node import RaftNode  # noqa: E402
from cronrd.runtime.log.raft_storage import RaftStorage  # noqa: E402
from cronrd.runtime.peers.transport import TLSConfig, Transport  # noqa: E402


class KV:
    def __init__(self):
        self.data: dict[str, str] = {}
        self.applied_index = 0

    def apply(self, index: int, data: bytes):
        key, _, value = data.decode().partition("=")
        self.data[key] = value
        self.applied_index = index
        return None

    def snapshot(self) -> bytes:
        return json.dumps({"data": self.data, "index": self.applied_index}).encode()

    def restore(self, data: bytes, index: int) -> None:
        body = json.loads(data)
        self.data = body["data"]
        self.applied_index = index


def addr(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--id", required=True)
    ap.add_argument("--listen", required=True)
    ap.add_argument("--client", required=True)
    ap.add_argument("--peers", required=True, help="id=host:port,... (all members, self too)")
    ap.add_argument("--data", required=True)
    ap.add_argument("--tls-dir")
    ap.add_argument("--no-fsync", action="store_true")
    ap.add_argument("--tick", type=float, default=0.05)
    ap.add_argument("--snapshot-every", type=int, default=10000)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(message)s")
    members = dict(p.split("=", 1) for p in args.peers.split(","))
    peers = {k: addr(v) for k, v in members.items() if k != args.id}
    os.makedirs(args.data, exist_ok=True)
    storage = RaftStorage(os.path.join(args.data, "raft.db"), fsync=not args.no_fsync)
    tls = None
    if args.tls_dir:
        d = args.tls_dir
        tls = TLSConfig(ca=f"{d}/ca.crt", cert=f"{d}/{args.id}.crt", key=f"{d}/{args.id}.key")
    node: RaftNode | None = None

    def deliver(msg):
        if node is not None:
            node.step(msg)

    transport = Transport(args.id, addr(args.listen), peers, deliver, tls=tls,
                          insecure=tls is None)
    node = RaftNode(args.id, ConfState(tuple(sorted(members))), storage, transport, KV(),
                    tick_interval=args.tick, snapshot_every=args.snapshot_every)
    await transport.start()
    await node.start()

    pending_out: dict[asyncio.StreamWriter, list[str]] = {}

    def put_done(fut: asyncio.Future, rid: str, writer: asyncio.StreamWriter) -> None:
        exc = fut.exception()
        if exc is None:
            reply(writer, rid, f"ok {fut.result()[0]}")
        elif isinstance(exc, NotLeader):
            reply(writer, rid, f"err notleader {exc.leader or '-'}")
        else:
            reply(writer, rid, f"err dropped {exc}")

    def dispatch(line: str, writer: asyncio.StreamWriter) -> None:
        parts = line.split(" ", 3)
        if len(parts) == 4 and parts[1] == "put":  # the hot path: no task per request
            fut = node.submit(f"{parts[2]}={parts[3]}".encode())
            fut.add_done_callback(lambda f, rid=parts[0]: put_done(f, rid, writer))
            return
        t = asyncio.ensure_future(handle(line, writer))
        tasks.add(t)
        t.add_done_callback(tasks.discard)

    def reply(writer: asyncio.StreamWriter, rid: str, text: str) -> None:
        out = pending_out.setdefault(writer, [])
        out.append(f"{rid} {text}\n")
        if len(out) == 1:  # flush every reply of this loop turn in one write
            asyncio.get_running_loop().call_soon(flush, writer)

    async def handle(line: str, writer: asyncio.StreamWriter) -> None:
        parts = line.split(" ", 3)
        rid, cmd = parts[0], parts[1] if len(parts) > 1 else ""
        try:
            if cmd == "get":
                await node.read_barrier()
                text = "ok " + node.sm.data.get(parts[2], "-")
            elif cmd == "status":
                s = node.status()
                text = (f"ok {s['role']} {s['leader'] or '-'} {s['term']} "
                        f"{s['commit_index']} {s['applied_index']}")
            else:
                text = "err usage"
        except NotLeader as exc:
            text = f"err notleader {exc.leader or '-'}"
        except ProposalDropped as exc:
            text = f"err dropped {exc}"
        reply(writer, rid, text)

    def flush(writer: asyncio.StreamWriter) -> None:
        out = pending_out.pop(writer, None)
        if out and not writer.is_closing():
            writer.write("".join(out).encode())

    tasks: set[asyncio.Task] = set()

    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                dispatch(line.decode().strip(), writer)
        except ConnectionError:
            pass
        finally:
            writer.close()

    host, port = addr(args.client)
    server = await asyncio.start_server(client, host, port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    print("ready", flush=True)
    await stop.wait()
    server.close()
    await node.stop()
    await transport.close()
    storage.close()


if __name__ == "__main__":
    asyncio.run(main())
