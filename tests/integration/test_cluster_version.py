"""A daemon whose state records a cluster version its cronrd cannot apply
refuses to start, naming both versions and what to do, and loses nothing:
the state is as it was (issue 31). The refusals of a joiner and of a
downgraded 0.2.0 node: security/test_membership_trust.py and
integration/test_rolling_upgrade.py."""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from cronrd import __version__
from cronrd.state import versions as V

pytestmark = pytest.mark.integration


def test_a_daemon_older_than_its_states_cluster_version_refuses_to_start(node):
    node.write_job("hello", {"schedule": "@yearly", "command": "true"})
    node.start()
    assert node.call("status")["versions"]["cluster_version"] == V.APPLY_VERSION
    assert node.terminate() == 0
    # As if a newer release had raised the version, and this one came back.
    db = Path(node.config["data_dir"]) / "state.db"
    conn = apsw.Connection(str(db))
    newer = V.APPLY_VERSION + 1
    with conn:
        conn.execute("UPDATE meta SET value=? WHERE key='cluster_version'", (newer,))
        conn.execute("UPDATE meta SET value='9.0.0' WHERE key='written_by'")
    conn.close()
    node.start(wait=False)
    # 78: the unit does not restart it (RestartPreventExitStatus)
    assert node.proc.wait(30) == V.EXIT_NEWER == 78, node.daemon_log()
    said = node.daemon_log()
    assert (f"this node's state database is at cluster version {newer} (written by cronrd "
            f"9.0.0); this cronrd {__version__} applies versions up to {V.APPLY_VERSION}: "
            "upgrade cronrd on this node to a newer release (the version the other members "
            "run), then start it again") in said, said
    # Nothing was changed: the offline status still reads the same state.
    res = node.cli("status")
    assert res.returncode == 0 and "jobs      1 (0 paused)" in res.stdout, res.stdout
    assert f"cluster   version {newer} (this node applies up to {V.APPLY_VERSION})" \
        in res.stdout
