"""The worker: section of a worker agent's config, and cluster.worker_listen."""

from __future__ import annotations

import pytest

from cronrd.config import load_config, parse_config
from cronrd.errors import ConfigError


def _tls(tmp_path, name="wk1"):
    for f in ("ca.crt", f"{name}.crt", f"{name}.key"):
        (tmp_path / f).write_text("x")
    return {"ca": str(tmp_path / "ca.crt"), "cert": str(tmp_path / f"{name}.crt"),
            "key": str(tmp_path / f"{name}.key")}


def _raw(tmp_path, **worker):
    section = {"servers": ["10.0.0.1:7100", "[::1]:7100"], "tls": _tls(tmp_path),
               "tags": ["gpu", "gpu", "eu"]}
    section.update(worker)
    return {"node_id": "wk1", "data_dir": str(tmp_path / "d"), "worker": section}


def test_a_worker_section_is_parsed(tmp_path):
    cfg = parse_config(_raw(tmp_path))
    assert cfg.cluster is None and cfg.worker is not None
    assert cfg.worker.servers == (("10.0.0.1", 7100), ("::1", 7100))
    assert cfg.worker.tags == ("gpu", "eu")   # a tag listed twice counts once
    assert cfg.worker.tls.cert.endswith("wk1.crt")


@pytest.mark.parametrize("over, message", [
    ({"servers": []}, "worker.servers must list 1 to 16 servers"),
    ({"servers": "10.0.0.1:7100"}, "worker.servers must list"),
    ({"servers": ["nohost"]}, "worker.servers[0]"),
    ({"servers": ["10.0.0.1:7100", "10.0.0.1:7100"]}, "lists '10.0.0.1:7100' twice"),
    ({"tls": None}, "worker.tls is required"),
    ({"tls": {"ca": "/nonexistent/ca.crt", "cert": "/x", "key": "/y"}},
     "worker.tls.ca: /nonexistent/ca.crt does not exist"),
    ({"tags": ["executor:container"]}, "announced by the worker itself"),
    ({"tags": "gpu"}, "worker.tags must be a list"),
    ({"tags": [""]}, "each entry of worker.tags must be a non-empty string"),
    ({"port": 1}, "unknown key"),
])
def test_a_bad_worker_section_says_what_to_fix(tmp_path, over, message):
    with pytest.raises(ConfigError) as exc:
        parse_config(_raw(tmp_path, **over))
    assert message in str(exc.value)


def test_a_config_is_a_members_or_a_workers_not_both(tmp_path):
    raw = _raw(tmp_path)
    raw["cluster"] = {"listen": "127.0.0.1:7000", "initial_members": {"wk1": "127.0.0.1:7000"},
                      "insecure": True}
    with pytest.raises(ConfigError, match="either cluster: .* or worker: "):
        parse_config(raw)


def _cluster(tmp_path, **over):
    cluster = {"listen": "127.0.0.1:7000", "initial_members": {"a": "127.0.0.1:7000"},
               "tls": _tls(tmp_path, "a")}
    cluster.update(over)
    return {"node_id": "a", "data_dir": str(tmp_path / "d"), "cluster": cluster}


def test_worker_listen_is_a_members_worker_port(tmp_path):
    cfg = parse_config(_cluster(tmp_path, worker_listen="0.0.0.0:7100"))
    assert cfg.cluster.worker_listen == ("0.0.0.0", 7100)
    assert parse_config(_cluster(tmp_path)).cluster.worker_listen is None
    with pytest.raises(ConfigError, match="must differ from cluster.listen"):
        parse_config(_cluster(tmp_path, worker_listen="127.0.0.1:7000"))
    with pytest.raises(ConfigError, match="worker_listen needs cluster.tls"):
        parse_config(_cluster(tmp_path, worker_listen="127.0.0.1:7100", tls=None,
                              insecure=True))


def test_a_worker_config_file_gives_line_numbers(tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text(f"node_id: wk1\ndata_dir: {tmp_path}/d\nworker:\n  servers: [nohost]\n"
                    f"  tls: {{ca: {tmp_path}/ca.crt, cert: {tmp_path}/c, key: {tmp_path}/k}}\n")
    with pytest.raises(ConfigError) as exc:
        load_config(str(path))
    assert f"{path}:4:" in str(exc.value) and "worker.servers[0]" in str(exc.value)
