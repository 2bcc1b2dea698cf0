"""Clock offsets between real daemons: one node started under faketime
(its wall clock moved, its monotonic clock left alone, as a host whose NTP
broke), the others on the real clock. Issue 11."""

from __future__ import annotations

import glob
import shutil

import pytest

from cluster_harness import Cluster
from harness import wait_for


def faketime_lib() -> str | None:
    if not shutil.which("faketime"):
        return None
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1")
                   + glob.glob("/usr/lib/faketime/libfaketime.so.1"))
    return found[0] if found else None


LIB = faketime_lib()
pytestmark = pytest.mark.skipif(LIB is None, reason="needs faketime (apt-get install faketime)")


def skewed(offset: str) -> dict:
    return {"LD_PRELOAD": LIB, "FAKETIME": offset, "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            "FAKETIME_NO_CACHE": "1"}


@pytest.mark.parametrize("offset, sign", [("+30s", 1), ("-30s", -1)])
def test_a_node_whose_clock_is_off_is_shown_and_logged_off(offset, sign):
    c = Cluster(first_ip=141 if sign > 0 else 151)
    try:
        c["a"].start(wait=False)
        c["b"].start(wait=False)
        c["c"].start(env=skewed(offset), wait=False)
        for n in c:
            n.wait_ready(timeout=40)
        leader = c.leader()
        skewed_node = c["c"]

        # c measures itself against the cluster's median clock...
        st = wait_for(lambda: (lambda s: s if s.get("clock_offset_ms") is not None else None)(
            skewed_node.call("status")), 30, what="c to measure its clock")
        assert abs(st["clock_offset_ms"] - sign * 30000) < 1000, st
        assert st["clock_off"] is True and st["max_clock_offset_ms"] == 500
        # ... and the nodes on the real clock are in step.
        for n in c:
            if n is not skewed_node:
                s = wait_for(lambda n=n: (lambda s: s if s.get("clock_offset_ms") is not None
                                          else None)(n.call("status")), 30,
                             what=f"{n.config['node_id']} to measure its clock")
                assert abs(s["clock_offset_ms"]) < 200 and s["clock_off"] is False, s

        # The leader shows every member's offset (whoever leads: c's too,
        # then measured the other way round).
        def members_known():
            ms = leader.call("cluster_members")["members"]
            return ms if all(m["clock_offset_ms"] is not None for m in ms) else None
        members = {m["id"]: m["clock_offset_ms"] for m in wait_for(members_known, 30,
                                                                   what="every member's offset")}
        assert abs(members["c"] - sign * 30000) < 1000, members
        assert abs(members["a"]) < 200 and abs(members["b"]) < 200, members

        # The CLI says it in words, with what to do.
        out = skewed_node.cli("status").stdout
        assert ("30.0s ahead of" if sign > 0 else "30.0s behind") in out, out
        assert "beyond cluster.max_clock_offset" in out and "chronyc" in out
        table = leader.cli("cluster", "members").stdout
        row_c = next(line for line in table.splitlines() if line.startswith("c "))
        assert "CLOCK" in table and ("+30.0s" if sign > 0 else "-30.0s") in row_c, table

        # Logged once, where it is seen: on c, and on the leader.
        wait_for(lambda: "event=clock_off node=c" in skewed_node.daemon_log(), 20,
                 what="c to log its clock off")
        wait_for(lambda: "event=clock_off node=c" in leader.daemon_log(), 20,
                 what="the leader to log c's clock off")
        assert skewed_node.daemon_log().count("event=clock_off node=c") == 1
    finally:
        c.cleanup()
