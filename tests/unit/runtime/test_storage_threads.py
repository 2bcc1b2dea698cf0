"""A stray use of a connection from a second thread is found every time
(cronrd/runtime/storage.py: guard_thread), not only when both threads meet
and apsw refuses one of them."""

from __future__ import annotations

import logging
import threading

from cronrd.runtime.storage import guard_thread, open_db


def off_thread(fn) -> None:
    t = threading.Thread(target=fn, name="stray")
    t.start()
    t.join()


def test_a_statement_from_another_thread_is_logged_with_its_stack_once_per_site(
        tmp_path, caplog):
    conn = open_db(str(tmp_path / "state.db"))
    guard_thread(conn, "state")
    conn.execute("CREATE TABLE t(x)")
    with caplog.at_level(logging.ERROR, logger="cronrd.storage"):
        conn.execute("INSERT INTO t VALUES(1)")     # the owner's thread: nothing said
        assert caplog.records == []

        def stray_read():
            conn.execute("SELECT count(*) FROM t").fetchall()
        for _ in range(3):
            off_thread(stray_read)
    strays = [r.getMessage() for r in caplog.records]
    assert len(strays) == 1, strays       # the same call site: said once
    assert "event=conn_off_thread db=state thread=stray" in strays[0]
    assert "stray_read" in strays[0]      # where it came from
    # The statement itself still ran (the check says; it does not refuse).
    assert conn.execute("SELECT count(*) FROM t").fetchall() == [(1,)]

