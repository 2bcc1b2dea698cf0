"""Certificates (runtime/peers/tls.py): what `cronrd status` says of this node's
certificate. Making them: test_transport.py (init_tls, used by every TLS
test there) and unit/test_cli_cluster.py (`cronrd cluster init-tls`)."""

from __future__ import annotations

import time

import pytest

from cronrd.runtime.peers.tls import (EXPIRY_WARNING_DAYS, cert_info, cert_status, init_ca,
                                issue_node_cert)

NOW = 1_800_000_000.0
DAY = 86400.0


def info(days_left: float) -> dict:
    return {"serial": "c0ffee", "expires_at": NOW + days_left * DAY,
            "not_after": "2027-01-15 08:00 UTC"}


def test_no_certificate_no_status():
    assert cert_status(None, NOW, "a") is None


def test_a_certificate_far_from_expiry_shows_its_serial_and_days_left():
    assert cert_status(info(200.04), NOW, "a") == {
        "serial": "c0ffee", "not_after": "2027-01-15 08:00 UTC", "days_left": 200.0}


@pytest.mark.parametrize("days, word", [(EXPIRY_WARNING_DAYS - 0.1, "expires"),
                                        (0.5, "expires"), (-3, "expired")])
def test_a_certificate_near_or_past_expiry_says_what_to_do(days, word):
    out = cert_status(info(days), NOW, "web-1")
    assert out["days_left"] == round(days, 1)
    assert out["warning"] == (f"this node's certificate {word} 2027-01-15 08:00 UTC: issue a "
                              "new one with `cronrd cluster rotate-cert web-1 DIR` and restart "
                              "cronrd here")


def test_the_status_of_a_real_certificate(tmp_path):
    init_ca(tmp_path)
    paths = issue_node_cert(tmp_path, "a", days=10)
    got = cert_info(paths.cert)
    assert got is not None and int(got["serial"], 16) > 0
    out = cert_status(got, time.time(), "a")
    assert 9 < out["days_left"] <= 10 and "rotate-cert a" in out["warning"]
    assert cert_info(str(tmp_path / "missing.crt")) is None
