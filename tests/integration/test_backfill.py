"""Integration: backfill and rerun through a real one-host daemon."""

from __future__ import annotations

import json
import time

import pytest

from cronrd.schedule import iso_utc, parse_iso
from harness import wait_for

pytestmark = pytest.mark.integration

MIN = 60


def past_minutes(n: int) -> tuple[int, int]:
    """The last ``n`` whole minutes ending a minute before now (before the
    job exists: the scheduler has not handled them)."""
    last = int(time.time()) // MIN * MIN - MIN
    return last - (n - 1) * MIN, last


def max_overlap(runs: list[dict]) -> int:
    edges = []
    for r in runs:
        edges.append((parse_iso(r["started_at"]), 1))
        edges.append((parse_iso(r["finished_at"]), -1))
    best = cur = 0
    for _t, d in sorted(edges, key=lambda e: (e[0], e[1])):  # an end before a start
        cur += d
        best = max(best, cur)
    return best


def backfill_runs(node, job):
    return [r for r in node.runs(job) if r["kind"] == "backfill"]


def test_backfill_six_past_minutes_two_at_a_time(node):
    first, last = past_minutes(6)
    node.write_job("bf", {"schedule": "* * * * *", "concurrency": "allow",
                          "command": "sleep 1.5"})
    node.start()
    dry = node.cli("backfill", "bf", "--from", iso_utc(first), "--to", iso_utc(last),
                   "--parallel", "2", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    lines = dry.stdout.splitlines()
    assert lines[:6] == [f"{iso_utc(first + k * MIN)}  create (before the job existed)"
                         for k in range(6)]
    assert "6 fire time(s) of bf: 6 create; at most 2 at once" in lines[6]
    assert node.runs("bf") == []          # a dry run changes nothing

    res = node.cli("backfill", "bf", "--from", iso_utc(first), "--to", iso_utc(last),
                   "--parallel", "2", "--note", "outage of the 1st")
    assert res.returncode == 0, res.stderr
    assert "backfill 1 of bf: 6 fire time(s), 6 to run, 0 skipped, at most 2 at once" \
        in res.stdout
    # the runs in flight, looked at while it goes: never more than 2
    seen = []

    def finished():
        rs = backfill_runs(node, "bf")
        seen.append(sum(r["state"] in ("pending", "assigned", "running") for r in rs))
        return len(rs) == 6 and all(r["state"] == "succeeded" for r in rs) and rs
    runs = wait_for(finished, 40, what="6 succeeded backfill runs",
                    on_fail=node.daemon_log)
    assert max(seen) <= 2
    assert max_overlap(runs) == 2
    assert sorted(parse_iso(r["fire_time"]) for r in runs) == [first + k * MIN
                                                               for k in range(6)]
    assert all(r["attempt"] == 1 for r in runs)
    listing = json.loads(node.cli("backfills", "--json").stdout)["backfills"]
    wait_for(lambda: json.loads(node.cli("backfills", "--json").stdout)["backfills"][0]
             ["state"] == "done", 10, what="backfill done")
    [bf] = json.loads(node.cli("backfills", "--json").stdout)["backfills"]
    assert bf["counts"]["done"] == 6 and bf["outcomes"] == {"succeeded": 6}
    assert bf["note"] == "outage of the 1st" and listing[0]["id"] == 1
    table = node.cli("backfills").stdout
    assert "done" in table and "6/6" in table

    # Again: everything succeeded already, nothing to run.
    again = node.cli("backfill", "bf", "--from", iso_utc(first), "--to", iso_utc(last),
                     "--dry-run")
    assert again.stdout.count("skip: already succeeded") == 6

    # A rerun is attempt 2 of the same record, kind rerun.
    rr = node.cli("rerun", "bf", "--at", iso_utc(first + MIN))
    assert rr.returncode == 0, rr.stderr
    assert "attempt 2 of bf" in rr.stdout
    wait_for(lambda: [r for r in node.runs("bf") if r["kind"] == "rerun"
                      and r["state"] == "succeeded"], 20, what="the rerun")
    keyed = [(r["fire_time"], r["attempt"]) for r in node.runs("bf")
             if r["fire_time"] == iso_utc(first + MIN)]
    assert sorted(keyed) == [(iso_utc(first + MIN), 1), (iso_utc(first + MIN), 2)]
    kinds = node.cli("runs", "bf", "--kind", "rerun")
    assert kinds.returncode == 0 and iso_utc(first + MIN) in kinds.stdout
    # Not a fire time: the error names the nearest ones.
    bad = node.cli("rerun", "bf", "--at", iso_utc(first + 30))
    assert bad.returncode == 1
    assert ("not a fire time of bf" in bad.stderr and iso_utc(first) in bad.stderr
            and iso_utc(first + MIN) in bad.stderr)


def test_backfill_pause_resume_cancel_and_forbid_queues(node):
    first, last = past_minutes(6)
    node.write_job("slow", {"schedule": "* * * * *", "command": "sleep 2"})  # forbid
    node.start()
    res = node.cli("backfill", "slow", "--from", iso_utc(first), "--to", iso_utc(last),
                   "--parallel", "3")
    assert res.returncode == 0, res.stderr
    assert "at most 1 at once" in res.stdout      # concurrency forbid: they queue
    wait_for(lambda: backfill_runs(node, "slow"), 10, what="the first backfill run")
    paused = node.cli("backfill", "pause", "1")
    assert paused.returncode == 0 and "backfill 1 paused" in paused.stdout
    # What was released finishes; nothing more is released while paused.
    wait_for(lambda: all(r["state"] == "succeeded" for r in backfill_runs(node, "slow")),
             15, what="the released run to end")
    n = len(backfill_runs(node, "slow"))
    assert n == 1
    time.sleep(2.5)  # two leader duty passes: still nothing new
    assert len(backfill_runs(node, "slow")) == n
    assert node.cli("backfill", "resume", "1").returncode == 0
    wait_for(lambda: len(backfill_runs(node, "slow")) > n, 15, what="release after resume")
    assert node.cli("backfill", "cancel", "1").returncode == 0
    wait_for(lambda: all(r["state"] == "succeeded" for r in backfill_runs(node, "slow")),
             15, what="the last released run to end")
    done = backfill_runs(node, "slow")
    assert max_overlap(done) == 1 and len(done) < 6
    [bf] = json.loads(node.cli("backfills", "--json").stdout)["backfills"]
    assert bf["state"] == "cancelled"
    assert bf["counts"]["cancelled"] == 6 - len(done)
    again = node.cli("backfill", "resume", "1")
    assert again.returncode == 1 and "cancelled already" in again.stderr
    # more than 10,000 fire times need --force
    many = node.cli("backfill", "slow", "--from", "8d", "--dry-run")
    assert many.returncode == 1 and "--force" in many.stderr
    assert "more than 10000" in many.stderr


def test_leader_killed_mid_backfill_it_resumes_one_record_per_fire_time(cluster):
    c = cluster(node_timeout="3s")
    first, last = past_minutes(10)
    c.write_job("fill", {"schedule": "* * * * *", "concurrency": "allow",
                         "command": "sleep 2"})
    c.start()
    lead = c.leader()
    follower = c.followers()[0]
    wait_for(lambda: [j for j in follower.call("jobs") if j["name"] == "fill"], what="job")
    # asked on a follower: forwarded to the leader
    res = follower.cli("backfill", "fill", "--from", iso_utc(first), "--to", iso_utc(last),
                       "--parallel", "2")
    assert res.returncode == 0, res.stderr
    peak = [0]

    def sample(node):
        rs = [r for r in backfill_fires(node) if first <= parse_iso(r["fire_time"]) <= last]
        active = {r["fire_time"] for r in rs if r["state"] in ("pending", "assigned",
                                                                "running")}
        peak[0] = max(peak[0], len(active))
        return rs
    wait_for(lambda: sum(r["state"] == "succeeded" for r in sample(lead)) >= 2, 30,
             what="two backfill runs done", on_fail=c.logs)
    lead.kill9()
    new = c.leader(timeout=30)
    assert new is not lead

    def all_done():
        # (only the backfilled minutes, as sample() reads them: a scheduled
        # run the killed leader was running is retried too, as kind retry,
        # at a fire time after them)
        rs = sample(new)
        done = {r["fire_time"] for r in rs if r["state"] == "succeeded"}
        return len(done) == 10 and not [r for r in rs if r["state"] in
                                        ("pending", "assigned", "running")]
    wait_for(all_done, 90, what="every fire time backfilled", on_fail=lambda: (
        c.logs() + "\n===== runs of fill on the new leader =====\n" + "\n".join(
            f"{r['run_id']} {r['fire_time']} attempt {r['attempt']} {r['state']} "
            f"node={r.get('node')} reason={r.get('reason')}" for r in new.runs("fill"))
        + "\n===== backfills =====\n" + new.cli("backfills", "--json").stdout))
    assert peak[0] <= 2
    runs = [r for r in new.runs("fill") if first <= parse_iso(r["fire_time"]) <= last]
    keys = [(r["fire_time"], r["attempt"]) for r in runs]
    assert len(keys) == len(set(keys))      # one record per fire time: attempts only
    firsts = sorted(parse_iso(f) for f, a in keys if a == 1)
    assert firsts == [first + k * MIN for k in range(10)]
    assert {r["kind"] for r in runs if r["attempt"] == 1} == {"backfill"}
    wait_for(lambda: new.call("backfills")["backfills"][0]["state"] == "done", 20,
             what="backfill done", on_fail=c.logs)
    assert new.call("backfills")["backfills"][0]["counts"]["done"] == 10
    # a rerun asked on a follower of the new leader is forwarded too
    other = [n for n in c.followers() if n is not lead][0]
    rr = other.cli("rerun", "fill", "--at", iso_utc(first))
    assert rr.returncode == 0, rr.stderr
    wait_for(lambda: any(r["kind"] == "rerun" and parse_iso(r["fire_time"]) == first
                         for r in new.runs("fill")), 30, what="rerun", on_fail=c.logs)


def backfill_fires(node):
    """The runs of the job "fill" the backfill made (attempts included)."""
    return [r for r in node.runs("fill") if r["kind"] in ("backfill", "retry")]
