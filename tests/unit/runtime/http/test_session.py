"""The browser session's cookie and CSRF token (cronrd/runtime/http/session.py)."""

from cronrd.runtime.http.session import cookie_options, csrf_ok, csrf_token


def test_the_csrf_token_is_the_secrets_own_on_every_node():
    a = csrf_token("crd_one")
    assert a == csrf_token("crd_one")  # no state: any node works it out
    assert a != csrf_token("crd_two") and len(a) == 64
    assert "crd_one" not in a


def test_only_the_sessions_own_csrf_token_passes():
    good = csrf_token("crd_one")
    assert csrf_ok("crd_one", good)
    for bad in (None, "", good.upper(), csrf_token("crd_two"), good[:-1]):
        assert not csrf_ok("crd_one", bad)


def test_the_cookie_is_httponly_strict_and_secure_with_tls():
    assert cookie_options(False) == {"httponly": True, "samesite": "Strict", "secure": False,
                                     "path": "/"}
    assert cookie_options(True)["secure"] is True
