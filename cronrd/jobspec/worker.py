"""Parsing job files in a process of its own (``python -m cronrd.jobspec.worker``,
``cronrd __parse-jobs`` in the frozen binary).

A fleet's job files are tens of thousands of jobs: parsing and validating
them is CPU work that, in a thread of the daemon, would take turns with the
event loop for Python's interpreter lock (every SQLite statement of the loop
then waits for the parser's turn to end). The watcher hands big loads to
worker processes instead, one request per file, over pipes: a line of JSON
in, a line of JSON out. What comes back is what the watcher needs of each
job: its name, line, canonical text and digest, and the file's problems.
A worker that cannot start or answer costs only speed: the watcher parses
that file itself.
"""

from __future__ import annotations

import json
import os
import sys
from typing import IO, Any

from .files import scan_job_file
from .model import Problem


def scan_for_sync(path: str, allowed: set[int] | None, known: str | None,
                  pools: dict[str, int] | None = None) -> dict[str, Any]:
    """One file, as the watcher needs it (JSON-able); ``pools``: the daemon
    config's (name -> slots) that a job's pool must name."""
    scanned = scan_job_file(path, allowed, known, pools=pools)
    out: dict[str, Any] = {"path": path, "digest": scanned.digest, "unchanged": scanned.result is None,
                 "problems": [], "positions": {}, "jobs": []}
    if scanned.result is not None:
        out["problems"] = [[p.path, p.line, p.col, p.message] for p in scanned.result.problems]
        out["positions"] = {k: list(v) for k, v in scanned.positions.items()}
        out["jobs"] = [[job.name, job.line, *job.canonical()] for job in scanned.result.jobs]
    return out


def problems_of(answer: dict[str, Any]) -> tuple[Problem, ...]:
    return tuple(Problem(p[0], p[1], p[2], p[3]) for p in answer["problems"])


def serve(stdin: IO[str], stdout: IO[str]) -> None:
    """Answer requests ``{"path", "allowed", "known"}`` until stdin closes."""
    for line in stdin:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
            allowed = None if req.get("allowed") is None else set(req["allowed"])
            answer = scan_for_sync(req["path"], allowed, req.get("known"), req.get("pools"))
        except Exception as exc:  # a bad request; scan_job_file itself does not raise
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        stdout.write(json.dumps(answer, ensure_ascii=False) + "\n")
        stdout.flush()


def argv() -> list[str]:
    """The command that starts a worker."""
    if getattr(sys, "frozen", False):  # the self-contained binary (packaging/)
        return [sys.executable, "__parse-jobs"]
    return [sys.executable, "-m", "cronrd.jobspec.worker"]


NICE = 10  # parsing yields the CPU to the daemons' event loops (Raft, the scheduler)


def main() -> int:
    try:
        os.nice(NICE)
    except OSError:
        pass
    serve(sys.stdin, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
