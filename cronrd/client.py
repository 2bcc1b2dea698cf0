"""The control-socket client the CLI uses: one JSON line out, lines back."""

from __future__ import annotations

import json
import socket
from typing import Any, Callable, Iterator

from .errors import DaemonNotRunning, DaemonUnavailable, RequestError, UsageError


class Client:
    def __init__(self, path: str, timeout: float | None = 30.0):
        self.path = path
        self.timeout = timeout

    def _connect(self) -> socket.socket:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(self.path)
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            s.close()
            raise DaemonNotRunning(
                f"no cronrd daemon is listening on {self.path} ({exc.strerror}); start it "
                "with `systemctl start cronrd` or `cronrd daemon --config FILE`, or point "
                "the CLI at the right config with --config / CRONRD_CONFIG") from None
        except PermissionError:
            s.close()
            raise DaemonUnavailable(
                f"permission denied on {self.path}; run as root or as a member of the "
                "socket's group (socket_group in the config)") from None
        return s

    def stream(self, cmd: str, args: dict | None = None) -> Iterator[dict]:
        """Send one request; yield every reply line (the last has 'ok')."""
        s = self._connect()
        try:
            try:
                s.sendall(json.dumps({"cmd": cmd, "args": args or {}}).encode() + b"\n")
            except (BrokenPipeError, ConnectionResetError):
                pass  # the daemon turned the connection away: its one line says why
            f = s.makefile("rb")
            for line in f:
                msg = json.loads(line)
                yield msg
                if "ok" in msg:
                    return
            raise DaemonUnavailable(f"the daemon on {self.path} closed the connection "
                                    "before answering; check its log (journalctl -u cronrd)")
        except socket.timeout:
            raise DaemonUnavailable(f"the daemon on {self.path} did not answer within "
                                    f"{self.timeout:g}s; check its log") from None
        except ConnectionResetError:
            raise DaemonUnavailable(f"the daemon on {self.path} reset the connection "
                                    "before answering; check its log") from None
        finally:
            s.close()

    def call(self, cmd: str, args: dict | None = None,
             on_message: Callable[[dict], None] | None = None) -> Any:
        for msg in self.stream(cmd, args):
            if "ok" not in msg:
                if on_message is not None:
                    on_message(msg)
                continue
            if msg["ok"]:
                return msg.get("result")
            if msg.get("code") == 2:
                raise UsageError(msg.get("error", "bad request"))
            raise RequestError(msg.get("error", "request failed"))
        return None
