"""The man pages and the systemd unit: lint-clean, complete, and loadable.

The linters are external tools; each test is skipped when its tool is
missing. ``systemd-analyze verify`` is run on a temporary copy of the unit
whose ExecStart points at an executable that exists here (/usr/bin/cronrd is
not installed on a development machine), with the two man pages copied into
a temporary MANPATH so the unit's Documentation=man:... references are
checked too (``--man=no`` when ``man`` itself is missing).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from cronrd.cli import main as cli_main
from cronrd.cli.base import every_command
from cronrd.config import KNOWN_KEYS
from cronrd.jobspec import JOB_KEYS

ROOT = Path(__file__).resolve().parents[2]
PAGE8 = ROOT / "man" / "cronrd.8"
PAGE5 = ROOT / "man" / "cronrd.d.5"
PAGES = [PAGE8, PAGE5]
UNIT = ROOT / "systemd" / "cronrd.service"


def _run(argv: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, **kw)


def _plain(page: Path) -> str:
    """The page source with roff escapes for '-' undone, for word searches."""
    return page.read_text(encoding="utf-8").replace("\\-", "-").replace("\\&", "")


# -- (a) groff ---------------------------------------------------------------------
@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_groff_reports_nothing(page):
    if shutil.which("groff") is None:
        pytest.skip("groff is not installed")
    res = _run(["groff", "-man", "-ww", "-z", str(page)])
    assert res.returncode == 0, res.stderr
    assert res.stdout == "" and res.stderr == "", res.stdout + res.stderr


# -- (b) mandoc --------------------------------------------------------------------
@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_mandoc_lint_has_no_warnings(page):
    if shutil.which("mandoc") is None:
        pytest.skip("mandoc is not installed (apt-get install mandoc)")
    res = _run(["mandoc", "-T", "lint", "-W", "warning", str(page)])
    assert res.stdout == "" and res.stderr == "", res.stdout + res.stderr
    assert res.returncode == 0


# -- (c) completeness ----------------------------------------------------------------
def test_every_cli_command_is_documented():
    text = _plain(PAGE8)
    missing = [name for name in every_command()
               if not re.search(rf"^\.B {re.escape(name)}\b", text, re.M)]
    assert not missing, f"commands without an entry in man/cronrd.8: {missing}"


def test_every_cli_option_is_documented():
    text = _plain(PAGE8)
    missing = []
    for name, cmd in list(every_command().items()) + [("", cli_main)]:
        for param in cmd.params:
            for opt in list(getattr(param, "opts", [])) + list(
                    getattr(param, "secondary_opts", [])):
                if opt.startswith("-") and opt not in text:
                    missing.append(f"{name} {opt}".strip())
    assert not missing, f"options missing from man/cronrd.8: {missing}"


def test_every_config_key_is_documented():
    text = _plain(PAGE8)
    keys = [k for k in KNOWN_KEYS if k != "cluster"] + [
        "max_age", "max_files_per_job", "mode", "grace"]
    missing = [k for k in keys if not re.search(rf"^\.(B|BR) {re.escape(k)}\b", text, re.M)]
    assert not missing, f"config keys without an entry in man/cronrd.8: {missing}"


def test_every_job_key_is_documented():
    text = _plain(PAGE5)
    missing = [k for k in JOB_KEYS if not re.search(rf"^\.(B|BR) {re.escape(k)}\b", text, re.M)]
    assert not missing, f"job keys without an entry in man/cronrd.d.5: {missing}"


def test_job_environment_is_documented():
    text = _plain(PAGE8)
    for var in ("PATH", "SHELL", "HOME", "USER", "LOGNAME", "LANG", "CRONRD_JOB",
                "CRONRD_RUN_ID", "CRONRD_FIRE_TIME", "CRONRD_ATTEMPT", "CRONRD_RUN_KEY",
                "CRONRD_NODE", "CRONRD_LOG_PATH"):
        assert var in text, var


# -- (d) systemd-analyze verify -----------------------------------------------------------
def test_unit_passes_systemd_analyze_verify(tmp_path):
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed")
    unit = UNIT.read_text(encoding="utf-8")
    exe = shutil.which("true") or "/bin/true"
    copy, n = re.subn(r"^ExecStart=/usr/bin/cronrd ", f"ExecStart={exe} ", unit, flags=re.M)
    assert n == 1, "expected exactly one ExecStart=/usr/bin/cronrd line"
    path = tmp_path / "cronrd.service"
    path.write_text(copy, encoding="utf-8")
    env = dict(os.environ)
    argv = ["systemd-analyze", "verify"]
    if shutil.which("man"):
        # Let verify resolve Documentation=man:cronrd(8) man:cronrd.d(5).
        for page, sect in ((PAGE8, "man8"), (PAGE5, "man5")):
            (tmp_path / "man" / sect).mkdir(parents=True, exist_ok=True)
            shutil.copy(page, tmp_path / "man" / sect / page.name)
        env["MANPATH"] = str(tmp_path / "man")
    else:
        argv.append("--man=no")
    res = _run(argv + [str(path)], env=env)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    # systemd before 254 does not know DelegateSubgroup= (the daemon then
    # uses rlimits for limits:, see cgroups.py); nothing else may be said.
    out = "\n".join(ln for ln in out.splitlines()
                    if "Unknown key 'DelegateSubgroup' in section [Service]" not in ln)
    assert "cronrd.service" not in out, out


def test_worker_unit_passes_systemd_analyze_verify(tmp_path):
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed")
    unit = (ROOT / "systemd" / "cronrd-worker.service").read_text(encoding="utf-8")
    exe = shutil.which("true") or "/bin/true"
    copy, n = re.subn(r"^ExecStart=/usr/bin/cronrd worker ", f"ExecStart={exe} ", unit,
                      flags=re.M)
    assert n == 1, "expected exactly one ExecStart=/usr/bin/cronrd worker line"
    path = tmp_path / "cronrd-worker.service"
    path.write_text(copy, encoding="utf-8")
    res = _run(["systemd-analyze", "verify", "--man=no", str(path)])
    out = "\n".join(ln for ln in (res.stdout + res.stderr).splitlines()
                    if "Unknown key 'DelegateSubgroup' in section [Service]" not in ln)
    assert res.returncode == 0, out
    assert "cronrd-worker.service" not in out, out


# -- (e) unit contents ---------------------------------------------------------------------
def _directives() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in UNIT.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";", "[")):
            continue
        key, _, value = line.partition("=")
        out.setdefault(key.strip(), []).append(value.strip())
    return out


def test_unit_is_type_notify():
    assert _directives().get("Type") == ["notify"]


def test_unit_key_settings():
    d = _directives()
    assert d["ExecStart"] == ["/usr/bin/cronrd daemon --config /etc/cronrd/cronrd.yaml"]
    assert d["ExecReload"] == ["/bin/kill -HUP $MAINPID"]
    # Runs outlive the daemon (adopted at its next start): systemd must not kill them.
    assert d["KillMode"] == ["process"]
    assert d["WatchdogSec"] == ["30s"]
    assert "NoNewPrivileges" not in d  # would break jobs using sudo/setuid programs
    assert d.get("ProtectSystem", ["no"]) != ["strict"]
    assert d.get("ProtectHome", ["no"]) == ["no"]


# -- the README and docs/ (issue 33, point 7) ---------------------------------------------
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _outside_code(path: Path) -> list[str]:
    """The page's lines outside its fenced code blocks."""
    out, code = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            code = not code
        elif not code:
            out.append(line)
    return out


