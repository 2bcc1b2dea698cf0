"""Run records: what a run's supervisor wrote about it, read back by the daemon.

One file per spawn, ``DATA_DIR/runs/RUN_ID.NONCE``, of JSON lines appended by
the supervisor (see supervisor.py): ``spawned``, ``started``, ``exited`` (the
raw wait status), ``closed``. A line cut short by a crash is ignored. Records
live in the daemon's private data_dir (0700), so only root (or the daemon's
user) can write them.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from .supervisor import boot_id, start_ticks

MAX_RECORD = 64 * 1024


@dataclass(frozen=True)
class Record:
    key: str
    run_id: int
    path: str
    boot: str | None = None
    sup: int | None = None
    sup_start: int | None = None
    pid: int | None = None
    pid_start: int | None = None
    spawned_at: float | None = None
    started_at: float | None = None
    status: int | None = None      # raw wait status, once the job exited
    exited_at: float | None = None
    written: int = 0
    closed: bool = False

    @property
    def started(self) -> bool:
        return self.started_at is not None

    @property
    def exited(self) -> bool:
        return self.status is not None

    def this_boot(self) -> bool:
        return self.boot is not None and self.boot == boot_id()

    def supervisor_alive(self) -> bool:
        return self._alive(self.sup, self.sup_start) and not self.closed

    def job_alive(self) -> bool:
        return not self.exited and self._alive(self.pid, self.pid_start)

    def _alive(self, pid: int | None, start: int | None) -> bool:
        return (self.this_boot() and isinstance(pid, int) and pid > 1 and start is not None
                and start_ticks(pid) == start)


def _int(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _num(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def read(path: str) -> Record | None:
    name = os.path.basename(path)
    run_id, _, nonce = name.partition(".")
    if not run_id.isdigit() or not nonce:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        data = os.read(fd, MAX_RECORD)
    except OSError:
        return None
    finally:
        os.close(fd)
    fields: dict = {"key": name, "run_id": int(run_id), "path": path}
    for line in data.split(b"\n"):
        try:
            ev = json.loads(line)
        except ValueError:
            continue  # empty, or cut short by a crash
        if not isinstance(ev, dict):
            continue
        kind = ev.get("event")
        if kind == "spawned":
            fields.update(boot=ev.get("boot") if isinstance(ev.get("boot"), str) else None,
                          sup=_int(ev.get("sup")), sup_start=_int(ev.get("sup_start")),
                          pid=_int(ev.get("pid")), pid_start=_int(ev.get("pid_start")),
                          spawned_at=_num(ev.get("at")))
        elif kind == "started":
            fields["started_at"] = _num(ev.get("at"))
        elif kind == "exited" and _int(ev.get("status")) is not None:
            fields.update(status=_int(ev.get("status")), exited_at=_num(ev.get("at")),
                          written=_int(ev.get("written")) or 0)
            if ev.get("started") is True and fields.get("started_at") is None:
                fields["started_at"] = _num(ev.get("at"))
        elif kind == "closed":
            fields["closed"] = True
    return Record(**fields)


def scan(runs_dir: str) -> dict[int, list[Record]]:
    """Every record in ``runs_dir`` by run id, oldest spawn first."""
    out: dict[int, list[Record]] = {}
    try:
        names = os.listdir(runs_dir)
    except FileNotFoundError:
        return out
    for name in names:
        rec = read(os.path.join(runs_dir, name))
        if rec is not None:
            out.setdefault(rec.run_id, []).append(rec)
    for recs in out.values():
        recs.sort(key=lambda r: r.spawned_at or 0.0)
    return out


@dataclass(frozen=True)
class Seen:
    """A record and what the node saw of its processes when it looked."""
    record: Record
    this_boot: bool
    supervisor_alive: bool
    job_alive: bool


def seen(rec: Record) -> Seen:
    return Seen(rec, rec.this_boot(), rec.supervisor_alive(), rec.job_alive())


def remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


SINCE = "supervised-since"


def first_supervised_start(runs_dir: str) -> bool:
    """True once per data_dir: at the first start of a daemon with run
    supervisors. Only then can a run without a record be an older daemon's,
    whose processes must be searched for; afterwards a run without a record
    never passed its gate (its supervisor writes the record first)."""
    path = os.path.join(runs_dir, SINCE)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
    except FileExistsError:
        return False
    os.close(fd)
    return True
