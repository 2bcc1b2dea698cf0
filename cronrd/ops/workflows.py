"""The typed requests about workflows: backfills, reruns, alerts, the dead
letter, pools, the audit log and notifications (see requests.py)."""

from __future__ import annotations

from typing import Any

TYPES: tuple[type[Any], ...] = ()