def _anchors(path: Path) -> set[str]:
    """The anchors of the page's headings, as GitHub makes them."""
    out = set()
    for line in _outside_code(path):
        m = re.match(r"#{1,6} (.*)", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            out.add(slug)
    return out


def _sh_blocks(text: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", text, re.S)


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda p: p.name)
def test_every_link_leads_to_a_file_and_a_heading_that_exist(page):
    broken = []
    for line in _outside_code(page):
        for target in _LINK.findall(line):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{target}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{target}: no heading #{anchor} in {dest.name}")
    assert not broken, f"{page.name}: {broken}"


def test_the_readme_is_a_front_door_and_links_every_doc():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300, "the README is the five-minute read: move detail to docs/"
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in _LINK.findall(text)}
    assert [d.name for d in DOCS if d.resolve() not in linked] == []
    for word in ("## Quick start", "## Guarantees", "## Dependencies, and why each one",
                 "## Read on"):
        assert word in text


def test_the_quick_starts_commands_name_what_exists():
    """The two quick-start commands: the test command is .ci/run's, word for
    word; the node's command uses files that exist; every `cronrd WORD` in
    the quick start is a command of the CLI."""
    text = README.read_text(encoding="utf-8")
    quick = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    blocks = _sh_blocks(quick)
    tests = [b.strip() for b in blocks if "pytest" in b]
    assert len(tests) == 1 and tests[0] in (ROOT / ".ci" / "run").read_text()
    node = next(b for b in blocks if "cronrd daemon" in b)
    for path in re.findall(r"(examples/[\w./*-]+)", node):
        assert list(ROOT.glob(path)), path
    commands = every_command()
    for block in blocks:
        for word in re.findall(r"\bcronrd ([a-z][\w-]*)", block):
            assert word in commands or word == "daemon", word
    for word in re.findall(r"`cronrd ([a-z][\w-]*)", quick):
        assert word in commands, word
