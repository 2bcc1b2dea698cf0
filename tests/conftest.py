import pytest

from cluster_harness import Cluster
from harness import Node


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
