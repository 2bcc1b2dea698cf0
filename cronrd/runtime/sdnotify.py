"""systemd notifications (READY, STOPPING, WATCHDOG) in a few lines.

Writes datagrams to $NOTIFY_SOCKET as sd_notify(3) describes; an abstract
socket name starts with '@'. Without NOTIFY_SOCKET every call is a no-op.
"""

from __future__ import annotations

import os
import socket


class Notifier:
    def __init__(self, environ: dict | None = None):
        env = os.environ if environ is None else environ
        addr = env.get("NOTIFY_SOCKET") or ""
        self.address = ("\0" + addr[1:]) if addr.startswith("@") else addr
        usec = env.get("WATCHDOG_USEC", "")
        pid = env.get("WATCHDOG_PID", "")
        self.watchdog_interval: float | None = None
        if usec.isdigit() and (not pid or pid == str(os.getpid())):
            self.watchdog_interval = int(usec) / 1e6

    @property
    def enabled(self) -> bool:
        return bool(self.address)

    def notify(self, message: str) -> bool:
        if not self.address:
            return False
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
                s.sendto(message.encode(), self.address)
            return True
        except OSError:
            return False

    def ready(self, status: str = "") -> bool:
        return self.notify("READY=1" + (f"\nSTATUS={status}" if status else ""))

    def stopping(self) -> bool:
        return self.notify("STOPPING=1")

    def watchdog(self) -> bool:
        return self.notify("WATCHDOG=1")

    def status(self, text: str) -> bool:
        return self.notify(f"STATUS={text}")
