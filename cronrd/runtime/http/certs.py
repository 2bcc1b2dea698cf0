"""Client-certificate roles of the HTTP server (mutual TLS).

With ``http.tls.client_ca`` the server asks every client for a certificate
and Python's TLS layer accepts only ones that CA signed (a client without
one may still use a token). ``http.tls.client_roles`` then maps a
certificate's name, its subject CN or one of its DNS subjectAltNames, to a
role and optionally a job pattern: such a client acts without a token, as
the principal ``cert:NAME``, audited under that name. A certificate whose
name is not listed gets nothing from being presented: it needs a token like
anyone else. A token sent alongside a certificate wins (it is what the
client chose to act as).
"""

from __future__ import annotations


def names_of(peercert: dict | None) -> list[str]:
    """The names a verified certificate (``ssl.getpeercert()``) vouches for:
    its subject CNs, then its DNS subjectAltNames."""
    if not peercert:
        return []
    names = [value for rdn in peercert.get("subject", ()) for key, value in rdn
             if key == "commonName"]
    names += [value for kind, value in peercert.get("subjectAltName", ()) if kind == "DNS"]
    return names


def principal(peercert: dict | None, roles: tuple[tuple[str, str, str], ...]) -> dict | None:
    """The principal (shaped like a state/tokens.py row) of the first of the
    certificate's names that ``roles`` lists, or None."""
    if not roles:
        return None
    table = {name: (role, jobs) for name, role, jobs in roles}
    for name in names_of(peercert):
        if name in table:
            role, jobs = table[name]
            return {"name": f"cert:{name}", "role": role, "jobs": jobs,
                    "expires_at": None, "created_at": None, "node": None}
    return None
