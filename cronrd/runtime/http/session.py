"""The browser's session: a cookie with a secret of its own, and the CSRF
token every write from the browser must carry.

Logging in with an API token starts a session (StartSession through the
log, state/tokens.py): the cookie holds only the session's secret, random
and never the token's, and the replicated state only its sha256, bound to
the token as it was then. So any node checks a session, and a session ends
at logout (EndSession), when its token is revoked or expires, and
SESSION_TTL after login, whichever is first. Browsers send a cookie to every
port of its host name (cookies are not port-scoped, RFC 6265 section 8.5):
another service there may see the cookie, never the token, and the cookie
does not work as ``Authorization: Bearer``. Under TLS the cookie is named
``__Host-cronrd_session`` (Secure, Path=/, no Domain: no plain-HTTP page or
subdomain can set or read it). The CSRF token is an HMAC of a fixed label
keyed by the session's secret: any node can check it, a page of another
site can neither read it nor work it out.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

COOKIE = "cronrd_session"             # without TLS
HOST_COOKIE = "__Host-cronrd_session"  # under TLS
SESSION_TTL = 12 * 3600.0              # s a session lasts at most
SECRET_PREFIX = "s1."                   # a session's secret, never a token's
CSRF_HEADER = "X-CSRF-Token"
CSRF_FIELD = "csrf"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_LABEL = b"cronrd csrf v1"


def csrf_token(secret: str) -> str:
    """The CSRF token of the session whose cookie holds ``secret``."""
    return hmac.new(secret.encode(), _LABEL, hashlib.sha256).hexdigest()


def csrf_ok(secret: str, presented: str | None) -> bool:
    if not presented:
        return False
    return hmac.compare_digest(csrf_token(secret), presented)


def from_another_site(headers, scheme: str, host: str) -> bool:
    """Whether a browser says the request comes from another site's page
    (``Sec-Fetch-Site``, else ``Origin``; ``Origin: null`` is a sandboxed
    or opaque page). A client that is no browser sends neither."""
    if headers.get("Sec-Fetch-Site", "").lower() in ("cross-site", "same-site"):
        return True
    origin = headers.get("Origin")
    return origin is not None and origin != f"{scheme}://{host}"


def cookie_name(tls: bool) -> str:
    return HOST_COOKIE if tls else COOKIE


def session_cookie(cookies, tls: bool) -> str | None:
    """The session secret a request's cookies hold (under TLS only the
    ``__Host-`` cookie counts: another site's page on plain HTTP could have
    set the other name)."""
    value = cookies.get(cookie_name(tls))
    return value.strip() if value and value.strip() else None


def new_secret() -> str:
    """A fresh session secret (256 bits)."""
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def session_ends(token: dict, now: float, ttl: float = SESSION_TTL) -> float:
    """When a session begun ``now`` with ``token`` ends: SESSION_TTL later,
    or when the token expires, if that is sooner."""
    expires = token.get("expires_at")
    return now + ttl if expires is None else min(now + ttl, float(expires))


def cookie_options(tls: bool, max_age: float | None = None) -> dict:
    """aiohttp set_cookie arguments of the session cookie (``max_age``: the
    seconds the session has left; None: the browser's session)."""
    opts: dict = {"httponly": True, "samesite": "Strict", "secure": tls, "path": "/"}
    if max_age is not None:
        opts["max_age"] = max(0, int(max_age))
    return opts
