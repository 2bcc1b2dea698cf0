"""Client-certificate roles (mutual TLS) of the HTTP API through a real
daemon: a listed certificate acts with its role, an unlisted one from the
same CA and one from another CA get nothing, a token still works."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request

import pytest

from cronrd.runtime.peers import tls

pytestmark = pytest.mark.integration


def call(url: str, path: str, *, ca: str, cert=None, token=None) -> tuple[int, dict]:
    ctx = ssl.create_default_context(cafile=ca)
    if cert is not None:
        ctx.load_cert_chain(cert.cert, cert.key)
    req = urllib.request.Request(url + path, headers={"Authorization": f"Bearer {token}"}
                                 if token else {})
    try:
        with urllib.request.urlopen(req, timeout=10, context=ctx) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_a_client_certificate_acts_with_the_role_its_name_is_given(node_factory, tmp_path):
    pki, other = tmp_path / "pki", tmp_path / "other"
    pki.mkdir(), other.mkdir()
    tls.init_ca(pki)
    server = tls.issue_node_cert(pki, "web")
    grafana = tls.issue_node_cert(pki, "grafana")
    mallory = tls.issue_node_cert(pki, "mallory")      # same CA, not listed
    tls.init_ca(other)
    intruder = tls.issue_node_cert(other, "grafana")   # the listed name, another CA
    node = node_factory(http={"listen": "127.0.0.1:0", "tls": {
        "cert": server.cert, "key": server.key, "client_ca": server.ca,
        "client_roles": {"grafana": "viewer"}}})
    node.write_job("a", {"schedule": "@yearly", "command": "true"})
    node.start()
    url = node.call("status")["http"]
    assert url.startswith("https://127.0.0.1:")
    status, doc = call(url, "/api/v1/whoami", ca=server.ca, cert=grafana)
    assert status == 200 and doc["name"] == "cert:grafana" and doc["role"] == "viewer"
    status, doc = call(url, "/api/v1/jobs", ca=server.ca, cert=grafana)
    assert status == 200 and [j["name"] for j in doc["items"]] == ["a"]
    status, doc = call(url, "/api/v1/tokens", ca=server.ca, cert=grafana)
    assert status == 403 and doc["needed"] == "admin"      # a viewer, no more
    status, doc = call(url, "/api/v1/whoami", ca=server.ca, cert=mallory)
    assert status == 401                                   # a valid certificate, no role
    with pytest.raises((urllib.error.URLError, ConnectionError, ssl.SSLError)):  # refused
        call(url, "/api/v1/whoami", ca=server.ca, cert=intruder)
    assert call(url, "/api/v1/whoami", ca=server.ca)[0] == 401   # no certificate
    admin = node.cli("token", "create", "--name", "ops", "--role", "admin").stdout.strip()
    status, doc = call(url, "/api/v1/tokens", ca=server.ca, cert=grafana, token=admin)
    assert status == 200                                   # a token sent along wins
    assert node.proc.poll() is None and "event=http_handler_failed" not in node.daemon_log()
