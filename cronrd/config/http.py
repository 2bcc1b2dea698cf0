"""The ``http:`` section of the daemon config -> ``HttpConfig``: where the web
UI, the HTTP API and ``/metrics`` listen, and how a listener that others can
reach is protected (TLS, or the explicit word that the network is trusted).

On by default on loopback (``127.0.0.1:8177``); ``http: {enabled: false}``
(or ``http: false``) turns it off. A ``listen`` that is not a loopback
address needs ``tls: {cert, key[, client_ca]}`` or ``insecure:
{allow_network: true}``. Port 0 picks a free port (``cronrd status`` shows
the one bound)."""

from __future__ import annotations

import os
import stat

from .addresses import format_address, is_loopback, parse_address
from .model import HTTP_KEYS, HTTP_TLS_KEYS, DEFAULT_HTTP_LISTEN, HttpConfig, HttpTLS
from .problems import ConfigProblems

H = ("http",)
_EXAMPLE = "http: {listen: \"127.0.0.1:8177\"}"


def parse_http(raw: object, base: str, report: ConfigProblems, *,
               load_tls: bool = False) -> HttpConfig:
    """The ``http:`` section (None: the default, on at 127.0.0.1:8177);
    problems go to ``report`` (the default is returned with them)."""
    if raw is None:
        return HttpConfig()
    if raw is False:
        return HttpConfig(listen=None)
    if raw is True:
        return HttpConfig()
    if not isinstance(raw, dict):
        report.add(H, f"http must be a mapping such as {_EXAMPLE}, or {{enabled: false}} to "
                      f"turn the web UI, API and /metrics off (got {type(raw).__name__})")
        return HttpConfig()
    before = len(report.problems)
    for key in raw:
        if key not in HTTP_KEYS:
            report.unknown(H, key, HTTP_KEYS)
    enabled = raw.get("enabled", True)
    if not isinstance(enabled, bool):
        report.add(H + ("enabled",), f"http.enabled must be true or false (got {enabled!r})")
        enabled = True
    listen = parse_address(DEFAULT_HTTP_LISTEN)
    if "listen" in raw:
        try:
            listen = parse_listen(raw["listen"])
        except ValueError as exc:
            report.add(H + ("listen",), f"http.listen {exc}")
    insecure_network = _parse_insecure(raw.get("insecure"), report)
    job_histograms = raw.get("job_histograms", HttpConfig.job_histograms)
    if not isinstance(job_histograms, int) or isinstance(job_histograms, bool) \
            or job_histograms < 0:
        report.add(H + ("job_histograms",),
                   f"http.job_histograms must be a whole number of jobs, 0 or more (got "
                   f"{job_histograms!r}): /metrics gives per-job histograms while there are "
                   "at most that many jobs (0: never; the cluster-wide ones are always there)")
        job_histograms = HttpConfig.job_histograms
    metrics_auth = raw.get("metrics_auth", HttpConfig.metrics_auth)
    if metrics_auth not in ("open", "token"):
        report.add(H + ("metrics_auth",),
                   f"http.metrics_auth must be open (whoever reaches the port reads /metrics) "
                   f"or token (a viewer token, as Prometheus' authorization: credentials) "
                   f"(got {metrics_auth!r})")
        metrics_auth = HttpConfig.metrics_auth
    tls = None
    if raw.get("tls") is not None:
        tls = _parse_tls(raw["tls"], base, report)
        if tls is not None and load_tls:
            _load_tls(tls, report)
        if insecure_network:
            report.add(H + ("insecure",), "http has both tls and insecure; remove insecure "
                                          "to serve HTTPS (or remove tls to serve plain HTTP "
                                          "on a trusted network)")
    if enabled and not is_loopback(listen[0]) and raw.get("tls") is None \
            and not insecure_network and len(report.problems) == before:
        report.add(H + ("listen",),
                   f"http.listen {format_address(listen)} is not a loopback address, so others "
                   "can reach the web UI and API: add tls: {cert: FILE, key: FILE} (and "
                   "client_ca: FILE to ask for client certificates), or, only on a trusted "
                   "network, insecure: {allow_network: true}; or listen on 127.0.0.1")
    if len(report.problems) > before:
        return HttpConfig()
    return HttpConfig(listen=listen if enabled else None, tls=tls,
                      insecure_network=insecure_network, job_histograms=job_histograms,
                      metrics_auth=metrics_auth)


def parse_listen(value: object) -> tuple[str, int]:
    """``HOST:PORT`` as for the peers, where port 0 means any free port."""
    if isinstance(value, str) and value.strip().endswith(":0"):
        host, _ = parse_address(value.strip()[:-1] + "1")
        return host, 0
    return parse_address(value)


def _parse_insecure(value: object, report: ConfigProblems) -> bool:
    if value is None or value is False:
        return False
    key = H + ("insecure",)
    if isinstance(value, dict) and set(value) <= {"allow_network"} and \
            value.get("allow_network") is True:
        return True
    if isinstance(value, dict):
        for name in value:
            if name != "allow_network":
                report.unknown(key, name, ("allow_network",))
                return False
    report.add(key, f"http.insecure must be {{allow_network: true}} (got {value!r}): the "
                    "explicit word that plain HTTP may listen on a non-loopback address; "
                    "leave it out on loopback")
    return False


