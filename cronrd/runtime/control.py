"""The control socket: newline-delimited JSON requests from the CLI.

A request is one line ``{"cmd": NAME, "args": {...}}`` of at most
``MAX_REQUEST`` bytes. A reply is one line ``{"ok": true, "result": ...}`` or
``{"ok": false, "error": MESSAGE, "code": 1|2}``; streaming commands (logs
--follow, run-now --wait) first send ``{"data": TEXT}`` or ``{"event": ...}``
lines. Malformed, oversized or unknown requests get an error reply; nothing
a client sends can stop the daemon.
"""

from __future__ import annotations

import asyncio
import grp
import json
import logging
import os
import socket
from typing import Any, AsyncIterator, Awaitable, Callable

from ..errors import CronrdError, RequestError, UsageError

log = logging.getLogger("cronrd.control")

MAX_REQUEST = 1 << 20

Handler = Callable[[dict], Awaitable[Any] | AsyncIterator[dict]]


class Stream:
    """Marks a handler result as an async iterator of intermediate messages."""

    def __init__(self, it: AsyncIterator[dict]):
        self.it = it


def socket_in_use(path: str) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(1.0)
        try:
            s.connect(path)
            return True
        except OSError:
            return False


class ControlServer:
    def __init__(self, path: str, handlers: dict[str, Handler], group: str | None = None):
        self.path = path
        self.handlers = handlers
        self.group = group
        self.server: asyncio.AbstractServer | None = None
        self.clients: set[asyncio.Task] = set()

    async def start(self) -> None:
        if len(os.fsencode(self.path)) > 107:
            raise CronrdError(f"socket path {self.path} is longer than the 107 bytes a Unix "
                              "socket address can hold; set a shorter socket: in the config")
        os.makedirs(os.path.dirname(self.path) or ".", mode=0o755, exist_ok=True)
        if os.path.exists(self.path):
            if socket_in_use(self.path):
                raise CronrdError(f"another daemon is listening on {self.path}; stop it or "
                                  "set another socket: in the config")
            os.unlink(self.path)
        old = os.umask(0o117)  # never world-accessible, not even for a moment
        try:
            self.server = await asyncio.start_unix_server(self._client, path=self.path,
                                                          limit=MAX_REQUEST)
        finally:
            os.umask(old)
        if os.geteuid() == 0:
            gid = 0
            if self.group:
                try:
                    gid = grp.getgrnam(self.group).gr_gid
                except KeyError:
                    log.error("event=socket_group_unknown group=%s", self.group)
            os.chown(self.path, 0, gid)
            os.chmod(self.path, 0o660)
        else:
            os.chmod(self.path, 0o600)

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            for task in list(self.clients):
                task.cancel()
            try:
                await asyncio.wait_for(self.server.wait_closed(), 2)
            except (asyncio.TimeoutError, Exception):
                pass
        try:
            os.unlink(self.path)
        except OSError:
            pass

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        task = asyncio.current_task()
        self.clients.add(task)
        try:
            while True:
                try:
                    line = await reader.readline()
                except (ValueError, asyncio.LimitOverrunError):
                    await self._send(writer, {"ok": False, "code": 2, "error":
                                              f"request larger than {MAX_REQUEST} bytes; "
                                              "send one JSON object per line"})
                    return
                except ConnectionError:
                    return
                if not line:
                    return
                await self._handle(line, writer)
        except (ConnectionError, asyncio.CancelledError):
            pass
        except Exception:
            log.exception("event=control_client_failed")
        finally:
            self.clients.discard(task)
            try:
                writer.close()
            except Exception:
                pass

    async def _send(self, writer: asyncio.StreamWriter, msg: dict) -> None:
        writer.write(json.dumps(msg, separators=(",", ":")).encode() + b"\n")
        await writer.drain()

    async def _handle(self, line: bytes, writer: asyncio.StreamWriter) -> None:
        try:
            req = json.loads(line)
            if not isinstance(req, dict) or not isinstance(req.get("cmd"), str):
                raise UsageError("a request is a JSON object with a string 'cmd'")
            args = req.get("args", {})
            if not isinstance(args, dict):
                raise UsageError("'args' must be a JSON object")
            handler = self.handlers.get(req["cmd"])
            if handler is None:
                raise UsageError(f"unknown command {req['cmd']!r}; known: "
                                 f"{', '.join(sorted(self.handlers))}")
            result = await handler(args)
            if isinstance(result, Stream):
                final = None
                async for msg in result.it:
                    if "result" in msg:
                        final = msg["result"]
                    else:
                        await self._send(writer, msg)
                result = final
            await self._send(writer, {"ok": True, "result": result})
        except (ValueError, UnicodeDecodeError) as exc:
            await self._send(writer, {"ok": False, "code": 2,
                                      "error": f"malformed request: {exc}"})
        except UsageError as exc:
            await self._send(writer, {"ok": False, "code": 2, "error": str(exc)})
        except (TypeError, KeyError) as exc:
            await self._send(writer, {"ok": False, "code": 2,
                                      "error": f"bad request arguments: {exc}"})
        except CronrdError as exc:
            await self._send(writer, {"ok": False, "code": 1, "error": str(exc)})
        except (ConnectionError, asyncio.CancelledError):
            raise
        except Exception as exc:  # a bug must cost one request, not the daemon
            log.exception("event=control_request_failed")
            await self._send(writer, {"ok": False, "code": 1, "error":
                                      f"internal error handling the request ({exc!r}); "
                                      "see the daemon log"})


def arg(args: dict, name: str, kind: type | tuple, default: Any = ..., *,
        required: bool = False) -> Any:
    """Fetch and type-check one request argument."""
    if name not in args or args[name] is None:
        if required:
            raise UsageError(f"missing argument {name!r}")
        return None if default is ... else default
    value = args[name]
    if isinstance(value, bool) and kind is int:
        raise UsageError(f"argument {name!r} must be an integer")
    if kind is int and isinstance(value, int) and not -(1 << 62) < value < (1 << 62):
        raise UsageError(f"argument {name!r} is out of range")
    if not isinstance(value, kind):
        raise UsageError(f"argument {name!r} has the wrong type")
    return value


__all__ = ["ControlServer", "Stream", "arg", "RequestError", "MAX_REQUEST"]
