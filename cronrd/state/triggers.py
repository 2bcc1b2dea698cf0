"""Which jobs a webhook starts: those whose definition in force lists the
hook under ``triggers:`` (runtime/http/hooks.py)."""

from __future__ import annotations

import apsw


def jobs_triggered_by(conn: apsw.Connection, hook: str) -> list[tuple[str, bool]]:
    """(job name, paused) of each job whose definition lists ``hook`` under
    triggers, by name. A scan of the definitions that name a trigger at all
    (SQLite's json_each over the stored JSON, no JobSpec built)."""
    return [(name, bool(paused)) for name, paused in conn.execute(
        "SELECT jobs.name, jobs.paused FROM jobs JOIN specs USING(name, digest) "
        "WHERE instr(specs.spec, '\"triggers\":') > 0 AND EXISTS (SELECT 1 FROM "
        "json_each(specs.spec, '$.triggers') WHERE json_each.value = ?) ORDER BY jobs.name",
        (hook,))]

