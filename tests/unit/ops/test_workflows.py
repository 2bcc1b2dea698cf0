"""The typed requests of `cronrd.ops.workflows`: each registered under its
operation, each parsing what its clients send."""

from __future__ import annotations

from cronrd.ops import workflows
from cronrd.ops.requests import REQUESTS


def test_every_type_is_registered_under_its_op():
    for cls in workflows.TYPES:
        assert REQUESTS[cls.OP] is cls
