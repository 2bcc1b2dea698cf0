"""The typed requests of the daemon and the cluster: status, explain,
reload, logs, membership and drains, API tokens and checkpoints (see
requests.py)."""

from __future__ import annotations

from typing import Any

TYPES: tuple[type[Any], ...] = ()
