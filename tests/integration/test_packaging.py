"""The Debian package (packaging/build-deb), checked from the outside.

Skipped unless CRONRD_DEB names the package to test, e.g.

    packaging/build-binary && packaging/build-deb && \\
        CRONRD_DEB=dist/cronrd_0.1.0_amd64.deb .venv/bin/python -m pytest tests/integration/test_packaging.py

The maintainer scripts' syntax is checked from the source tree either way.

Nothing touches the host: the package is unpacked with `dpkg -x`, and the
install / upgrade / remove / reinstall / purge cycle runs with
`dpkg --root=SCRATCH --force-script-chrootless`, where the maintainer scripts
run on the host with DPKG_ROOT=SCRATCH, which they honour (they start and stop
nothing then, and write only below DPKG_ROOT).
"""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from cronrd import __version__
from cronrd.config import load_config

REPO = Path(__file__).resolve().parents[2]
_deb = os.environ.get("CRONRD_DEB")
DEB = str((REPO / _deb).resolve()) if _deb else ""
needs_deb = pytest.mark.skipif(not _deb, reason="set CRONRD_DEB=dist/cronrd_VERSION_amd64.deb "
                               "(built by packaging/build-deb) to test the package")
needs_dpkg = pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="dpkg-deb is missing")

SCRIPTS = ["postinst", "prerm", "postrm"]
CONFFILES = ["/etc/cronrd/cronrd.yaml", "/etc/cronrd.d/README"]


def run(*argv: str, **kw) -> subprocess.CompletedProcess:
    res = subprocess.run(list(argv), capture_output=True, text=True, timeout=120, **kw)
    assert res.returncode == 0, f"{' '.join(argv)}: {res.stdout}{res.stderr}"
    return res


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


@pytest.mark.parametrize("script", SCRIPTS)
def test_maintainer_scripts_parse_with_posix_sh(script):
    path = REPO / "packaging" / "debian" / script
    assert os.access(path, os.X_OK)
    assert path.read_text().startswith("#!/bin/sh\n")
    for sh in ("sh", "dash", "bash"):
        if shutil.which(sh):
            run(sh, "-n", str(path))
    if shutil.which("checkbashisms"):
        run("checkbashisms", str(path))


# -- the package's contents ----------------------------------------------------------
@pytest.fixture(scope="module")
def unpacked(tmp_path_factory):
    if not _deb:
        pytest.skip("CRONRD_DEB is not set")
    if shutil.which("dpkg-deb") is None:
        pytest.skip("dpkg-deb is missing")
    root = tmp_path_factory.mktemp("deb")
    run("dpkg-deb", "-x", DEB, str(root))
    run("dpkg-deb", "-e", DEB, str(root / "DEBIAN"))
    return root


@needs_deb
def test_package_name_and_fields():
    assert Path(DEB).name == f"cronrd_{__version__}_amd64.deb"
    fields = dict(line.split(": ", 1) for line in
                  run("dpkg-deb", "-f", DEB).stdout.splitlines() if ": " in line)
    assert fields["Package"] == "cronrd"
    assert fields["Version"] == __version__
    assert fields["Architecture"] == "amd64"
    # Everything but glibc is inside the binary.
    assert fields["Depends"].startswith("libc6 (>= 2.")
    assert "," not in fields["Depends"]


