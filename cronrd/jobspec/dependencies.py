"""Checks of ``depends_on`` across a whole jobs directory: every parent is a
job, and the graph has no cycle (pure: the jobs in, problems out)."""

from __future__ import annotations

import difflib
from typing import Mapping

from .model import JobSpec, Problem


def _where(job: JobSpec, parent: str) -> tuple[int, int]:
    for dep in job.depends_on:
        if dep.job == parent:
            return dep.line or job.line, dep.col or 1
    return job.line, 1


def find_cycles(edges: Mapping[str, list[str]]) -> list[list[str]]:
    """Each cycle of the graph ``child -> [parents]`` once, as the list of
    its jobs starting at its smallest name (``[a, b, c]`` for a -> b -> c -> a).
    Iterative (a chain of 10,000 jobs does not hit the recursion limit)."""
    colour: dict[str, int] = {}  # 1 on the path, 2 done
    cycles: dict[tuple[str, ...], list[str]] = {}
    for start in sorted(edges):
        if colour.get(start):
            continue
        path: list[str] = []
        stack: list[tuple[str, int]] = [(start, 0)]
        while stack:
            node, i = stack.pop()
            if i == 0:
                colour[node] = 1
                path.append(node)
            parents = sorted(edges.get(node, ()))
            if i < len(parents):
                stack.append((node, i + 1))
                nxt = parents[i]
                state = colour.get(nxt, 0)
                if state == 1:
                    cyc = path[path.index(nxt):]
                    k = cyc.index(min(cyc))
                    cyc = cyc[k:] + cyc[:k]
                    cycles.setdefault(tuple(cyc), cyc)
                elif state == 0 and nxt in edges:
                    stack.append((nxt, 0))
                continue
            colour[node] = 2
            path.pop()
    return [cycles[k] for k in sorted(cycles)]


def check_dependencies(jobs: Mapping[str, JobSpec]) -> list[Problem]:
    """Unknown parents and cycles among ``jobs`` (by name), each a problem at
    the ``depends_on`` entry that names the parent."""
    problems: list[Problem] = []
    names = sorted(jobs)
    for name in names:
        job = jobs[name]
        for dep in job.depends_on:
            if dep.job not in jobs:
                close = difflib.get_close_matches(dep.job, names, n=1)
                hint = f"did you mean {close[0]!r}? " if close else ""
                problems.append(Problem(job.source, dep.line or job.line, dep.col or 1,
                                        f"job {name!r} depends on {dep.job!r}, which no job "
                                        f"file defines; {hint}add a job named {dep.job!r} or "
                                        "fix the name (`cronrd jobs` lists the jobs)"))
    edges = {n: [d.job for d in jobs[n].depends_on if d.job in jobs] for n in names}
    for cyc in find_cycles(edges):
        first = jobs[cyc[0]]
        line, col = _where(first, cyc[1] if len(cyc) > 1 else cyc[0])
        text = " -> ".join(cyc + [cyc[0]])
        problems.append(Problem(first.source, line, col,
                                f"dependency cycle: {text} (each job waits for the next); "
                                "remove one of these depends_on entries"))
    return problems
