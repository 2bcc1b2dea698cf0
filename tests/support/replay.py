"""A state machine in memory fed one command at a time, each in its own
transaction at the next log index, as the one-member log does: a refused
command changes nothing but still takes its index. For the random-history
tests of tests/unit/state/."""

from __future__ import annotations

import apsw

from cronrd.errors import Refused
from cronrd.state.machine import StateMachine


class Replay:
    def __init__(self):
        self.sm = StateMachine(apsw.Connection(":memory:"))
        self.index = 0

    def apply(self, cmd):
        """The command's result, or the Refused it raised."""
        self.index += 1
        with self.sm.conn:
            try:
                return self.sm.apply(self.index, cmd)[0]
            except Refused as exc:
                return exc