@needs_deb
def test_files_land_where_documented(unpacked):
    r = unpacked
    binary = r / "usr/bin/cronrd"
    assert binary.is_file() and mode(binary) == 0o755
    assert binary.read_bytes()[:4] == b"\x7fELF"
    unit = r / "lib/systemd/system/cronrd.service"
    assert unit.read_text() == (REPO / "systemd/cronrd.service").read_text()
    assert "ExecStart=/usr/bin/cronrd daemon --config /etc/cronrd/cronrd.yaml" in unit.read_text()
    for page, src in (("man8/cronrd.8.gz", "man/cronrd.8"), ("man5/cronrd.d.5.gz", "man/cronrd.d.5")):
        gz = r / "usr/share/man" / page
        raw = gz.read_bytes()
        # gzip -9n: no file name (FLG.FNAME unset), no timestamp, best compression.
        assert raw[:2] == b"\x1f\x8b" and raw[3] & 0x08 == 0 and raw[4:8] == b"\0\0\0\0"
        assert raw[8] == 2  # XFL: maximum compression
        assert gzip.decompress(raw) == (REPO / src).read_bytes()
        assert mode(gz) == 0o644
    conf = r / "etc/cronrd/cronrd.yaml"
    cfg = load_config(str(conf))  # all defaults, so the unit's ExecStart works as is
    assert (cfg.data_dir, cfg.jobs_dir, cfg.log_dir, cfg.socket) == (
        "/var/lib/cronrd", "/etc/cronrd.d", "/var/log/cronrd", "/run/cronrd/cronrd.sock")
    readme = r / "etc/cronrd.d/README"
    assert "cronrd.d(5)" in readme.read_text()
    assert [p.name for p in (r / "etc/cronrd.d").iterdir()] == ["README"]
    assert mode(r / "var/lib/cronrd") == 0o700 and not any((r / "var/lib/cronrd").iterdir())
    assert mode(r / "var/log/cronrd") == 0o750
    assert (r / "usr/share/doc/cronrd/copyright").is_file()
    assert (r / "usr/share/doc/cronrd/changelog.gz").is_file()
    assert (r / "usr/share/lintian/overrides/cronrd").is_file()
    # Nothing else: every file is one of the above.
    files = sorted(str(p.relative_to(r)) for p in r.rglob("*")
                   if not p.is_dir() and p.parts[len(r.parts)] != "DEBIAN")
    assert files == sorted([
        "etc/cronrd.d/README", "etc/cronrd/cronrd.yaml", "lib/systemd/system/cronrd.service",
        "lib/systemd/system/cronrd-worker.service",
        "usr/bin/cronrd", "usr/share/doc/cronrd/changelog.gz",
        "usr/share/doc/cronrd/copyright", "usr/share/lintian/overrides/cronrd",
        "usr/share/man/man5/cronrd.d.5.gz", "usr/share/man/man8/cronrd.8.gz",
        "usr/share/bash-completion/completions/cronrd",
        "usr/share/zsh/vendor-completions/_cronrd",
        "usr/share/fish/vendor_completions.d/cronrd.fish"])
    bash = (r / "usr/share/bash-completion/completions/cronrd").read_text()
    assert "_CRONRD_COMPLETE" in bash and mode(r / "usr/share/bash-completion/completions/"
                                                "cronrd") == 0o644


@needs_deb
def test_control_area(unpacked):
    ctl = unpacked / "DEBIAN"
    assert (ctl / "conffiles").read_text().split() == CONFFILES
    for script in SCRIPTS:
        assert mode(ctl / script) == 0o755
        run("sh", "-n", str(ctl / script))
    assert "@BUNDLE@" not in (ctl / "postinst").read_text()
    for line in (ctl / "md5sums").read_text().splitlines():
        digest, name = line.split(None, 1)
        assert hashlib.md5((unpacked / name).read_bytes()).hexdigest() == digest, name


@needs_deb
def test_installed_binary_runs_and_ignores_the_readme(unpacked, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["CRONRD_CACHE_DIR"] = str(tmp_path / "cache")
    res = run(str(unpacked / "usr/bin/cronrd"), "--version", env=env)
    assert re.fullmatch(rf"cronrd, version {re.escape(__version__)} \(commit [0-9a-f]{{12}}\)",
                        res.stdout.strip()), res.stdout
    res = run(str(unpacked / "usr/bin/cronrd"), "validate", "--no-permissions",
              str(unpacked / "etc/cronrd.d"), env=env)
    assert "0 job(s) valid" in res.stderr


@needs_deb
@pytest.mark.parametrize("page", ["man8/cronrd.8.gz", "man5/cronrd.d.5.gz"])
def test_man_renders_the_packaged_pages_without_warnings(unpacked, page):
    if shutil.which("man") is None:
        pytest.skip("man is not installed (apt-get install man-db)")
    res = subprocess.run(["man", "--warnings", "-l", str(unpacked / "usr/share/man" / page)],
                         capture_output=True, text=True, timeout=60,
                         env={**os.environ, "MANWIDTH": "80", "MAN_KEEP_FORMATTING": "",
                              "PAGER": "cat", "MANPAGER": "cat"})
    assert res.returncode == 0, res.stderr
    assert res.stderr == "", res.stderr
    assert "NAME" in res.stdout and "cronrd" in res.stdout


# -- install, upgrade, remove, reinstall, purge in a scratch root ---------------------
class ScratchRoot:
    def __init__(self, path: Path):
        self.root = path
        admin = path / "var/lib/dpkg"
        for d in ("info", "updates", "triggers"):
            (admin / d).mkdir(parents=True)
        (admin / "status").touch()
        (admin / "available").touch()

    def dpkg(self, *args: str) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if k != "DPKG_ROOT"}
        return run("dpkg", f"--root={self.root}", "--force-script-chrootless",
                   "--force-depends", "--log=/dev/null", *args, env=env)

    def __truediv__(self, rel: str) -> Path:
        return self.root / rel

    def status(self) -> str:
        res = subprocess.run(["dpkg-query", f"--admindir={self.root}/var/lib/dpkg", "-W",
                              "-f", "${Status}", "cronrd"], capture_output=True, text=True)
        return res.stdout if res.returncode == 0 else "not-installed"