_WHAT = {"cert": "the server's certificate (PEM, with its chain)",
         "key": "the certificate's private key (PEM)",
         "client_ca": "the CA whose client certificates are accepted (PEM)"}


def _parse_tls(raw: object, base: str, report: ConfigProblems) -> HttpTLS | None:
    T = H + ("tls",)
    if not isinstance(raw, dict):
        report.add(T, "http.tls must be a mapping {cert: FILE, key: FILE, client_ca: FILE}")
        return None
    before = len(report.problems)
    for key in raw:
        if key not in HTTP_TLS_KEYS:
            report.unknown(T, key, HTTP_TLS_KEYS)
    files: dict[str, str] = {}
    for key in HTTP_TLS_KEYS:
        value = raw.get(key)
        if key == "client_roles" or value is None and key == "client_ca":
            continue
        if not isinstance(value, str) or not value:
            report.add(T + (key,), f"http.tls.{key} is required: the path of {_WHAT[key]}")
            continue
        full = os.path.normpath(os.path.join(base, os.path.expanduser(value)))
        try:
            st = os.stat(full)
        except (FileNotFoundError, NotADirectoryError):
            report.add(T + (key,), f"http.tls.{key}: {full} does not exist; point it at "
                                   f"{_WHAT[key]} (relative paths are relative to the "
                                   "config file's directory)")
            continue
        except PermissionError:
            st = None  # the CLI as another user; the daemon checks it
        if st is not None and not stat.S_ISREG(st.st_mode):
            report.add(T + (key,), f"http.tls.{key}: {full} is not a regular file; point it "
                                   f"at {_WHAT[key]}")
            continue
        files[key] = full
    roles = _parse_client_roles(raw.get("client_roles"), "client_ca" in files, report)
    if len(report.problems) > before:
        return None
    return HttpTLS(cert=files["cert"], key=files["key"], client_ca=files.get("client_ca"),
                   client_roles=roles)


_ROLES = ("viewer", "operator", "admin")


def _parse_client_roles(raw: object, has_ca: bool, report: ConfigProblems
                        ) -> tuple[tuple[str, str, str], ...]:
    """``client_roles: {NAME: ROLE | {role: ROLE, jobs: GLOB}}``."""
    T = H + ("tls", "client_roles")
    if raw is None:
        return ()
    if not isinstance(raw, dict) or not raw:
        report.add(T, "http.tls.client_roles must be a mapping {CERTIFICATE_NAME: ROLE} "
                      "(or {CERTIFICATE_NAME: {role: ROLE, jobs: GLOB}})")
        return ()
    if not has_ca:
        report.add(T, "http.tls.client_roles needs http.tls.client_ca: the CA whose client "
                      "certificates are checked before their names are trusted")
        return ()
    out = []
    for name, value in raw.items():
        if not isinstance(name, str) or not name or len(name) > 255:
            report.add(T, f"http.tls.client_roles: {name!r} is not a certificate name (the "
                          "subject CN or a DNS subjectAltName of the client certificate)")
            continue
        role, jobs = value, ""
        if isinstance(value, dict):
            extra = set(value) - {"role", "jobs"}
            if extra:
                report.add(T + (name,), f"http.tls.client_roles.{name}: unknown keys "
                                        f"{sorted(extra)}; use role and jobs")
                continue
            role, jobs = value.get("role"), value.get("jobs", "")
        if role not in _ROLES:
            report.add(T + (name,), f"http.tls.client_roles.{name}: role must be one of "
                                    f"{', '.join(_ROLES)} (got {role!r})")
            continue
        if not isinstance(jobs, str) or len(jobs) > 200:
            report.add(T + (name,), f"http.tls.client_roles.{name}: jobs must be a shell "
                                    "pattern of job names such as 'etl-*' (or left out: all)")
            continue
        out.append((name, role, jobs))
    return tuple(sorted(out))


def _load_tls(tls: HttpTLS, report: ConfigProblems) -> None:
    """Load the files as the server will at start (a file this user may not
    read is left to the daemon)."""
    import ssl
    T = H + ("tls",)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        ctx.load_cert_chain(tls.cert, tls.key)
    except PermissionError:
        return
    except (OSError, ssl.SSLError) as exc:
        report.add(T + ("key",), f"http.tls: {tls.key} is not the private key of {tls.cert}, "
                                 f"or they are not PEM ({getattr(exc, 'reason', None) or exc})")
        return
    if tls.client_ca:
        try:
            ctx.load_verify_locations(cafile=tls.client_ca)
        except PermissionError:
            return
        except (OSError, ssl.SSLError) as exc:
            report.add(T + ("client_ca",), f"http.tls.client_ca: {tls.client_ca} is not a PEM "
                                           f"certificate ({getattr(exc, 'reason', None) or exc})")
