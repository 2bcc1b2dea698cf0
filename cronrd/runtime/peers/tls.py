"""Certificates for the peer transport: one private CA per cluster, one
certificate per node (CN = node id, subjectAltName DNS:node id and
IP:127.0.0.1).

The certificates are made with the ``openssl`` command-line tool rather than a
Python library: the standard library's ``ssl`` module can use certificates but
not create them, and the ``cryptography`` package would add a large compiled
dependency to the self-contained binary for something an operator does once
per cluster (``cronrd cluster init-tls``) and that every host already has a
tool for. The price is a subprocess and a check that node ids are safe to put
in a subject and a DNS name (``cronrd.ids``).

Layout of ``dir``::

    ca.crt  ca.key              the cluster CA (keep ca.key off the nodes)
    <node>.crt  <node>.key      one pair per node; keys are mode 0600
"""

from __future__ import annotations

import os
import secrets
import shutil
import ssl
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from cronrd.config import TLSPaths
from cronrd.errors import ConfigError
from cronrd.ids import RULE, is_node_id

CA_CERT = "ca.crt"
CA_KEY = "ca.key"




def _openssl(*args: str, cwd: Path) -> None:
    exe = shutil.which("openssl")
    if exe is None:
        raise ConfigError("the openssl command is not installed; install it (e.g. apt-get install "
                          "openssl) to create cluster certificates")
    proc = subprocess.run([exe, *args], cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ConfigError(f"openssl {args[0]} failed in {cwd}: {proc.stderr.strip()[-500:]}")


def _check_id(node_id: str) -> None:
    if not is_node_id(node_id):
        raise ConfigError(f"node id {node_id!r} cannot be used in a certificate: {RULE}")


def _newkey_args() -> list[str]:
    return ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def _serial() -> str:
    return "0x" + secrets.token_hex(16)


def init_ca(dir: str | os.PathLike, days: int = 3650) -> tuple[str, str]:
    """Create ``ca.crt``/``ca.key`` in ``dir`` unless they exist; return their paths."""
    d = Path(dir)
    d.mkdir(parents=True, exist_ok=True)
    crt, key = d / CA_CERT, d / CA_KEY
    if crt.exists() and key.exists():
        return str(crt), str(key)
    old = os.umask(0o077)
    try:
        _openssl("req", "-x509", *_newkey_args(), "-keyout", CA_KEY, "-out", CA_CERT,
                 "-days", str(days), "-set_serial", _serial(), "-subj", "/CN=cronrd cluster CA",
                 "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)
    finally:
        os.umask(old)
    os.chmod(crt, 0o644)
    return str(crt), str(key)


# The organizational unit of a worker's certificate (``cronrd worker``, issue
# 34): signed by the cluster CA, but for a client only (no serverAuth), and
# refused on the peer port: a worker never speaks Raft, proposes nothing and
# is never admitted as a member, whatever its name.
WORKER_OU = "cronrd-worker"


def issue_node_cert(dir: str | os.PathLike, node_id: str, days: int = 365, *,
                    worker: bool = False) -> TLSPaths:
    """Issue (or re-issue) ``<node_id>.crt``/``.key`` signed by the CA in
    ``dir``; ``worker``: a worker's (OU cronrd-worker, client use only)."""
    _check_id(node_id)
    d = Path(dir)
    ca_crt, ca_key = d / CA_CERT, d / CA_KEY
    if not (ca_crt.exists() and ca_key.exists()):
        raise ConfigError(f"no cluster CA in {d} (expected {CA_CERT} and {CA_KEY}); "
                          f"run init_tls first")
    old = os.umask(0o077)
    try:
        with tempfile.TemporaryDirectory(dir=d, prefix=".issue-") as tmp:
            t = Path(tmp)
            (t / "ext.cnf").write_text(
                f"subjectAltName=DNS:{node_id},IP:127.0.0.1\n"
                "basicConstraints=critical,CA:FALSE\n"
                "keyUsage=critical,digitalSignature,keyEncipherment\n"
                + ("extendedKeyUsage=clientAuth\n" if worker else
                   "extendedKeyUsage=serverAuth,clientAuth\n"))
            subject = f"/OU={WORKER_OU}/CN={node_id}" if worker else f"/CN={node_id}"
            _openssl("req", "-new", *_newkey_args(), "-keyout", "node.key", "-out", "node.csr",
                     "-subj", subject, cwd=t)
            _openssl("x509", "-req", "-in", "node.csr", "-CA", str(ca_crt.resolve()),
                     "-CAkey", str(ca_key.resolve()), "-set_serial", _serial(),
                     "-days", str(days), "-extfile", "ext.cnf", "-out", "node.crt", cwd=t)
            os.chmod(t / "node.crt", 0o644)
            os.replace(t / "node.key", d / f"{node_id}.key")
            os.replace(t / "node.crt", d / f"{node_id}.crt")
    finally:
        os.umask(old)
    return TLSPaths(ca=str(ca_crt), cert=str(d / f"{node_id}.crt"), key=str(d / f"{node_id}.key"))


CA_DAYS = 3650
NODE_DAYS = 365
EXPIRY_WARNING_DAYS = 30


def cert_info(path: str) -> dict | None:
    """Serial (lower-case hex) and expiry of the certificate at ``path``, or
    None if there is none (read with openssl, like everything here)."""
    if not os.path.exists(path) or shutil.which("openssl") is None:
        return None
    proc = subprocess.run(["openssl", "x509", "-noout", "-serial", "-enddate", "-in", path],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        return None
    fields = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
    try:
        expires = ssl.cert_time_to_seconds(fields["notAfter"].strip())
        serial = format(int(fields["serial"].strip(), 16), "x")
    except (KeyError, ValueError):
        return None
    return {"serial": serial, "expires_at": float(expires),
            "not_after": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(expires))}


def cert_subject(path: str) -> dict[str, str] | None:
    """The subject of the certificate at ``path`` ({"CN": ..., "OU": ...}),
    or None if it cannot be read (read with openssl)."""
    if not os.path.exists(path) or shutil.which("openssl") is None:
        return None
    proc = subprocess.run(["openssl", "x509", "-noout", "-subject", "-nameopt", "RFC2253",
                           "-in", path], capture_output=True, text=True)
    if proc.returncode != 0:
        return None
    text = proc.stdout.strip().removeprefix("subject=").strip()
    return {k.strip(): v.strip() for k, _, v in
            (part.partition("=") for part in text.split(",")) if k.strip()}


def cert_status(info: dict | None, now: float, node_id: str) -> dict | None:
    """A node's certificate as `cronrd status` shows it (``info`` from
    ``cert_info``): serial, expiry, and a warning within EXPIRY_WARNING_DAYS
    of it."""
    if info is None:
        return None
    days = (info["expires_at"] - now) / 86400
    out = {"serial": info["serial"], "not_after": info["not_after"],
           "days_left": round(days, 1)}
    if days < EXPIRY_WARNING_DAYS:
        out["warning"] = (f"this node's certificate {'expired' if days < 0 else 'expires'} "
                          f"{info['not_after']}: issue a new one with `cronrd cluster "
                          f"rotate-cert {node_id} DIR` and restart cronrd here")
    return out


def init_tls(dir: str | os.PathLike, node_ids, days: int = NODE_DAYS,
             worker_ids=()) -> dict[str, TLSPaths]:
    """Create the cluster CA in ``dir`` (kept if it already exists) and one
    certificate and key per node id, and per worker name (a worker's: see
    WORKER_OU). Returns id -> paths."""
    ids, workers = list(node_ids), list(worker_ids)
    for n in ids + workers:
        _check_id(n)
    init_ca(dir, max(days, CA_DAYS))
    out = {n: issue_node_cert(dir, n, days) for n in ids}
    out.update({n: issue_node_cert(dir, n, days, worker=True) for n in workers})
    return out


# -- TLS contexts and verified certificates of the peer port (transport.py) ----------------
class TransportConfigError(ConfigError, ValueError):
    """The transport was configured in a way it refuses to run (e.g. plaintext)."""


def _load(ctx: ssl.SSLContext, tls: Any) -> ssl.SSLContext:
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    try:
        ctx.load_cert_chain(tls.cert, tls.key)
        ctx.load_verify_locations(cafile=tls.ca)
    except (OSError, ssl.SSLError) as exc:
        raise TransportConfigError(
            f"cannot load TLS files (ca={tls.ca}, cert={tls.cert}, key={tls.key}): {exc}; "
            f"create them with `cronrd cluster init-tls`") from exc
    return ctx


def server_context(tls: Any) -> ssl.SSLContext:
    """Server side: our certificate; a client certificate signed by the CA is required."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.verify_mode = ssl.CERT_REQUIRED
    return _load(ctx, tls)


def client_context(tls: Any) -> ssl.SSLContext:
    """Client side: our certificate; the server's must chain to the CA. Host
    names are not checked (``cert_names`` is checked against the node id)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_REQUIRED
    return _load(ctx, tls)


def cert_names(peercert: dict | None) -> set[str]:
    """The node ids a verified certificate vouches for: its CN(s) and SAN DNS names."""
    names: set[str] = set()
    if not peercert:
        return names
    for rdn in peercert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                names.add(value)
    for kind, value in peercert.get("subjectAltName", ()):
        if kind == "DNS":
            names.add(value)
    return names


def cert_is_worker(peercert: dict | None) -> bool:
    """Is a verified certificate a worker's (OU cronrd-worker)? Such a
    certificate never authenticates a member on the peer port."""
    for rdn in (peercert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "organizationalUnitName" and value == WORKER_OU:
                return True
    return False


def cert_serial(peercert: dict | None) -> str:
    """A verified certificate's serial number as lower-case hex ("" if none)."""
    raw = (peercert or {}).get("serialNumber") or ""
    try:
        return format(int(raw, 16), "x")
    except ValueError:
        return ""
