"""Shared fixtures. The helpers in tests/support/ (harness, cluster_harness,
raft_sim, ...) are imported as top-level modules (``from harness import
Node``): this puts that directory first on sys.path."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "support"))

from cluster_harness import Cluster  # noqa: E402
from fake_daemon import FakeDaemon  # noqa: E402
from harness import Node  # noqa: E402


def _factory(cls):
    """A fixture body: ``make(**kw)`` builds a ``cls``; all are cleaned up after."""
    made = []

    def make(**kw):
        obj = cls(**kw)
        made.append(obj)
        return obj
    yield make
    for obj in made:
        obj.cleanup()


@pytest.fixture
def node_factory():
    yield from _factory(Node)


@pytest.fixture
def node(node_factory):
    return node_factory()


@pytest.fixture
def cluster():
    """``cluster(**kw)`` starts nothing; it makes a cluster_harness.Cluster."""
    yield from _factory(Cluster)


@pytest.fixture
def daemon():
    """``daemon(cmd=result, ...)``: a fake daemon answering on a Unix socket
    (support/fake_daemon.py), for tests of the CLI."""
    yield from _factory(lambda **answers: FakeDaemon(answers))