@needs_deb
@needs_dpkg
def test_install_upgrade_remove_purge_cycle(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("dpkg --root needs root to set file owners")
    r = ScratchRoot(tmp_path / "root")
    wants = r / "etc/systemd/system/multi-user.target.wants/cronrd.service"
    helper = shutil.which("deb-systemd-helper") is not None

    # Install: files in place, directories made, the unit enabled (not started:
    # with DPKG_ROOT set nothing is started, and in a real install a fresh
    # /etc/cronrd.d has no jobs).
    out = r.dpkg("-i", DEB)
    assert "Setting up cronrd" in out.stdout
    assert r.status() == "install ok installed"
    assert (r / "usr/bin/cronrd").is_file()
    assert mode(r / "var/lib/cronrd") == 0o700 and mode(r / "var/log/cronrd") == 0o750
    if helper:
        assert wants.is_symlink() and os.readlink(wants) == "/lib/systemd/system/cronrd.service"

    # The daemon has run: state, a run log, a job file, an edited conffile.
    (r / "var/lib/cronrd/state.db").write_bytes(b"state")
    (r / "var/log/cronrd/job").mkdir()
    (r / "var/log/cronrd/job/run.log").write_text("output\n")
    job = r / "etc/cronrd.d/backup.yaml"
    job.write_text('schedule: "@daily"\ncommand: "true"\n')
    conf = r / "etc/cronrd/cronrd.yaml"
    conf.write_text(conf.read_text() + "log_level: debug\n")
    cache_old = r / "var/cache/cronrd/0.0.9-0000000000000000"
    cache_old.mkdir(parents=True)

    # Upgrade (same version again: prerm upgrade, unpack, postinst configure
    # OLD): state, logs, jobs and the edited conffile stay; the scripts are
    # idempotent; stale unpacked copies of the binary are pruned.
    r.dpkg("-i", DEB)
    assert r.status() == "install ok installed"
    assert (r / "var/lib/cronrd/state.db").read_bytes() == b"state"
    assert (r / "var/log/cronrd/job/run.log").read_text() == "output\n"
    assert job.exists() and conf.read_text().endswith("log_level: debug\n")
    assert not cache_old.exists()
    if helper:
        assert wants.is_symlink()

    # Remove: the program goes, everything the administrator wants back stays.
    r.dpkg("--remove", "cronrd")
    assert r.status() == "deinstall ok config-files"
    assert not (r / "usr/bin/cronrd").exists()
    assert not (r / "lib/systemd/system/cronrd.service").exists()
    assert (r / "var/lib/cronrd/state.db").exists() and job.exists() and conf.exists()
    assert (r / "var/log/cronrd/job/run.log").exists()
    if helper:  # masked, so leftover enablement cannot start a missing daemon
        assert os.readlink(r / "etc/systemd/system/cronrd.service") == "/dev/null"

    # Reinstall after remove: the state is picked up again, unmasked.
    r.dpkg("-i", DEB)
    assert r.status() == "install ok installed"
    assert (r / "var/lib/cronrd/state.db").read_bytes() == b"state"
    assert not (r / "etc/systemd/system/cronrd.service").exists()

    # Purge: state, logs, the cache, conffiles and enablement go; job files
    # the administrator wrote stay.
    r.dpkg("--purge", "cronrd")
    assert r.status() == "not-installed"
    for gone in ("var/lib/cronrd", "var/log/cronrd", "var/cache/cronrd", "etc/cronrd",
                 "etc/cronrd.d/README", "usr/bin/cronrd"):
        assert not (r / gone).exists(), gone
    assert job.read_text().startswith("schedule")
    assert not wants.exists() and not (r / "etc/systemd/system/cronrd.service").exists()
