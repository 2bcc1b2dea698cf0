import pytest

from harness import Node


@pytest.fixture
def node_factory():
    nodes = []

    def make(**config):
        n = Node(**config)
        nodes.append(n)
        return n
    yield make
    for n in nodes:
        n.cleanup()


@pytest.fixture
def node(node_factory):
    return node_factory()
