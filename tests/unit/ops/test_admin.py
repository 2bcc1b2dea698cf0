"""The typed requests of `cronrd.ops.admin`: each registered under its
operation, each parsing what its clients send."""

from __future__ import annotations

from cronrd.ops import admin
from cronrd.ops.requests import REQUESTS


def test_every_type_is_registered_under_its_op():
    for cls in admin.TYPES:
        assert REQUESTS[cls.OP] is cls
