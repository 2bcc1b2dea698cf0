"""The browser's session: a cookie that carries the API token's secret, and
the CSRF token every write from the browser must carry.

The cookie holds the token itself (HttpOnly, SameSite=Strict, Secure when
the server speaks TLS), so a session works on every node of the cluster:
tokens are replicated, nothing about the session is stored anywhere. The
CSRF token is an HMAC of a fixed label keyed by the secret: any node can
check it, a page of another site can neither read it nor work it out.
Logging out clears the cookie; the token stays valid until revoked
(`cronrd token revoke NAME`).
"""

from __future__ import annotations

import hashlib
import hmac

COOKIE = "cronrd_session"
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


def cookie_options(tls: bool) -> dict:
    """aiohttp set_cookie arguments of the session cookie (no max-age: it
    ends with the browser's session)."""
    return {"httponly": True, "samesite": "Strict", "secure": tls, "path": "/"}
