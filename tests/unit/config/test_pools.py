"""The daemon config's ``pools:`` (cronrd/config/pools.py)."""

from __future__ import annotations

import pytest

from cronrd.config import PoolConfig, load_config, parse_config
from cronrd.errors import ConfigError


def test_pools_are_parsed_sorted_with_their_defaults():
    cfg = parse_config({"node_id": "n1", "pools": {"db": {"slots": 2},
                                                    "gpu": {"slots": 1, "scope": "node"}}})
    assert cfg.pools == (PoolConfig("db", 2, "cluster"), PoolConfig("gpu", 1, "node"))
    assert cfg.pool_map()["gpu"].scope == "node"
    assert parse_config({"node_id": "n1"}).pools == ()


@pytest.mark.parametrize("pools, message", [
    ([1], "pools must be a mapping of pool names"),
    ({"db": 2}, "pools.db must be a mapping {slots: N, scope: cluster|node}"),
    ({"db": {}}, "pools.db needs slots: N"),
    ({"db": {"slots": 0}}, "pools.db.slots must be a whole number from 1 to 100000 (got 0)"),
    ({"db": {"slots": True}}, "pools.db.slots must be a whole number"),
    ({"db": {"slots": 1, "scope": "host"}}, "pools.db.scope must be cluster"),
    ({"db": {"slot": 1}}, "unknown key pools.db.slot (did you mean 'slots'?)"),
    ({"-db": {"slots": 1}}, "pool name '-db' is not valid"),
])
def test_bad_pools_are_refused_with_what_to_do(pools, message):
    with pytest.raises(ConfigError) as exc:
        parse_config({"node_id": "n1", "pools": pools}, "/etc/cronrd/cronrd.yaml")
    assert message in str(exc.value)


def test_a_bad_pool_is_reported_at_its_line_and_column(tmp_path):
    path = tmp_path / "cronrd.yaml"
    path.write_text("node_id: n1\npools:\n  db:\n    slots: many\n")
    with pytest.raises(ConfigError) as exc:
        load_config(str(path))
    assert str(exc.value).startswith(f"{path}:4:12: pools.db.slots must be a whole number")
