"""The wire between the daemon and its faces' process (faces_host.py,
faces_child.py): length-prefixed pickle frames over a Unix socket pair.

Both ends are this cronrd, started together; still, the faces' process is
the one that parses what the network and the control socket send, so what
it sends the daemon is read with a narrow unpickler (``Narrow``): the
builtin containers and scalars, and cronrd's own dataclasses, enums and
exceptions (requests, callers, commands), nothing that names a function.
What the daemon sends its faces is read in full (its answers, effects and
errors). A frame is at most MAX_FRAME bytes; a bigger one is a broken peer
and ends the wire.
"""

from __future__ import annotations

import asyncio
import copyreg
import dataclasses
import enum
import io
import pickle
import socket
import struct
import types
from typing import Any

MAX_FRAME = 64 * 1024 * 1024
_LEN = struct.Struct("!I")

_BUILTINS = frozenset({"set", "frozenset", "bytearray", "tuple", "list", "dict", "int", "float",
                       "str", "bytes", "bool", "complex", "slice", "range"})


def frozen_mapping(d: dict) -> types.MappingProxyType:
    return types.MappingProxyType(d)


def _mapping_proxy(mp: types.MappingProxyType) -> tuple:
    # (the config's frozen mappings, cluster.initial_members, as the daemon
    # sends its config to the faces at start; the narrow side refuses them)
    return frozen_mapping, (dict(mp),)


copyreg.pickle(types.MappingProxyType, _mapping_proxy)


class WireError(Exception):
    """The other end sent something that is not a frame of ours."""


class Narrow(pickle.Unpickler):
    """Unpickles only builtin data and cronrd's dataclasses, enums and
    exceptions: a faces' process that was taken over cannot make the
    daemon call a function by sending it a pickle."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "builtins" and name in _BUILTINS:
            return super().find_class(module, name)
        if module == "cronrd" or module.startswith("cronrd."):
            obj = super().find_class(module, name)
            if isinstance(obj, type) and (dataclasses.is_dataclass(obj)
                                          or issubclass(obj, (enum.Enum, BaseException))):
                return obj
        raise WireError(f"the faces' process sent {module}.{name}: not data the daemon accepts")


def dumps(obj: Any) -> bytes:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    if len(data) > MAX_FRAME:
        raise WireError(f"a frame of {len(data)} bytes is over the {MAX_FRAME} allowed")
    return _LEN.pack(len(data)) + data


def loads(data: bytes, narrow: bool) -> Any:
    try:
        if narrow:
            return Narrow(io.BytesIO(data)).load()
        return pickle.loads(data)
    except WireError:
        raise
    except Exception as exc:
        raise WireError(f"an unreadable frame: {type(exc).__name__}: {exc}") from None


async def read_frame(reader: asyncio.StreamReader, narrow: bool) -> Any:
    """The next frame's object; EOFError at the end of the wire."""
    try:
        head = await reader.readexactly(_LEN.size)
        (size,) = _LEN.unpack(head)
        if size > MAX_FRAME:
            raise WireError(f"a frame of {size} bytes announced, over the {MAX_FRAME} allowed")
        return loads(await reader.readexactly(size), narrow)
    except asyncio.IncompleteReadError:
        raise EOFError("the other end closed the wire") from None


def recv_frame(sock: socket.socket) -> Any:
    """The next frame of a blocking socket (the faces' side's blocking calls)."""
    (size,) = _LEN.unpack(_recv_exactly(sock, _LEN.size))
    if size > MAX_FRAME:
        raise WireError(f"a frame of {size} bytes announced, over the {MAX_FRAME} allowed")
    return loads(_recv_exactly(sock, size), narrow=False)


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise EOFError("the daemon closed the wire")
        buf += chunk
    return bytes(buf)


def pack_error(exc: BaseException) -> tuple:
    """An error as (class, args, attributes): rebuilt on the other side
    without calling the class's __init__ (whose parameters need not be its
    args). An error whose class cannot cross becomes a plain one."""
    state = {k: v for k, v in getattr(exc, "__dict__", {}).items() if not k.startswith("__")}
    try:
        pickle.dumps((type(exc), exc.args, state))
        return (type(exc), exc.args, state)
    except Exception:
        from ..errors import CronrdError
        return (CronrdError, (f"{type(exc).__name__}: {exc}",), {})


def unpack_error(packed: tuple) -> BaseException:
    cls, args, state = packed
    exc = BaseException.__new__(cls, *args)
    exc.args = tuple(args)
    exc.__dict__.update(state)
    return exc
