"""Is a node's disk too slow to lead or to be given runs? (decisions/disk.py)"""

from __future__ import annotations

from cronrd.decisions.disk import (MIN_WRITES, SLOW, STALLED, WINDOW, disk_bar, slow_disk,
                                   slow_write)


def test_a_disk_is_slow_when_its_typical_write_of_late_is():
    now = 1000.0
    fast = [(now - i, 0.002) for i in range(10)]
    assert slow_write(fast, now) is None
    slow = [(now - i, 0.4) for i in range(5)]
    assert slow_write(slow, now) == 0.4
    # one slow fsync among fast ones is not a slow disk
    assert slow_write(fast + [(now, 1.0)], now) is None
    # too few writes to judge
    assert slow_write(slow[:MIN_WRITES - 1], now) is None
    # slow writes older than the window are forgotten: fast again
    assert slow_write([(now - WINDOW - 1, 0.4)] * 5 + fast[:3], now) is None
    assert slow_write([(now, SLOW)] * 3, now) is None          # at the bound: not over it


def test_the_leader_names_a_slow_disk_as_the_reason():
    assert disk_bar("a", {}) is None
    assert disk_bar("a", {"b": 0.4}) is None
    assert "400ms" in disk_bar("b", {"b": 0.4})


def test_a_write_under_way_for_half_a_second_is_a_slow_disk_at_once():
    now = 1000.0
    fast = [(now - i, 0.002) for i in range(10)]
    assert slow_disk(fast, None, now) is None                         # idle, fast
    assert slow_disk(fast, now - 0.1, now) is None                    # a write, not long yet
    assert slow_disk(fast, now - STALLED, now) == STALLED             # no need for three
    assert slow_disk([], now - 2.0, now) == 2.0                       # nothing written yet
    slow = [(now - i, 0.9) for i in range(5)]
    assert slow_disk(slow, None, now) == 0.9                          # the typical write
    assert slow_disk(slow, now - 1.5, now) == 1.5                     # the worse of the two
