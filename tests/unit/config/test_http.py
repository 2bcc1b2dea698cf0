"""The daemon config's ``http:`` section (cronrd/config/http.py)."""

from __future__ import annotations

import subprocess
import shutil

import pytest

from cronrd.config import HttpConfig, HttpTLS, load_config, parse_config
from cronrd.errors import ConfigError


def http(section):
    return parse_config({"node_id": "n1", "http": section}).http


def test_on_by_default_on_loopback_and_off_when_asked():
    assert parse_config({"node_id": "n1"}).http == HttpConfig(listen=("127.0.0.1", 8177))
    assert http({"enabled": False}).listen is None
    assert http(False).listen is None
    assert http({"listen": "127.0.0.1:9000"}).listen == ("127.0.0.1", 9000)
    assert http({"listen": "[::1]:9000"}).listen == ("::1", 9000)
    assert http({"listen": "localhost:0"}).listen == ("localhost", 0)  # any free port


def test_a_network_listen_needs_tls_or_the_insecure_word(tmp_path):
    with pytest.raises(ConfigError) as exc:
        http({"listen": "0.0.0.0:8177"})
    assert "http.listen 0.0.0.0:8177 is not a loopback address" in str(exc.value)
    assert "tls: {cert: FILE, key: FILE}" in str(exc.value)
    got = http({"listen": "0.0.0.0:8177", "insecure": {"allow_network": True}})
    assert got.listen == ("0.0.0.0", 8177) and got.insecure_network
    for name in ("c.pem", "k.pem", "ca.pem"):
        (tmp_path / name).write_text("x")
    got = http({"listen": "0.0.0.0:8177", "tls": {"cert": str(tmp_path / "c.pem"),
                                                  "key": str(tmp_path / "k.pem"),
                                                  "client_ca": str(tmp_path / "ca.pem")}})
    assert got.tls == HttpTLS(str(tmp_path / "c.pem"), str(tmp_path / "k.pem"),
                              str(tmp_path / "ca.pem"))
    # a network listen that is turned off needs nothing
    assert http({"listen": "0.0.0.0:8177", "enabled": False}).listen is None


@pytest.mark.parametrize("section, message", [
    ([1], "http must be a mapping such as"),
    ({"listen": "8177"}, "http.listen '8177' has no port"),
    ({"listen": "127.0.0.1:70000"}, "http.listen port '70000'"),
    ({"enabled": "no"}, "http.enabled must be true or false"),
    ({"listn": "127.0.0.1:1"}, "unknown key http.listn (did you mean 'listen'?)"),
    ({"insecure": True}, "http.insecure must be {allow_network: true}"),
    ({"insecure": {"allow": True}}, "unknown key http.insecure.allow"),
    ({"tls": {"cert": "/nonexistent/c.pem"}}, "http.tls.cert: /nonexistent/c.pem does not "
                                              "exist"),
    ({"tls": {"cert": "/etc"}}, "http.tls.key is required"),
    ({"tls": "yes"}, "http.tls must be a mapping {cert: FILE, key: FILE, client_ca: FILE}"),
])
def test_bad_sections_are_refused_with_what_to_do(section, message):
    with pytest.raises(ConfigError) as exc:
        parse_config({"node_id": "n1", "http": section}, "/etc/cronrd/cronrd.yaml")
    assert message in str(exc.value)


def test_a_problem_is_reported_at_its_line_and_column(tmp_path):
    path = tmp_path / "cronrd.yaml"
    path.write_text("node_id: n1\nhttp:\n  listen: 10.0.0.1:8177\n")
    with pytest.raises(ConfigError) as exc:
        load_config(str(path))
    assert str(exc.value).startswith(f"{path}:3:11: http.listen 10.0.0.1:8177 is not a "
                                     "loopback address")


def test_relative_tls_paths_are_relative_to_the_config_file(tmp_path):
    (tmp_path / "tls").mkdir()
    for name in ("web.crt", "web.key"):
        (tmp_path / "tls" / name).write_text("x")
    path = tmp_path / "cronrd.yaml"
    path.write_text("node_id: n1\nhttp:\n  listen: '[::]:8443'\n"
                    "  tls: {cert: tls/web.crt, key: tls/web.key}\n")
    cfg = load_config(str(path))
    assert cfg.http.tls == HttpTLS(str(tmp_path / "tls" / "web.crt"),
                                   str(tmp_path / "tls" / "web.key"))


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not installed")
def test_the_daemon_check_loads_the_tls_files(tmp_path):
    from cronrd.config.http import parse_http
    from cronrd.config.problems import ConfigProblems
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-subj", "/CN=web", "-days", "1",
                    "-keyout", str(tmp_path / "k.pem"), "-out", str(tmp_path / "c.pem")],
                   check=True, capture_output=True)
    (tmp_path / "other.pem").write_text("not a key\n")
    good = {"listen": "0.0.0.0:8443", "tls": {"cert": "c.pem", "key": "k.pem"}}
    report = ConfigProblems("cfg")
    assert parse_http(good, str(tmp_path), report, load_tls=True).tls is not None
    assert not report.problems
    bad = {"listen": "0.0.0.0:8443", "tls": {"cert": "c.pem", "key": "other.pem"}}
    report = ConfigProblems("cfg")
    parse_http(bad, str(tmp_path), report, load_tls=True)
    assert "is not the private key of" in str(report.problems[0])


def test_job_histograms_is_a_number_of_jobs():
    assert http({}).job_histograms == 10_000
    assert http({"job_histograms": 0}).job_histograms == 0
    assert http({"job_histograms": 200_000}).job_histograms == 200_000
    for bad in (-1, "many", True, 1.5):
        with pytest.raises(ConfigError, match="http.job_histograms must be a whole number"):
            http({"job_histograms": bad})


def test_client_roles_map_certificate_names_to_roles(tmp_path):
    for name in ("c.pem", "k.pem", "ca.pem"):
        (tmp_path / name).write_text("x")
    tls = {"cert": str(tmp_path / "c.pem"), "key": str(tmp_path / "k.pem"),
           "client_ca": str(tmp_path / "ca.pem")}
    got = http({"listen": "0.0.0.0:8443", "tls": {
        **tls, "client_roles": {"grafana": "viewer",
                                "deployer": {"role": "operator", "jobs": "etl-*"}}}})
    assert got.tls.client_roles == (("deployer", "operator", "etl-*"),
                                    ("grafana", "viewer", ""))
    bad = [({"client_roles": {"x": "root"}}, "client_roles.x: role must be one of viewer"),
           ({"client_roles": ["x"]}, "client_roles must be a mapping"),
           ({"client_roles": {"x": {"role": "viewer", "job": "a"}}}, "unknown keys ['job']"),
           ({"client_roles": {"x": {"role": "viewer", "jobs": 3}}}, "jobs must be a shell")]
    for extra, message in bad:
        with pytest.raises(ConfigError) as exc:
            http({"listen": "0.0.0.0:8443", "tls": {**tls, **extra}})
        assert message in str(exc.value)
    no_ca = {k: v for k, v in tls.items() if k != "client_ca"}
    with pytest.raises(ConfigError) as exc:
        http({"listen": "0.0.0.0:8443", "tls": {**no_ca, "client_roles": {"x": "viewer"}}})
    assert "client_roles needs http.tls.client_ca" in str(exc.value)


def test_metrics_auth_is_open_or_token():
    assert http({}).metrics_auth == "open"
    assert http({"metrics_auth": "token"}).metrics_auth == "token"
    with pytest.raises(ConfigError) as exc:
        http({"metrics_auth": "yes"})
    assert "http.metrics_auth must be open" in str(exc.value)
